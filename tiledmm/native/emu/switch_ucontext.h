// switch_ucontext.h: the portable fiber switch (POSIX ucontext), for architectures without a
// hand-written one and under TM_EMU_FORCE_UCONTEXT. Included by fiber_switch.h.
// swapcontext also saves and restores the signal mask, a system call per switch: correct
// everywhere glibc runs, about ten times slower than the assembly switches.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>

namespace tm_emu {

constexpr const char *kSwitchKind = "ucontext";

struct FiberContext {
    ucontext_t uc;
};

// makecontext passes int arguments only: a pointer travels as two 32-bit halves.
inline void context_entry_split(unsigned fn_hi, unsigned fn_lo, unsigned arg_hi, unsigned arg_lo)
{
    auto fn = (void (*)(void *))(((uintptr_t)fn_hi << 32) | (uintptr_t)fn_lo);
    fn((void *)(((uintptr_t)arg_hi << 32) | (uintptr_t)arg_lo));
}

inline void context_make(FiberContext &c, char *lo, size_t size, void (*fn)(void *), void *arg)
{
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = lo;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;   // fn never returns
    uintptr_t f = (uintptr_t)fn, a = (uintptr_t)arg;
    makecontext(&c.uc, (void (*)())context_entry_split, 4, (unsigned)(f >> 32), (unsigned)f,
                (unsigned)(a >> 32), (unsigned)a);
}

inline void context_switch(FiberContext &from, FiberContext &to)
{
    swapcontext(&from.uc, &to.uc);
}

// No prefetch: swapcontext's system call dwarfs what it would save.
inline void context_prefetch(const FiberContext &) {}

}  // namespace tm_emu
