// registry.cu: the ONE table of every kernel. A kernel variant is one kernel file under cuda/
// and one row here (its declarations sit beside the row); Python, `tm.kernels()`, the CLI,
// the docs and the tests read this table.
#include "common.h"

#define TM_DECLARE_KERNEL(prefix)                                          \
    int prefix##_launch(const tm_problem *p, tm_launch_facts *facts);     \
    double prefix##_bytes(const tm_problem *p)

// Parameters shared by several rows.
#define TM_PARAM_TILE {"tile", 16, 3, {8, 16, 32}, "edge of the square shared-memory tile and of the thread block"}
#define TM_PARAM_THREADS {"block", 256, 4, {128, 256, 512, 1024}, "threads per block"}
#define TM_PARAM_BLOCK_EDGE {"block", 16, 3, {8, 16, 32}, "edge of the square thread block"}

// ---- matmul declarations ----
TM_DECLARE_KERNEL(tm_matmul_naive);
TM_DECLARE_KERNEL(tm_matmul_naive_uncoalesced);
TM_DECLARE_KERNEL(tm_matmul_tiled);
// ---- reduce declarations ----
// ---- elementwise declarations ----
int tm_vec_add_launch(const tm_problem *p, tm_launch_facts *facts);
int tm_mat_add_launch(const tm_problem *p, tm_launch_facts *facts);
double tm_elementwise_bytes(const tm_problem *p);

extern "C" const tm_kernel_spec tm_registry[] = {
    // ---- matmul ----
    {"naive", "matmul", TM_F32 | TM_F64, 1, {TM_PARAM_BLOCK_EDGE},
     tm_matmul_naive_launch, NULL, tm_matmul_naive_bytes,
     "000 CS133: A Simple Matrix Multiplication Kernel; 001 CMU 15-418: strawman 2N^3",
     "one thread per element of C; threads along a row read B coalesced"},
    {"naive_uncoalesced", "matmul", TM_F32 | TM_F64, 1, {TM_PARAM_BLOCK_EDGE},
     tm_matmul_naive_uncoalesced_launch, NULL, tm_matmul_naive_uncoalesced_bytes,
     "002 GPU performance basics: memory coalescing",
     "naive with the thread mapping swapped: a warp's loads of A are K elements apart"},
    {"tiled", "matmul", TM_F32 | TM_F64, 1, {TM_PARAM_TILE},
     tm_matmul_tiled_launch, NULL, tm_matmul_tiled_bytes,
     "000 CS133: Tiled Matrix Multiplication Kernel; 003: tiled kernel; 001: 2N^3/L",
     "shared-memory tiles cut global loads by the tile edge"},
    // ---- reduce ----
    // ---- elementwise ----
    {"vec_add", "elementwise", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_vec_add_launch, NULL, tm_elementwise_bytes,
     "000 CS133: Vector Addition Kernel",
     "c[i] = a[i] + b[i], one thread per element, 1-D grid"},
    {"mat_add", "elementwise", TM_F32 | TM_F64, 1, {TM_PARAM_BLOCK_EDGE},
     tm_mat_add_launch, NULL, tm_elementwise_bytes,
     "001 CMU 15-418: matrix add with 2-D thread indices",
     "C[i][j] = A[i][j] + B[i][j], one thread per element, 2-D grid"},
};

extern "C" const int tm_registry_size = sizeof(tm_registry) / sizeof(tm_registry[0]);
