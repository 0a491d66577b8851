// lecture: 003_3afaee5c710a3655.txt:396 (Matrix-matrix product, "Tiled Matrix Multiplication Kernel")
// kernel: MatrixMulKernel
// defines: TILE_WIDTH=16
// fixes: the slide's line numbers deleted (as printed, tiledmm names them); `Synchthreads();` ->
//  `__syncthreads();` (g++: 'Synchthreads' was not declared in this scope); TILE_WIDTH from defines=
// as printed: as_printed/003_MatrixMulKernel_tiled.cu
// launch: grid (Width/TILE_WIDTH, Width/TILE_WIDTH), block (TILE_WIDTH, TILE_WIDTH)

__global__ void MatrixMulKernel(float* Md, float* Nd, float* Pd, int Width)
{
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH];

    int bx = blockIdx.x;  int by = blockIdx.y;
    int tx = threadIdx.x; int ty = threadIdx.y;

// Identify the row and column of the Pd element to work on
    int Row = by * TILE_WIDTH + ty;
    int Col = bx * TILE_WIDTH + tx;

    float Pvalue = 0;
// Loop over the Md and Nd tiles required to compute the Pd element
    for (int m = 0; m < Width/TILE_WIDTH; ++m) {
// Collaborative loading of Md and Nd tiles into shared memory
        Mds[ty][tx] = Md[Row*Width + (m*TILE_WIDTH + tx)];
        Nds[ty][tx] = Nd[Col + (m*TILE_WIDTH + ty)*Width];
        __syncthreads();

        for (int k = 0; k < TILE_WIDTH; ++k)
            Pvalue += Mds[ty][k] * Nds[k][tx];
        __syncthreads();
    }
        Pd[Row*Width+Col] = Pvalue;
}
