// Pitched memory (cudaMallocPitch, cudaMemcpy2D), cudaStreamQuery and cudaStreamWaitEvent.
#include <cuda_runtime.h>
#include <stdio.h>

__global__ void add_row_index(float *m, size_t pitch, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < width && y < height) {
        float *row = (float *)((char *)m + y * pitch);
        row[x] += (float)y;
    }
}

int main(void)
{
    const int width = 100, height = 7;
    float h[height][width];
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) h[y][x] = (float)x;
    float *d;
    size_t pitch = 0;
    cudaError_t e = cudaMallocPitch(&d, &pitch, width * sizeof(float), height);
    printf("cudaMallocPitch: %s, pitch >= row: %d, multiple of 128: %d\n", cudaGetErrorName(e),
           pitch >= width * sizeof(float), pitch % 128 == 0);
    e = cudaMemcpy2D(d, pitch, h, width * sizeof(float), width * sizeof(float), height,
                     cudaMemcpyHostToDevice);
    printf("cudaMemcpy2D H2D: %s\n", cudaGetErrorName(e));
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaEvent_t ev;
    cudaEventCreate(&ev);
    add_row_index<<<dim3(1, height), 128, 0, s>>>(d, pitch, width, height);
    cudaEventRecord(ev, s);
    printf("cudaStreamWaitEvent: %s\n", cudaGetErrorName(cudaStreamWaitEvent(0, ev, 0)));
    cudaStreamSynchronize(s);
    printf("cudaStreamQuery: %s\n", cudaGetErrorName(cudaStreamQuery(s)));
    e = cudaMemcpy2D(h, width * sizeof(float), d, pitch, width * sizeof(float), height,
                     cudaMemcpyDeviceToHost);
    printf("cudaMemcpy2D D2H: %s; h[6][99] = %.0f, h[3][10] = %.0f\n", cudaGetErrorName(e),
           h[6][99], h[3][10]);
    cudaStreamDestroy(s);
    cudaEventDestroy(ev);
    cudaFree(d);
    return 0;
}
