// registry.cu: the ONE table of every kernel. A kernel variant is one kernel file under cuda/
// and one row here (its declarations sit beside the row); Python, `tm.kernels()`, the CLI,
// the docs and the tests read this table.
#include "common.h"

#define TM_DECLARE_KERNEL(prefix)                                     \
    int prefix##_launch(const tm_problem *p, tm_launch_facts *facts); \
    double prefix##_bytes(const tm_problem *p)
// A matmul that reports its block tile (the row's block_tile, after its summary).
#define TM_DECLARE_BLOCKED_KERNEL(prefix) \
    TM_DECLARE_KERNEL(prefix);            \
    void prefix##_tile(const tm_problem *p, long long *bm, long long *bn)

// One tunable of a row: its name, default, allowed values (a TM_VALUES_* list of registry.h,
// which the kernel file dispatches on too) and what it means.
template <typename... Values>
constexpr int tm_count_values(Values...)
{
    return (int)sizeof...(Values);
}
#define TM_PARAM(name, default_value, values, doc) \
    {name, default_value, tm_count_values(values), {values}, doc}

// Parameters shared by several rows.
#define TM_PARAM_TILE                    \
    TM_PARAM("tile", 16, TM_VALUES_TILE, \
             "edge of the square shared-memory tile and of the thread block")
#define TM_PARAM_THREADS TM_PARAM("block", 256, TM_VALUES_THREADS, "threads per block")
#define TM_PARAM_BLOCK_EDGE \
    TM_PARAM("block", 16, TM_VALUES_BLOCK_EDGE, "edge of the square thread block")
// The naive pair defaults to 32x32 blocks: the same block for both mappings, and a full warp
// along threadIdx.x, so the measured gap is the coalescing lesson alone.
#define TM_PARAM_NAIVE_BLOCK \
    TM_PARAM("block", 32, TM_VALUES_BLOCK_EDGE, "edge of the square thread block")

// ---- matmul declarations ----
TM_DECLARE_BLOCKED_KERNEL(tm_matmul_naive);
TM_DECLARE_KERNEL(tm_matmul_naive_uncoalesced);
TM_DECLARE_BLOCKED_KERNEL(tm_matmul_tiled);
TM_DECLARE_BLOCKED_KERNEL(tm_matmul_coarse);
TM_DECLARE_BLOCKED_KERNEL(tm_matmul_colmajor_b);
double tm_matmul_colmajor_b_scratch(const tm_problem *p);
TM_DECLARE_BLOCKED_KERNEL(tm_matmul_regtile);
TM_DECLARE_BLOCKED_KERNEL(tm_matmul_fast);
TM_DECLARE_KERNEL(tm_matmul_cublas);
TM_DECLARE_BLOCKED_KERNEL(tm_matmul_cutlass);
TM_DECLARE_BLOCKED_KERNEL(tm_matmul_wmma);
TM_DECLARE_BLOCKED_KERNEL(tm_matmul_tf32x3);
// ---- reduce declarations ----
TM_DECLARE_KERNEL(tm_reduce_per_level);
TM_DECLARE_KERNEL(tm_reduce_wrong_block_sync);
TM_DECLARE_KERNEL(tm_reduce_single_block);
TM_DECLARE_KERNEL(tm_reduce_multi_pass);
TM_DECLARE_KERNEL(tm_reduce_shared);
double tm_reduce_work_copy_scratch(const tm_problem *p);
#define TM_DECLARE_REDUCE_STEP(prefix) \
    TM_DECLARE_KERNEL(prefix);         \
    double prefix##_scratch(const tm_problem *p)
TM_DECLARE_REDUCE_STEP(tm_reduce_interleaved_divergent);
TM_DECLARE_REDUCE_STEP(tm_reduce_interleaved_bank_conflicts);
TM_DECLARE_REDUCE_STEP(tm_reduce_sequential);
TM_DECLARE_REDUCE_STEP(tm_reduce_first_add);
TM_DECLARE_REDUCE_STEP(tm_reduce_unroll_last_warp);
TM_DECLARE_REDUCE_STEP(tm_reduce_multi_element);
int tm_reduce_shuffle_launch(const tm_problem *p, tm_launch_facts *facts);
int tm_reduce_vectorized_launch(const tm_problem *p, tm_launch_facts *facts);
double tm_reduce_shuffle_scratch(const tm_problem *p);
double tm_reduce_vectorized_scratch(const tm_problem *p);
double tm_reduce_grid_stride_bytes(const tm_problem *p);
TM_DECLARE_KERNEL(tm_reduce_atomic);
TM_DECLARE_KERNEL(tm_reduce_atomic_per_element);
#define TM_PARAM_PER_THREAD \
    TM_PARAM("per_thread", 8, TM_VALUES_PER_THREAD, "elements each thread adds before the tree")
// ---- elementwise declarations ----
int tm_vec_add_launch(const tm_problem *p, tm_launch_facts *facts);
int tm_mat_add_launch(const tm_problem *p, tm_launch_facts *facts);
double tm_elementwise_bytes(const tm_problem *p);

// clang-format off: one row a kernel, laid out as a table
extern "C" const tm_kernel_spec tm_registry[] = {
    // ---- matmul ----
    {"naive", "matmul", TM_F32 | TM_F64, 1, {TM_PARAM_NAIVE_BLOCK},
     tm_matmul_naive_launch, NULL, tm_matmul_naive_bytes,
     "000 CS133: A Simple Matrix Multiplication Kernel; 001 CMU 15-418: strawman 2N^3",
     "one thread per element of C; threads along a row read B coalesced",
     tm_matmul_naive_tile},
    {"naive_uncoalesced", "matmul", TM_F32 | TM_F64, 1, {TM_PARAM_NAIVE_BLOCK},
     tm_matmul_naive_uncoalesced_launch, NULL, tm_matmul_naive_uncoalesced_bytes,
     "002 GPU performance basics: memory coalescing",
     "naive with the thread mapping swapped: a warp's loads of A are K elements apart",
     tm_matmul_naive_tile},
    {"tiled", "matmul", TM_F32 | TM_F64, 1, {TM_PARAM_TILE},
     tm_matmul_tiled_launch, NULL, tm_matmul_tiled_bytes,
     "000 CS133: Tiled Matrix Multiplication Kernel; 003: tiled kernel; 001: 2N^3/L",
     "shared-memory tiles cut global loads by the tile edge",
     tm_matmul_tiled_tile},
    {"coarse", "matmul", TM_F32 | TM_F64, 2,
     {TM_PARAM("coarsen", 4, TM_VALUES_COARSEN, "output tiles per block along a row of C, sharing one A tile"),
      TM_PARAM("tile", 32, TM_VALUES_TILE, "edge of the square shared-memory tile and of the thread block")},
     tm_matmul_coarse_launch, NULL, tm_matmul_coarse_bytes,
     "002 GPU performance basics: thread coarsening (the listing's column and bounds bugs fixed)",
     "tiled, each block computing `coarsen` adjacent output tiles: A loaded once per strip",
     tm_matmul_coarse_tile},
    {"colmajor_b", "matmul", TM_F32 | TM_F64, 2,
     {TM_PARAM("corner", 1, TM_VALUES_CORNER, "0: naive, B read down its columns (uncoalesced); 1: corner turning through shared memory"),
      TM_PARAM("tile", 16, TM_VALUES_TILE, "edge of the square thread block (and shared tile)")},
     tm_matmul_colmajor_b_launch, tm_matmul_colmajor_b_scratch, tm_matmul_colmajor_b_bytes,
     "002 GPU performance basics: memory coalescing, B in column-major order, corner turning",
     "B column-major (a transpose into scratch, timed with the call): naive vs corner turning",
     tm_matmul_colmajor_b_tile},
    {"regtile", "matmul", TM_F32 | TM_F64, 1,
     {TM_PARAM("dims", 2, TM_VALUES_REGTILE_DIMS, "1: a column of 8 outputs per thread (64x64 block tile); 2: 8x8 outputs per thread (128x128)")},
     tm_matmul_regtile_launch, NULL, tm_matmul_regtile_bytes,
     "001 CMU 15-418: thread-level register tiling, 2N^3/V; block tiling in shared memory",
     "register tiling: each thread accumulates a column (1-D) or a VxV block (2-D) of C",
     tm_matmul_regtile_tile},
    {"fast", "matmul", TM_F32, 1,
     {TM_PARAM("config", 0, TM_VALUES_FAST_CONFIG, "0: choose by size; 1: 128x128 tile, BK 16; 2: 128x128, BK 8; 3: 64x64, BK 16; 4: 128x256, BK 32; 5: 128x256, BK 16; 6: 4 with B by cp.async, 2 stages; 7: CUTLASS's SIMT structure, 128x256x8, both operands by cp.async, 4 stages")},
     tm_matmul_fast_launch, NULL, tm_matmul_fast_bytes,
     "001 register tiling + 002 coalescing, taken to the hardware: float4, warp tiles, double buffering",
     "float32 only: 128-bit loads, transposed A tile, warp tiling, double-buffered shared stages",
     tm_matmul_fast_tile},
    {"cublas", "matmul", TM_F32 | TM_F64, 0, {},
     tm_matmul_cublas_launch, NULL, tm_matmul_cublas_bytes,
     "the reference: NVIDIA cuBLAS SGEMM/DGEMM (TF32 off), loaded at run time",
     "cuBLAS, for correctness and for % of cuBLAS (cuda backend only; not on the emulator)"},
    {"cutlass", "matmul", TM_F32, 0, {},
     tm_matmul_cutlass_launch, NULL, tm_matmul_cutlass_bytes,
     "the open reference: CUTLASS's SIMT SGEMM, 128x256x8 blocks, 64x64 warps, 3 cp.async stages",
     "CUTLASS FP32 FFMA GEMM, source you can read (cuda only, sm_80+, built where its headers are found)",
     tm_matmul_cutlass_tile},
    {"wmma", "matmul", TM_F32, 1,
     {TM_PARAM("precision", 1, TM_VALUES_WMMA_PRECISION, "tensor-core inputs: 0 TF32, 1 FP16 (FP32 accumulate either way)")},
     tm_matmul_wmma_launch, NULL, tm_matmul_wmma_bytes,
     "003 tiled kernel on tensor cores: nvcuda::wmma fragments (CUDA Programming Guide, Warp Matrix Functions)",
     "tiled, each warp's 16x16 piece of C an FP32 accumulator fragment fed by FP16 or TF32 mma_sync (sm_80+)",
     tm_matmul_wmma_tile},
    {"tf32x3", "matmul", TM_F32, 0, {},
     tm_matmul_tf32x3_launch, NULL, tm_matmul_tf32x3_bytes,
     "tensor cores at FP32 accuracy: CUTLASS's 3xTF32 (big + small TF32 parts, three products)",
     "FP32 in and out on TF32 tensor cores: mma.sync.m16n8k8, a*b = ab*bb + ab*bs + as*bb (cuda only, sm_80+)",
     tm_matmul_tf32x3_tile},
    // ---- reduce ----
    {"shuffle", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_shuffle_launch, tm_reduce_shuffle_scratch, tm_reduce_grid_stride_bytes,
     "002 GPU performance basics: coalescing, latency hiding, coarsening; warp shuffle (__shfl_down_sync)",
     "fastest: 128-bit loads in a grid-stride loop, warp-shuffle sums, last block adds the partials (1 launch)"},
    {"vectorized", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_vectorized_launch, tm_reduce_vectorized_scratch, tm_reduce_grid_stride_bytes,
     "002 GPU performance basics: coalescing, latency hiding, thread coarsening",
     "128-bit loads in a grid-stride loop, shared-memory tree per block, a second launch adds the partials"},
    {"per_level", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_per_level_launch, tm_reduce_work_copy_scratch, tm_reduce_per_level_bytes,
     "001 CMU 15-418: CUDA Example 3: Reduction, Idea 1 (kernel end as a barrier)",
     "one launch per tree level (ceil(log2 n) launches), the loop over levels on the host"},
    {"single_block", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_single_block_launch, tm_reduce_work_copy_scratch, tm_reduce_single_block_bytes,
     "001 CMU 15-418: CUDA Example 3: Reduction, Idea 2.1 (only launch 1 block)",
     "one block walks the whole tree in global memory with __syncthreads between levels"},
    {"multi_pass", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_multi_pass_launch, tm_reduce_work_copy_scratch, tm_reduce_multi_pass_bytes,
     "001 CMU 15-418: CUDA Example 3: Reduction, Idea 2.2 (barriers in blocks, launches across)",
     "per pass each block trees its values in global memory; passes on partials blockDim^pass apart"},
    {"shared", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_shared_launch, tm_reduce_work_copy_scratch, tm_reduce_shared_bytes,
     "001 CMU 15-418: CUDA Example 3: Using Shared Memory, Idea 2.3",
     "multi_pass with the block's tree in shared memory: one global read per element"},
    {"interleaved_divergent", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_interleaved_divergent_launch, tm_reduce_interleaved_divergent_scratch,
     tm_reduce_interleaved_divergent_bytes,
     "001 Idea 2.3; 002 optimisation checklist: divergence; Harris, Optimizing Parallel Reduction, kernel 1",
     "shared-memory tree, tid % (2*stride) == 0 adds: warps keep diverging"},
    {"interleaved_bank_conflicts", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_interleaved_bank_conflicts_launch, tm_reduce_interleaved_bank_conflicts_scratch,
     tm_reduce_interleaved_bank_conflicts_bytes,
     "002: shared memory banks; Harris, Optimizing Parallel Reduction, kernel 2",
     "index = 2*stride*tid: no divergence, but strided shared-memory accesses conflict in banks"},
    {"sequential", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_sequential_launch, tm_reduce_sequential_scratch, tm_reduce_sequential_bytes,
     "002: shared memory banks, divergence; Harris, Optimizing Parallel Reduction, kernel 3",
     "sequential addressing: thread tid adds partial[tid + half], conflict-free"},
    {"first_add", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_first_add_launch, tm_reduce_first_add_scratch, tm_reduce_first_add_bytes,
     "002: thread coarsening; Harris, Optimizing Parallel Reduction, kernel 4",
     "first add during load: each thread loads two elements, half the blocks"},
    {"unroll_last_warp", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_unroll_last_warp_launch, tm_reduce_unroll_last_warp_scratch,
     tm_reduce_unroll_last_warp_bytes,
     "002: optimisation checklist; Harris, Optimizing Parallel Reduction, kernel 5",
     "first_add, and the last warp unrolled with __syncwarp instead of __syncthreads"},
    {"multi_element", "reduce", TM_F32 | TM_F64, 2, {TM_PARAM_THREADS, TM_PARAM_PER_THREAD},
     tm_reduce_multi_element_launch, tm_reduce_multi_element_scratch,
     tm_reduce_multi_element_bytes,
     "002: thread coarsening (COARSE_FACTOR); Harris, Optimizing Parallel Reduction, kernel 6",
     "several elements per thread (coalesced), then the unrolled tree"},
    {"atomic", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_atomic_launch, NULL, tm_reduce_atomic_bytes,
     "001 CMU 15-418: Advanced topics: atomics",
     "grid-stride sums, warp-shuffle block sums, one atomicAdd per block (order varies run to run)"},
    {"atomic_per_element", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_atomic_per_element_launch, NULL, tm_reduce_atomic_per_element_bytes,
     "001 CMU 15-418: Advanced topics: atomics",
     "one atomicAdd per element on one address: contention serialises them"},
    {"demo_wrong_block_sync", "reduce", TM_F32 | TM_F64, 1, {TM_PARAM_THREADS},
     tm_reduce_wrong_block_sync_launch, tm_reduce_work_copy_scratch,
     tm_reduce_wrong_block_sync_bytes,
     "001 CMU 15-418: CUDA Example 3: Reduction, Idea 2 (\"this implementation is not correct\")",
     "DEMONSTRATION, WRONG beyond one block: one launch, __syncthreads cannot synchronise blocks"},
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
// clang-format on

extern "C" const int tm_registry_size = sizeof(tm_registry) / sizeof(tm_registry[0]);
