// lecture: 003_3afaee5c710a3655.txt:124 (Matrix-matrix product, "Step 4: Kernel Function", printed across two slides)
// kernel: MatrixMulKernel
// defines: none
// fixes: the two slides' fragments joined (the first ends after `float Pvalue = 0;`)
// launch: one block of (Width, Width) threads (Width <= 32)

// Matrix multiplication kernel - per thread code
__global__ void MatrixMulKernel(float* Md, float* Nd, float* Pd, int Width)
{
    // Pvalue is used to store the element of the matrix
    // that is computed by the thread
    float Pvalue = 0;

    for (int k = 0; k < Width; ++k) {
        float Melement = Md[threadIdx.y*Width+k];
        float Nelement = Nd[k*Width+threadIdx.x];
        Pvalue += Melement * Nelement;
    }

    Pd[threadIdx.y*Width+threadIdx.x] = Pvalue;
}
