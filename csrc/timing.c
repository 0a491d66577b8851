/* timing.c: one call's device work, run without the GIL: allocate, copy in (timed), launch
 * `warmup` untimed and `repeat` timed times (CUDA events around each launch; the L2 cache
 * flushed before each unless the caller keeps it warm), copy out (timed), free. One cleanup path frees everything, errors included. */
#include "glue.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef TM_EMU
#include <pthread.h>
#endif

#define TRY(step, call) TM_TRY(job->failed_step, step, call)

/* Elapsed ms between two events already recorded; waits for `stop`. */
cudaError_t tm_elapsed_ms(cudaEvent_t start, cudaEvent_t stop, double *ms)
{
    float f = 0.0f;
    cudaError_t err = cudaEventSynchronize(stop);
    if (err == cudaSuccess) err = cudaEventElapsedTime(&f, start, stop);
    *ms = f;
    return err;
}

/* Device buffers that live for one call only (host inputs, an output copied back, scratch) come
 * from the device's stream-ordered pool, told to keep freed memory for the next call instead of
 * giving it back to the driver: cudaMalloc and cudaFree of a 4096^3 matmul's three 64 MiB buffers
 * took about 0.45 ms on the H100 (5% of that call end to end). The pool gives its memory back
 * when an allocation fails (which is then retried once) and before mem_info() reads free memory,
 * so out-of-memory behaviour and the free memory tiledmm reports are as without it. An output
 * that stays on the device (a DeviceArray) is freed by its owner with cudaFree: cudaMalloc.
 * The emulator has no pool: plain cudaMalloc / cudaFree. */
#ifndef TM_EMU
static pthread_once_t pool_setup_once = PTHREAD_ONCE_INIT;
static int pool_usable; /* written once, under pool_setup_once, before any reader */

static void set_up_pool(void)
{
    int device = 0, supported = 0;
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess &&
        supported && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess &&
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess)
        pool_usable = 1;
    (void)cudaGetLastError(); /* no pools here: cudaMalloc as before */
}
#endif

void tm_release_pool_memory(void)
{
#ifndef TM_EMU
    int device = 0;
    cudaMemPool_t pool;
    pthread_once(&pool_setup_once, set_up_pool);
    if (pool_usable && cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess &&
        cudaDeviceSynchronize() == cudaSuccess)
        (void)cudaMemPoolTrimTo(pool, 0);
    (void)cudaGetLastError();
#endif
}

/* The L2 flush. A small problem's inputs stay in L2 from one timed launch to the next (a 4 MB
 * reduction fits the H200's 60 MB L2 many times over), so repeats after the first would time L2,
 * not memory. Before each timed launch a buffer of twice the L2 size is written
 * (cudaMemsetAsync on stream 0, enqueued before the start event, so outside the timed span): the
 * write evicts what the previous launch left, and the launch reads its inputs from DRAM, as a
 * program's first touch of its data does. llm.c's benchmark_kernel and nvbench do the same.
 * One buffer per device, allocated on first use (cudaMalloc, not the pool: it outlives calls)
 * and freed at module teardown (the module's m_free). Like the pool's kept memory it goes back
 * before mem_info() reads free memory and when an allocation fails (tm_release_l2_flush), so
 * the free memory tiledmm reports and its out-of-memory behaviour are as without it; the next
 * timed launch allocates it again. One mutex guards the table and is held while the memset is
 * enqueued, so a release never frees a buffer a flush is about to write. The emulator has no
 * L2 to flush. */
#ifndef TM_EMU
#define TM_L2_MAX_DEVICES 64
#define TM_L2_MIN_FLUSH_BYTES ((size_t)1 << 20)
static pthread_mutex_t l2_lock = PTHREAD_MUTEX_INITIALIZER;
static void *l2_buffer[TM_L2_MAX_DEVICES];       /* guarded by l2_lock */
static size_t l2_buffer_bytes[TM_L2_MAX_DEVICES]; /* guarded by l2_lock */

/* With l2_lock held: the current device's flush buffer, allocated on first use (after giving
 * the pool's kept memory back, once, if the device is full). */
static cudaError_t l2_flush_buffer_locked(int device)
{
    int l2_bytes = 0;
    cudaError_t err;
    if (l2_buffer[device] != NULL) return cudaSuccess;
    if ((err = cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device)) != cudaSuccess)
        return err;
    size_t want = 2 * (size_t)(l2_bytes > 0 ? l2_bytes : 0);
    if (want < TM_L2_MIN_FLUSH_BYTES) want = TM_L2_MIN_FLUSH_BYTES;
    err = cudaMalloc(&l2_buffer[device], want);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        tm_release_pool_memory();
        err = cudaMalloc(&l2_buffer[device], want);
    }
    if (err != cudaSuccess) {
        l2_buffer[device] = NULL;
        return err;
    }
    l2_buffer_bytes[device] = want;
    return cudaSuccess;
}
#endif

cudaError_t tm_flush_l2(int repeat_index)
{
#ifdef TM_EMU
    (void)repeat_index;
    return cudaSuccess;
#else
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (device < 0 || device >= TM_L2_MAX_DEVICES) return cudaErrorInvalidDevice;
    if (pthread_mutex_lock(&l2_lock) != 0) return cudaErrorUnknown;
    err = l2_flush_buffer_locked(device);
    /* a different byte each time: no write of the same value can be skipped */
    if (err == cudaSuccess)
        err = cudaMemsetAsync(l2_buffer[device], repeat_index & 0xff, l2_buffer_bytes[device], 0);
    pthread_mutex_unlock(&l2_lock);
    return err;
#endif
}

const char *tm_l2_state(int flush)
{
    if (!flush) return "warm";
#ifdef TM_EMU
    return "n/a on the emulator";
#else
    return "flushed";
#endif
}

void tm_release_l2_flush(void)
{
#ifndef TM_EMU
    if (pthread_mutex_lock(&l2_lock) != 0) return;
    for (int device = 0; device < TM_L2_MAX_DEVICES; ++device)
        if (l2_buffer[device] != NULL) {
            /* Flushes already enqueued finish before the buffer goes. At interpreter exit the
             * runtime may be unloading already: then there is nothing to free or report. */
            int current = 0;
            if (cudaGetDevice(&current) == cudaSuccess && cudaSetDevice(device) == cudaSuccess) {
                (void)cudaDeviceSynchronize();
                (void)cudaFree(l2_buffer[device]);
                (void)cudaSetDevice(current);
            }
            (void)cudaGetLastError(); /* what went wrong here is no error of the next call */
            l2_buffer[device] = NULL;
            l2_buffer_bytes[device] = 0;
        }
    pthread_mutex_unlock(&l2_lock);
#endif
}

static cudaError_t device_alloc(tm_job *job, void **ptr, size_t bytes, int pooled, const char *step)
{
    cudaError_t err;
    *ptr = NULL;
    if (bytes == 0) return cudaSuccess;
#ifndef TM_EMU
    if (pooled) pthread_once(&pool_setup_once, set_up_pool);
    if (pooled && pool_usable) {
        err = cudaMallocAsync(ptr, bytes, 0);
        if (err == cudaErrorMemoryAllocation) { /* memory kept for later may be what is missing */
            (void)cudaGetLastError();
            tm_release_pool_memory();
            tm_release_l2_flush();
            err = cudaMallocAsync(ptr, bytes, 0);
        }
    } else
#endif
    {
        (void)pooled;
        err = cudaMalloc(ptr, bytes);
    }
    if (err != cudaSuccess) {
        *ptr = NULL;
        job->failed_step = step;
        job->failed_bytes = bytes;
    }
    return err;
}

static void device_free(void *ptr, int pooled)
{
    if (ptr == NULL) return;
#ifndef TM_EMU
    if (pooled && pool_usable) { /* pool_usable was settled before ptr was allocated */
        (void)cudaFreeAsync(ptr, 0);
        return;
    }
#endif
    (void)pooled;
    cudaFree(ptr);
}

/* Registers, static shared memory and occupancy of the launched kernel, from the runtime. */
static cudaError_t query_launch_facts(tm_job *job)
{
    struct cudaFuncAttributes attr;
    cudaError_t err;
    int device, max_threads_per_sm = 0, blocks = 0;
    const int threads = (int)(job->facts.block[0] * job->facts.block[1] * job->facts.block[2]);

    if ((err = cudaFuncGetAttributes(&attr, job->facts.func)) != cudaSuccess) return err;
    job->registers = attr.numRegs;
    job->static_shared_bytes = (int)attr.sharedSizeBytes;
    if ((err = cudaGetDevice(&device)) != cudaSuccess) return err;
    if ((err = cudaDeviceGetAttribute(&max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor,
                                      device)) != cudaSuccess)
        return err;
#ifdef TM_EMU
    /* The emulator cannot see static __shared__ sizes; pass what the launcher computed. */
    const size_t occupancy_shared = job->facts.shared_bytes;
#else
    const size_t occupancy_shared = job->facts.dynamic_shared_bytes;
#endif
    if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, job->facts.func, threads,
                                                             occupancy_shared)) != cudaSuccess)
        return err;
    job->blocks_per_sm = blocks;
    job->occupancy = max_threads_per_sm ? (double)blocks * threads / max_threads_per_sm : 0.0;
    return cudaSuccess;
}

/* Bytes this call copies to the device (host inputs only). */
size_t job_h2d_bytes(const tm_job *job)
{
    size_t bytes = 0;
    for (int i = 0; i < job->n_inputs; ++i)
        if (!job->in_on_device[i]) bytes += job->in_bytes[i];
    return bytes;
}

int tm_execute(tm_job *job)
{
    const tm_kernel_spec *spec = job->spec;
    tm_problem device_problem = job->problem;
    void *d_in[TM_MAX_INPUTS] = {NULL, NULL}, *d_out = NULL, *d_scratch = NULL;
    const void *h_in[TM_MAX_INPUTS] = {job->problem.in0, job->problem.in1};
    cudaEvent_t start = NULL, stop = NULL;
    cudaError_t err = cudaSuccess;
    size_t scratch_bytes = 0;

    job->samples_ms = calloc((size_t)job->repeat, sizeof(double));
    if (job->samples_ms == NULL) {
        job->failed_step = "host allocation of timing samples";
        err = cudaErrorMemoryAllocation;
        goto cleanup;
    }
    TRY("cudaEventCreate", cudaEventCreate(&start));
    TRY("cudaEventCreate", cudaEventCreate(&stop));
    /* The launcher's choices and the byte model (res.model_bytes) read this one count. */
    if (job->problem.sm_count <= 0)
        TRY("cudaDeviceGetAttribute (multiprocessors)", tm_current_sm_count(&job->problem.sm_count));
    device_problem.sm_count = job->problem.sm_count;

    for (int i = 0; i < job->n_inputs; ++i)
        if (!job->in_on_device[i] &&
            (err = device_alloc(job, &d_in[i], job->in_bytes[i], 1, "cudaMalloc (input)")))
            goto cleanup;
    if ((err = device_alloc(job, &d_out, job->out_bytes, !job->out_on_device, "cudaMalloc (output)")))
        goto cleanup;
    device_problem.in0 = job->in_on_device[0] ? h_in[0] : d_in[0];
    device_problem.in1 = job->in_on_device[1] ? h_in[1] : d_in[1];
    device_problem.out = d_out;
    if (spec->scratch_bytes) scratch_bytes = (size_t)spec->scratch_bytes(&device_problem);
    if ((err = device_alloc(job, &d_scratch, scratch_bytes, 1, "cudaMalloc (scratch)"))) goto cleanup;
    device_problem.scratch = d_scratch;

    if (job->in_on_device[0] || job->in_on_device[1])
        /* Device inputs may come from another library's stream (CuPy, PyTorch): wait for
         * the work that produced them. */
        TRY("cudaDeviceSynchronize", cudaDeviceSynchronize());
    if (job_h2d_bytes(job)) {
        /* All host inputs in one call: large ones stream through one staging pipeline. */
        void *copy_dst[TM_MAX_INPUTS];
        const void *copy_src[TM_MAX_INPUTS];
        size_t copy_bytes[TM_MAX_INPUTS];
        int copies = 0;
        for (int i = 0; i < job->n_inputs; ++i)
            if (job->in_bytes[i] && !job->in_on_device[i]) {
                copy_dst[copies] = d_in[i];
                copy_src[copies] = h_in[i];
                copy_bytes[copies++] = job->in_bytes[i];
            }
        TRY("cudaEventRecord", cudaEventRecord(start, 0));
        TRY("copy to the device", tm_copy_many_to_device(copies, copy_dst, copy_src, copy_bytes));
        TRY("cudaEventRecord", cudaEventRecord(stop, 0));
        TRY("timing the copy to the device", tm_elapsed_ms(start, stop, &job->h2d_ms));
        job->h2d_ms += job->pin_ms; /* registering an input in place is part of its copy */
    }

    for (int i = 0; i < job->warmup; ++i) {
        TRY("kernel launch", (cudaError_t)spec->launch(&device_problem, &job->facts));
        TRY("kernel execution", cudaDeviceSynchronize());
    }
    for (int i = 0; i < job->repeat; ++i) {
        if (job->flush_l2) TRY("the L2 flush before a timed launch (warm_l2=True skips it)", tm_flush_l2(i));
        TRY("cudaEventRecord", cudaEventRecord(start, 0));
        TRY("kernel launch", (cudaError_t)spec->launch(&device_problem, &job->facts));
        TRY("cudaEventRecord", cudaEventRecord(stop, 0));
        TRY("kernel execution", tm_elapsed_ms(start, stop, &job->samples_ms[i]));
    }
    if (job->facts.launches > 0 && job->facts.func != NULL)
        TRY("querying launch facts", query_launch_facts(job));
#ifdef TM_EMU
    job->launch_path = job->facts.launches > 0 ? tm_emu_last_launch_path() : "";
    snprintf(job->launch_reason, sizeof job->launch_reason, "%s",
             job->facts.launches > 0 ? tm_emu_last_launch_reason() : "");
#else
    job->launch_path = "";
#endif

    if (job->out_on_device) {
        TRY("kernel execution", cudaDeviceSynchronize());
        job->device_out = d_out; /* the caller owns it from here */
        d_out = NULL;
    } else if (job->out_bytes) {
        TRY("cudaEventRecord", cudaEventRecord(start, 0));
        TRY("copy to the host", tm_copy_to_host(job->problem.out, d_out, job->out_bytes));
        TRY("cudaEventRecord", cudaEventRecord(stop, 0));
        TRY("timing the copy to the host", tm_elapsed_ms(start, stop, &job->d2h_ms));
    }

cleanup:
    /* Free on every path; the first error is the one reported. Device inputs are not ours. */
    for (int i = 0; i < TM_MAX_INPUTS; ++i) device_free(d_in[i], 1);
    device_free(d_out, !job->out_on_device);
    device_free(d_scratch, 1);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    job->err = err;
    if (err != cudaSuccess) (void)cudaGetLastError(); /* clear a non-sticky error for the next call */
    return err == cudaSuccess ? 0 : -1;
}

void tm_job_free(tm_job *job)
{
    free(job->samples_ms);
    job->samples_ms = NULL;
}

PyObject *tm_raise_cuda_error(cudaError_t err, const char *step)
{
    const char *name = cudaGetErrorName(err), *text = cudaGetErrorString(err);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
        return PyErr_Format(PyExc_RuntimeError,
                            "no usable CUDA device (%s: %s). Run on the CPU emulator with "
                            "backend='emu', tiledmm.set_backend('emu') or TILEDMM_BACKEND=emu",
                            name, text);
    if (err == cudaErrorMemoryAllocation)
        return PyErr_Format(PyExc_MemoryError, "device out of memory during %s (%s)", step, name);
    return PyErr_Format(PyExc_RuntimeError, "%s failed: %s: %s", step, name, text);
}

PyObject *tm_raise_job_error(const tm_job *job)
{
    const char *name = cudaGetErrorName(job->err), *text = cudaGetErrorString(job->err);
    if (job->err == cudaErrorMemoryAllocation) {
        size_t free_bytes = 0, total_bytes = 0;
        (void)cudaMemGetInfo(&free_bytes, &total_bytes);
        (void)cudaGetLastError();
        return PyErr_Format(PyExc_MemoryError,
                            "kernel '%s': device out of memory: %s of %zu bytes failed "
                            "(%zu of %zu bytes free); use smaller arrays",
                            job->spec->name, job->failed_step, job->failed_bytes, free_bytes,
                            total_bytes);
    }
    if (job->err == cudaErrorNoDevice || job->err == cudaErrorInsufficientDriver)
        return tm_raise_cuda_error(job->err, job->failed_step);
#ifdef TM_EMU
    const char *detail = tm_emu_last_error_detail();
    if (detail && *detail)
        return PyErr_Format(PyExc_RuntimeError, "kernel '%s': %s failed: %s: %s\n%s",
                            job->spec->name, job->failed_step, name, text, detail);
#endif
    return PyErr_Format(PyExc_RuntimeError, "kernel '%s': %s failed: %s: %s", job->spec->name,
                        job->failed_step, name, text);
}

/* Pinned host memory for the reference copies; on the emulator all host memory is as good. */
static cudaError_t pinned_alloc(void **ptr, size_t bytes)
{
#ifdef TM_EMU
    *ptr = malloc(bytes);
    return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
#else
    return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault);
#endif
}

static void pinned_free(void *ptr)
{
#ifdef TM_EMU
    free(ptr);
#else
    cudaFreeHost(ptr);
#endif
}

/* Reference copies for bench, each timed with CUDA events after `warmup` untimed ones:
 * kind "d2d" (device to device: the bandwidth a reduction is compared with), "h2d_pinned" and
 * "d2h_pinned" (from or to pinned host memory: the best a transfer can do), the L2 flushed
 * before each timed copy when flush_l2 (as the kernels they are compared with). Fills
 * samples_ms[repeat]; returns 0 or -1 with *err_out and *step set. */
#define COPY_TRY(what, call) TM_TRY(*step, what, call)

int tm_copy_time(const char *kind, size_t bytes, int warmup, int repeat, int flush_l2,
                 double *samples_ms, cudaError_t *err_out, const char **step)
{
    void *src = NULL, *dst = NULL, *host = NULL;
    const int d2d = strcmp(kind, "d2d") == 0, to_device = strcmp(kind, "h2d_pinned") == 0;
    const enum cudaMemcpyKind direction = d2d ? cudaMemcpyDeviceToDevice
                                          : to_device ? cudaMemcpyHostToDevice
                                                      : cudaMemcpyDeviceToHost;
    cudaEvent_t start = NULL, stop = NULL;
    cudaError_t err = cudaSuccess;
    *step = NULL;

    COPY_TRY("cudaEventCreate", cudaEventCreate(&start));
    COPY_TRY("cudaEventCreate", cudaEventCreate(&stop));
    COPY_TRY("cudaMalloc (copy source)", cudaMalloc(d2d || to_device ? &dst : &src, bytes));
    if (d2d) COPY_TRY("cudaMalloc (copy destination)", cudaMalloc(&src, bytes));
    else COPY_TRY("cudaHostAlloc", pinned_alloc(&host, bytes));
    if (!d2d) *(to_device ? &src : &dst) = host;
    if (to_device) memset(src, 1, bytes);
    else COPY_TRY("cudaMemset", cudaMemset(src, 1, bytes));
    for (int i = 0; i < warmup + repeat; ++i) {
        if (flush_l2 && i >= warmup) COPY_TRY("the L2 flush before a timed copy", tm_flush_l2(i));
        COPY_TRY("cudaEventRecord", cudaEventRecord(start, 0));
        COPY_TRY("cudaMemcpy", cudaMemcpy(dst, src, bytes, direction));
        COPY_TRY("cudaEventRecord", cudaEventRecord(stop, 0));
        double ms = 0;
        COPY_TRY("timing the copy", tm_elapsed_ms(start, stop, &ms));
        if (i >= warmup) samples_ms[i - warmup] = ms;
    }
cleanup:
    if (src && src != host) cudaFree(src);
    if (dst && dst != host) cudaFree(dst);
    if (host) pinned_free(host);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (err != cudaSuccess) (void)cudaGetLastError();
    *err_out = err;
    return err == cudaSuccess ? 0 : -1;
}
