// lecture: 001_b0bed8cdb5b583cc.txt:129 (CMU 15-418, "CUDA Example 1")
// kernel: matadd_kernel
// defines: none
// fixes: none. tiledmm passes a 2-D array for each float ** and builds the table of row pointers
//  where the kernel runs. x (threadIdx.x ...) indexes rows: C[x][y]; the host code's
//  gridSize(X_len/blockSize.x, Y_len/blockSize.y) floor-divides (rows past the last full block
//  are never written) and has no bounds check in the kernel
// launch: block (16, 32), grid (X_len/16, Y_len/32)

__global__ void
matadd_kernel(float ** C, const float ** A, const float ** B) {
    int x = threadIdx.x + blockIdx.x * blockDim.x;
    int y = threadIdx.y + blockIdx.y * blockDim.y;
    C[x][y] = A[x][y] + B[x][y];
}
