/* staging.c: NumPy arrays live in pageable host memory, which the GPU copies from slowly
 * (about 9 GB/s in, 4 GB/s out on an H100 machine) while pinned memory moves about 55 GB/s.
 * Copies of large arrays therefore go through a small ring of pinned staging buffers: the
 * host copies one chunk into pinned memory (with several threads: one thread's memcpy is
 * slower than the PCIe link) while the DMA engine moves the previous chunk. The buffers
 * are reused across calls from a pool guarded by a mutex.
 *
 * On the emulator "device" memory is host memory and cudaMemcpy is a memcpy: no staging. */
#include "glue.h"
#include <pthread.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define STAGING_CHUNK_BYTES ((size_t)8 << 20) /* per DMA: large enough to reach full speed */
#define STAGING_RING 3                          /* chunks in flight per copy */
#define STAGING_POOL_MAX 6                      /* buffers kept between calls (48 MiB) */
#define STAGING_MIN_BYTES ((size_t)1 << 20)     /* smaller copies go direct */
#define MEMCPY_THREADS_MAX 8

#ifndef TM_EMU
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static void *pool[STAGING_POOL_MAX];
static int pool_count;

static cudaError_t staging_acquire(void **buffer)
{
    pthread_mutex_lock(&pool_lock);
    *buffer = pool_count > 0 ? pool[--pool_count] : NULL;
    pthread_mutex_unlock(&pool_lock);
    if (*buffer) return cudaSuccess;
    return cudaHostAlloc(buffer, STAGING_CHUNK_BYTES, cudaHostAllocDefault);
}

static void staging_release(void *buffer)
{
    if (buffer == NULL) return;
    pthread_mutex_lock(&pool_lock);
    if (pool_count < STAGING_POOL_MAX) {
        pool[pool_count++] = buffer;
        buffer = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    if (buffer) cudaFreeHost(buffer);
}

/* memcpy with several threads: pageable-to-pinned copies are bound by one core's memcpy. */
static void parallel_memcpy(void *dst, const void *src, size_t bytes)
{
#ifdef _OPENMP
    int threads = omp_get_max_threads();
    if (threads > MEMCPY_THREADS_MAX) threads = MEMCPY_THREADS_MAX;
    const size_t part = (bytes / (size_t)threads + 63) & ~(size_t)63;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
        size_t begin = (size_t)t * part;
        if (begin < bytes) {
            size_t n = bytes - begin < part ? bytes - begin : part;
            memcpy((char *)dst + begin, (const char *)src + begin, n);
        }
    }
#else
    memcpy(dst, src, bytes);
#endif
}

/* One pipelined copy between pageable host memory and the device. */
static cudaError_t staged_copy(void *dst, const void *src, size_t bytes, int to_device)
{
    void *ring[STAGING_RING] = {NULL};
    cudaEvent_t done[STAGING_RING] = {NULL};
    size_t pending_offset[STAGING_RING], pending_bytes[STAGING_RING] = {0};
    cudaError_t err = cudaSuccess;
    const size_t chunks = (bytes + STAGING_CHUNK_BYTES - 1) / STAGING_CHUNK_BYTES;

    for (int i = 0; i < STAGING_RING && err == cudaSuccess; ++i) {
        err = staging_acquire(&ring[i]);
        if (err == cudaSuccess) err = cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming);
    }
    for (size_t c = 0; c < chunks && err == cudaSuccess; ++c) {
        const int slot = (int)(c % STAGING_RING);
        const size_t offset = c * STAGING_CHUNK_BYTES;
        const size_t n = bytes - offset < STAGING_CHUNK_BYTES ? bytes - offset : STAGING_CHUNK_BYTES;
        /* The slot's previous DMA must be finished before its buffer is reused. */
        if ((err = cudaEventSynchronize(done[slot])) != cudaSuccess) break;
        if (!to_device && pending_bytes[slot]) { /* drain the chunk this slot brought back */
            parallel_memcpy((char *)dst + pending_offset[slot], ring[slot], pending_bytes[slot]);
            pending_bytes[slot] = 0;
        }
        if (to_device) {
            parallel_memcpy(ring[slot], (const char *)src + offset, n);
            err = cudaMemcpyAsync((char *)dst + offset, ring[slot], n, cudaMemcpyHostToDevice, 0);
        } else {
            err = cudaMemcpyAsync(ring[slot], (const char *)src + offset, n, cudaMemcpyDeviceToHost, 0);
            pending_offset[slot] = offset;
            pending_bytes[slot] = n;
        }
        if (err == cudaSuccess) err = cudaEventRecord(done[slot], 0);
    }
    /* Drain the ring in chunk order (also on the error path, so no DMA still targets a
     * buffer when it goes back to the pool). */
    for (size_t c = chunks > STAGING_RING ? chunks - STAGING_RING : 0; c < chunks; ++c) {
        const int slot = (int)(c % STAGING_RING);
        if (done[slot] == NULL) continue;
        cudaError_t sync = cudaEventSynchronize(done[slot]);
        if (err == cudaSuccess) err = sync;
        if (err == cudaSuccess && !to_device && pending_bytes[slot])
            parallel_memcpy((char *)dst + pending_offset[slot], ring[slot], pending_bytes[slot]);
    }
    for (int i = 0; i < STAGING_RING; ++i) {
        if (done[i]) cudaEventDestroy(done[i]);
        staging_release(ring[i]);
    }
    return err;
}
#endif

cudaError_t tm_copy_to_device(void *dst, const void *src, size_t bytes)
{
#ifndef TM_EMU
    if (bytes >= STAGING_MIN_BYTES) return staged_copy(dst, src, bytes, 1);
#endif
    return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}

cudaError_t tm_copy_to_host(void *dst, const void *src, size_t bytes)
{
#ifndef TM_EMU
    if (bytes >= STAGING_MIN_BYTES) return staged_copy(dst, src, bytes, 0);
#endif
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}
