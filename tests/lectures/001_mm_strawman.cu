// lecture: 001_b0bed8cdb5b583cc.txt:458 (CMU 15-418, "Strawman Implementation of Matmul")
// kernel: mm
// defines: N=64
// fixes: `result = 0;` declares nothing: `float result = 0;`. N from defines= (the host code's
//  `int N = 1024;` is a variable, the parameters need a constant)
// as printed: as_printed/001_mm_strawman.cu
// launch: grid (N/32, N/32), block (32, 32); x (blockIdx.x ...) indexes rows of C

__global__ void mm(float A[N][N], float B[N][N], float C[N][N]) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;

    float result = 0;
    for (int k = 0; k < N; ++k) {
        result += A[x][k] * B[k][y];
    }
    C[x][y] = result;
}
