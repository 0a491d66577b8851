// lecture: 003_3afaee5c710a3655.txt:64-170 (Matrix-matrix product, steps 1 to 5)
// fixes: `width` in MatrixMulOnHost is `Width`; `float* Md, Nd, Pd;` declares one pointer and
//  two floats: `float *Md, *Nd, *Pd;`; the elided kernel invocation is step 5's (one block of
//  Width x Width threads, so Width <= 32); the kernel's two slides joined; a main that compares
//  the device's P with the host's.
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

// Matrix multiplication on the (CPU) host
void MatrixMulOnHost(float* M, float* N, float* P, int Width)
{
    for (int i = 0; i < Width; ++i)
        for (int j = 0; j < Width; ++j) {
            double sum = 0;
            for (int k = 0; k < Width; ++k) {
                double a = M[i * Width + k];
                double b = N[k * Width + j];
                sum += a * b;
            }
            P[i * Width + j] = sum;
        }
}

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

void MatrixMulOnDevice(float* M, float* N, float* P, int Width)
{
    int size = Width * Width * sizeof(float);
    float *Md, *Nd, *Pd;
    // 1. Allocate and Load M, N to device memory
    cudaMalloc(&Md, size);
    cudaMemcpy(Md, M, size, cudaMemcpyHostToDevice);
    cudaMalloc(&Nd, size);
    cudaMemcpy(Nd, N, size, cudaMemcpyHostToDevice);
    // Allocate P on the device
    cudaMalloc(&Pd, size);

    // 2. Kernel invocation code
    // Setup the execution configuration
    dim3 dimGrid(1, 1);
    dim3 dimBlock(Width, Width);
    // Launch the device computation threads!
    MatrixMulKernel<<<dimGrid, dimBlock>>>(Md, Nd, Pd, Width);

    // 3. Read P from the device
    cudaMemcpy(P, Pd, size, cudaMemcpyDeviceToHost);
    // Free device matrices
    cudaFree(Md); cudaFree(Nd); cudaFree (Pd);
}

int main(int argc, char **argv)
{
    int Width = argc > 1 ? atoi(argv[1]) : 24;
    int n = Width * Width;
    float *M = (float *)malloc(n * sizeof(float)), *N = (float *)malloc(n * sizeof(float));
    float *P = (float *)malloc(n * sizeof(float)), *P_host = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; ++i) {
        M[i] = (float)((i * 7) % 13) - 6.0f;
        N[i] = (float)((i * 5) % 11) * 0.5f - 2.5f;
    }
    MatrixMulOnHost(M, N, P_host, Width);
    MatrixMulOnDevice(M, N, P, Width);
    double worst = 0;
    for (int i = 0; i < n; ++i) worst = fmax(worst, fabs((double)P[i] - P_host[i]));
    printf("Width %d: P[0] = %.2f, largest difference from the host %.3g\n", Width, P[0], worst);
    free(M); free(N); free(P); free(P_host);
    return worst > 1e-3;
}
