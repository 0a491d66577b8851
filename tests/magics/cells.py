"""The %%cuda cells that tests/test_magics.py runs through nbclient on emu and
benchmarks/magics_gpu.py runs through IPython's InteractiveShell on cuda: (tag, cell source)
pairs, and the stdout every backend must print for the cells whose output is exact."""

HELLO = r"""#include <cstdio>
__global__ void hello(int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = 7 * i + 1;
    printf("hello from block %d thread %d\n", blockIdx.x, threadIdx.x);
}
int main() {
    int *d, h[6];
    cudaMalloc(&d, sizeof h);
    hello<<<2, 3>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int sum = 0;
    for (int i = 0; i < 6; ++i) sum += h[i];
    printf("sum %d\n", sum);
    fprintf(stderr, "a line on stderr\n");
    cudaFree(d);
    return 0;
}
"""

CELLS = [
    ("load", "%load_ext tiledmm"),
    ("config", "%config NVCCPlugin.wd = \"cuda_groups\""),
    ("hello", "%%cuda\n" + HELLO),
    ("shared_h", "%%cuda_group_save -g shared -n utils.h\n#pragma once\n#define SCALE 3\n"
                 "__device__ inline float twice(float x) { return 2.0f * x; }\n"
                 "int answer();\n"),
    ("shared_cu", "%%cuda_group_save -g shared -n answer.cu\n#include \"utils.h\"\n"
                  "int answer() { return 42; }\n"),
    ("g_kernel", "%%cuda_group_save --group vec --name kernel.cu\n#include \"utils.h\"\n"
                 "__global__ void scale(float *x, int n) {\n"
                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "    if (i < n) x[i] = twice((float)i) * SCALE;\n}\n"
                 "void launch(float *d, int n) { scale<<<(n + 63) / 64, 64>>>(d, n); }\n"),
    ("g_main", "%%cuda_group_save --group vec --name main.cu\n#include <cstdio>\n"
               "#include \"utils.h\"\nvoid launch(float *d, int n);\n"
               "int main() {\n    const int n = 100;\n    float *d, h[n];\n"
               "    cudaMalloc(&d, n * sizeof(float));\n    launch(d, n);\n"
               "    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);\n"
               "    printf(\"x[99] = %g, answer %d\\n\", h[99], answer());\n    return 0;\n}\n"),
    ("group_files", "import os\nprint(sorted(os.listdir(os.path.join('cuda_groups', 'vec'))))"),
    ("group_run", "%cuda_group_run --group vec"),
    ("shared_in_cell", "%%cuda\n#include <cstdio>\n#include \"utils.h\"\n"
                       "int main() { printf(\"SCALE %d answer %d\\n\", SCALE, answer()); }\n"),
    ("group_delete", "%cuda_group_delete --group vec"),
    ("group_gone", "%cuda_group_run --group vec"),
    ("define", "%%cuda --compiler-args \"-DN=8\"\n#include <cstdio>\n"
               "__global__ void fill(int *x) { x[threadIdx.x] = N * threadIdx.x; }\n"
               "int main() {\n    int *d, h[N];\n    cudaMalloc(&d, sizeof h);\n"
               "    fill<<<1, N>>>(d);\n    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);\n"
               "    printf(\"N=%d last=%d\\n\", N, h[N - 1]);\n}\n"),
    ("profile", "%%cuda --profile\n#include <cstdio>\n"
                "__global__ void copy(const float *a, float *b, int n) {\n"
                "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                "    if (i < n) b[i] = a[i];\n}\n"
                "int main() {\n    int n = 1 << 12;\n    float *a, *b;\n"
                "    cudaMalloc(&a, n * 4);\n    cudaMalloc(&b, n * 4);\n"
                "    cudaMemset(a, 0, n * 4);\n    copy<<<n / 128, 128>>>(a, b, n);\n"
                "    cudaDeviceSynchronize();\n    printf(\"copied\\n\");\n}\n"),
    ("nsys", "%%cuda -p -l nsys\n#include <cstdio>\nint main() { printf(\"ran\\n\"); }\n"),
    ("args_stdin", "%%cuda --args \"alpha 'two words'\" --stdin \"12 30\"\n#include <cstdio>\n"
                   "int main(int argc, char **argv) {\n    int a = 0, b = 0;\n"
                   "    if (scanf(\"%d %d\", &a, &b) != 2) return 2;\n"
                   "    printf(\"argc %d, argv[1] %s, argv[2] %s, sum %d\\n\", argc, argv[1], "
                   "argv[2], a + b);\n    return 0;\n}\n"),
    ("exit_code", "%%cuda\n#include <cstdio>\nint main() { printf(\"failing\\n\"); return 3; }\n"),
    ("compile_error", "%%cuda\n#include <cstdio>\nint main() {\n    int x = 1;\n"
                      "    printf(\"%d\\n\", x + undeclared);\n}\n"),
    ("broken_save", "%%cuda_group_save -g broken -n oops.cu\nint f() {\n"
                    "    return undefined_here;\n}\n"),
    ("broken_main", "%%cuda_group_save -g broken -n main.cu\nint f();\n"
                    "int main() { return f(); }\n"),
    ("broken_run", "%cuda_group_run -g broken"),
    ("bad_option", "%%cuda --no-such-option\nint main() {}\n"),
    ("timeit", "%%cuda -t\n#include <cstdio>\nint main() { printf(\"quick\\n\"); }\n"),
]

# tag: the exact stdout on every backend
EXPECTED_STDOUT = {
    "group_files": "['kernel.cu', 'main.cu']\n",
    "group_run": "x[99] = 594, answer 42\n",
    "shared_in_cell": "SCALE 3 answer 42\n",
    "define": "N=8 last=56\n",
    "args_stdin": "argc 3, argv[1] alpha, argv[2] two words, sum 42\n",
    "exit_code": "failing\n",
}
