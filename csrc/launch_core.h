/* launch_core.h: the device layer of the C glue, with no Python in it. One timed-launch core
 * (tm_timed_launch) runs the protocol every timed kernel call follows, registry kernels
 * (timing.c's tm_execute) and user kernels (user_kernels.c) alike: allocate the call's device
 * buffers from the stream-ordered pool, wait for device inputs, copy host inputs in (timed),
 * `warmup` untimed launches, `repeat` timed ones (CUDA events around each, the L2 flushed before
 * each unless kept warm), the launch facts, copy out (timed), free. What differs between the
 * callers is a request's fields and two callbacks. The result is a tm_launch_record, which
 * result.c turns into the raw launch-result dict (its one field table, RAW_LAUNCH_FIELDS).
 *
 * Layers (each uses only those above it): launch_core.h (device_memory.c, launch_core.c,
 * staging.c's copies) <- timing.c (registry kernels) <- result.c (Python objects and errors)
 * <- module.c, user_kernels.c, arrays.c, device.c. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "runtime.h"
#include "registry.h"

/* ---- copies between host and device (staging.c) ----
 * tm_copy_many_to_device copies n (at most TM_COPY_MANY_MAX) host buffers to the device, the
 * large pageable ones through one staging pipeline. */
#define TM_COPY_MANY_MAX 2
cudaError_t tm_copy_many_to_device(int n, void *const dst[], const void *const src[],
                                   const size_t bytes[]);
cudaError_t tm_copy_to_device(void *dst, const void *src, size_t bytes);
cudaError_t tm_copy_to_host(void *dst, const void *src, size_t bytes);

/* ---- device memory (device_memory.c) ----
 * Buffers that live for one call (and a kept output, a DeviceArray) come from the device's
 * stream-ordered pool where the device has one, plain cudaMalloc elsewhere (the emulator).
 * tm_device_alloc retries once after giving kept memory back when the device is full.
 * tm_device_free frees what tm_device_alloc gave, stream-ordered on stream 0. */
cudaError_t tm_device_alloc(void **ptr, size_t bytes);
void tm_device_free(void *ptr);
int tm_device_pool_in_use(void);     /* 1: tm_device_alloc's memory comes from the pool */
void tm_release_pool_memory(void);   /* memory kept for later calls back to the driver */
/* The L2 flush before a timed launch: writes a device buffer of twice the current device's L2
 * size on stream 0, to be enqueued BEFORE the start event. A no-op on the emulator.
 * tm_l2_state(flush): what Timing.l2 says ("flushed", "warm", or "n/a on the emulator").
 * tm_release_l2_flush frees the buffers (module teardown, mem_info, a failed allocation); the
 * next flush allocates again. */
cudaError_t tm_flush_l2(int repeat_index);
const char *tm_l2_state(int flush);
void tm_release_l2_flush(void);
/* The current device's multiprocessors (the emulator's: its worker threads), what the launch
 * choices of a call assume (tm_problem.sm_count). */
cudaError_t tm_current_sm_count(int *count);

/* ---- the timed-launch core (launch_core.c) ---- */
cudaError_t tm_elapsed_ms(cudaEvent_t start, cudaEvent_t stop, double *ms); /* waits for stop */

/* What one timed call reports: the fields of the raw launch result, one member each (result.c's
 * table names them and their kinds). Text members are always NUL-terminated. */
#define TM_RECORD_TEXT 256
typedef struct {
    double *samples_ms;                 /* `samples` entries, owned by the record */
    int samples;
    double h2d_ms, d2h_ms;              /* copies in (pinning included) and out, timed */
    long long h2d_bytes, d2h_bytes;
    unsigned grid[3], block[3];
    long long shared_bytes;             /* per block, static + dynamic */
    long long static_shared_bytes;      /* as the compiler reports it; 0 where unknown */
    long long registers;                /* per thread; 0 where the backend cannot tell */
    long long launches;                 /* kernel launches per call */
    long long blocks_per_sm;
    double occupancy;                   /* resident threads / max threads per SM */
    double model_bytes;                 /* the registry's traffic model; 0 for user kernels */
    char l2[32];                        /* tm_l2_state */
    char path[TM_RECORD_TEXT];          /* emu: how the last launch ran (Launch.path); cuda: "" */
    char path_reason[TM_RECORD_TEXT];   /* emu: why fibers, where a split was refused; else "" */
} tm_launch_record;
void tm_launch_record_free(tm_launch_record *record);

/* Device memory a call is given (a device input): what to wait for before the first launch. */
enum {
    TM_WAIT_DEVICE = 0, /* the producer's stream is unknown: cudaDeviceSynchronize */
    TM_WAIT_NONE = 1,   /* the memory is ready (the producer said so: no stream) */
    TM_WAIT_STREAM = 2  /* wait for `stream` (__cuda_array_interface__ v3: 1 legacy default
                         * stream, 2 per-thread default stream, else a cudaStream_t) */
};

/* One buffer of a call. host_in set: allocated here and copied in (timed); host_out set: copied
 * back after the launches (timed); neither and `allocate`: device-only (scratch, or an output
 * kept on the device); neither and not `allocate`: `dev` is given device memory. */
typedef struct {
    const void *host_in;
    void *host_out;
    void *dev;                          /* allocated here, or given */
    size_t bytes;
    int allocate;                       /* tm_device_alloc here, tm_device_free after */
    int keep; /* allocate: on success the caller owns dev (tm_device_free) */
    const char *step; /* allocate: the failed step's name ("cudaMalloc (input)") */
    int wait; /* given dev: TM_WAIT_* */
    uintptr_t stream; /* TM_WAIT_STREAM: the stream's number or handle */
} tm_launch_buffer;

/* One launch of the kernel on stream 0; fills `facts` (the first launch's, as registry.h says).
 * Returns a cudaError_t (the launch error, or cudaGetLastError's). */
typedef cudaError_t (*tm_launch_fn)(void *ctx, tm_launch_facts *facts);
/* Called once after allocation and the copies in, before the first launch; names its failed
 * step in *step. */
typedef cudaError_t (*tm_prepare_fn)(void *ctx, const char **step);

typedef struct {
    tm_launch_fn launch;
    tm_prepare_fn prepare; /* optional */
    void *ctx;
    tm_launch_buffer *buffers;
    int n_buffers;
    int warmup, repeat; /* repeat >= 1 */
    int flush_l2; /* flush L2 before each timed launch (tm_flush_l2) */
    double pin_ms; /* host time already spent pinning inputs: part of h2d_ms */
    int facts_required; /* a failed launch-facts query fails the call (else zeros) */
    int facts_cacheable; /* facts.func lives as long as the module: cache its facts */
} tm_launch_request;

typedef struct {
    cudaError_t err;
    const char *step; /* which step failed, for the message */
    size_t bytes; /* the allocation's size, when one failed */
} tm_launch_failure;

/* Run the protocol; call WITHOUT the GIL. Fills *record (samples_ms allocated: the caller frees
 * it with tm_launch_record_free, also after a failure) and *facts (the kernel's launch as the
 * launch callback reported it). Buffers' dev: allocated ones are freed (NULL after) except kept
 * ones on success. Returns 0, or -1 with *failure set (the first error; a non-sticky error is
 * cleared for the next call). */
int tm_timed_launch(tm_launch_request *request, tm_launch_record *record, tm_launch_facts *facts,
                    tm_launch_failure *failure);
/* Cached events and launch facts back to the runtime (module teardown). */
void tm_release_launch_cache(void);
