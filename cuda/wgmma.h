// wgmma.h: the Hopper warpgroup matrix-multiply (wgmma, sm_90a only) as the tf32x3 rung uses it:
// shared-memory matrix descriptors, the fences, commit and wait, and one m64n128k8 TF32 product;
// and the thread-block cluster's barrier and distributed shared memory (its split-K tail).
// Everything here compiles only where __CUDA_ARCH_FEAT_SM90_ALL is defined (an sm_90a device
// pass); the including file keeps its callers under the same test.
#pragma once
#include <stdint.h>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A matrix descriptor (PTX ISA, "Matrix Descriptor Format") for an operand in shared memory with
// no swizzle: the operand is made of "core matrices" of 8 rows x 16 bytes (4 TF32), each 128
// contiguous bytes; `k_step_bytes` (the leading dimension byte offset) separates core matrices
// adjacent in K, `row_step_bytes` (the stride dimension byte offset) those adjacent in M (for A)
// or N (for B). Bits 0-13: address >> 4; 16-29: LBO >> 4; 32-45: SBO >> 4; 62-63: swizzle 0.
static __device__ __forceinline__ uint64_t wgmma_desc(const void *smem, unsigned k_step_bytes,
                                                      unsigned row_step_bytes)
{
    const unsigned addr = (unsigned)__cvta_generic_to_shared(smem);
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((k_step_bytes >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((row_step_bytes >> 4) & 0x3FFFu) << 32);
}

// Orders this warpgroup's earlier register accesses (to the accumulators) before the wgmma that
// follow; needed before the first wgmma and after registers the wgmma use were touched.
static __device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

// Closes the wgmma issued so far into one group.
static __device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most N committed groups are still running.
template <int N>
static __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Shared memory written by ordinary stores, made visible to the async proxy (the wgmma operand
// reads); each writing thread, before the barrier that publishes the stage.
static __device__ __forceinline__ void fence_proxy_async_shared()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving accesses to an accumulator register across a wait (the
// registers are written asynchronously; CUTLASS's warpgroup_fence_operand).
static __device__ __forceinline__ void wgmma_fence_operand(float &x)
{
    asm volatile("" : "+f"(x)::"memory");
}

// An m64n128 FP32 product's 64 accumulators, this thread's: their PTX registers (%0 .. %63) and
// their operands (inline asm names each one; both products below take them so)
#define W3_D64_REGS                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
    "%56, %57, %58, %59, %60, %61, %62, %63}"
#define W3_D64_OUTS(d)                                                                             \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63])

// d = (accumulate ? d : 0) + A * B for a 64 x 128 x 8 tile: A (64 x 8) and B (8 x 128) TF32 in
// shared memory, both K-major, given by descriptors; d: this thread's 64 floats of the 64 x 128
// FP32 result (warp w of the warpgroup holds rows 16w .. 16w + 15; lane l, g = l / 4, t = l % 4:
// d[4j + 0, 1] = (g, 8j + 2t + 0, 1), d[4j + 2, 3] = (g + 8, 8j + 2t + 0, 1)).
static __device__ __forceinline__ void wgmma_m64n128k8_tf32(float d[64], uint64_t desc_a,
                                                            uint64_t desc_b, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " W3_D64_REGS
                 ", %64, %65, p, 1, 1;\n}\n"
                 : W3_D64_OUTS(d)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// The same product with A from registers: a[0..3], this thread's TF32 of A (warp w of the
// warpgroup, rows 16w .. 16w + 15; lane l, g = l / 4, t = l % 4: a[0] (g, t), a[1] (g + 8, t),
// a[2] (g, t + 4), a[3] (g + 8, t + 4), as mma.sync's m16n8k8); B from its descriptor. The
// registers are read asynchronously: not to be written again before a wgmma_wait covers this.
static __device__ __forceinline__ void wgmma_m64n128k8_tf32_rs(float d[64], const unsigned a[4],
                                                               uint64_t desc_b, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " W3_D64_REGS
                 ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                 : W3_D64_OUTS(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

// A barrier of all the cluster's threads; shared-memory writes before it are visible after it
// to every block of the cluster (release, acquire).
static __device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}

// The same shared-memory location in the block of rank `rank` of the cluster, as a generic
// pointer that plain loads read (distributed shared memory).
static __device__ __forceinline__ const float *cluster_peer(const float *p, unsigned rank)
{
    uint64_t peer;
    asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(peer) : "l"(p), "r"(rank));
    return (const float *)peer;
}

#endif
