// lecture: 001_b0bed8cdb5b583cc.txt:129-147 (CMU 15-418, "CUDA Example 1")
// fixes: none in the kernel and matadd(); a main that builds, on the device, the tables of row
//  pointers a float ** needs (rows of X_len x Y_len matrices, X_len and Y_len multiples of the
//  block as the floor-divided grid assumes) and checks C = A + B.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void
matadd_kernel(float ** C, const float ** A, const float ** B) {
    int x = threadIdx.x + blockIdx.x * blockDim.x;
    int y = threadIdx.y + blockIdx.y * blockDim.y;
    C[x][y] = A[x][y] + B[x][y];
}

__host__ void
matadd(float ** C, const float ** A, const float ** B, const int X_len,
        const int Y_len) {
    dim3 blockSize(16,32);
    dim3 gridSize(X_len/blockSize.x, Y_len/blockSize.y);

    matadd_kernel <<<gridSize,blockSize>>> (C,A,B);
}

// A device matrix as a float **: the elements, and the table of its row pointers.
static float **device_rows(float **data, int rows, int cols)
{
    cudaMalloc((void **)data, sizeof(float) * rows * cols);
    float **table_host = (float **)malloc(sizeof(float *) * rows);
    for (int r = 0; r < rows; ++r) table_host[r] = *data + (size_t)r * cols;
    float **table;
    cudaMalloc((void **)&table, sizeof(float *) * rows);
    cudaMemcpy(table, table_host, sizeof(float *) * rows, cudaMemcpyHostToDevice);
    free(table_host);
    return table;
}

int main(void)
{
    const int X_len = 64, Y_len = 96, n = X_len * Y_len;
    float *a = (float *)malloc(sizeof(float) * n), *b = (float *)malloc(sizeof(float) * n);
    float *c = (float *)malloc(sizeof(float) * n);
    for (int i = 0; i < n; ++i) {
        a[i] = (float)(i % 97);
        b[i] = (float)(3 * i % 89) * 0.25f;
    }
    float *A_data, *B_data, *C_data;
    float **A = device_rows(&A_data, X_len, Y_len), **B = device_rows(&B_data, X_len, Y_len);
    float **C = device_rows(&C_data, X_len, Y_len);
    cudaMemcpy(A_data, a, sizeof(float) * n, cudaMemcpyHostToDevice);
    cudaMemcpy(B_data, b, sizeof(float) * n, cudaMemcpyHostToDevice);
    matadd(C, (const float **)A, (const float **)B, X_len, Y_len);
    cudaMemcpy(c, C_data, sizeof(float) * n, cudaMemcpyDeviceToHost);
    int wrong = 0;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
        if (c[i] != a[i] + b[i]) ++wrong;
        sum += c[i];
    }
    printf("sum of C = %.2f; %d of %d elements wrong\n", sum, wrong, n);
    cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(A_data); cudaFree(B_data); cudaFree(C_data);
    free(a); free(b); free(c);
    return wrong != 0;
}
