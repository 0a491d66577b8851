// bench_switch.cpp: the cost of a fiber switch as a kernel sees it. One block of B threads runs
// R __syncthreads() in a loop, so every thread switches out about once per barrier; the figure
// is the launch time divided by B * R (switch plus barrier bookkeeping, per thread and barrier).
// Usage: bench_switch [rounds] [repeats]. One line per block size:
//   "switch <kind> block B: <ns> ns per thread per __syncthreads() (best of N)"
#include "common.h"

#include <algorithm>
#include <chrono>
#include <vector>

__global__ void k_barriers(int *out, int rounds)
{
    int acc = 0;
    for (int r = 0; r < rounds; ++r) {
        acc += r ^ (int)threadIdx.x;
        __syncthreads();
    }
    out[threadIdx.x] = acc;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20000;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    tm_emu_set_threads(1);
    int *d = nullptr;
    if (cudaMalloc((void **)&d, 1024 * sizeof(int)) != cudaSuccess) return 1;
    for (int block : {2, 32, 256}) {
        std::vector<double> t;
        for (int i = 0; i < reps; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            cudaError_t e = tm_launch(k_barriers, dim3(1), dim3(block), 0, d, rounds);
            t.push_back(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            if (e != cudaSuccess) {
                printf("launch failed: %s\n", tm_emu_last_error_detail());
                return 1;
            }
        }
        std::sort(t.begin(), t.end());
        printf("switch %s block %d: %.1f ns per thread per __syncthreads() (best of %d)\n",
               tm_emu_switch_kind(), block, t[0] * 1e9 / ((double)block * rounds), reps);
        fflush(stdout);
    }
    cudaFree(d);
    return 0;
}
