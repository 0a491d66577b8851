// lecture: 001_b0bed8cdb5b583cc.txt:416 (CMU 15-418, "CUDA Example 3: Using Shared Memory")
// kernel: reduce_2_3
// defines: none
// fixes: `external __shared__` -> `extern __shared__` (nvcc: identifier "external" is undefined);
//  `d <= 1` left as printed (warned)
// as printed: as_printed/001_reduce_2_3.cu
// launch: for (d = 1; d < length; d *= 256) reduce_2_3<<<grid, 256, 256 * sizeof(float)>>>(A, length, d)
//  (the slide launches reduce_2_2 there: a copy-paste slip)

__global__ void reduce_2_3(float * A, int length, int depth) {
    int iters = min(blockDim.x, length/depth);
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    extern __shared__ float sh_mem[];
    int tid = threadIdx.x;
    if(i < length/depth) { sh_mem[tid] = A[i*depth]; }
    __syncthreads();
    for (int d = 1; d < iters; d <= 1) {
        if(i < length/(depth) && i % (2*d) == 0) {
            sh_mem[tid] += sh_mem[tid+d];
        }
        __syncthreads();
    }
    if(i < length/depth) { A[i*depth] = sh_mem[tid]; }
}
