// lecture: 000_2a0a66598de58fa7.txt:146 (CS133, "A Simple Matrix Multiplication Kernel (Simplified Dimension and Syntax!)")
// kernel: MatrixMulKernel
// defines: none
// fixes: d_M[Row][k], d_N[k][Col], d_P[Row][Col] on float* do not compile ("subscripted value
//  is neither array nor pointer" / nvcc: "expression must have pointer-to-object type"): written
//  d_M[Row*Width+k], d_N[k*Width+Col], d_P[Row*Width+Col] as the later slides do
// launch: grid (ceil(Width/16), ceil(Width/16)), block (16, 16)

__global__ void MatrixMulKernel(float* d_M, float* d_N, float* d_P, int Width)
{
    // Calculate the row index of the d_P element and d_M
    int Row = blockIdx.y*blockDim.y+threadIdx.y;
    // Calculate the column index of d_P and d_N
    int Col = blockIdx.x*blockDim.x+threadIdx.x;

    if ((Row < Width) && (Col < Width)) {
        float Pvalue = 0;
        // each thread computes one element of the block sub-matrix
        for (int k = 0; k < Width; ++k) {
            Pvalue += d_M[Row*Width+k] * d_N[k*Width+Col];
        }
        d_P[Row*Width+Col] = Pvalue;
    }
}
