// tiledmm_kernel.h: the prelude of a kernel compiled with tiledmm.compile (tiledmm/user_kernels/kernel.py
// includes it before the user's source, then resets line numbers with #line 1), and of a whole
// program on the emulator (tm.run). It gives user kernels nvcc's dialect on both backends, plus
// TM_DYNAMIC_SHARED and tm_ceil_div (kernel_dialect.h, shared with the registry's kernels):
//   cuda (NVRTC): the CUDA built-ins NVRTC provides.
//   emu (g++ -DTM_EMU): emu/cuda_emu.h (not common.h: the registry's names M, N, K
//   must not meet a student's -DN=64), plus, with -DTM_CHECK, check mode's runtime
//   (tiledmm_check.h): the bounds-checked pointer type that check mode gives the kernel's
//   pointer parameters and the race-checked shared arrays it gives its __shared__ declarations.
// The user's -D defines come after this prelude.
// `extern __shared__ T name[];` is rewritten for the emulator (tiledmm/toolchain/source.py,
// emu_dialect) into TM_DYNAMIC_SHARED(T, name) in a function, a tm_extern_shared<T> at
// namespace scope.
#pragma once

#ifdef TM_EMU
#include "emu/cuda_emu.h"
#include <stddef.h>
#endif
#include "kernel_dialect.h"

#ifdef TM_EMU
// `extern __shared__ T name[];` at namespace scope: reads the running block's dynamic shared
// memory wherever it is used (name[i], name + k, (float4 *)name, passing it as T *).
template <typename T>
struct tm_extern_shared {
    T *get() const { return reinterpret_cast<T *>(tm_emu_dynamic_shared()); }
    operator T *() const { return get(); }
    template <typename I, typename = typename std::enable_if<std::is_integral<I>::value>::type>
    T &operator[](I i) const
    {
        return get()[i];
    }
    template <typename U>
    explicit operator U *() const
    {
        return reinterpret_cast<U *>(get());
    }
};

// What the generated launcher calls after a launch. `detail` gets the emulator's report of a
// failed launch; after a launch that ran, the path it took and why ("fibers\n<reason>" or
// "thread loops\n"), which csrc/user_kernels.c returns as Launch.path and path_reason.
static inline int tm_user_finish(cudaError_t err, char *detail, size_t detail_size)
{
    if (err != cudaSuccess) {
        const char *d = tm_emu_last_error_detail();
        snprintf(detail, detail_size, "%s", d ? d : "");
        return (int)err;
    }
    snprintf(detail, detail_size, "%s\n%s", tm_emu_last_launch_path(), tm_emu_last_launch_reason());
    return 0;
}
#endif

// Check mode's runtime, for check-mode compiles only (-DTM_CHECK, the emulator).
#if defined(TM_EMU) && defined(TM_CHECK)
#include "tiledmm_check.h"
#endif
