// lecture: 000_2a0a66598de58fa7.txt:202 (CS133, "Declaring Shared Memory Arrays")
// kernel: MatrixMulKernel
// defines: TILE_WIDTH=16
// fixes: the slide shows only the first lines: the closing '}' added (as printed, tiledmm says the
//  '{' at line 2 is never closed); TILE_WIDTH comes from defines=
// as printed: as_printed/000_MatrixMulKernel_shared_declarations.cu
// launch: none (it does nothing)

__global__ void MatrixMulKernel(float* M, float* N, float* P, int Width)
{
    __shared__ float subTileM[TILE_WIDTH][TILE_WIDTH];
    __shared__ float subTileN[TILE_WIDTH][TILE_WIDTH];
}
