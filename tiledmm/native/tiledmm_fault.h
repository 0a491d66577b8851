// tiledmm_fault.h: the fault report of an isolated user kernel on the emulator.
//
// tm.compile's generated launcher (tiledmm/toolchain/compile_emu.py) includes this after the user's source.
// In tiledmm's worker process (tiledmm/confine/isolation.py) each loaded kernel library installs these
// handlers; in the caller's own process (isolate=False) nothing is installed. When a CUDA thread
// faults (SIGSEGV/SIGBUS on an address outside the argument buffers' 256-byte-aligned extents,
// which the worker surrounds with inaccessible guard pages; SIGFPE; SIGILL; abort(), a failed
// assert or an uncaught C++ exception: SIGABRT), the handler writes ONE line to the worker's
// standard error:
//   tiledmm-fault: <what happened> by thread (x,y,z) of block (x,y,z)
// naming, for an access next to an argument's buffer, the argument and the element index, then
// lets the signal end the worker. The caller turns that line into tm.KernelError and starts a
// new worker for the next call.
//
// Each kernel library carries its own copy of the emulator's runtime, with its own thread-local
// state (tm_emu_tls), so the handlers chain: a library whose kernel is not running on the
// faulting OS thread passes the signal on to the handler installed before it.
#pragma once
#ifdef TM_EMU
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unistd.h>

struct tm_fault_arg_t {
    const char *name, *type;   // the parameter's name and element type, as the user wrote them
    uintptr_t base;   // the buffer passed for it
    size_t bytes, elem;   // its size and the element's size
};
// The inaccessible bytes the worker leaves before and after each argument's buffer
// (tiledmm/confine/isolation.py's GUARD).
#define TM_FAULT_GUARD ((uintptr_t)1 << 20)
static tm_fault_arg_t tm_fault_args_[64];
static int tm_fault_nargs_ = 0;
static const char *tm_fault_kernel_ = "?";
static struct sigaction tm_fault_prev_[32];

// Set by the launcher before each launch (one launch at a time per worker).
static inline void tm_fault_note_arg(int i, const char *name, const char *type, const void *base,
                                     size_t bytes, size_t elem)
{
    if (i < 0 || i >= 64) return;
    tm_fault_args_[i] = {name, type, (uintptr_t)base, bytes, elem};
    if (i + 1 > tm_fault_nargs_) tm_fault_nargs_ = i + 1;
}

static inline const char *tm_fault_signal_text(int sig, int code)
{
    switch (sig) {
    case SIGSEGV: return "invalid memory access (SIGSEGV)";
    case SIGBUS: return "invalid memory access (SIGBUS)";
    case SIGFPE:
        return code == FPE_INTDIV || code == FPE_INTOVF
                   ? "integer division by zero or overflow (SIGFPE; a GPU does not trap here, its "
                     "result is undefined)"
                   : "arithmetic fault (SIGFPE)";
    case SIGILL: return "illegal instruction (SIGILL; e.g. the end of a non-void function reached)";
    case SIGABRT: return "abort (SIGABRT: abort(), a failed assert or an uncaught C++ exception)";
    case SIGTRAP: return "trap (SIGTRAP: __trap() or __builtin_trap())";
    default: return "fatal signal";
    }
}

// SIGSYS: the sandbox (tiledmm/confine/sandbox.py's seccomp filter, SECCOMP_RET_TRAP) refused a
// system call. The report gives its number; the caller names it and says what it would have done
// from the sandbox's one list (sandbox.REFUSED_CALLS, describe_refused_call).
static inline void tm_fault_sandbox_text(char *buf, size_t n, int nr)
{
    snprintf(buf, n,
             "sandbox: the kernel made system call %d, which the sandbox refuses; student code "
             "may only compute on its arrays",
             nr);
}

// Where the faulting address lies: past the end or before the start of an argument's buffer
// (the guard pages), at a null pointer, or elsewhere.
static inline void tm_fault_where(char *buf, size_t n, uintptr_t addr)
{
    for (int i = 0; i < tm_fault_nargs_; ++i) {
        const tm_fault_arg_t &a = tm_fault_args_[i];
        if (!a.name || !a.elem) continue;
        const uintptr_t padded = (a.bytes + 255) / 256 * 256;
        const size_t count = a.bytes / a.elem;
        if (addr >= a.base + a.bytes && addr < a.base + padded + TM_FAULT_GUARD) {
            snprintf(buf, n,
                     ": %s[%lld] is past the end of the buffer passed for '%s' (%zu %s "
                     "element%s)",
                     a.name, (long long)((addr - a.base) / a.elem), a.name, count, a.type,
                     count == 1 ? "" : "s");
            return;
        }
        if (addr < a.base && addr + TM_FAULT_GUARD >= a.base) {
            snprintf(buf, n, ": %s[-%lld] is before the start of the buffer passed for '%s'",
                     a.name, (long long)((a.base - addr + a.elem - 1) / a.elem), a.name);
            return;
        }
    }
    if (addr < 65536) {
        snprintf(buf, n, " at address %#lx: a null or small pointer", (unsigned long)addr);
        return;
    }
    // Farther away: name the nearest buffer, as a hint (the address may belong to nothing).
    const tm_fault_arg_t *near = nullptr;
    uintptr_t best = ~(uintptr_t)0;
    for (int i = 0; i < tm_fault_nargs_; ++i) {
        const tm_fault_arg_t &a = tm_fault_args_[i];
        if (!a.name || !a.elem) continue;
        const uintptr_t d = addr < a.base ? a.base - addr : addr - a.base;
        if (d < best) {
            best = d;
            near = &a;
        }
    }
    if (near && best < ((uintptr_t)1 << 40)) {
        const long long index =
            addr >= near->base ? (long long)((addr - near->base) / near->elem)
                               : -(long long)((near->base - addr + near->elem - 1) / near->elem);
        snprintf(buf, n,
                 " at address %#lx, outside every argument's buffer (the nearest is '%s': "
                 "that would be %s[%lld] of %zu)",
                 (unsigned long)addr, near->name, near->name, index, near->bytes / near->elem);
    } else {
        snprintf(buf, n, " at address %#lx, outside every argument's buffer", (unsigned long)addr);
    }
}

static void tm_fault_handler(int sig, siginfo_t *si, void *uctx)
{
    if (!tm_emu_tls.worker) {   // not this library's kernel: the handler installed before ours
        const struct sigaction &prev = tm_fault_prev_[sig < 32 ? sig : 0];
        if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction) {
            prev.sa_sigaction(sig, si, uctx);
            return;
        }
        if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL &&
            prev.sa_handler != SIG_IGN) {
            prev.sa_handler(sig);
            return;
        }
    }
    char where[512] = "", line[1024];
    if ((sig == SIGSEGV || sig == SIGBUS) && si)
        tm_fault_where(where, sizeof where, (uintptr_t)si->si_addr);
    if (sig == SIGSYS) {   // the sandbox's refusal: named, whichever thread made the call
        char text[400];
        tm_fault_sandbox_text(text, sizeof text, si ? si->si_syscall : -1);
        snprintf(line, sizeof line, "\ntiledmm-fault: %s (in kernel '%s')\n", text,
                 tm_fault_kernel_);
    } else if (tm_emu_tls.worker && tm_emu_tls.linear_tid < 0) {   // split at its barriers
        const uint3 b = tm_emu_tls.block_idx;
        snprintf(line, sizeof line,
                 "\ntiledmm-fault: %s%s in kernel '%s', by a thread of block "
                 "(%u,%u,%u) (the kernel ran as loops over the block's threads; check=True runs "
                 "one fiber per thread and names it)\n",
                 tm_fault_signal_text(sig, si ? si->si_code : 0), where, tm_fault_kernel_, b.x, b.y,
                 b.z);
    } else if (tm_emu_tls.worker) {
        const uint3 t = tm_emu_tls.thread_idx, b = tm_emu_tls.block_idx;
        snprintf(line, sizeof line,
                 "\ntiledmm-fault: %s%s in kernel '%s', by thread (%u,%u,%u) of "
                 "block (%u,%u,%u)\n",
                 tm_fault_signal_text(sig, si ? si->si_code : 0), where, tm_fault_kernel_, t.x, t.y,
                 t.z, b.x, b.y, b.z);
    } else {
        snprintf(line, sizeof line,
                 "\ntiledmm-fault: %s%s outside the kernel's threads (while "
                 "loading or launching '%s')\n",
                 tm_fault_signal_text(sig, si ? si->si_code : 0), where, tm_fault_kernel_);
    }
    ssize_t unused = write(2, line, strlen(line));
    (void)unused;
    signal(sig, SIG_DFL);   // the signal ends the worker: raised again now or when the
    raise(sig);   // faulting instruction runs again
}

// Called once by the worker after loading the library.
extern "C" __attribute__((visibility("default"))) int tm_user_fault_setup(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
    for (int sig : sigs) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = tm_fault_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, &tm_fault_prev_[sig]) != 0) return -1;
    }
    return 0;
}
#endif
