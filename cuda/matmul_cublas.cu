// matmul_cublas.cu: cuBLAS SGEMM / DGEMM, the reference every other kernel is measured against
// ("% of cuBLAS" in `python -m tiledmm bench`).
//
// cuBLAS is opened at run time with dlopen at the first call, never at import, so the module
// imports on machines without cuBLAS, without a driver and without a GPU. Where it looks, in
// order: $TILEDMM_CUBLAS (a path to libcublas.so*), the loader's default path
// (libcublas.so.13, then .12), $CUDA_HOME/lib64, /usr/local/cuda/lib64, and the NVIDIA pip
// wheel's folder (site-packages/nvidia/cublas/lib or nvidia/cu13/lib) beside this module.
// libcublasLt from the same folder is opened first, so a folder not on the loader's path works.
//
// cuBLAS is column-major, tiledmm row-major. A row-major M x N matrix is the column-major
// N x M matrix of its transpose, so C = A B is computed as C^T = B^T A^T: gemm(N, N, m=N, n=M,
// k=K, B with ld N, A with ld K, C with ld N). No copies, no transposes.
// Math mode: CUBLAS_DEFAULT_MATH, so float32 is real FP32 (no TF32 tensor cores).
//
// One cuBLAS handle for the process, created at the first call, its calls serialised by a
// mutex: a handle per thread would leak its device workspace (tens of MB) whenever a Python
// thread that used it ends, since nothing runs at a thread's exit to destroy it. cuBLAS is
// the reference here, not the subject, so serialising concurrent calls costs nothing that
// matters. The emulator has no cuBLAS: there the launcher returns cudaErrorNotSupported and
// the call raises RuntimeError.
#include "common.h"

#ifdef TM_EMU

int tm_matmul_cublas_launch(const tm_problem *p, tm_launch_facts *facts)
{
    (void)p;
    (void)facts;
    return cudaErrorNotSupported;  // "operation not supported": no cuBLAS on the CPU emulator
}

#else

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>

namespace {

// The few cuBLAS declarations used here (cublas_api.h is not needed to build).
typedef void *cublas_handle;
enum { CUBLAS_OK = 0, CUBLAS_OP_N = 0, CUBLAS_DEFAULT_MATH = 0 };
typedef int (*create_fn)(cublas_handle *);
typedef int (*set_math_mode_fn)(cublas_handle, int);
typedef int (*sgemm_fn)(cublas_handle, int, int, int, int, int, const float *, const float *, int,
                        const float *, int, const float *, float *, int);
typedef int (*dgemm_fn)(cublas_handle, int, int, int, int, int, const double *, const double *, int,
                        const double *, int, const double *, double *, int);

struct CublasApi {
    void *lib = nullptr;
    create_fn create = nullptr;
    set_math_mode_fn set_math_mode = nullptr;
    sgemm_fn sgemm = nullptr;
    dgemm_fn dgemm = nullptr;
};

CublasApi api;
pthread_once_t api_once = PTHREAD_ONCE_INIT;

// Open `dir/libcublasLt<suffix>` (so libcublas finds it) and then `dir/libcublas<suffix>`.
void *open_in_dir(const std::string &dir, const char *suffix)
{
    const std::string lt = dir + "/libcublasLt" + suffix, blas = dir + "/libcublas" + suffix;
    void *lt_handle = dlopen(lt.c_str(), RTLD_NOW | RTLD_GLOBAL);
    void *handle = dlopen(blas.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle && lt_handle) dlclose(lt_handle);
    return handle;
}

void *open_cublas()
{
    static const char *const suffixes[] = {".so.13", ".so.12"};
    const char *env = getenv("TILEDMM_CUBLAS");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        fprintf(stderr, "tiledmm: TILEDMM_CUBLAS=%s could not be opened: %s\n", env, dlerror());
    }
    for (const char *suffix : suffixes) {
        const std::string name = std::string("libcublas") + suffix;
        if (void *h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    }
    std::string dirs[6];
    int n = 0;
    const char *cuda_home = getenv("CUDA_HOME");
    if (cuda_home && *cuda_home) dirs[n++] = std::string(cuda_home) + "/lib64";
    dirs[n++] = "/usr/local/cuda/lib64";
    // The pip wheels (nvidia-cublas-cu12, nvidia-cublas / cu13) beside this package:
    // <site-packages>/tiledmm/_cuda*.so -> <site-packages>/nvidia/...
    Dl_info info;
    if (dladdr((void *)&open_cublas, &info) && info.dli_fname) {
        std::string path(info.dli_fname);
        for (int up = 0; up < 2; ++up) {
            const size_t slash = path.rfind('/');
            path = slash == std::string::npos ? std::string(".") : path.substr(0, slash);
        }
        dirs[n++] = path + "/nvidia/cu13/lib";
        dirs[n++] = path + "/nvidia/cublas/lib";
    }
    for (const char *suffix : suffixes)
        for (int i = 0; i < n; ++i)
            if (void *h = open_in_dir(dirs[i], suffix)) return h;
    return nullptr;
}

void load_api()
{
    void *lib = open_cublas();
    if (!lib) {
        fprintf(stderr, "tiledmm: cuBLAS not found (libcublas.so.13 or .12 on the loader path, "
                        "$CUDA_HOME/lib64, /usr/local/cuda/lib64, the nvidia pip wheel); set "
                        "TILEDMM_CUBLAS=/path/to/libcublas.so to use kernel='cublas'\n");
        return;
    }
    CublasApi a;
    a.lib = lib;
    a.create = (create_fn)dlsym(lib, "cublasCreate_v2");
    a.set_math_mode = (set_math_mode_fn)dlsym(lib, "cublasSetMathMode");
    a.sgemm = (sgemm_fn)dlsym(lib, "cublasSgemm_v2");
    a.dgemm = (dgemm_fn)dlsym(lib, "cublasDgemm_v2");
    if (!a.create || !a.sgemm || !a.dgemm) {
        fprintf(stderr,
                "tiledmm: the cuBLAS library found lacks cublasCreate_v2/Sgemm_v2/Dgemm_v2\n");
        return;
    }
    api = a;
}

pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;  // guards the handle and its calls
cublas_handle shared_handle = nullptr;
bool handle_tried = false;

// The process's handle, created at the first call (nullptr if cuBLAS refused). Call with
// handle_lock held.
cublas_handle process_handle()
{
    if (!handle_tried) {
        handle_tried = true;
        cublas_handle h = nullptr;
        if (api.create(&h) == CUBLAS_OK) {
            if (api.set_math_mode) api.set_math_mode(h, CUBLAS_DEFAULT_MATH);  // no TF32
            shared_handle = h;
        }
    }
    return shared_handle;
}

// cuBLAS statuses to the CUDA error the glue reports.
int status_to_error(int status)
{
    switch (status) {
    case CUBLAS_OK: return cudaSuccess;
    case 3: return cudaErrorMemoryAllocation;   // CUBLAS_STATUS_ALLOC_FAILED
    case 1: return cudaErrorInitializationError; // CUBLAS_STATUS_NOT_INITIALIZED
    case 7: return cudaErrorInvalidValue;        // CUBLAS_STATUS_INVALID_VALUE
    case 8: return cudaErrorNotSupported;        // CUBLAS_STATUS_ARCH_MISMATCH
    default: return cudaErrorLaunchFailure;      // execution failed, internal error...
    }
}

}  // namespace

int tm_matmul_cublas_launch(const tm_problem *p, tm_launch_facts *facts)
{
    pthread_once(&api_once, load_api);
    if (!api.lib) return cudaErrorSharedObjectInitFailed;
    if (p->M > INT_MAX || p->N > INT_MAX || p->K > INT_MAX) return cudaErrorInvalidValue;
    pthread_mutex_lock(&handle_lock);
    cublas_handle handle = process_handle();
    if (!handle) {
        pthread_mutex_unlock(&handle_lock);
        return cudaErrorInitializationError;
    }
    const int m = (int)p->N, n = (int)p->M,
              k = (int)p->K;  // C^T (N x M) = B^T (N x K) A^T (K x M)
    int status;
    if (p->dtype == TM_F32) {
        const float one = 1.0f, zero = 0.0f;
        status = api.sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, (const float *)p->in1,
                           m, (const float *)p->in0, k, &zero, (float *)p->out, m);
    } else {
        const double one = 1.0, zero = 0.0;
        status = api.dgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, (const double *)p->in1,
                           m, (const double *)p->in0, k, &zero, (double *)p->out, m);
    }
    pthread_mutex_unlock(&handle_lock);
    // cuBLAS picks its own kernels: no __global__ of ours to describe.
    tm_facts_set(facts, NULL, dim3(0, 0, 0), dim3(0, 0, 0), 0, 0, 1);
    return status_to_error(status);
}

#endif  // TM_EMU

// cuBLAS's traffic is its own business; the compulsory traffic: read A and B, write C.
double tm_matmul_cublas_bytes(const tm_problem *p)
{
    const double elem = p->dtype == TM_F32 ? 4.0 : 8.0;
    return elem * ((double)p->M * p->K + (double)p->K * p->N + (double)p->M * p->N);
}
