__global__ void reduce_2_3(float * A, int length, int depth) {
    int iters = min(blockDim.x, length/depth);
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    external __shared__ float sh_mem[];
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
