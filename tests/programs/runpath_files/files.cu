// A program that reads an input of its folder and writes files (issue 44): tm.run returns them
// (ProgramResult.files), the CLI writes them back. It also says whether it could read a link
// its folder holds (to a file outside it) and write its input: it must not.
#include <cstdio>
#include <sys/stat.h>

__global__ void twice(int *v) { v[threadIdx.x] *= 2; }

int main()
{
    FILE *in = fopen("data/in.txt", "r");
    if (!in) {
        printf("no input\n");
        return 1;
    }
    int h[3];
    for (int i = 0; i < 3; i++)
        if (fscanf(in, "%d", &h[i]) != 1) return 1;
    fclose(in);
    printf("link readable: %d\n", fopen("outside.txt", "r") != NULL);
    printf("input writable: %d\n", fopen("data/in.txt", "a") != NULL);
    int *d;
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    twice<<<1, 3>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    FILE *out = fopen("out.txt", "w");
    for (int i = 0; i < 3; i++) fprintf(out, "%d\n", h[i]);
    fclose(out);
    mkdir("sub", 0755);
    FILE *more = fopen("sub/more.txt", "w");
    fprintf(more, "more\n");
    fclose(more);
    FILE *src = fopen("files.cu", "w");   // its own source: read-only here
    printf("source writable: %d\n", src != NULL);
    return 0;
}
