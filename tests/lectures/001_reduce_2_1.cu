// lecture: 001_b0bed8cdb5b583cc.txt:360 (CMU 15-418, "Idea2.1: ... only launch 1 block")
// kernel: reduce_2_1
// defines: none
// fixes: none to compile; `d <= 1` (warned) and `i % (d <= 1)` (meant d << 1)
// launch: not launched as printed

__global__ void reduce_2_1(float * A, int length) {
    for (int d=1; d < length; d <= 1) {
        int i = threadIdx.x;
        for(; i < length; i+= blockDim.x) {
            if(i % (d <= 1) == 0) {
                A[i] += A[i+d];
            }
        }
        __syncthreads();
    }
}
