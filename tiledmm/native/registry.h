/* registry.h: the one table of kernels, shared by the C glue and the kernel files.
 * Plain C so csrc/ (C11) and cuda/ (CUDA C++ / host C++ on emu) both include it. */
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TM_F32 = 1, TM_F64 = 2 };

#define TM_MAX_PARAMS 4
#define TM_MAX_VALUES 8

/* The allowed values of the kernels' tunables, written once. A registry row lists them
 * (TM_PARAM in registry.cu) and the glue accepts only those; a kernel file that instantiates a
 * template per value dispatches on the same list (tm_dispatch in common.h), so a value added
 * here is both accepted and compiled, or fails to compile. A kernel whose tunable takes a set
 * of values of its own adds its list here, beside its file and its registry row. */
#define TM_VALUES_TILE 8, 16, 32                   /* tiled, coarse, colmajor_b: tile edge */
#define TM_VALUES_BLOCK_EDGE 8, 16, 32             /* naive, mat_add: square block edge */
#define TM_VALUES_THREADS 128, 256, 512, 1024      /* the reductions, vec_add: threads */
#define TM_VALUES_COARSEN 1, 2, 4, 8               /* coarse */
#define TM_VALUES_CORNER 0, 1                      /* colmajor_b */
#define TM_VALUES_REGTILE_DIMS 1, 2                /* regtile */
#define TM_VALUES_FAST_CONFIG 0, 1, 2, 3, 4, 5, 6, 7 /* fast (0: chosen by size, see there) */
#define TM_VALUES_PER_THREAD 2, 4, 8, 16, 32       /* multi_element */
#define TM_VALUES_WMMA_PRECISION 0, 1             /* wmma: 0 TF32, 1 FP16 inputs */

/* One tunable of a kernel (tile, coarsen, block...): its allowed values and default. */
typedef struct {
    const char *name;
    int default_value;
    int n_values;
    int values[TM_MAX_VALUES];
    const char *doc;
} tm_param_spec;

/* What a launcher is asked to compute. Device pointers, row-major, contiguous.
 * matmul:      out(M x N) = in0(M x K) @ in1(K x N)
 * reduce:      out[0] = sum of in0[0 .. M)            (N = K = 1)
 * elementwise: out = in0 + in1, M x N elements        (K = 1)                       */
typedef struct {
    int dtype;                  /* TM_F32 or TM_F64 */
    long long M, N, K;
    const void *in0, *in1;
    void *out;
    void *scratch;              /* spec->scratch_bytes(problem) bytes of device memory, or NULL */
    int params[TM_MAX_PARAMS];  /* in the order of spec->params */
    int sm_count;               /* multiprocessors the launch choices assume (fast's config 0):
                                 * the glue sets the device's before launching; tm.model passes
                                 * its own. The launcher and the byte model read this one value. */
} tm_problem;

/* What a launcher reports about the launch it made (the first, when it made several). */
typedef struct {
    unsigned grid[3], block[3];
    size_t shared_bytes; /* shared memory per block, static + dynamic, as the kernel uses it */
    size_t dynamic_shared_bytes; /* the dynamic part, as passed at launch (for the occupancy API) */
    const void *func; /* the __global__ function, for cudaFuncGetAttributes/occupancy */
    int launches; /* kernel launches per call (grid chunks, tree levels...) */
} tm_launch_facts;

/* Launch the kernel on the current device, default stream. Returns a cudaError_t value. */
typedef int (*tm_launcher)(const tm_problem *problem, tm_launch_facts *facts);
/* A model evaluated for a problem (bytes of scratch, bytes of global traffic...). The traffic
 * model is the one source of tm.model.traffic_bytes too (csrc/module.c's traffic_bytes), so it
 * reads only M, N, K, dtype, params and sm_count, never the pointers. */
typedef double (*tm_problem_model)(const tm_problem *problem);
/* A matmul's block tile for a problem: the bm x bn piece of C one block computes, sharing its
 * loads of A and B (0 x 0 for parameters the kernel does not take). */
typedef void (*tm_block_tile)(const tm_problem *problem, long long *bm, long long *bn);

typedef struct {
    const char *name; /* what users pass as kernel=... */
    const char *family; /* "matmul" | "reduce" | "elementwise" */
    int dtypes; /* TM_F32 | TM_F64 */
    int n_params;
    tm_param_spec params[TM_MAX_PARAMS];
    tm_launcher launch;
    tm_problem_model scratch_bytes; /* NULL: the kernel needs no scratch */
    tm_problem_model global_bytes; /* modelled global-memory traffic (loads + stores) */
    const char *lecture; /* where the lesson is taught */
    const char *summary; /* one line: what the kernel shows */
    tm_block_tile block_tile; /* matmul: the piece of C a block computes (NULL: not known) */
} tm_kernel_spec;

extern const tm_kernel_spec tm_registry[];
extern const int tm_registry_size;

#ifdef __cplusplus
}
#endif
