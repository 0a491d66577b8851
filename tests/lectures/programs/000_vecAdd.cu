// lecture: 000_2a0a66598de58fa7.txt:54-111 (CS133, "vecAdd Host Code" and "Vector Addition Kernel")
// fixes: `float* A_d, B_d, C_d;` declares one pointer and two floats: `float *A_d, *B_d, *C_d;`;
//  the slide numbers "1." "2." "3." deleted; line 110's `>>>>` is `>>>`; the elided kernel
//  invocation ("to be shown later") is the launch of line 110; a main that fills A and B,
//  calls vecAdd and prints what a student would check.
#include <cuda.h>
#include <stdio.h>
#include <math.h>

// Compute vector sum C = A+B
// Each thread performs one pair-wise addition
__global__
void vecAddKernel(float* A_d, float* B_d, float* C_d, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x ;
    if(i < n) C_d[i] = A_d[i] + B_d[i];
}

void vecAdd(float* A, float* B, float* C, int n)
{
    int size = n * sizeof(float);
    float *A_d, *B_d, *C_d;

    // Transfer A and B to device memory
    cudaMalloc((void **) &A_d, size);
    cudaMemcpy(A_d, A, size, cudaMemcpyHostToDevice);
    cudaMalloc((void **) &B_d, size);
    cudaMemcpy(B_d, B, size, cudaMemcpyHostToDevice);

    // Allocate device memory for
    cudaMalloc((void **) &C_d, size);

    // Kernel invocation code
    // Run ceil(n/256) blocks of 256 threads each
    vecAddKernel<<<ceil(n/256.0), 256>>>(A_d, B_d, C_d, n);

    // Transfer C from device to host
    cudaMemcpy(C, C_d, size, cudaMemcpyDeviceToHost);
    // Free device memory for A, B, C
    cudaFree(A_d); cudaFree(B_d); cudaFree(C_d);
}

int main(void)
{
    const int n = 1000;
    static float A[n], B[n], C[n];
    for (int i = 0; i < n; ++i) {
        A[i] = 0.5f * i;
        B[i] = 1000.0f - i;
    }
    vecAdd(A, B, C, n);
    int wrong = 0;
    for (int i = 0; i < n; ++i)
        if (C[i] != A[i] + B[i]) ++wrong;
    printf("C[0] = %.1f, C[%d] = %.1f\n", C[0], n - 1, C[n - 1]);
    printf("%d of %d elements wrong\n", wrong, n);
    return wrong != 0;
}
