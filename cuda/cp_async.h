// cp_async.h: cp.async (sm_80+), global -> shared without passing through registers, as the
// matmul kernels that stage their tiles asynchronously share it (fast's configs 6-7, tf32x3).
#pragma once
#include "common.h"
#include <stdint.h>

// A device pointer's 16-byte alignment: what cp_async16 and float4 accesses need.
static inline bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

// cp_async16 copies `bytes` (0 or 16) bytes and zero-fills the rest of the 16; cp_async4 the
// same for one float (0 or 4 bytes). commit closes a group of copies; wait<N> returns once at
// most N of the committed groups are still in flight. On the emulator the copy happens at once
// (the destination stage is not being read: the kernel's barriers ensure that), so commit and
// wait have nothing to do; the same plain copies serve GPUs older than sm_80 (Turing), which
// have no cp.async, in the default multi-architecture build.
// The emulator's profile build (TM_EMU_PROFILE, docs/profile.md) counts what an sm_80+ GPU runs:
// one cp.async per call, which tm_profile_cp_async (emu/profile/emu_profile.cpp) copies and
// counts as Nsight Compute does (ldgsts requests and sectors, not a global load and a shared store).
#if defined(TM_EMU_PROFILE)
extern "C" void tm_profile_cp_async(void *dst, const void *src, int size, int src_bytes);
__device__ __forceinline__ void cp_async16(float *dst, const float *src, int bytes)
{
    tm_profile_cp_async(dst, src, 16, bytes);
}
__device__ __forceinline__ void cp_async4(float *dst, const float *src, int bytes)
{
    tm_profile_cp_async(dst, src, 4, bytes);
}
__device__ __forceinline__ void cp_async_commit() {}
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
}
#elif defined(TM_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
__device__ __forceinline__ void cp_async16(float *dst, const float *src, int bytes)
{
    for (int i = 0; i < 4; ++i)
        dst[i] = 4 * i < bytes ? src[i] : 0.0f;
}
__device__ __forceinline__ void cp_async4(float *dst, const float *src, int bytes)
{
    dst[0] = bytes > 0 ? src[0] : 0.0f;
}
__device__ __forceinline__ void cp_async_commit() {}
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
}
#else
__device__ __forceinline__ void cp_async16(float *dst, const float *src, int bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(float *dst, const float *src, int bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif
