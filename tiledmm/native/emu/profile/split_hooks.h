// split_hooks.h: profile mode's hooks in kernels split at their barriers (issue 34). The profile
// build compiles each split registry file with this header included first (setup.py,
// -include); tiledmm/native/kernel_dialect.h defines the same macros for every other build
// (empty, or a plain store). split/transform.py emits them: the hooks' state once per block
// (TM_SPLIT_STATE, null when not profiling), the start and end of each CUDA thread's turn in a
// thread loop, each former __syncthreads() and __syncwarp(), and the store of the fault report's
// thread index (TM_SPLIT_NOTE). emu_profile.cpp defines the functions.
#pragma once
#include <cstddef>

extern "C" void *tm_profile_split_state(void) noexcept;
extern "C" void tm_profile_split_thread(void *state, size_t linear_tid) noexcept;
extern "C" void tm_profile_split_thread_end(void *state) noexcept;
extern "C" void tm_profile_split_thread_last(void *state) noexcept;
extern "C" void tm_profile_split_barrier(void *state, int line) noexcept;
extern "C" void tm_profile_split_warp_sync(void *state, const unsigned *lane_masks,
                                           int line) noexcept;

#define TM_SPLIT_STATE void *const tm_ps_ = tm_profile_split_state();
#define TM_SPLIT_TURN(linear_tid) tm_profile_split_thread(tm_ps_, (linear_tid));
#define TM_SPLIT_TURN_END() tm_profile_split_thread_end(tm_ps_);
#define TM_SPLIT_TURN_LAST() tm_profile_split_thread_last(tm_ps_);
#define TM_SPLIT_BARRIER(line) tm_profile_split_barrier(tm_ps_, (line));
#define TM_SPLIT_WARP_SYNC(lane_masks, line) \
    tm_profile_split_warp_sync(tm_ps_, (lane_masks), (line));

// The thread index the fault report reads (tm_emu_tls.thread_idx) is no access of the kernel's:
// stored in asm, out of sight of -fsanitize=thread, whose hook on a plain store took a tenth of
// a profiled reduction's time (one store per thread turn; benchmarks/emu_notes.md).
#if defined(__x86_64__)
#define TM_SPLIT_NOTE(slot, value) \
    __asm__ volatile("movl %1, %0" : "=m"(slot) : "r"((unsigned)(value)));
#elif defined(__aarch64__)
#define TM_SPLIT_NOTE(slot, value) \
    __asm__ volatile("str %w1, %0" : "=m"(slot) : "r"((unsigned)(value)));
#else
#define TM_SPLIT_NOTE(slot, value) (slot) = (value);
#endif
