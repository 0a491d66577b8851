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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define STAGING_CHUNK_BYTES ((size_t)8 << 20) /* per DMA: large enough to reach full speed */
#define STAGING_RING 3                          /* chunks in flight per copy */
#define STAGING_POOL_MAX 6                      /* buffers kept between calls (48 MiB) */
#define STAGING_MIN_BYTES ((size_t)1 << 20)     /* smaller copies go direct */
#define MEMCPY_THREADS_MAX 16
#define PINNED_OUTPUT_MIN_BYTES ((size_t)1 << 20)  /* smaller outputs: plain NumPy arrays */
#define PINNED_CACHE_BLOCKS 8                     /* freed output blocks kept for reuse */

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
    /* Each thread's share: the ceiling of bytes / threads, rounded up to a cache line, so the
     * shares cover every byte (rounding the floor up could fall short of the end). */
    const size_t part = ((bytes + (size_t)threads - 1) / (size_t)threads + 63) & ~(size_t)63;
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

#ifndef TM_EMU
/* Whether host memory is pinned (a tiledmm output, cudaHostAlloc'd or registered memory):
 * such memory is copied directly, at full speed, without staging. */
static int is_pinned(const void *host)
{
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, host) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return attr.type == cudaMemoryTypeHost;
}
#endif

cudaError_t tm_copy_to_device(void *dst, const void *src, size_t bytes)
{
#ifndef TM_EMU
    if (bytes >= STAGING_MIN_BYTES && !is_pinned(src)) return staged_copy(dst, src, bytes, 1);
#endif
    return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}

cudaError_t tm_copy_to_host(void *dst, const void *src, size_t bytes)
{
#ifndef TM_EMU
    if (bytes >= STAGING_MIN_BYTES && !is_pinned(dst)) return staged_copy(dst, src, bytes, 0);
#endif
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}

/* ---- NumPy outputs in pinned memory ----
 * A fresh NumPy array's pages are first touched by the copy into it, so a device-to-host copy
 * into one runs at page-fault speed (about 11 GB/s measured on an H100 machine, against 55
 * from pinned memory). Large outputs are therefore NumPy arrays whose memory is pinned: the
 * copy lands at full speed, and the array's base (a capsule) gives the block back to a small
 * cache when the array dies, so the next call reuses it without pinning pages again (as
 * PyTorch's pinned allocator does). Pinned memory in use is bounded; past the bound outputs
 * are plain arrays again. */
#ifndef TM_EMU
typedef struct { void *ptr; size_t bytes; } pinned_block;

static pinned_block pinned_cache[PINNED_CACHE_BLOCKS];
static int pinned_cached;
static size_t pinned_in_use; /* bytes held by arrays and by the cache */

static size_t pinned_limit(void)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const char *env = getenv("TILEDMM_PINNED_MB");
    if (env && *env) return (size_t)strtoull(env, NULL, 10) << 20;
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page / 4 : (size_t)1 << 30;
}

/* A pinned block of at least `bytes` (a cached one of at most twice the size, else a new one);
 * NULL when none can be had within the bound. */
static pinned_block pinned_take(size_t bytes)
{
    pinned_block block = {NULL, 0};
    int best = -1;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < pinned_cached; ++i)
        if (pinned_cache[i].bytes >= bytes && pinned_cache[i].bytes <= 2 * bytes &&
            (best < 0 || pinned_cache[i].bytes < pinned_cache[best].bytes))
            best = i;
    if (best >= 0) {
        block = pinned_cache[best];
        memmove(&pinned_cache[best], &pinned_cache[best + 1],
                sizeof(pinned_block) * (size_t)(pinned_cached - best - 1)); /* keep age order */
        --pinned_cached;
    } else if (pinned_in_use + bytes <= pinned_limit()) {
        pinned_in_use += bytes; /* reserved before allocating, outside the lock */
        block.bytes = bytes;
    }
    pthread_mutex_unlock(&pool_lock);
    if (block.ptr == NULL && block.bytes) {
        if (cudaHostAlloc(&block.ptr, bytes, cudaHostAllocDefault) != cudaSuccess) {
            (void)cudaGetLastError(); /* no device, or no pinned memory left: plain arrays */
            pthread_mutex_lock(&pool_lock);
            pinned_in_use -= bytes;
            pthread_mutex_unlock(&pool_lock);
            block = (pinned_block){NULL, 0};
        }
    }
    return block;
}

/* Cache a freed block, newest last. A full cache drops its oldest block rather than the one
 * coming back: the size just used is the size most likely to be asked for next (a cache full
 * of other sizes would otherwise make every call pin its output afresh). */
static void pinned_give_back(pinned_block block)
{
    pinned_block evicted = {NULL, 0};
    pthread_mutex_lock(&pool_lock);
    if (pinned_cached == PINNED_CACHE_BLOCKS) {
        evicted = pinned_cache[0];
        memmove(&pinned_cache[0], &pinned_cache[1], sizeof(pinned_block) * (PINNED_CACHE_BLOCKS - 1));
        --pinned_cached;
        pinned_in_use -= evicted.bytes;
    }
    pinned_cache[pinned_cached++] = block;
    pthread_mutex_unlock(&pool_lock);
    if (evicted.ptr) cudaFreeHost(evicted.ptr);
}

static void pinned_capsule_destructor(PyObject *capsule)
{
    pinned_block *block = PyCapsule_GetPointer(capsule, "tiledmm.pinned_block");
    if (block) {
        pinned_give_back(*block);
        PyMem_Free(block);
    }
}
#endif

PyArrayObject *tm_new_output_array(int ndim, const npy_intp *shape, int typenum)
{
#ifndef TM_EMU
    const size_t bytes = (size_t)PyArray_MultiplyList((npy_intp *)shape, ndim) *
                         (typenum == NPY_FLOAT32 ? 4 : 8);
    if (bytes >= PINNED_OUTPUT_MIN_BYTES) {
        pinned_block *block = PyMem_Malloc(sizeof(*block));
        if (block == NULL) return (PyArrayObject *)PyErr_NoMemory();
        *block = pinned_take(bytes);
        if (block->ptr) {
            PyObject *base = PyCapsule_New(block, "tiledmm.pinned_block", pinned_capsule_destructor);
            if (base == NULL) {
                pinned_give_back(*block);
                PyMem_Free(block);
                return NULL;
            }
            PyArrayObject *a = (PyArrayObject *)PyArray_NewFromDescr(
                &PyArray_Type, PyArray_DescrFromType(typenum), ndim, (npy_intp *)shape, NULL,
                block->ptr, NPY_ARRAY_CARRAY, NULL);
            if (a == NULL || PyArray_SetBaseObject(a, base) < 0) { /* SetBase steals base */
                if (a == NULL) Py_DECREF(base);
                Py_XDECREF(a);
                return NULL;
            }
            return a;
        }
        PyMem_Free(block);
    }
#endif
    return (PyArrayObject *)PyArray_SimpleNew(ndim, (npy_intp *)shape, typenum);
}
