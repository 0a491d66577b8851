// lecture: 000_2a0a66598de58fa7.txt:399 (CS133, "Compare with Basic MM Kernel"; the same listing again at line 569, "A Simple Matrix Multiplication Kernel (review)")
// kernel: MatrixMulKernel
// defines: none
// fixes: none
// launch: grid (ceil(Width/16), ceil(Width/16)), block (16, 16)

__global__ void MatrixMulKernel(float* M, float* N, float* P, int Width)
{
    // Calculate the row index of the P element and M
    int Row = blockIdx.y * blockDim.y + threadIdx.y;
    // Calculate the column index of P and N
    int Col = blockIdx.x * blockDim.x + threadIdx.x;

    if ((Row < Width) && (Col < Width)) {
        float Pvalue = 0;

        // each thread computes one element of the block sub-matrix
        for (int k = 0; k < Width; ++k)
            Pvalue += M[Row*Width+k] * N[k*Width+Col];

        P[Row*Width+Col] = Pvalue;
    }
}
