// scheduler.cpp: the emulator's core. Runs a grid: blocks spread over OS threads (OpenMP),
// each block's CUDA threads are cooperatively scheduled fibers on one OS thread.
//
// - A fiber is a stack plus a saved stack pointer. Fibers are pooled per OS thread and
//   reused across blocks and launches; a fiber whose CUDA thread returns without waiting
//   picks the next unstarted thread of the block directly (a plain loop, no switch).
// - __syncthreads() and warp operations are barriers: an arriving thread that is not the
//   last switches straight to the next runnable fiber (one 6-register switch); the last one
//   to arrive releases the others and keeps running.
// - When no thread can run and some have not finished, the block is abandoned and the launch
//   fails with cudaErrorLaunchFailure and a report of where the threads wait.
//
// macOS (untested; docs/platforms.md): fiber_switch.h takes the ucontext switch there. Apple's
// <ucontext.h> requires _XOPEN_SOURCE, and its ucontext_t holds the machine context that
// getcontext writes only when _XOPEN_SOURCE is defined before the first system header (else the
// struct is too small); _DARWIN_C_SOURCE keeps MAP_ANONYMOUS, MAP_NORESERVE and sysconf's names.
#if defined(__APPLE__) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#define _DARWIN_C_SOURCE 1
#endif
#include "cuda_emu.h"
#include "emu_internal.h"

#include <cxxabi.h>
#include <dlfcn.h>
#ifdef _OPENMP
#include <omp.h>   // without -fopenmp (Apple clang, no libomp) blocks run on one OS thread
#endif
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TM_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TM_EMU_ASAN 1
#endif
#endif
#ifdef TM_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
// ThreadSanitizer (a -fsanitize=thread build of tests/emu, to look for missing fences on x86,
// which qemu's aarch64 runs cannot show): it must be told of every fiber and every switch.
#if defined(__SANITIZE_THREAD__)
#define TM_EMU_TSAN 1
#include <sanitizer/tsan_interface.h>
#define TM_TSAN_RELEASE(p) __tsan_release((void *)(p))
#define TM_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define TM_TSAN_RELEASE(p) ((void)0)
#define TM_TSAN_ACQUIRE(p) ((void)0)
#endif

#ifndef MAP_STACK
#define MAP_STACK 0   // Linux's hint; macOS has no such flag
#endif

#include "fiber_switch.h"   // FiberContext, context_make, context_switch: one file per architecture

__thread tm_emu_tls_t tm_emu_tls = {uint3{0, 0, 0}, uint3{0, 0, 0}, dim3(1, 1, 1), dim3(1, 1, 1), 0,
                                    nullptr};

// Barrier epoch for check mode's shared-memory race detection (tiledmm_kernel.h): per OS
// thread, bumped when a block starts and whenever its __syncthreads() opens, never reset, so
// two accesses of one block carry the same value exactly when no barrier lies between them.
static __thread unsigned long long tm_emu_epoch = 1;

namespace tm_emu {
namespace {

enum State : unsigned char { S_NEW, S_RUN, S_BAR, S_WARP, S_DONE };

struct Fiber {
    FiberContext ctx;
    char *map = nullptr;
    size_t map_size = 0;
    char *lo = nullptr;   // usable stack [lo, lo + size)
    size_t size = 0;
    int thread = -1;   // the CUDA thread (linear id) it runs, -1 when free
    size_t color = 0;   // bytes left unused at the top of the stack (under a page)
#ifdef TM_EMU_TSAN
    void *tsan = nullptr;   // ThreadSanitizer's fiber
#endif
};

void fiber_free(Fiber *f)
{
#ifdef TM_EMU_TSAN
    if (f->tsan) __tsan_destroy_fiber(f->tsan);
#endif
#ifdef TM_EMU_ASAN
    // A suspended fiber's frames leave their redzones poisoned in ASan's shadow, and munmap does
    // not clear it: whatever is mapped here next (a thread's stack and TLS, an allocation)
    // would report false overflows.
    ASAN_UNPOISON_MEMORY_REGION(f->lo, f->size);
#endif
    munmap(f->map, f->map_size);
    delete f;
}

struct alignas(64) Thr {   // one cache line each: resuming a thread reads one line
    State st;
    unsigned char wop;
    short wwidth;
    int line;
    const char *file;
    uint3 tid;
    unsigned wmask;
    int warg;
    unsigned long long wval, wres;
    Fiber *fiber;
};

// cg::this_grid().sync() in a cooperative launch (cudaLaunchCooperativeKernel): every block of
// the grid runs on an OS thread of its own (the launch holds at most the occupancy's blocks per
// SM times the SMs, as on a GPU), and one thread of each block waits here for the others. A
// block that ends or fails leaves it, so the rest never wait for a block that will not come.
struct GridBarrier {
    std::mutex mu;
    std::condition_variable cv;
    long long expected, arrived = 0, generation = 0;
    explicit GridBarrier(long long blocks) : expected(blocks) {}

    void open_locked()
    {
        arrived = 0;
        ++generation;
        cv.notify_all();
    }
    // false when the launch failed meanwhile: the caller's block stops waiting for the others
    bool arrive_and_wait(const std::atomic<bool> &failed)
    {
        std::unique_lock<std::mutex> g(mu);
        const long long round = generation;
        if (++arrived >= expected) {
            open_locked();
            return true;
        }
        cv.wait(g, [&] { return generation != round || failed.load(); });
        return generation != round;
    }
    void leave()
    {
        std::lock_guard<std::mutex> g(mu);
        --expected;
        if (arrived > 0 && arrived >= expected) open_locked();
        cv.notify_all();   // a failed launch wakes every waiter
    }
};

struct Launch {
    GridBarrier *grid_barrier = nullptr;   // a cooperative launch (see GridBarrier)
    const void *func;
    void (*invoke)(void *);
    void *pack;
    dim3 grid, block;
    size_t shared_bytes;
    int nthreads;
    bool strict;
    bool
        whole_block;   // invoke runs a whole block as thread loops (tiledmm/toolchain/split/transform.py)
    std::atomic<bool> failed{false};
    std::mutex mu;
    cudaError_t err = cudaSuccess;
    std::string detail;

    long long fail_block = -1;

    // Keeps the report of the failing block with the lowest linear index.
    void fail(cudaError_t e, const std::string &d, long long block_index)
    {
        std::lock_guard<std::mutex> g(mu);
        if (err == cudaSuccess || block_index < fail_block) {
            err = e;
            detail = d;
            fail_block = block_index;
        }
        // Relaxed: `failed` only tells other workers to stop taking blocks early. err and detail
        // are read after the OpenMP join (a barrier: everything written here happens before).
        failed.store(true, std::memory_order_relaxed);
    }
};

struct Block {
    Launch *L;
    int n;
    Thr *t;
    int next_new;   // next thread never started
    int done;   // threads that returned
    int bar_wait;   // threads waiting at the block barrier
    int bar_need;   // arrivals that open it (INT_MAX: it cannot open); see update_bar_need
    int bar_line;
    const char *bar_file;
    bool bar_mismatch;
    bool abort;   // e.g. no stack could be allocated
    // __syncthreads_count/and/or: the predicates of the threads waiting now, folded as they
    // arrive, and the results of the barrier that opened last. A thread released by that
    // barrier reads them when it resumes, before the next barrier can open (which needs it).
    int op_count, op_all, op_any;
    int res_count, res_all, res_any;
    // Runnable threads, in the order they run: first the sweep, the threads that the last
    // barrier released (every thread from index sweep_pos up whose state is still S_BAR,
    // except sweep_self, which kept running), then the ring rq (released warp lanes). An open
    // barrier costs O(1): it starts a sweep instead of queueing each waiter.
    int sweep_pos, sweep_self;
    int *rq;   // ring of runnable thread ids (each at most once)
    int rq_head, rq_count;
    unsigned *warp_arrived;
    int coalesce_waiting;   // threads in cg::coalesced_threads() (OP_COALESCE), not yet grouped
    long long index;   // linear block index
    bool grid_waited;   // between grid.sync()'s two block barriers: one thread has waited
    bool overflow;   // a thread overflowed its fiber stack
    int overflow_thread;
};

size_t page_size()
{
    static size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

// Inaccessible bytes below each fiber stack: an overflow faults there, and a frame that is
// larger than a page is less likely to jump over the guard into a neighbouring stack.
constexpr size_t kGuardBytes = 64 * 1024;
// Address space in each fiber's mapping (never touched, so never committed) that lets the stack
// tops start at different offsets modulo 64 KiB (see fiber_new). Without it every top sits at
// the same offset modulo the stacks' spacing (a power of two), so the few cache lines that each
// waiting fiber keeps hot (its frames and saved registers) all fall into the same handful of L2
// sets: with 256 fibers a block's barrier evicted them to L3 on every switch (tiled 16 at 256^3
// went from 86 to 70 ms with this alone; benchmarks/emu_notes.md).
constexpr size_t kColorBytes = 64 * 1024;

struct Worker {
    FiberContext sched;   // the scheduler's own context while a fiber runs
    Fiber *cur = nullptr;   // the running fiber, nullptr on the scheduler's stack
    Block *b = nullptr;   // the block being run
    std::vector<Fiber *> fibers, free_fibers;
    size_t fiber_stack = 0;
    void *dyn = nullptr;
    size_t dyn_size = 0;
    std::vector<Thr> thr_buf;
    std::vector<int> rq_buf;
    std::vector<unsigned> warp_buf;
    void *altstack = nullptr;
    size_t altstack_size = 0;
    bool signals_ready = false;
    // Set by split_warp_stuck while a split kernel runs a block (run_block reports it).
    std::string split_stuck;
    int split_stuck_threads = 0;
    const Launch *split_launch = nullptr;   // the launch of the split block running (grid sync)
#ifdef TM_EMU_ASAN
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
#endif
#ifdef TM_EMU_TSAN
    void *tsan_sched = __tsan_get_current_fiber();   // the OS thread's own
#endif
    Worker()
    {
#ifdef TM_EMU_ASAN
        pthread_attr_t a;
        if (pthread_getattr_np(pthread_self(), &a) == 0) {
            void *addr;
            size_t sz;
            pthread_attr_getstack(&a, &addr, &sz);
            sched_bottom = addr;
            sched_size = sz;
            pthread_attr_destroy(&a);
        }
#endif
    }
    ~Worker()
    {
        tm_emu_tls.worker = nullptr;
        for (Fiber *f : fibers)
            fiber_free(f);
        free(dyn);
        if (altstack) {
            stack_t st;
            memset(&st, 0, sizeof st);
            st.ss_flags = SS_DISABLE;
            sigaltstack(&st, nullptr);
            munmap(altstack, altstack_size);
        }
    }
};

thread_local std::unique_ptr<Worker> tl_worker;

Worker &worker_slow()
{
    if (!tl_worker) tl_worker.reset(new Worker());   // owned here, destroyed at thread exit
    tm_emu_tls.worker = tl_worker.get();
    return *tl_worker;
}

// One TLS access on the hot path (tm_emu_tls also holds threadIdx and friends).
inline Worker &worker()
{
    Worker *w = static_cast<Worker *>(tm_emu_tls.worker);
    if (__builtin_expect(!w, 0)) return worker_slow();
    return *w;
}

void fiber_entry(void *arg);

// (Re)initialises f so that switching to it calls fiber_entry(f) on a clean stack.
void fiber_reset(Fiber *f)
{
#ifdef TM_EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(f->lo, f->size);
#endif
    // Stack tops at the same page offset would all compete for the same L1 cache sets; colour
    // them with a per-fiber offset.
    context_make(f->ctx, f->lo, f->size - f->color, fiber_entry, f);
}

Fiber *fiber_new(Worker &w)
{
    size_t pg = page_size();
    size_t size = (w.fiber_stack + pg - 1) / pg * pg;
    size_t guard = kGuardBytes > pg ? kGuardBytes : pg;   // address space only
    // Colour: steps of 65 cache lines, so consecutive fibers differ by one L1 set (64 sets) and
    // cover the L2 sets of 64 KiB before repeating (1024 fibers); a 16-byte shift for the next
    // 1024. Its whole pages move the stack down inside the mapping (the guard moves with it,
    // so the usable stack keeps its size); the rest, under a page, is left unused at the top.
    size_t k = w.fibers.size();
    size_t color = (k * 65 * 64) % kColorBytes + (k / 1024 % 4) * 16;
    size_t color_pages = color / pg * pg;
    size_t map_size = guard + kColorBytes + size;
    void *m = mmap(nullptr, map_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    char *lo = (char *)m + map_size - color_pages - size;
    if (mprotect(m, (size_t)(lo - (char *)m), PROT_NONE) != 0) {   // guard region below the stack
        munmap(m, map_size);
        return nullptr;
    }
    Fiber *f = new (std::nothrow) Fiber();
    if (!f) {
        munmap(m, map_size);
        return nullptr;
    }
    f->map = (char *)m;
    f->map_size = map_size;
    f->lo = lo;
    f->size = size;
    f->color = color - color_pages;
#ifdef TM_EMU_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    fiber_reset(f);
    w.fibers.push_back(f);
    return f;
}

// Switches from `from` (nullptr: the scheduler's own stack) to `to` (nullptr: the scheduler).
inline void jump(Worker &w, Fiber *from, Fiber *to)
{
#ifdef TM_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, to ? (const void *)to->lo : w.sched_bottom,
                                   to ? to->size : w.sched_size);
#endif
    w.cur = to;
#ifdef TM_EMU_TSAN
    __tsan_switch_to_fiber(to ? to->tsan : w.tsan_sched, 0);
#endif
    context_switch(from ? from->ctx : w.sched, to ? to->ctx : w.sched);
#ifdef TM_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

inline void set_tls(Block *b, int t)
{
    tm_emu_tls.thread_idx = b->t[t].tid;
    tm_emu_tls.linear_tid = t;
}

inline void rq_push(Block *b, int t)
{
    int i = b->rq_head + b->rq_count;
    if (i >= b->n) i -= b->n;
    b->rq[i] = t;
    b->rq_count++;
}

Fiber *pick_new(Worker &w, Block *b);

// Thread t is about to be switched to: its state and threadIdx are set here, by the switching
// side, so that a waiting thread has nothing left to do after its switch returns (its
// __syncthreads() then ends in a tail call to the switch; see tm_emu_syncthreads).
inline Fiber *resume_as(Block *b, int t, tm_emu_tls_t *tls)
{
    Thr &x = b->t[t];
    x.st = S_RUN;   // a barrier's release leaves its waiters' states to be set here (O(1))
    tls->thread_idx = x.tid;
    tls->linear_tid = t;
    return x.fiber;
}

// The next fiber to run: a released thread, else a fresh thread on a free fiber, else nullptr.
// tls is &tm_emu_tls, looked up once by the caller (in a shared object each lookup is a call to
// __tls_get_addr); a block's fibers never leave their OS thread, so it stays valid.
bool coalesce_release(Block *b);

inline Fiber *pick_next(Worker &w, Block *b, tm_emu_tls_t *tls)
{
    while (b->sweep_pos < b->n) {
        int t = b->sweep_pos++;
        if (b->t[t].st == S_BAR && t != b->sweep_self) {
            // With hundreds of fibers their frames do not fit in L1, and resuming one is a chain
            // of dependent misses (its Thr, its Fiber, its saved frame, its callers' frames).
            // Run the chain ahead as a pipeline while this thread works: the Thr three ahead,
            // the Fiber two ahead, the stack one ahead (emu_notes.md).
            if (t + 3 < b->n) __builtin_prefetch(&b->t[t + 3]);
            if (t + 2 < b->n && b->t[t + 2].fiber) __builtin_prefetch(&b->t[t + 2].fiber->ctx);
            if (t + 1 < b->n && b->t[t + 1].fiber) context_prefetch(b->t[t + 1].fiber->ctx);
            return resume_as(b, t, tls);
        }
    }
    if (b->rq_count) {
        int t = b->rq[b->rq_head];
        if (++b->rq_head == b->n) b->rq_head = 0;
        b->rq_count--;
        return resume_as(b, t, tls);
    }
    Fiber *f = pick_new(w, b);   // fiber_entry sets threadIdx
    if (!f && b->coalesce_waiting && coalesce_release(b)) return pick_next(w, b, tls);
    return f;
}

// A thread that never ran, on a free (or new) fiber; nullptr when there is none.
Fiber *pick_new(Worker &w, Block *b)
{
    if (b->next_new < b->n && !b->abort) {
        Fiber *f;
        if (!w.free_fibers.empty()) {
            f = w.free_fibers.back();
            w.free_fibers.pop_back();
        } else {
            f = fiber_new(w);
            if (!f) {
                b->abort = true;
                b->L->fail(cudaErrorLaunchOutOfResources,
                           "tiledmm emulator: could not allocate a fiber stack (" +
                               std::to_string(w.fibers.size()) + " stacks of " +
                               std::to_string(w.fiber_stack / 1024) +
                               " KiB in use); lower TILEDMM_EMU_STACK_KB or the block size",
                           b->index);
                return nullptr;
            }
        }
        int t = b->next_new++;
        f->thread = t;
        b->t[t].fiber = f;
        b->t[t].st = S_RUN;
        return f;
    }
    return nullptr;
}

// Called by a waiting thread: run something else until it is released (whoever switches back
// to it sets its state and threadIdx: resume_as).
inline void block_wait(Worker &w, Block *b, tm_emu_tls_t *tls)
{
    Fiber *f = w.cur;
    Fiber *nx = pick_next(w, b, tls);
    if (nx == f) return;   // released by its own turn (cg::coalesced_threads: coalesce_release)
    jump(w, f, nx);
}

// The barrier opens when every live thread waits at it: all n threads in strict mode (a thread
// that returned keeps it closed for good, as CUDA leaves that undefined), else the n - done
// threads that have not returned. Threads waiting at different call sites keep it closed for
// good (the stuck report names the sites). Kept as one number so an arrival compares once.
inline void update_bar_need(Block *b)
{
    b->bar_need = b->bar_mismatch ? INT_MAX
                  : b->L->strict  ? (b->done ? INT_MAX : b->n)
                                  : b->n - b->done;
}

inline bool barrier_ready(Block *b)
{
    return b->bar_wait != 0 && b->bar_wait == b->bar_need;
}

// Opens the block barrier: every waiting thread except `self` becomes runnable, in index order,
// through the sweep. No thread is runnable when a barrier opens (every live thread waits at
// it), so the sweep comes before anything queued later, as a FIFO of the waiters would.
inline void barrier_release(Block *b, int self)
{
    b->res_count = b->op_count;
    b->res_all = b->op_all;
    b->res_any = b->op_any;
    b->op_count = 0;
    b->op_all = 1;
    b->op_any = 0;
    if (self >= 0) b->t[self].st = S_RUN;
    b->sweep_pos = 0;
    b->sweep_self = self;
    b->bar_wait = 0;
    ++tm_emu_epoch;   // a barrier interval ends
}

inline bool has_runnable(Block *b)
{
    return b->sweep_pos < b->n || b->rq_count;
}

void thread_exit(Worker &w, Block *b, Fiber *f, int t)
{
    b->t[t].st = S_DONE;
    b->done++;
    update_bar_need(b);
    if (!b->L->strict && barrier_ready(b)) barrier_release(b, -1);
    if (!has_runnable(b) && b->next_new < b->n && !b->abort) {   // plain loop: reuse this stack
        int nt = b->next_new++;
        f->thread = nt;
        b->t[nt].fiber = f;
        b->t[nt].st = S_RUN;
        return;
    }
    f->thread = -1;
    w.free_fibers.push_back(f);
    Fiber *nx = pick_next(w, b, &tm_emu_tls);
    if (nx == f) return;
    jump(w, f, nx);   // resumed when the scheduler hands this fiber a new thread
}

void fiber_entry(void *arg)
{
    Fiber *f = (Fiber *)arg;
#ifdef TM_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    Worker &w = worker();
    for (;;) {
        Block *b = w.b;
        int t = f->thread;
        set_tls(b, t);
        b->L->invoke(b->L->pack);
        thread_exit(w, b, f, t);
    }
}

#ifndef TM_EMU_ASAN
// A CUDA thread that overflows its fiber stack faults in the guard region below it. The
// SIGSEGV handler (on an alternate signal stack) recognises that address, marks the block
// failed and switches to the worker's scheduler: the launch returns cudaErrorLaunchFailure
// instead of crashing the process. Every other fault goes to the handler that was installed
// before this one (a fault reporter, Python's faulthandler) or to the default action, exactly
// as if this handler did not exist. Works with every switch in fiber_switch.h, the ucontext
// fallback included. (Under AddressSanitizer, ASan owns SIGSEGV and reports overflows itself.)
struct sigaction g_prev_segv;
std::once_flag g_segv_once;
std::atomic<bool> g_segv_installed{false};

void segv_handler(int sig, siginfo_t *si, void *uctx)
{
    Worker *w = static_cast<Worker *>(tm_emu_tls.worker);
    Fiber *f = w ? w->cur : nullptr;
    Block *b = w ? w->b : nullptr;
    char *addr = static_cast<char *>(si->si_addr);
    if (f && b && addr >= f->map && addr < f->lo) {
        b->overflow = true;
        b->abort = true;
        b->overflow_thread = f->thread;
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGSEGV);
        pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
        w->cur = nullptr;
        FiberContext dead;   // what is saved here is never resumed: the fiber is abandoned
        context_switch(dead, w->sched);
    }
    // not ours: behave as if we were never here
    if (g_prev_segv.sa_flags & SA_SIGINFO) {
        if (g_prev_segv.sa_sigaction) {
            g_prev_segv.sa_sigaction(sig, si, uctx);
            return;
        }
    } else if (g_prev_segv.sa_handler != SIG_DFL && g_prev_segv.sa_handler != SIG_IGN) {
        g_prev_segv.sa_handler(sig);
        return;
    }
    signal(SIGSEGV, SIG_DFL);   // re-raised when the faulting instruction runs again
}

void install_overflow_handler(Worker &w)
{
    std::call_once(g_segv_once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, &g_prev_segv) == 0) g_segv_installed = true;
    });
    stack_t cur;
    if (sigaltstack(nullptr, &cur) == 0 && !(cur.ss_flags & SS_DISABLE))
        return;   // the thread has one
    size_t sz = 64 * 1024;
    void *m = mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    stack_t st;
    st.ss_sp = m;
    st.ss_size = sz;
    st.ss_flags = 0;
    if (sigaltstack(&st, nullptr) == 0) {
        w.altstack = m;
        w.altstack_size = sz;
    } else {
        munmap(m, sz);
    }
}
#else
void install_overflow_handler(Worker &) {}
#endif

std::string kernel_name(const void *func)
{
    Dl_info info;
    char buf[64];
    if (dladdr(func, &info) && info.dli_sname && info.dli_saddr == func) {
        int status = 0;
        char *dm = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
        std::string s = (status == 0 && dm) ? dm : info.dli_sname;
        free(dm);
        return s;
    }
    snprintf(buf, sizeof buf, "%p", func);
    std::string s = std::string("kernel at ") + buf;
    if (dladdr(func, &info) && info.dli_fname) {
        snprintf(buf, sizeof buf, "+0x%lx",
                 (unsigned long)((const char *)func - (const char *)info.dli_fbase));
        s += std::string(" (") + info.dli_fname + buf + ")";
    }
    return s;
}

const char *op_name(int op)
{
    switch (op) {
    case OP_SYNCWARP: return "__syncwarp()";
    case OP_SHFL: return "__shfl_sync()";
    case OP_SHFL_UP: return "__shfl_up_sync()";
    case OP_SHFL_DOWN: return "__shfl_down_sync()";
    case OP_SHFL_XOR: return "__shfl_xor_sync()";
    case OP_BALLOT: return "__ballot_sync()";
    case OP_ALL: return "__all_sync()";
    case OP_ANY: return "__any_sync()";
    case OP_COALESCE: return "cg::coalesced_threads()";
    case OP_MATCH_ANY: return "__match_any_sync()";
    }
    return "warp operation";
}

std::string dim_str(uint3 v)
{
    return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

// Why no thread of block b can run: which call sites its threads wait at.
std::string stuck_report(Block *b, uint3 bid)
{
    Launch *L = b->L;
    struct Key {
        int kind;   // 0 block barrier, 1 warp op
        const char *file;
        int line;
        int op;
        bool operator<(const Key &o) const
        {
            if (kind != o.kind) return kind < o.kind;
            int c = strcmp(file ? file : "", o.file ? o.file : "");
            if (c) return c < 0;
            if (line != o.line) return line < o.line;
            return op < o.op;
        }
    };
    std::map<Key, int> sites;
    int waiting_bar = 0, waiting_warp = 0, not_started = 0;
    std::string warp_missing;
    for (int i = 0; i < b->n; ++i) {
        Thr &x = b->t[i];
        if (x.st == S_BAR) {
            sites[Key{0, x.file, x.line, 0}]++;
            waiting_bar++;
        } else if (x.st == S_WARP) {
            sites[Key{1, x.file, x.line, x.wop}]++;
            waiting_warp++;
        } else if (x.st == S_NEW) {
            not_started++;
        }
    }
    // For warp operations: which lanes of the mask never arrived, and where they are.
    int reported = 0;
    for (int i = 0; i < b->n && reported < 4; ++i) {
        Thr &x = b->t[i];
        if (x.st != S_WARP) continue;
        int base = i & ~31;
        unsigned missing = 0;
        int exited = 0, at_bar = 0, elsewhere = 0;
        for (int l = 0; l < 32; ++l)
            if ((x.wmask >> l) & 1u) {
                Thr &y = b->t[base + l];
                if (y.st == S_WARP) continue;
                missing |= 1u << l;
                if (y.st == S_DONE)
                    exited++;
                else if (y.st == S_BAR)
                    at_bar++;
                else
                    elsewhere++;
            }
        if (!missing) continue;
        char buf[256];
        snprintf(
            buf, sizeof buf,
            "\n  warp %d: lane %d waits at %s (%s:%d) with mask 0x%08x, but lanes 0x%08x never "
            "arrive (%d exited, %d wait at __syncthreads(), %d elsewhere)",
            i / 32, i - base, op_name(x.wop), x.file, x.line, x.wmask, missing, exited, at_bar,
            elsewhere);
        warp_missing += buf;
        ++reported;
        i = base + 31;   // one report per warp
    }
    std::string s = "tiledmm emulator: kernel " + kernel_name(L->func) + ", block " +
                    dim_str(tm_emu_tls.block_idx) + " of grid " + dim_str(L->grid) + ", blockDim " +
                    dim_str(L->block) +
                    ": no thread can proceed (a __syncthreads() or warp operation that not every "
                    "thread reaches).";
    for (auto &kv : sites) {
        char buf[512];
        if (kv.first.kind == 0)
            snprintf(buf, sizeof buf, "\n  %d thread%s wait%s at __syncthreads() at %s:%d",
                     kv.second, kv.second == 1 ? "" : "s", kv.second == 1 ? "s" : "", kv.first.file,
                     kv.first.line);
        else
            snprintf(buf, sizeof buf, "\n  %d thread%s wait%s at %s at %s:%d", kv.second,
                     kv.second == 1 ? "" : "s", kv.second == 1 ? "s" : "", op_name(kv.first.op),
                     kv.first.file, kv.first.line);
        s += buf;
    }
    s += "\n  " + std::to_string(b->done) + " thread" + (b->done == 1 ? " has" : "s have") +
         " exited (returned)";
    if (not_started) s += "; " + std::to_string(not_started) + " never started";
    s += warp_missing;
    if (waiting_bar && sites.size() > 1 && !waiting_warp)
        s += "\n  every thread of a block must reach the same __syncthreads() call";
    else if (waiting_bar && b->done && L->strict)
        s += "\n  threads returned while others wait at a barrier (undefined in CUDA; set "
             "TILEDMM_EMU_STRICT_EXIT=0 to let exited threads leave the barrier count as current "
             "GPUs do)";
    (void)bid;
    return s;
}

void dyn_reserve(Worker &w, size_t bytes)
{
#ifdef TM_EMU_ASAN
    bool need = w.dyn == nullptr || w.dyn_size != bytes;   // exact size, so ASan sees overruns
#else
    bool need = w.dyn == nullptr || w.dyn_size < bytes;
#endif
    if (!need) return;
    free(w.dyn);
    w.dyn = nullptr;
    size_t sz = bytes ? bytes : 1;
#ifndef TM_EMU_ASAN
    sz = (sz + 63) / 64 * 64;
#endif
    if (posix_memalign(&w.dyn, 64, sz) != 0) w.dyn = nullptr;
    w.dyn_size = w.dyn ? bytes : 0;
}

// Runs one block on the calling OS thread. Returns false when the block failed.
bool run_block(Worker &w, Launch *L, uint3 bid, long long index)
{
    if (L->whole_block) {   // a kernel split at its barriers: one call runs every thread in turn
        ++tm_emu_epoch;
        tm_emu_tls.block_idx = bid;
        tm_emu_tls.block_dim = L->block;
        tm_emu_tls.grid_dim = L->grid;
        tm_emu_tls.thread_idx = uint3{0, 0, 0};
        // No one thread runs: the fault report says so (tiledmm_fault.h). Storing the thread
        // index per iteration would be sunk out of the loops by the compiler anyway.
        tm_emu_tls.linear_tid = -1;
        w.split_stuck.clear();
        w.split_stuck_threads = 0;
        w.split_launch = L;
        L->invoke(L->pack);
        w.split_launch = nullptr;
        tm_emu_tls.linear_tid = 0;
        if (!w.split_stuck.empty()) {   // a divergent full-mask __syncwarp (split_warp_stuck)
            L->fail(cudaErrorLaunchFailure,
                    "tiledmm emulator: kernel " + kernel_name(L->func) + ", block " + dim_str(bid) +
                        " of grid " + dim_str(L->grid) + ", blockDim " + dim_str(L->block) +
                        ": no thread can proceed (a __syncthreads() or warp operation that not "
                        "every thread "
                        "reaches)." +
                        w.split_stuck,
                    index);
            w.split_stuck.clear();
            return false;
        }
        return true;
    }
    int n = L->nthreads;
    if (w.thr_buf.size() < (size_t)n) {
        w.thr_buf.resize(n);
        w.rq_buf.resize(n);
    }
    size_t nw = ((size_t)n + 31) / 32;
    if (w.warp_buf.size() < nw) w.warp_buf.resize(nw);
    Block blk;
    Block *b = &blk;
    b->L = L;
    b->index = index;
    b->n = n;
    b->t = w.thr_buf.data();
    b->next_new = 0;
    b->done = 0;
    b->bar_wait = 0;
    b->bar_line = 0;
    b->bar_file = nullptr;
    b->bar_mismatch = false;
    update_bar_need(b);
    b->abort = false;
    b->op_count = b->op_any = 0;
    b->op_all = 1;
    b->res_count = b->res_any = 0;
    b->res_all = 1;
    b->sweep_pos = n;
    b->sweep_self = -1;
    b->grid_waited = false;
    b->overflow = false;
    b->overflow_thread = -1;
    b->rq = w.rq_buf.data();
    b->rq_head = b->rq_count = 0;
    b->warp_arrived = w.warp_buf.data();
    std::fill(b->warp_arrived, b->warp_arrived + nw, 0u);
    b->coalesce_waiting = 0;
    unsigned bx = L->block.x, by = L->block.y;
    for (int i = 0; i < n; ++i) {
        Thr &x = b->t[i];
        x.st = S_NEW;
        x.fiber = nullptr;
        x.tid = uint3{(unsigned)i % bx, ((unsigned)i / bx) % by, (unsigned)i / (bx * by)};
    }
    ++tm_emu_epoch;   // a new block: nothing of the previous one is concurrent with it
    tm_emu_tls.block_idx = bid;
    tm_emu_tls.block_dim = L->block;
    tm_emu_tls.grid_dim = L->grid;
    w.b = b;
    for (Fiber *nx; (nx = pick_next(w, b, &tm_emu_tls));)
        jump(w, nullptr, nx);
    bool ok = b->done == n;
    if (!ok) {
        if (b->overflow) {
            unsigned t = (unsigned)b->overflow_thread;
            uint3 tid = b->t[t].tid;
            L->fail(cudaErrorLaunchFailure,
                    "tiledmm emulator: kernel " + kernel_name(L->func) + ", block " + dim_str(bid) +
                        ", thread " + dim_str(tid) + ": stack overflow (each CUDA thread has a " +
                        std::to_string(w.fiber_stack / 1024) +
                        " KiB stack on the emulator; large local arrays need more: set "
                        "TILEDMM_EMU_STACK_KB)",
                    b->index);
        } else if (!b->abort) {
            L->fail(cudaErrorLaunchFailure, stuck_report(b, bid), b->index);
        }
        for (int i = 0; i < n;
             ++i) {   // abandon the suspended fibers: fresh stacks, back to the pool
            Thr &x = b->t[i];
            if ((x.st == S_BAR || x.st == S_WARP || x.st == S_RUN) && x.fiber) {
                x.fiber->thread = -1;
                fiber_reset(x.fiber);
                w.free_fibers.push_back(x.fiber);
            }
        }
    }
    w.b = nullptr;
    return ok;
}

std::atomic<int> g_threads{0};
std::atomic<int> g_strict{-1};

int env_int(const char *name, int dflt)
{
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end;
    long v = strtol(e, &end, 10);
    return end == e ? dflt : (int)v;
}

int default_threads()
{
    int n = env_int("TILEDMM_EMU_THREADS", 0);
    if (n > 0) return n;
#ifndef _OPENMP
    return 1;   // no OpenMP: launch runs the blocks in order on the calling thread
#endif
#ifdef CPU_COUNT   // glibc (sched_getaffinity); macOS has no affinity masks
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

}   // namespace

// ---- entry points used by kernels (through cuda_emu.h) ----

void split_warp_stuck(const char *file, int line, int warp, unsigned waiting, unsigned missing,
                      const char *op)
{
    Worker &w = worker();
    const int n = __builtin_popcount(waiting);
    char buf[512];
    if (w.split_stuck.empty()) {
        snprintf(buf, sizeof buf, "\n  lanes of warps that enter it wait at %s at %s:%d", op, file,
                 line);
        w.split_stuck = buf;
    }
    snprintf(buf, sizeof buf,
             "\n  warp %d: %d lane%s wait%s at %s (%s:%d) with mask 0xffffffff, but lanes 0x%08x "
             "never arrive (they skip the if holding it)",
             warp, n, n == 1 ? "" : "s", n == 1 ? "s" : "", op, file, line, missing);
    w.split_stuck += buf;
}

unsigned long long warp_op(int op, unsigned mask, unsigned long long value, int arg, int width,
                           const char *file, int line)
{
    Worker &w = worker();
    Block *b = w.b;
    width = shfl_width(width);
    int t = b ? tm_emu_tls.linear_tid : 0;
    int lane = t & 31, base = t - lane;
    unsigned exist = b ? ((b->n - base >= 32) ? ~0u : ((1u << (b->n - base)) - 1u)) : 1u;
    unsigned eff = (mask & exist) | (1u << lane);
    Thr self_storage;
    Thr &me = b ? b->t[t] : self_storage;
    me.wop = (unsigned char)op;
    me.wmask = eff;
    me.wval = value;
    me.warg = arg;
    me.wwidth = (short)width;
    me.file = file;
    me.line = line;
    if (op == OP_COALESCE) {
        if (!b) return 1u;
        me.st = S_WARP;
        b->coalesce_waiting++;
        block_wait(w, b, &tm_emu_tls);
        return me.wres;
    }
    if (eff == (1u << lane) || !b) {   // alone: the operation involves no other lane
        unsigned long long r = value;
        switch (op) {
        case OP_BALLOT: r = value ? (1u << lane) : 0u; break;
        case OP_ALL:
        case OP_ANY: r = value != 0; break;
        case OP_SYNCWARP: r = 0; break;
        case OP_MATCH_ANY: r = 1u << lane; break;
        default: break;
        }
        return r;
    }
    unsigned &arrived = b->warp_arrived[t >> 5];
    arrived |= 1u << lane;
    me.st = S_WARP;
    // The group: every lane named by a mask of a lane in it (closure), all of which must wait here.
    unsigned g = eff, prev = 0;
    while (g != prev && (arrived & g) == g) {
        prev = g;
        for (unsigned m = g; m; m &= m - 1)
            g |= b->t[base + __builtin_ctz(m)].wmask;
    }
    if ((arrived & g) != g) {
        block_wait(w, b, &tm_emu_tls);
        return me.wres;
    }
    // Last lane of the group: compute every lane's result, release the others.
    for (unsigned m = g; m; m &= m - 1) {
        int l = __builtin_ctz(m);
        Thr &x = b->t[base + l];
        unsigned xm = x.wmask & g;
        unsigned long long r = x.wval;
        const int src = shfl_source(x.wop, l, x.warg, x.wwidth);
        switch (x.wop) {
        case OP_SYNCWARP: r = 0; break;
        case OP_BALLOT:
        case OP_ALL:
        case OP_ANY: {
            unsigned bal = 0;
            for (unsigned k = xm; k; k &= k - 1) {
                int q = __builtin_ctz(k);
                if (b->t[base + q].wval) bal |= 1u << q;
            }
            r = x.wop == OP_BALLOT ? bal : x.wop == OP_ALL ? (bal == xm) : (bal != 0);
            break;
        }
        case OP_MATCH_ANY: {   // the lanes of the mask holding the same value
            unsigned same = 0;
            for (unsigned k = xm; k; k &= k - 1) {
                int q = __builtin_ctz(k);
                if (b->t[base + q].wval == x.wval) same |= 1u << q;
            }
            r = same;
            break;
        }
        }
        if (src >= 0 && src < 32 && ((g >> src) & 1u)) r = b->t[base + src].wval;
        x.wres = r;
    }
    arrived &= ~g;
    for (unsigned m = g; m; m &= m - 1) {
        int i = base + __builtin_ctz(m);
        b->t[i].st = S_RUN;
        if (i != t) rq_push(b, i);
    }
    return me.wres;
}

// cg::coalesced_threads(): the lanes of a warp that reach the same call together. A GPU knows
// them (the warp's active mask there); the emulator finds them when no thread of the block can
// run any more: every live lane then waits somewhere or has returned, and the lanes of a warp
// waiting in coalesced_threads() at one call site are one group. Returns whether any was released.
namespace {
bool coalesce_release(Block *b)
{
    bool any = false;
    for (int base = 0; base < b->n; base += 32) {
        for (int l = 0; l < 32 && base + l < b->n; ++l) {
            Thr &x = b->t[base + l];
            if (x.st != S_WARP || x.wop != OP_COALESCE) continue;
            unsigned g = 0;
            for (int k = l; k < 32 && base + k < b->n; ++k) {
                Thr &y = b->t[base + k];
                if (y.st == S_WARP && y.wop == OP_COALESCE && y.line == x.line &&
                    (y.file == x.file || (y.file && x.file && strcmp(y.file, x.file) == 0)))
                    g |= 1u << k;
            }
            for (unsigned m = g; m; m &= m - 1) {
                Thr &y = b->t[base + __builtin_ctz(m)];
                y.wres = g;
                y.wop = OP_SYNCWARP;
                y.st = S_RUN;
                rq_push(b, base + __builtin_ctz(m));
                b->coalesce_waiting--;
                any = true;
            }
        }
    }
    return any;
}
}   // namespace

unsigned activemask()
{
    Worker &w = worker();
    Block *b = w.b;
    if (!b) return 1u;
    int t = tm_emu_tls.linear_tid, base = t & ~31;
    unsigned m = 0;
    for (int l = 0; l < 32 && base + l < b->n; ++l)
        if (b->t[base + l].st != S_DONE) m |= 1u << l;
    return m;
}

// __threadfence(): blocks run on different OS threads, so this must be a real fence on weakly
// ordered CPUs (dmb ish on Arm), not only a compiler barrier: a block's plain stores before it
// are visible to a block that sees a later atomic (reduce_shuffle's last-block ticket). Every
// other ordering the emulator needs is either one OS thread's program order (a block's threads
// are fibers of one OS thread), a mutex (runtime.cpp) or the OpenMP join.
void threadfence()
{
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

long long clock64()
{
    return (long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// The OS thread stack of each block of a cooperative launch: on fibers it holds only the
// scheduler; a split kernel's thread loops run on it with their per-thread arrays (at most
// TM_EMU_SPLIT_MAX_FRAME, the launcher's bound) and the kernel's own locals.
constexpr size_t kCooperativeThreadStack = 1 << 20;
constexpr size_t kCooperativeSplitStack = kCooperativeThreadStack + TM_EMU_SPLIT_MAX_FRAME;

// Blocks per grab of a worker: at least 1, at most the grid / (workers x this) (launch_impl).
constexpr long long kChunksPerWorker = 64;

static thread_local bool tl_cooperative = false;   // tm_emu_set_cooperative_launch
static thread_local const char *tl_launch_path = "";   // tm_emu_last_launch_path
static thread_local char tl_launch_reason[160];   // tm_emu_last_launch_reason

static cudaError_t launch_impl(const void *func, void (*invoke)(void *), void *pack, dim3 grid,
                               dim3 block, size_t shared_bytes, bool whole_block)
{
    const bool cooperative = tl_cooperative;
    tl_cooperative = false;
    tl_launch_path = whole_block ? "thread loops" : "fibers";
    tl_launch_reason[0] = '\0';
    char buf[512];
    unsigned long long nthreads = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
        block.x > (unsigned)kMaxBlockDim[0] || block.y > (unsigned)kMaxBlockDim[1] ||
        block.z > (unsigned)kMaxBlockDim[2] || nthreads > (unsigned long long)kMaxThreadsPerBlock ||
        grid.x > kMaxGrid[0] || grid.y > kMaxGrid[1] || grid.z > kMaxGrid[2]) {
        snprintf(buf, sizeof buf,
                 "tiledmm emulator: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u): "
                 "blocks allow at "
                 "most 1024 threads and (1024,1024,64) per dimension, grids (2^31-1,65535,65535), "
                 "no zero dimension",
                 grid.x, grid.y, grid.z, block.x, block.y, block.z);
        return set_error(cudaErrorInvalidConfiguration, buf);
    }
    if (!func) return set_error(cudaErrorInvalidDeviceFunction, "tiledmm emulator: null kernel");
    size_t max_dyn = max_dynamic_shared(func);
    if (shared_bytes > max_dyn) {
        snprintf(buf, sizeof buf,
                 "tiledmm emulator: %zu bytes of dynamic shared memory requested, the kernel "
                 "allows %zu (raise it with "
                 "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n), n "
                 "<= %zu)",
                 shared_bytes, max_dyn, kSharedPerBlockOptin);
        return set_error(cudaErrorInvalidValue, buf);
    }
    Worker &self = worker();
    if (self.b)
        return set_error(cudaErrorNotSupported,
                         "tiledmm emulator: launching a kernel from a kernel is not emulated");

    Launch L;
    L.func = func;
    L.invoke = invoke;
    L.pack = pack;
    L.grid = grid;
    L.block = block;
    L.shared_bytes = shared_bytes;
    L.nthreads = (int)nthreads;
    L.strict = tm_emu_strict_exit() != 0;
    L.whole_block = whole_block;
    long long nblocks = (long long)grid.x * grid.y * grid.z;
    long long gx = grid.x, gxy = (long long)grid.x * grid.y;
    size_t stack = tm_emu_stack_bytes();
    int nw = tm_emu_threads();
    if ((long long)nw > nblocks) nw = (int)nblocks;

    auto body = [&](Worker &w, long long i) {
        if (L.failed.load(std::memory_order_relaxed)) return;
        if (w.fiber_stack != stack) {   // stack size changed: drop the old (free) fibers
            if (w.free_fibers.size() == w.fibers.size()) {
                for (Fiber *f : w.fibers)
                    fiber_free(f);
                w.fibers.clear();
                w.free_fibers.clear();
                w.fiber_stack = stack;
            }
        }
        uint3 bid{(unsigned)(i % gx), (unsigned)((i / gx) % grid.y), (unsigned)(i / gxy)};
        run_block(w, &L, bid, i);
    };
    auto prepare = [&](Worker &w) {
        if (!w.signals_ready) {
            install_overflow_handler(w);
            w.signals_ready = true;
        }
        if (w.fiber_stack == 0) w.fiber_stack = stack;
        dyn_reserve(w, shared_bytes);
        if (!w.dyn)
            L.fail(cudaErrorMemoryAllocation,
                   "tiledmm emulator: cannot allocate dynamic shared memory", 0);
    };

#ifdef _OPENMP
    const bool serial = nw <= 1 || omp_in_parallel();
#else
    const bool serial = true;   // built without OpenMP: see default_threads
#endif
    if (cooperative && nblocks > 1) {
        // every block resident at once: an OS thread each (cudaLaunchCooperativeKernel has
        // bounded the grid by the occupancy), so that a block waiting in grid.sync() never holds
        // up another
        GridBarrier barrier(nblocks);
        L.grid_barrier = &barrier;
        auto run_one = [&](long long i) {
            TM_TSAN_ACQUIRE(&L);
            Worker &w = worker();
            prepare(w);
            body(w, i);
            barrier.leave();
            TM_TSAN_RELEASE(&L);
        };
        struct Arg {   // what each block's thread starts with
            decltype(run_one) *run;
            long long i;
        };
        auto start = [](void *a) -> void * {
            Arg *arg = static_cast<Arg *>(a);
            (*arg->run)(arg->i);
            return nullptr;
        };
        std::vector<Arg> args((size_t)nblocks);
        std::vector<pthread_t> blocks;
        // Small stacks (a grid of 64 blocks would otherwise reserve 512 MiB of thread stacks).
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr,
                                  whole_block ? kCooperativeSplitStack : kCooperativeThreadStack);
        TM_TSAN_RELEASE(&L);
        for (long long i = 0; i < nblocks; ++i) {
            args[(size_t)i] = Arg{&run_one, i};
            pthread_t t;
            const int started = pthread_create(&t, &attr, start, &args[(size_t)i]);
            if (started != 0) {
                L.fail(cudaErrorLaunchOutOfResources,
                       "tiledmm emulator: a cooperative launch runs each of its " +
                           std::to_string(nblocks) + " blocks on an OS thread of its own, and " +
                           "thread " + std::to_string(i + 1) + " could not be started (" +
                           strerror(started) + ")",
                       i);
                for (long long k = i; k < nblocks; ++k)   // the started ones stop waiting
                    barrier.leave();
                break;
            }
            blocks.push_back(t);
        }
        pthread_attr_destroy(&attr);
        for (pthread_t t : blocks)
            pthread_join(t, nullptr);
        TM_TSAN_ACQUIRE(&L);
    } else if (serial) {
        prepare(self);
        for (long long i = 0; i < nblocks && !L.failed.load(std::memory_order_relaxed); ++i)
            body(self, i);
    } else {
        // ThreadSanitizer cannot see libgomp's fork and join (it is not instrumented): say
        // that the launch's set-up happens before its blocks and its blocks before the return.
        TM_TSAN_RELEASE(&L);
        // Blocks are handed out in chunks: one update of the shared counter per chunk, not per
        // block (a grid of 10^5 small blocks moved the counter's cache line between cores once
        // per block, about what a small split block itself costs), and still kChunksPerWorker
        // chunks per worker, so a worker slowed by other work on its core leaves the rest of
        // the grid to the others. Which block's failure is reported does not change: the
        // lowest index among those that ran (Launch::fail), and blocks run in index order
        // within a chunk.
        const long long chunk = std::max(1LL, nblocks / ((long long)nw * kChunksPerWorker));
#pragma omp parallel num_threads(nw)
        {
            TM_TSAN_ACQUIRE(&L);
            Worker &w = worker();
            prepare(w);
#pragma omp for schedule(dynamic, chunk)
            for (long long i = 0; i < nblocks; ++i)
                body(w, i);
            TM_TSAN_RELEASE(&L);
        }
        TM_TSAN_ACQUIRE(&L);
    }
    if (L.failed.load()) return set_error(L.err, L.detail);
    return cudaSuccess;
}

// Two entry points, not a flag: profile mode wraps `launch` by its mangled name
// (tiledmm/_profile_build.py), and a split kernel is never profiled.
cudaError_t launch(const void *func, void (*invoke)(void *), void *pack, dim3 grid, dim3 block,
                   size_t shared_bytes)
{
    return launch_impl(func, invoke, pack, grid, block, shared_bytes, false);
}

cudaError_t launch_whole_blocks(const void *func, void (*invoke)(void *), void *pack, dim3 grid,
                                dim3 block, size_t shared_bytes)
{
    return launch_impl(func, invoke, pack, grid, block, shared_bytes, true);
}

}   // namespace tm_emu

// ---- C entry points ----

extern "C" void *tm_emu_dynamic_shared(void)
{
    return tm_emu::worker().dyn;
}

extern "C" unsigned long long tm_emu_barrier_epoch(void)
{
    return tm_emu_epoch;
}

// A CUDA thread that ends where it stands (a failed device assert: emu/program_runtime.h's
// __assert_fail): it counts as returned, its fiber is never resumed nor reused (its stack is
// left as it is), and the block goes on. 0 where the thread has no fiber of its own (a kernel
// run as thread loops, or no kernel running): the caller ends the program instead.
extern "C" int tm_emu_end_thread(void)
{
    using namespace tm_emu;
    Worker &w = worker();
    Block *b = w.b;
    Fiber *f = w.cur;
    if (!b || !f || f->thread < 0 || f->thread != tm_emu_tls.linear_tid) return 0;
    const int t = f->thread;
    b->t[t].st = S_DONE;
    b->done++;
    update_bar_need(b);
    if (!b->L->strict && barrier_ready(b)) barrier_release(b, -1);
    f->thread = -1;   // not on the free list: nothing resumes it
    Fiber *nx = pick_next(w, b, &tm_emu_tls);
    jump(w, f, nx);
    return 1;   // (never)
}

// The hot path of barrier-heavy kernels (2 million arrivals for tiled 16 at 256^3): one TLS
// lookup, a site check, one compare to know whether the barrier opens, and a switch that the
// function ends in (emu_notes.md has what each step saved).
extern "C" void tm_emu_syncthreads(const char *file, int line)
{
    using namespace tm_emu;
    tm_emu_tls_t *tls = &tm_emu_tls;
    // Keep the address in a register: gcc would otherwise compute it again after the switch,
    // with a second __tls_get_addr call in a shared object.
    __asm__("" : "+r"(tls));
    Worker *w = static_cast<Worker *>(tls->worker);
    Block *b = w ? w->b : nullptr;   // no worker yet: no block runs on this thread
    if (!b || b->n == 1) return;
    int t = tls->linear_tid;
    Thr &me = b->t[t];
    if (b->bar_wait == 0) {
        b->bar_file = file;
        b->bar_line = line;
    } else if (line != b->bar_line || (file != b->bar_file && strcmp(file, b->bar_file) != 0)) {
        b->bar_mismatch = true;
        update_bar_need(b);
    }
    me.file = file;
    me.line = line;
    me.st = S_BAR;
    if (++b->bar_wait == b->bar_need) {
        barrier_release(b, t);
        return;
    }
#if defined(TM_EMU_ASAN) || defined(TM_EMU_TSAN)
    block_wait(*w, b, tls);   // the sanitizers' hooks run after the switch
#else
    // The switch is this function's last act (a tail call): the kernel's frame is the only one
    // between the fiber's saved registers and its resumption, which returns into the kernel.
    Fiber *f = w->cur;
    Fiber *nx = pick_next(*w, b, tls);
    w->cur = nx;
    context_switch(f->ctx, nx ? nx->ctx : w->sched);
#endif
}

// A block barrier that also folds a predicate over the waiting threads (op 0 count, 1 and, 2 or).
static int syncthreads_fold(tm_emu::Block *b, int op, int pred, const char *file, int line)
{
    int p = pred != 0;
    b->op_count += p;
    b->op_all &= p;
    b->op_any |= p;
    tm_emu_syncthreads(file, line);
    return op == 0 ? b->res_count : op == 1 ? b->res_all : b->res_any;
}

extern "C" int tm_emu_syncthreads_op(int op, int pred, const char *file, int line)
{
    using namespace tm_emu;
    Worker &w = worker();
    Block *b = w.b;
    if (!b) return op == 0 ? (pred != 0) : (pred != 0);
    if (b->n == 1) return op == 0 ? (int)(pred != 0) : (pred != 0);
    return syncthreads_fold(b, op, pred, file, line);
}

// grid.sync() (cooperative_groups.h): the block's barrier, then one of its threads waits for
// every other block of the grid to get there, then the block's barrier again, so that no thread
// goes on before every thread of the grid has arrived. Outside a cooperative launch a GPU's
// grid.sync() is undefined (the grid may not be resident): refused at its line.
[[noreturn]] static void refuse_grid_sync(const char *file, int line)
{
    fflush(stdout);
    fprintf(stderr,
            "tiledmm: %s:%d: grid.sync() outside a cooperative launch: every block must be "
            "resident at once, so launch the kernel with cudaLaunchCooperativeKernel\n",
            file, line);
    fflush(stderr);
    abort();
}

extern "C" void tm_emu_grid_sync(const char *file, int line)
{
    using namespace tm_emu;
    Worker &w = worker();
    Block *b = w.b;
    const Launch *L = b ? b->L : nullptr;
    if (!L || !L->grid_barrier || tm_emu_tls.linear_tid < 0) refuse_grid_sync(file, line);
    tm_emu_syncthreads(file, line);
    if (!b->grid_waited) {   // the first of the block's threads to run after the barrier
        b->grid_waited = true;
        L->grid_barrier->arrive_and_wait(L->failed);
    }
    tm_emu_syncthreads(file, line);
    b->grid_waited = false;   // every thread sets it before any can reach the next grid.sync
}

// grid.sync() in a kernel split at its barriers (transform._emit_seq emits this call between the
// thread loops before and after it): the block's OS thread waits for the grid's other blocks.
extern "C" void tm_emu_split_grid_sync(const char *file, int line)
{
    using namespace tm_emu;
    const Launch *L = worker().split_launch;
    if (!L || !L->grid_barrier) refuse_grid_sync(file, line);
    // false when another block failed: this block then runs on to its end without the others
    // (the launch has failed: its results are not read)
    L->grid_barrier->arrive_and_wait(L->failed);
}

// Whether the next launch of this OS thread is cooperative (program_graphs.h's
// cudaLaunchCooperativeKernel sets it around its launch): its blocks run at once, for
// grid.sync(). The launch itself clears it.
extern "C" void tm_emu_set_cooperative_launch(int on)
{
    tm_emu::tl_cooperative = on != 0;
}

extern "C" const char *tm_emu_last_launch_path(void)
{
    return tm_emu::tl_launch_path;
}

extern "C" const char *tm_emu_last_launch_reason(void)
{
    return tm_emu::tl_launch_reason;
}

extern "C" void tm_emu_note_launch_reason(const char *why)
{
    snprintf(tm_emu::tl_launch_reason, sizeof tm_emu::tl_launch_reason, "%s", why ? why : "");
}

extern "C" int tm_emu_threads(void)
{
    int n = tm_emu::g_threads.load();
    if (n <= 0) {
        n = tm_emu::default_threads();
        tm_emu::g_threads.store(n);
    }
    return n;
}

extern "C" void tm_emu_set_threads(int n)
{
    tm_emu::g_threads.store(n > 0 ? n : tm_emu::default_threads());
}

extern "C" size_t tm_emu_stack_bytes(void)
{
#ifdef TM_EMU_ASAN
    int dflt = 256;
#else
    int dflt = 64;
#endif
    int kb = tm_emu::env_int("TILEDMM_EMU_STACK_KB", dflt);
    if (kb < 16) kb = 16;
    return (size_t)kb * 1024;
}

extern "C" int tm_emu_strict_exit(void)
{
    int s = tm_emu::g_strict.load();
    if (s < 0) {
        s = tm_emu::env_int("TILEDMM_EMU_STRICT_EXIT", 1) != 0;
        tm_emu::g_strict.store(s);
    }
    return s;
}

extern "C" void tm_emu_set_strict_exit(int strict)
{
    tm_emu::g_strict.store(strict < 0 ? -1 : strict != 0);
}

extern "C" const char *tm_emu_switch_kind(void)
{
    return tm_emu::kSwitchKind;
}
