// tests/test_program_check.py: one program, one mistake per mode (argv[1]), so that one build
// serves every test. The comments `// @name` mark the lines the reports must name.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                           \
    do {                                                                      \
        cudaError_t err_ = (call);                                            \
        if (err_ != cudaSuccess) {                                            \
            printf("error: %s\n", cudaGetErrorString(err_));                  \
        }                                                                     \
    } while (0)

__global__ void add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

__global__ void add_one_too_many(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) c[i] = a[i] + b[i];
}

__global__ void reverse_block(float *x)
{
    __shared__ float tile[128];
    int t = threadIdx.x;
    tile[t] = x[blockIdx.x * 128 + t];
    x[blockIdx.x * 128 + t] = tile[127 - t];   // no __syncthreads() before reading another's
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ok";
    const int n = 1000;
    const size_t bytes = n * sizeof(float);
    float *h_a = (float *)malloc(bytes), *h_b = (float *)malloc(bytes), *h_c = (float *)malloc(bytes);
    for (int i = 0; i < n; ++i) {
        h_a[i] = 0.5f * i;
        h_b[i] = 1000.0f - i;
    }
    float *d_a, *d_b, *d_c;
    CHECK(cudaMalloc(&d_a, bytes));            // @alloc_a
    CHECK(cudaMalloc((void **)&d_b, bytes));   // @alloc_b
    CHECK(cudaMalloc(&d_c, bytes));            // @alloc_c
    CHECK(cudaMemcpy(d_a, h_a, bytes, cudaMemcpyHostToDevice));
    if (!strcmp(mode, "past_end")) {
        cudaMemcpy(d_b, h_b, bytes + 4, cudaMemcpyHostToDevice);   // @past_end
    } else if (!strcmp(mode, "wrong_kind")) {
        cudaMemcpy(d_b, h_b, bytes, cudaMemcpyDeviceToHost);       // @wrong_kind
    } else if (!strcmp(mode, "checked_copy")) {
        CHECK(cudaMemcpy(d_b, h_b, bytes + 4, cudaMemcpyHostToDevice));   // @checked_copy
        CHECK(cudaMemcpy(d_b, h_b, bytes, cudaMemcpyHostToDevice));
    } else if (strcmp(mode, "uninit")) {
        CHECK(cudaMemcpy(d_b, h_b, bytes, cudaMemcpyHostToDevice));
    }
    if (!strcmp(mode, "oob")) {
        add_one_too_many<<<(n + 255) / 256, 256>>>(d_a, d_b, d_c, n);   // @oob
    } else if (!strcmp(mode, "unchecked_launch")) {
        add<<<1, 2048>>>(d_a, d_b, d_c, n);   // @bad_launch
        add<<<(n + 255) / 256, 256>>>(d_a, d_b, d_c, n);
    } else if (!strcmp(mode, "checked_launch")) {
        add<<<1, 2048>>>(d_a, d_b, d_c, n);
        printf("launch: %s\n", cudaGetErrorName(cudaGetLastError()));
        add<<<(n + 255) / 256, 256>>>(d_a, d_b, d_c, n);
    } else if (!strcmp(mode, "race")) {
        CHECK(cudaMemcpy(d_c, h_a, 512 * sizeof(float), cudaMemcpyHostToDevice));
        reverse_block<<<4, 128>>>(d_c);   // @race
        CHECK(cudaDeviceSynchronize());
        add<<<(n + 255) / 256, 256>>>(d_a, d_b, d_c, n);
    } else {
        add<<<(n + 255) / 256, 256>>>(d_a, d_b, d_c, n);   // @launch
    }
    CHECK(cudaMemcpy(h_c, d_c, bytes, cudaMemcpyDeviceToHost));
    printf("c[10] = %.1f, c[999] = %.1f\n", h_c[10], h_c[999]);
    CHECK(cudaFree(d_a));
    if (strcmp(mode, "leak")) CHECK(cudaFree(d_b));
    CHECK(cudaFree(d_c));
    free(h_a);
    free(h_b);
    free(h_c);
    return 0;
}
