// switch_aarch64.h: the fiber switch for 64-bit Arm (AAPCS64, ELF). Included by fiber_switch.h.
//
// tm_emu_ctx_switch(void **save_sp, void *to_sp) stores, in a 176-byte frame on the current
// stack, what AAPCS64 says a callee preserves: x19-x28, the frame pointer x29, the link register
// x30, the low halves d8-d15 of v8-v15, and FPCR (rounding mode, flush-to-zero: a kernel must
// not see another thread's modes). It stores sp in *save_sp, loads to_sp and restores the same
// frame from there; `ret` then goes to the x30 of the resumed fiber.
// - sp stays 16-byte aligned: the frame is 11 x 16 bytes (AArch64 faults on a misaligned sp).
// - x18 is not touched: it is the platform register (reserved on macOS, the shadow call stack
//   under -fsanitize=shadow-call-stack), not the switch's to save or clobber.
// - FPCR is written only when it differs: msr fpcr can serialise the pipeline, and kernels
//   almost never change it.
// - `hint #34` is BTI c (a no-op on cores without branch target identification).
// Cost on paper (qemu timings mean nothing): 32 instructions when FPCR is unchanged (10 stp,
// 10 ldp, mrs/str/ldr of FPCR, 2 moves of sp, compare and branch, sub/add, bti, ret), no system
// call, no fence. The pairs move 16 bytes each, so on a current core (Neoverse, Apple M) it is
// about 10-15 cycles plus the mispredicted `ret` (it returns into another fiber, which the
// return-address predictor cannot know): about 25-30 cycles, some 10 ns, as on x86-64.
#pragma once
#include <stddef.h>
#include <stdint.h>

extern "C" void tm_emu_ctx_switch(void **save_sp, void *to_sp);
extern "C" void tm_emu_fiber_trampoline(void);
asm(R"(
    .text
    .globl tm_emu_ctx_switch
    .hidden tm_emu_ctx_switch
    .type tm_emu_ctx_switch, %function
    .p2align 4
tm_emu_ctx_switch:
    .cfi_startproc
    hint #34
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mrs x9, fpcr
    str x9, [sp, #160]
    mov x10, sp
    str x10, [x0]
    mov sp, x1
    ldr x10, [sp, #160]
    cmp x9, x10
    b.eq 1f
    msr fpcr, x10
1:
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    ret
    .cfi_endproc
    .size tm_emu_ctx_switch, .-tm_emu_ctx_switch

    .globl tm_emu_fiber_trampoline
    .hidden tm_emu_fiber_trampoline
    .type tm_emu_fiber_trampoline, %function
    .p2align 4
tm_emu_fiber_trampoline:
    .cfi_startproc
    .cfi_undefined x30
    mov x0, x20
    blr x19
    brk #0x1
    .cfi_endproc
    .size tm_emu_fiber_trampoline, .-tm_emu_fiber_trampoline
)");

namespace tm_emu {

constexpr const char *kSwitchKind = "aarch64 asm";

struct FiberContext {
    void *sp = nullptr;
};

// The frame tm_emu_ctx_switch pops, in 8-byte words from sp upwards.
enum : int { kX19 = 0, kX20 = 1, kX29 = 10, kX30 = 11, kD8 = 12, kFpcr = 20, kFrameWords = 22 };

// The first switch to c returns (x30) into the trampoline, which calls fn(arg) from x19 and x20
// with sp = the 16-byte aligned top of the stack.
inline void context_make(FiberContext &c, char *lo, size_t size, void (*fn)(void *), void *arg)
{
    uint64_t *top = (uint64_t *)(((uintptr_t)(lo + size)) & ~(uintptr_t)15);
    uint64_t *s = top - kFrameWords;
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    for (int i = 0; i < kFrameWords; ++i)
        s[i] = 0;
    s[kX19] = (uint64_t)(uintptr_t)fn;
    s[kX20] = (uint64_t)(uintptr_t)arg;
    s[kX29] = 0;   // the end of the frame chain
    s[kX30] = (uint64_t)(uintptr_t)&tm_emu_fiber_trampoline;
    s[kFpcr] = fpcr;
    c.sp = s;
}

inline void context_switch(FiberContext &from, FiberContext &to)
{
    tm_emu_ctx_switch(&from.sp, to.sp);
}

// Starts loading, into the cache, what the next switch to c will read (its saved frame of
// kFrameWords words and the caller's frames above it); see switch_x86_64.h.
inline void context_prefetch(const FiberContext &c)
{
    const char *sp = static_cast<const char *>(c.sp);
    if (!sp) return;
    for (int i = 0; i < 8; ++i)
        __builtin_prefetch(sp + 64 * i);
}

}  // namespace tm_emu
