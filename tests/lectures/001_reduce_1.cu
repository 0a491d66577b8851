// lecture: 001_b0bed8cdb5b583cc.txt:306 (CMU 15-418, "Idea1: Use Kernel end as a barrier")
// kernel: reduce_1
// defines: none
// fixes: none (the host loop's `d <= 1` is the same typo: it is `d <<= 1`)
// launch: for (d = 1; d < length; d <<= 1) reduce_1<<<ceil(length/256), 256>>>(A, length, d); the sum is A[0]

__global__ void reduce_1(float * A, int length,
                        int d) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if(i < length && i % (d << 1) == 0) {
        A[i] += A[i+d];
    }
}
