// lecture: 000_2a0a66598de58fa7.txt:366 (CS133, "Tiled Matrix Multiplication Kernel")
// kernel: MatrixMulKernel
// defines: TILE_WIDTH=16
// fixes: the slide's line numbers (1. to 16.) deleted (as printed, tiledmm names them); TILE_WIDTH
//  from defines=
// as printed: as_printed/000_MatrixMulKernel_tiled.cu
// launch: grid (Width/16, Width/16), block (16, 16); Width a multiple of 16 (the code says so)

__global__ void MatrixMulKernel(float* M, float* N, float* P, int Width)
{
    __shared__ float subTileM[TILE_WIDTH][TILE_WIDTH];
    __shared__ float subTileN[TILE_WIDTH][TILE_WIDTH];

    int bx = blockIdx.x;  int by = blockIdx.y;
    int tx = threadIdx.x; int ty = threadIdx.y;

    // Identify the row and column of the P element to work on
    int Row = by * TILE_WIDTH + ty;
    int Col = bx * TILE_WIDTH + tx;
    float Pvalue = 0;

    // Loop over the M and N tiles required to compute the P element
    // The code assumes that the Width is a multiple of TILE_WIDTH!
    for (int m = 0; m < Width/TILE_WIDTH; ++m) {
        // Collaborative loading of M and N tiles into shared memory
        subTileM[ty][tx] = M[Row*Width + m*TILE_WIDTH+tx];
        subTileN[ty][tx] = N[(m*TILE_WIDTH+ty)*Width+Col];
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k)
            Pvalue += subTileM[ty][k] * subTileN[k][tx];
        __syncthreads();
    }
    P[Row*Width+Col] = Pvalue;
}
