// lecture: 001_b0bed8cdb5b583cc.txt:330 (CMU 15-418, "Idea2: Implement barriers in kernel", "This implementation is not correct")
// kernel: reduce_2
// defines: none
// fixes: none to compile; `d <= 1` and `d < 1` as in reduce (warned; the loop never ends)
// launch: not launched as printed

__global__ void reduce_2(float * A, int length) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    for (int d=1; d < length; d <= 1) {
        if(i < length && i % (d < 1) == 0) {
            A[i] += A[i+d];
        }
        __syncthreads();
    }
}
