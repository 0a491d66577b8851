// switch_x86_64.h: the fiber switch for x86-64 (System V ABI, ELF). Included by fiber_switch.h.
//
// tm_emu_ctx_switch(void **save_sp, void *to_sp) pushes the callee-saved registers (rbp, rbx,
// r12-r15) and the floating-point control state (mxcsr, x87 control word) on the current stack,
// stores the stack pointer in *save_sp and pops the same frame from to_sp. The control state is
// reloaded only when it differs from the current one: ldmxcsr and fldcw are slow, and kernels
// almost never change it. 6 pushes, 6 pops, 2 stores of control state, a compare and a return.
#pragma once
#include <stddef.h>
#include <stdint.h>

extern "C" void tm_emu_ctx_switch(void **save_sp, void *to_sp);
extern "C" void tm_emu_fiber_trampoline(void);
asm(R"(
    .text
    .globl tm_emu_ctx_switch
    .hidden tm_emu_ctx_switch
    .type tm_emu_ctx_switch, @function
    .p2align 4
tm_emu_ctx_switch:
    .cfi_startproc
    endbr64
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    movq $0, (%rsp)
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq (%rsp), %rax
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    cmpq (%rsp), %rax
    je 1f
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
1:
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size tm_emu_ctx_switch, .-tm_emu_ctx_switch

    .globl tm_emu_fiber_trampoline
    .hidden tm_emu_fiber_trampoline
    .type tm_emu_fiber_trampoline, @function
    .p2align 4
tm_emu_fiber_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    endbr64
    movq %r12, %rdi
    callq *%rbx
    ud2
    .cfi_endproc
    .size tm_emu_fiber_trampoline, .-tm_emu_fiber_trampoline
)");

namespace tm_emu {

constexpr const char *kSwitchKind = "x86-64 asm";

struct FiberContext {
    void *sp = nullptr;
};

// The first switch to c "returns" into the trampoline, which calls fn(arg) with rbx = fn and
// r12 = arg; the stack is 16-byte aligned at that call, as the ABI requires.
inline void context_make(FiberContext &c, char *lo, size_t size, void (*fn)(void *), void *arg)
{
    uint64_t *s = (uint64_t *)(((uintptr_t)(lo + size)) & ~(uintptr_t)15);
    unsigned mxcsr = __builtin_ia32_stmxcsr();
    unsigned short fpcw;
    __asm__ volatile("fnstcw %0" : "=m"(fpcw));
    s[-1] = (uint64_t)(uintptr_t)&tm_emu_fiber_trampoline;   // return address
    s[-2] = 0;                                              // rbp
    s[-3] = (uint64_t)(uintptr_t)fn;                        // rbx
    s[-4] = (uint64_t)(uintptr_t)arg;                       // r12
    s[-5] = 0;                                              // r13
    s[-6] = 0;                                              // r14
    s[-7] = 0;                                              // r15
    s[-8] = (uint64_t)mxcsr | ((uint64_t)fpcw << 32);
    c.sp = &s[-8];
}

inline void context_switch(FiberContext &from, FiberContext &to)
{
    tm_emu_ctx_switch(&from.sp, to.sp);
}

// Starts loading, into the cache, what the next switch to c will read: the saved frame and the
// caller's frames just above it (a fiber waiting at a barrier resumes in them). The scheduler
// calls it for the fiber after the next one, so the loads overlap the next fiber's work.
inline void context_prefetch(const FiberContext &c)
{
    const char *sp = static_cast<const char *>(c.sp);
    if (!sp) return;
    for (int i = 0; i < 6; ++i)
        __builtin_prefetch(sp + 64 * i);
}

}  // namespace tm_emu
