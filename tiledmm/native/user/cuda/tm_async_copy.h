// cuda/tm_async_copy.h: what tiledmm's stand-ins for libcu++'s <cuda/pipeline> and
// <cuda/barrier> declare, on the emulator: cuda::thread_scope, cuda::aligned_size_t,
// cuda::memcpy_async into a pipeline or a barrier, cuda::pipeline<thread_scope_thread> with
// make_pipeline() and pipeline_consumer_wait_prior<N>, and cuda::barrier<thread_scope_block>.
//
// A thread-scope pipeline's copies are made as late as CUDA allows: when consumer_wait() (or
// wait_prior) waits for their batch, so a program that overwrites a stage before waiting for it
// sees what a GPU may show, never an early copy that hides the bug. A barrier's copies are made
// at once (complete before the barrier's phase, as CUDA requires). A block-scope barrier is the
// block's barrier: its expected count must be the block's threads. Block-scope pipelines
// (pipeline_shared_state, producer and consumer roles) are refused at their line: a consumer
// waiting for another thread's copy needs the scheduler to run that thread first.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiledmm_kernel.h"

// the block barrier (emu/cuda_emu.h), declared again for the libclang parse of a program
// (tiledmm/programs/build.py), which reads this header as CUDA without the emulator's
extern "C" __host__ __device__ void tm_emu_syncthreads(const char *file, int line);

namespace cuda {

enum thread_scope {
    thread_scope_system = 0,
    thread_scope_device = 1,
    thread_scope_block = 2,
    thread_scope_thread = 3,
};

template <size_t Alignment>
struct aligned_size_t {
    static constexpr size_t align = Alignment;
    size_t value;
    __host__ __device__ explicit aligned_size_t(size_t size) : value(size) {}
    __host__ __device__ operator size_t() const { return value; }
};

namespace tm_detail {
[[noreturn]] __host__ __device__ inline void refuse(const char *what, const char *file, int line)
{
    fflush(stdout);
    fprintf(stderr, "tiledmm: %s:%d: %s\n", file, line, what);
    fflush(stderr);
    abort();
}
}  // namespace tm_detail

// ---- pipelines ----
enum class pipeline_role { producer, consumer };

template <thread_scope Scope>
class pipeline;

// A pipeline's copies not yet made, in batches (one per producer_commit). A full ring makes its
// oldest copies early, which CUDA also allows. 16 copies in 8 batches hold a 4-stage pipeline of
// two operands; the thread loops keep a pipeline per thread of the block (432 bytes each here,
// 1,616 with 64 copies in 16 batches: globalToShmemAsyncCopy ran 130 s instead of 162 s).
template <>
class pipeline<thread_scope_thread> {
    static constexpr unsigned COPIES = 16, BATCHES = 8;
    struct Copy {
        void *dst;
        const void *src;
        size_t n;
    };
    Copy copies_[COPIES];
    unsigned first_ = 0, count_ = 0;   // the pending copies, a ring
    unsigned batch_end_[BATCHES];      // copies counted from first_ up to each committed batch
    unsigned batches_ = 0;

    __host__ __device__ void make(unsigned n)   // the oldest n pending copies
    {
        for (unsigned i = 0; i < n; ++i) {
            const Copy &c = copies_[(first_ + i) % COPIES];
            memcpy(c.dst, c.src, c.n);
        }
        first_ = (first_ + n) % COPIES;
        count_ -= n;
        unsigned kept = 0;
        for (unsigned b = 0; b < batches_; ++b)
            if (batch_end_[b] > n) batch_end_[kept++] = batch_end_[b] - n;
        batches_ = kept;
    }

  public:
    __host__ __device__ pipeline() = default;
    __host__ __device__ pipeline(const pipeline &) = delete;
    pipeline &operator=(const pipeline &) = delete;
    __host__ __device__ ~pipeline() { make(count_); }   // copies no one waited for still land

    __host__ __device__ void tm_add(void *dst, const void *src, size_t n)
    {
        if (count_ == COPIES) make(batches_ ? batch_end_[0] : 1);
        if (count_ == COPIES) make(1);
        copies_[(first_ + count_++) % COPIES] = Copy{dst, src, n};
    }
    // every committed batch but the newest `prior`
    __host__ __device__ void tm_wait_prior(unsigned prior)
    {
        if (batches_ > prior) make(batch_end_[batches_ - prior - 1]);
    }

    __host__ __device__ void producer_acquire() {}
    __host__ __device__ void producer_commit()
    {
        if (batches_ == BATCHES) make(batch_end_[0]);
        batch_end_[batches_++] = count_;
    }
    __host__ __device__ void consumer_wait()
    {
        if (batches_) make(batch_end_[0]);
    }
    template <typename Duration>
    __host__ __device__ bool consumer_wait_for(const Duration &)
    {
        consumer_wait();
        return true;
    }
    template <typename TimePoint>
    __host__ __device__ bool consumer_wait_until(const TimePoint &)
    {
        consumer_wait();
        return true;
    }
    __host__ __device__ void consumer_release() {}
    __host__ __device__ bool quit()
    {
        make(count_);
        return true;
    }
};

// A block-scope pipeline: declared, so programs that also hold one compile; refused when made.
template <thread_scope Scope>
class pipeline {
  public:
    __host__ __device__ void producer_acquire() {}
    __host__ __device__ void producer_commit() {}
    __host__ __device__ void consumer_wait() {}
    __host__ __device__ void consumer_release() {}
    __host__ __device__ bool quit() { return true; }
    __host__ __device__ void tm_add(void *, const void *, size_t) {}
};

template <thread_scope Scope, unsigned char Stages = 2>
struct pipeline_shared_state {};

__host__ __device__ inline pipeline<thread_scope_thread> make_pipeline()
{
    return pipeline<thread_scope_thread>();
}

template <typename Group, thread_scope Scope, unsigned char Stages>
__host__ __device__ inline pipeline<Scope> make_pipeline(const Group &,
                                                         pipeline_shared_state<Scope, Stages> *,
                                                         const char *file = __builtin_FILE(),
                                                         int line = __builtin_LINE())
{
    tm_detail::refuse(
        "cuda::make_pipeline(group, shared_state, ...): a block-scope pipeline (producer and "
        "consumer threads) is not emulated; the thread-scope cuda::make_pipeline() is",
        file, line);
}
// with a role (pipeline_role) or a producer count
template <typename Group, thread_scope Scope, unsigned char Stages, typename Role>
__host__ __device__ inline pipeline<Scope> make_pipeline(
    const Group &g, pipeline_shared_state<Scope, Stages> *state, Role,
    const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return make_pipeline(g, state, file, line);
}

template <unsigned char Prior>
__host__ __device__ inline void pipeline_consumer_wait_prior(pipeline<thread_scope_thread> &pipe)
{
    pipe.tm_wait_prior(Prior);
}

template <thread_scope Scope>
__host__ __device__ inline void pipeline_producer_commit(pipeline<Scope> &pipe)
{
    pipe.producer_commit();
}

template <typename Size, thread_scope Scope>
__host__ __device__ inline void memcpy_async(void *dst, const void *src, Size size,
                                             pipeline<Scope> &pipe)
{
    pipe.tm_add(dst, src, (size_t)size);
}

// ---- barriers ----
struct tm_default_completion {
    __host__ __device__ void operator()() const {}
};

template <thread_scope Scope, typename Completion = tm_default_completion>
class barrier {
    ptrdiff_t expected_ = 0;

  public:
    class arrival_token {};
    __host__ __device__ barrier() = default;
    __host__ __device__ barrier(ptrdiff_t expected, Completion = Completion()) : expected_(expected)
    {
    }
    __host__ __device__ barrier(const barrier &) = delete;
    barrier &operator=(const barrier &) = delete;
    __host__ __device__ static constexpr ptrdiff_t max() { return 1024; }

    __host__ __device__ friend void init(barrier *b, ptrdiff_t expected, Completion = Completion())
    {
        b->expected_ = expected;
    }

    __host__ __device__ arrival_token arrive(ptrdiff_t = 1) { return arrival_token(); }
    __host__ __device__ void wait(arrival_token &&, const char *file = __builtin_FILE(),
                                  int line = __builtin_LINE()) const
    {
        block_wait(file, line);
    }
    __host__ __device__ void arrive_and_wait(const char *file = __builtin_FILE(),
                                             int line = __builtin_LINE())
    {
        block_wait(file, line);
    }

  private:
    __host__ __device__ void block_wait(const char *file, int line) const
    {
        if (Scope == thread_scope_thread) return;
        if (expected_ != (ptrdiff_t)(blockDim.x * blockDim.y * blockDim.z))
            tm_detail::refuse(
                "cuda::barrier: the emulator runs a barrier whose expected count is its "
                "block's threads (init(&bar, blockDim.x * blockDim.y * blockDim.z)) as the "
                "block's barrier; other counts are not emulated",
                file, line);
        tm_emu_syncthreads(file, line);
    }
};

template <typename Size, thread_scope Scope, typename Completion>
__host__ __device__ inline void memcpy_async(void *dst, const void *src, Size size,
                                             barrier<Scope, Completion> &)
{
    memcpy(dst, src, (size_t)size);
}

}  // namespace cuda
