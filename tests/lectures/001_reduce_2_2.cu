// lecture: 001_b0bed8cdb5b583cc.txt:381 (CMU 15-418, "Idea2.2: ... across blocks using kernels")
// kernel: reduce_2_2
// defines: none
// fixes: none to compile; `d <= 1` (warned; meant d <<= 1)
// launch: for (d = 1; d < length; d *= 256) reduce_2_2<<<grid, 256>>>(A, length, d)

__global__ void reduce_2_2(float * A, int length,
                          int depth) {
    int iters = min(blockDim.x, length/depth);
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    for (int d = 1; d < iters; d <= 1) {
        if(i < length/depth && i % (2*d) == 0) {
            int idx = i*depth;
            A[idx] += A[(i+d)*depth];
        }
        __syncthreads();
    }
}
