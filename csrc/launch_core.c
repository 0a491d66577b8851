/* launch_core.c: the one timed-launch core (launch_core.h), run without the GIL: allocate,
 * wait for device inputs, copy in (timed), launch `warmup` untimed and `repeat` timed times
 * (CUDA events around each launch; the L2 cache flushed before each unless the caller keeps it
 * warm), the launch facts, copy out (timed), free. One cleanup path frees everything, errors
 * included. What is the same on every call is kept between calls, each cache under its lock:
 * the event pairs (two creates and two destroys a call before) and, for kernels that live as
 * long as the module, cudaFuncGetAttributes' and the occupancy query's answers. */
#include "launch_core.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaError_t tm_elapsed_ms(cudaEvent_t start, cudaEvent_t stop, double *ms)
{
    float f = 0.0f;
    cudaError_t err = cudaEventSynchronize(stop);
    if (err == cudaSuccess) err = cudaEventElapsedTime(&f, start, stop);
    *ms = f;
    return err;
}

void tm_launch_record_free(tm_launch_record *record)
{
    free(record->samples_ms);
    record->samples_ms = NULL;
    record->samples = 0;
}

/* ---- events: a few sets kept for the next calls, per device ---- */
#define TM_EVENT_SETS_KEPT 8

typedef struct {
    int device;
    cudaEvent_t start, stop; /* timing */
    cudaEvent_t ready;       /* no timing: a device input's stream, waited for (made on use) */
} event_set;

static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static event_set events_kept[TM_EVENT_SETS_KEPT]; /* guarded by events_lock */
static int events_kept_count;                     /* guarded by events_lock */

static void events_destroy(event_set *e)
{
    if (e->start) (void)cudaEventDestroy(e->start);
    if (e->stop) (void)cudaEventDestroy(e->stop);
    if (e->ready) (void)cudaEventDestroy(e->ready);
    memset(e, 0, sizeof *e);
}

/* A set for the current device: a kept one, else new. */
static cudaError_t events_take(event_set *e, const char **step)
{
    cudaError_t err;
    memset(e, 0, sizeof *e);
    *step = "cudaGetDevice";
    if ((err = cudaGetDevice(&e->device)) != cudaSuccess) return err;
    if (pthread_mutex_lock(&events_lock) == 0) {
        for (int i = events_kept_count - 1; i >= 0; --i)
            if (events_kept[i].device == e->device) {
                *e = events_kept[i];
                events_kept[i] = events_kept[--events_kept_count];
                pthread_mutex_unlock(&events_lock);
                return cudaSuccess;
            }
        pthread_mutex_unlock(&events_lock);
    }
    *step = "cudaEventCreate";
    if ((err = cudaEventCreate(&e->start)) == cudaSuccess) err = cudaEventCreate(&e->stop);
    if (err != cudaSuccess) events_destroy(e);
    return err;
}

/* Back for the next call after a call that succeeded; destroyed after one that failed (an event
 * a failed launch left recorded is no use) or when enough are kept. */
static void events_give_back(event_set *e, int healthy)
{
    if (e->start == NULL) return;
    if (healthy && pthread_mutex_lock(&events_lock) == 0) {
        if (events_kept_count < TM_EVENT_SETS_KEPT) {
            events_kept[events_kept_count++] = *e;
            memset(e, 0, sizeof *e);
        }
        pthread_mutex_unlock(&events_lock);
    }
    events_destroy(e);
}

/* ---- launch facts: registers, static shared memory, occupancy ---- */
typedef struct {
    int registers, static_shared, blocks_per_sm, max_threads_per_sm;
} facts_answer;

#ifndef TM_EMU
/* The runtime's answers depend on the device, the function, the block size and the dynamic
 * shared memory only; the emulator's occupancy also reads its per-function shared-memory limit,
 * which changes, so it asks every time (its answers are cheap). */
#define TM_FACTS_KEPT 128
typedef struct {
    int device;
    const void *func;
    int threads;
    size_t shared;
    facts_answer answer;
} facts_entry;
static pthread_mutex_t facts_lock = PTHREAD_MUTEX_INITIALIZER;
static facts_entry facts_kept[TM_FACTS_KEPT]; /* guarded by facts_lock */
static int facts_kept_count, facts_next;      /* guarded by facts_lock; next slot to replace */

static int facts_lookup(const facts_entry *key, facts_answer *answer)
{
    int found = 0;
    if (pthread_mutex_lock(&facts_lock) != 0) return 0;
    for (int i = 0; i < facts_kept_count && !found; ++i) {
        const facts_entry *k = &facts_kept[i];
        if (k->device == key->device && k->func == key->func && k->threads == key->threads &&
            k->shared == key->shared) {
            *answer = k->answer;
            found = 1;
        }
    }
    pthread_mutex_unlock(&facts_lock);
    return found;
}

static void facts_store(const facts_entry *entry)
{
    if (pthread_mutex_lock(&facts_lock) != 0) return;
    if (facts_kept_count < TM_FACTS_KEPT)
        facts_kept[facts_kept_count++] = *entry;
    else {
        facts_kept[facts_next] = *entry;
        facts_next = (facts_next + 1) % TM_FACTS_KEPT;
    }
    pthread_mutex_unlock(&facts_lock);
}
#endif

/* Registers, static shared memory and occupancy of the launched kernel, from the runtime
 * (or the cache). With `required` the first error is returned; without, what could be asked is
 * filled and the errors are cleared. */
static cudaError_t ask_launch_facts(const void *func, int threads, size_t shared, int required,
                                    facts_answer *a, int *have_occupancy)
{
    struct cudaFuncAttributes attr;
    cudaError_t err, attr_err;
    int device = 0;
    if ((attr_err = cudaFuncGetAttributes(&attr, func)) == cudaSuccess) {
        a->registers = attr.numRegs;
        a->static_shared = (int)attr.sharedSizeBytes;
    } else if (required) {
        return attr_err;
    }
    if ((err = cudaGetDevice(&device)) == cudaSuccess &&
        (err = cudaDeviceGetAttribute(&a->max_threads_per_sm,
                                      cudaDevAttrMaxThreadsPerMultiProcessor, device)) ==
            cudaSuccess &&
        (err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a->blocks_per_sm, func, threads,
                                                             shared)) == cudaSuccess)
        *have_occupancy = 1;
    if (err != cudaSuccess && required) return err;
    if (attr_err != cudaSuccess || err != cudaSuccess) (void)cudaGetLastError();
    return attr_err == cudaSuccess && *have_occupancy ? cudaSuccess : cudaErrorUnknown;
}

static cudaError_t query_launch_facts(const tm_launch_facts *f, int required, int cacheable,
                                      tm_launch_record *record)
{
    facts_answer a = {0, 0, 0, 0};
    int have_occupancy = 0;
    cudaError_t err;
    const int threads = (int)(f->block[0] * f->block[1] * f->block[2]);
#ifdef TM_EMU
    /* The emulator cannot see static __shared__ sizes; pass what the launcher computed. */
    const size_t occupancy_shared = f->shared_bytes;
    (void)cacheable;
    err = ask_launch_facts(f->func, threads, occupancy_shared, required, &a, &have_occupancy);
    if (required && err != cudaSuccess) return err;
#else
    const size_t occupancy_shared = f->dynamic_shared_bytes;
    facts_entry key = {0, f->func, threads, occupancy_shared, {0, 0, 0, 0}};
    if (cacheable && cudaGetDevice(&key.device) != cudaSuccess) {
        (void)cudaGetLastError();
        cacheable = 0;
    }
    if (cacheable && facts_lookup(&key, &a)) {
        have_occupancy = 1;
    } else {
        err = ask_launch_facts(f->func, threads, occupancy_shared, required, &a, &have_occupancy);
        if (required && err != cudaSuccess) return err;
        if (cacheable && err == cudaSuccess) { /* complete answers only */
            key.answer = a;
            facts_store(&key);
        }
    }
#endif
    record->registers = a.registers;
    record->static_shared_bytes = a.static_shared;
    if (have_occupancy) {
        record->blocks_per_sm = a.blocks_per_sm;
        record->occupancy =
            a.max_threads_per_sm ? (double)a.blocks_per_sm * threads / a.max_threads_per_sm : 0.0;
    }
    return cudaSuccess;
}

/* ---- the protocol ---- */
#define TRY(what, call)             \
    do {                            \
        err = (call);               \
        if (err != cudaSuccess) {   \
            failure->step = (what); \
            goto cleanup;           \
        }                           \
    } while (0)

/* Make stream 0 wait for the work that produced the given device buffers. */
static cudaError_t wait_for_device_inputs(const tm_launch_request *rq, event_set *events,
                                          const char **step)
{
    cudaError_t err = cudaSuccess;
    int device_wide = 0;
    for (int i = 0; i < rq->n_buffers; ++i) {
        const tm_launch_buffer *b = &rq->buffers[i];
        if (b->host_in == NULL && !b->allocate)
            device_wide |= b->wait == TM_WAIT_DEVICE
#ifdef TM_EMU
                           || b->wait == TM_WAIT_STREAM /* no streams to wait for: all work */
#endif
                ;
    }
    *step = "cudaDeviceSynchronize";
    /* Device inputs may come from another library's stream (CuPy, PyTorch): wait for the work
     * that produced them, all of it when the stream is not known. */
    if (device_wide) return cudaDeviceSynchronize();
#ifndef TM_EMU
    for (int i = 0; i < rq->n_buffers && err == cudaSuccess; ++i) {
        const tm_launch_buffer *b = &rq->buffers[i];
        if (b->host_in != NULL || b->allocate || b->wait != TM_WAIT_STREAM) continue;
        cudaStream_t stream = b->stream == 1   ? cudaStreamLegacy
                              : b->stream == 2 ? cudaStreamPerThread
                                               : (cudaStream_t)b->stream;
        *step = "cudaEventCreateWithFlags";
        if (events->ready == NULL &&
            (err = cudaEventCreateWithFlags(&events->ready, cudaEventDisableTiming)) != cudaSuccess)
            break;
        *step = "waiting for a device input's stream (cudaEventRecord, cudaStreamWaitEvent)";
        if ((err = cudaEventRecord(events->ready, stream)) == cudaSuccess)
            err = cudaStreamWaitEvent(0, events->ready, 0);
    }
#else
    (void)events;
#endif
    return err;
}

/* The host buffers to the device, timed, all in one pipeline where they fit one. */
static cudaError_t copy_in(const tm_launch_request *rq, event_set *events, double *ms,
                           const char **step)
{
    cudaError_t err;
    void *dst[TM_COPY_MANY_MAX];
    const void *src[TM_COPY_MANY_MAX];
    size_t bytes[TM_COPY_MANY_MAX];
    int n = 0;
    *step = "cudaEventRecord";
    if ((err = cudaEventRecord(events->start, 0)) != cudaSuccess) return err;
    for (int i = 0; i < rq->n_buffers; ++i) {
        const tm_launch_buffer *b = &rq->buffers[i];
        if (b->host_in == NULL || b->bytes == 0) continue;
        dst[n] = b->dev;
        src[n] = b->host_in;
        bytes[n++] = b->bytes;
        if (n == TM_COPY_MANY_MAX) {
            *step = "copy to the device";
            if ((err = tm_copy_many_to_device(n, dst, src, bytes)) != cudaSuccess) return err;
            n = 0;
        }
    }
    *step = "copy to the device";
    if (n && (err = tm_copy_many_to_device(n, dst, src, bytes)) != cudaSuccess) return err;
    *step = "cudaEventRecord";
    if ((err = cudaEventRecord(events->stop, 0)) != cudaSuccess) return err;
    *step = "timing the copy to the device";
    return tm_elapsed_ms(events->start, events->stop, ms);
}

/* The device buffers back to the host, timed. */
static cudaError_t copy_out(const tm_launch_request *rq, event_set *events, double *ms,
                            const char **step)
{
    cudaError_t err;
    *step = "cudaEventRecord";
    if ((err = cudaEventRecord(events->start, 0)) != cudaSuccess) return err;
    for (int i = 0; i < rq->n_buffers; ++i) {
        const tm_launch_buffer *b = &rq->buffers[i];
        if (b->host_out == NULL || b->bytes == 0) continue;
        *step = "copy to the host";
        if ((err = tm_copy_to_host(b->host_out, b->dev, b->bytes)) != cudaSuccess) return err;
    }
    *step = "cudaEventRecord";
    if ((err = cudaEventRecord(events->stop, 0)) != cudaSuccess) return err;
    *step = "timing the copy to the host";
    return tm_elapsed_ms(events->start, events->stop, ms);
}

int tm_timed_launch(tm_launch_request *rq, tm_launch_record *record, tm_launch_facts *facts,
                    tm_launch_failure *failure)
{
    event_set events = {0, NULL, NULL, NULL};
    cudaError_t err = cudaSuccess;
    int any_in = 0, any_out = 0;

    memset(facts, 0, sizeof *facts);
    failure->err = cudaSuccess;
    failure->step = NULL;
    failure->bytes = 0;
    snprintf(record->l2, sizeof record->l2, "%s", tm_l2_state(rq->flush_l2));
    record->samples_ms = calloc((size_t)rq->repeat, sizeof(double));
    if (record->samples_ms == NULL) {
        failure->step = "host allocation of timing samples";
        err = cudaErrorMemoryAllocation;
        goto cleanup;
    }
    record->samples = rq->repeat;
    if ((err = events_take(&events, &failure->step)) != cudaSuccess) goto cleanup;

    for (int i = 0; i < rq->n_buffers; ++i) {
        tm_launch_buffer *b = &rq->buffers[i];
        if (b->host_in) record->h2d_bytes += (long long)b->bytes;
        if (b->host_out) record->d2h_bytes += (long long)b->bytes;
        any_in |= b->host_in != NULL && b->bytes != 0;
        any_out |= b->host_out != NULL && b->bytes != 0;
        if (!b->allocate && b->host_in == NULL) continue; /* given device memory */
        if ((err = tm_device_alloc(&b->dev, b->bytes)) != cudaSuccess) {
            failure->step = b->step;
            failure->bytes = b->bytes;
            goto cleanup;
        }
    }
    if ((err = wait_for_device_inputs(rq, &events, &failure->step)) != cudaSuccess) goto cleanup;
    if (any_in) {
        if ((err = copy_in(rq, &events, &record->h2d_ms, &failure->step)) != cudaSuccess)
            goto cleanup;
        record->h2d_ms += rq->pin_ms; /* registering an input in place is part of its copy */
    }
    if (rq->prepare && (err = rq->prepare(rq->ctx, &failure->step)) != cudaSuccess) goto cleanup;

    for (int i = 0; i < rq->warmup; ++i) {
        TRY("kernel launch", rq->launch(rq->ctx, facts));
        TRY("kernel execution", cudaDeviceSynchronize());
    }
    for (int i = 0; i < rq->repeat; ++i) {
        if (rq->flush_l2)
            TRY("the L2 flush before a timed launch (warm_l2=True skips it)", tm_flush_l2(i));
        TRY("cudaEventRecord", cudaEventRecord(events.start, 0));
        TRY("kernel launch", rq->launch(rq->ctx, facts));
        TRY("cudaEventRecord", cudaEventRecord(events.stop, 0));
        TRY("kernel execution", tm_elapsed_ms(events.start, events.stop, &record->samples_ms[i]));
    }
    for (int d = 0; d < 3; ++d) {
        record->grid[d] = facts->grid[d];
        record->block[d] = facts->block[d];
    }
    record->shared_bytes = (long long)facts->shared_bytes;
    record->launches = facts->launches;
    if (facts->launches > 0 && facts->func != NULL)
        TRY("querying launch facts",
            query_launch_facts(facts, rq->facts_required, rq->facts_cacheable, record));

    if (any_out) {
        if ((err = copy_out(rq, &events, &record->d2h_ms, &failure->step)) != cudaSuccess)
            goto cleanup;
    } else {
        TRY("kernel execution", cudaDeviceSynchronize());
    }

cleanup:
    /* Free on every path; the first error is the one reported. Given memory is not ours. */
    for (int i = 0; i < rq->n_buffers; ++i) {
        tm_launch_buffer *b = &rq->buffers[i];
        if (!b->allocate && b->host_in == NULL) continue;
        if (b->keep && err == cudaSuccess) continue; /* the caller's now */
        tm_device_free(b->dev);
        b->dev = NULL;
    }
    events_give_back(&events, err == cudaSuccess);
    failure->err = err;
    if (err != cudaSuccess)
        (void)cudaGetLastError(); /* clear a non-sticky error for the next call */
    return err == cudaSuccess ? 0 : -1;
}

void tm_release_launch_cache(void)
{
    if (pthread_mutex_lock(&events_lock) == 0) {
        /* At interpreter exit the runtime may be unloading already: nothing to report. */
        for (int i = 0; i < events_kept_count; ++i)
            events_destroy(&events_kept[i]);
        events_kept_count = 0;
        pthread_mutex_unlock(&events_lock);
    }
    (void)cudaGetLastError();
#ifndef TM_EMU
    if (pthread_mutex_lock(&facts_lock) == 0) {
        facts_kept_count = facts_next = 0;
        pthread_mutex_unlock(&facts_lock);
    }
#endif
}
