// lecture: 003_3afaee5c710a3655.txt:215 (Matrix-matrix product, "Revised Matrix Multiplication Kernel using Multiple Blocks")
// kernel: MatrixMulKernel
// defines: TILE_WIDTH=16
// fixes: TILE_WIDTH from defines=. No bounds check: Width must be a multiple of TILE_WIDTH
// launch: grid (Width/TILE_WIDTH, Width/TILE_WIDTH), block (TILE_WIDTH, TILE_WIDTH)

__global__ void MatrixMulKernel(float* Md, float* Nd, float* Pd, int Width)
{
    // Calculate the row index of the Pd element and M
    int Row = blockIdx.y*TILE_WIDTH + threadIdx.y;
    // Calculate the column index of Pd and N
    int Col = blockIdx.x*TILE_WIDTH + threadIdx.x;

    float Pvalue = 0;
    // each thread computes one element of the block sub-matrix
    for (int k = 0; k < Width; ++k)
        Pvalue += Md[Row*Width+k] * Nd[k*Width+Col];

    Pd[Row*Width+Col] = Pvalue;
}
