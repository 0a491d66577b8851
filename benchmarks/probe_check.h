// probe_check.h: the error check the standalone CUDA probes in benchmarks/ share. A probe has
// no cleanup to do: it reports the failing call and exits.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                \
                         cudaGetErrorString(e_));                                             \
            std::exit(1);                                                                     \
        }                                                                                     \
    } while (0)
