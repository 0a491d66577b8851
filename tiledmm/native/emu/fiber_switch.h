// fiber_switch.h: the fiber context switch, one small file per architecture, picked here.
// Included by scheduler.cpp only (the x86-64 and aarch64 files define assembly symbols).
//
// Each file provides, in namespace tm_emu:
//   struct FiberContext            the saved state of a suspended fiber (or of the scheduler)
//   void context_make(FiberContext &c, char *lo, size_t size, void (*fn)(void *), void *arg)
//                                  prepare c so that the first switch to it calls fn(arg) on the
//                                  stack [lo, lo + size); fn never returns
//   void context_switch(FiberContext &from, FiberContext &to)
//                                  save the running context in `from`, resume `to`
//   void context_prefetch(const FiberContext &c)
//                                  hint the cache to load what switching to c will read
//   kSwitchKind                    what tm_emu_switch_kind() reports
//
// The hand-written switches save only what the calling convention says a callee preserves,
// plus the floating-point control register; glibc's swapcontext, the portable fallback, also
// saves the signal mask with a system call on every switch (about 185 ns against 10-20 ns).
// TM_EMU_FORCE_UCONTEXT picks the fallback on any architecture (tests use it).
#pragma once

#if defined(TM_EMU_FORCE_UCONTEXT)
#include "switch_ucontext.h"
#elif defined(__x86_64__) && defined(__ELF__)
#include "switch_x86_64.h"
#elif defined(__aarch64__) && defined(__ELF__)
#include "switch_aarch64.h"
#else
#include "switch_ucontext.h"
#endif
