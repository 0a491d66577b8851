// matmul_cutlass.cu: CUTLASS's SIMT SGEMM, the open reference beside cuBLAS (closed). The same
// FP32 FFMA arithmetic as `fast`, in source one can read: 128 x 256 x 8 block tiles, 64 x 64
// warp tiles (a lane owns 16 x 8 outputs), 3 cp.async stages, A and B row-major with CUTLASS's
// SIMT alignment of 1 (any shape, any pointer). It measured 99-100% of cuBLAS at 4096^3 and
// 8192^3 (benchmarks/fast_notes.md v7, v8), so it shows what FFMA-only code can reach.
// Where to read it: cutlass/gemm/threadblock/default_mma_core_sm80.h (the SIMT multistage core),
// mma_multistage.h (the main loop), warp/mma_simt.h and thread/mma_sm50.h (the per-lane FFMAs).
//
// Built only where CUTLASS's headers are found (TILEDMM_CUTLASS_INCLUDE, or the nvidia-cutlass
// wheel's cutlass_library/source/include; setup.py defines TM_HAVE_CUTLASS and compiles this
// file for sm_80 and newer only). On the emulator the launcher returns cudaErrorNotSupported (a
// GPU library, as cuBLAS); on a cuda build without it, cudaErrorNotYetImplemented, after one
// line on stderr saying how to build it.
#include "common.h"

#if defined(TM_EMU)

int tm_matmul_cutlass_launch(const tm_problem *p, tm_launch_facts *facts)
{
    (void)p;
    (void)facts;
    return cudaErrorNotSupported;  // "operation not supported": no CUTLASS on the CPU emulator
}

#elif !defined(TM_HAVE_CUTLASS)

#include <stdio.h>

// Built without CUTLASS's headers (or for no sm_80+ architecture): say how to build it, once.
int tm_matmul_cutlass_launch(const tm_problem *p, tm_launch_facts *facts)
{
    (void)p;
    (void)facts;
    static int told = 0;
    if (!told) {
        told = 1;
        fprintf(stderr,
                "tiledmm: kernel 'cutlass' was not built: setup.py found no CUTLASS headers "
                "(or no sm_80+ architecture in TILEDMM_CUDA_ARCHS). Set "
                "TILEDMM_CUTLASS_INCLUDE=/path/to/cutlass/include, or pip install "
                "nvidia-cutlass and build with --no-build-isolation, then rebuild\n");
    }
    return cudaErrorNotYetImplemented;
}

#else

#include <limits.h>

#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm.h"

namespace {

using RowMajor = cutlass::layout::RowMajor;
using CutlassSimtSgemm = cutlass::gemm::device::Gemm<
    float, RowMajor, float, RowMajor, float, RowMajor, float, cutlass::arch::OpClassSimt,
    cutlass::arch::Sm80, cutlass::gemm::GemmShape<128, 256, 8>,  // block tile
    cutlass::gemm::GemmShape<64, 64, 8>,    // warp tile
    cutlass::gemm::GemmShape<1, 1, 1>,      // one FFMA
    cutlass::epilogue::thread::LinearCombination<float, 1, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>,
    3>;                                     // cp.async stages

}  // namespace

int tm_matmul_cutlass_launch(const tm_problem *p, tm_launch_facts *facts)
{
    if (p->dtype != TM_F32) return cudaErrorInvalidValue;
    if (p->M > INT_MAX || p->N > INT_MAX || p->K > INT_MAX) return cudaErrorInvalidValue;
    const int M = (int)p->M, N = (int)p->N, K = (int)p->K;
    const float *A = (const float *)p->in0, *B = (const float *)p->in1;
    float *C = (float *)p->out;
    // C = 1 * A B + 0 * C (C is the source and the destination; beta 0 never reads it).
    CutlassSimtSgemm::Arguments args({M, N, K}, {A, K}, {B, N}, {C, N}, {C, N}, {1.0f, 0.0f});
    CutlassSimtSgemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
    // The kernel CUTLASS launches, described for res.launch (grid as its swizzle computes it).
    typedef CutlassSimtSgemm::GemmKernel Kernel;
    const cutlass::gemm::GemmCoord tiles =
        CutlassSimtSgemm::ThreadblockSwizzle().get_tiled_shape({M, N, K}, {128, 256, 8}, 1);
    const dim3 grid = CutlassSimtSgemm::ThreadblockSwizzle().get_grid_shape(tiles);
    const size_t shared = sizeof(typename Kernel::SharedStorage);
    tm_facts_set(facts, (const void *)cutlass::Kernel<Kernel>, grid, dim3(Kernel::kThreadCount),
                 shared, shared, 1);  // CUTLASS launches with it all dynamic
    if (M == 0 || N == 0) return cudaSuccess;
    const cutlass::Status st = gemm(args, nullptr, 0);
    if (st == cutlass::Status::kSuccess) return cudaSuccess;
    const cudaError_t err = cudaGetLastError();
    return err != cudaSuccess ? err : cudaErrorLaunchFailure;
}

#endif  // TM_EMU, !TM_HAVE_CUTLASS

// The piece of C a block computes: the GemmShape<128, 256, 8> block tile instantiated above.
void tm_matmul_cutlass_tile(const tm_problem *p, long long *bm, long long *bn)
{
    (void)p;
    *bm = 128;
    *bn = 256;
}

// The compulsory traffic: read A and B, write C (CUTLASS's own is ~3n^3/256, as fast's; its
// blocked count would be tm_blocked_matmul_bytes with the tile above).
double tm_matmul_cutlass_bytes(const tm_problem *p)
{
    return 4.0 * ((double)p->M * p->K + (double)p->K * p->N + (double)p->M * p->N);
}
