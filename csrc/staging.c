/* staging.c: NumPy arrays live in pageable host memory, which the GPU copies from slowly
 * (about 9 GB/s in, 4 GB/s out on an H100 machine) while pinned memory moves about 55 GB/s.
 * Copies of large arrays therefore go through a small ring of pinned staging buffers: the
 * host copies one chunk into pinned memory (with several threads: one thread's memcpy is
 * slower than the PCIe link) while the DMA engine moves the previous chunks. All host inputs
 * of a call stream through one pipeline (staging_pipeline.h), so it fills and drains once per
 * call. The buffers are reused across calls from a pool guarded by a mutex.
 *
 * On the emulator "device" memory is host memory and cudaMemcpy is a memcpy: no staging. */
#include "glue.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__GLIBC__)
#include <malloc.h> /* malloc_usable_size */
#endif
#include <unistd.h>
#ifndef TM_EMU
#include "staging_pipeline.h"
#include "emu/host_memory.h"
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* The pipeline's tunables: to be set from benchmarks/staging_probe.cu's results on the H100
 * machine (its SUMMARY: the best rows, and the best score per setting; scores move by about 5
 * points between runs). Measured 2026-11 (H100 SXM VM, 16 cores, glibc 2.39), 2 x 64 / 2 x 256 MiB
 * against pinned cudaMemcpy. Session 2, three runs: one pipeline for all inputs, memcpy, 16 MiB
 * chunks, 16 threads: 88-89% / 97% (before issue 8, a pipeline per array: 72-79% / 87-90%).
 * memcpy beats non-temporal stores (77-88% at best): the ring stays in the CPU's last-level
 * cache, where the DMA engine reads it. Ramped first chunks measured no better than fixed ones.
 * Session 3, two runs: 8 threads score 89-93% against 86-91% for 16, and memcpy in pieces
 * taken in turn (TM_COPY_LIBC_PIECES) 93% against 91% with one share per thread. Inside a Python
 * process the difference is larger than in the probe: with 16 threads on 16 cores, calls whose
 * memcpy shared cores with other threads (NumPy's BLAS pool after a numpy.matmul) ran at half
 * or a third of the speed (5 of 6 calls); with 8 threads in pieces, 1 of 6. */
#define STAGING_CHUNK_BYTES ((size_t)8 << 20)        /* steady chunk, and each buffer's size */
#define STAGING_FIRST_CHUNK_BYTES ((size_t)8 << 20)  /* first chunk; doubles up to the above */
#define STAGING_RING 4                               /* buffers, so chunks in flight */
#define STAGING_THREADS 8                            /* memcpy threads at most */
#define STAGING_COPY_KIND TM_COPY_LIBC_PIECES        /* into the buffers: memcpy in pieces */

#define STAGING_POOL_MAX STAGING_RING           /* buffers kept between calls: one call's */
#define STAGING_MIN_BYTES ((size_t)1 << 20)     /* smaller copies go direct */
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

/* Copies between pageable host memory and the device, all through one pipelined ring. */
static cudaError_t staged_copy(const tm_staging_item *items, int n_items, int to_device)
{
    void *ring[STAGING_RING] = {NULL};
    cudaEvent_t done[STAGING_RING] = {NULL};
    cudaError_t err = cudaSuccess;
    tm_staging_plan plan = {STAGING_FIRST_CHUNK_BYTES, STAGING_CHUNK_BYTES, STAGING_RING,
                            STAGING_THREADS, STAGING_COPY_KIND};
#ifdef _OPENMP
    if (omp_get_max_threads() < plan.threads) plan.threads = omp_get_max_threads();
#else
    plan.threads = 1;
#endif

    for (int i = 0; i < STAGING_RING && err == cudaSuccess; ++i) {
        err = staging_acquire(&ring[i]);
        if (err == cudaSuccess) err = cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming);
    }
    if (err == cudaSuccess)
        err = tm_staged_pipeline(&plan, ring, done, items, n_items, to_device, 0);
    for (int i = 0; i < STAGING_RING; ++i) {
        if (done[i]) cudaEventDestroy(done[i]);
        staging_release(ring[i]);
    }
    return err;
}
#endif

#ifndef TM_EMU
/* Whether host memory [host, host + bytes) is pinned, so that it is copied directly, at full
 * speed, without staging: cudaHostAlloc'd (a tiledmm output; CuPy's or PyTorch's pinned
 * buffers) or registered (an input pinned in place, tm_pin_input). Both ends are asked: a
 * registration need not cover a whole allocation, and the driver refuses (cudaErrorInvalidValue)
 * a direct copy that starts inside a registered range and runs past its end. */
static int is_pinned(const void *host, size_t bytes)
{
    const char *const ends[2] = {host, (const char *)host + (bytes ? bytes - 1 : 0)};
    for (int e = 0; e < 2; ++e) {
        struct cudaPointerAttributes attr;
        if (cudaPointerGetAttributes(&attr, ends[e]) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        if (attr.type != cudaMemoryTypeHost) return 0;
    }
    return 1;
}
#endif

cudaError_t tm_copy_many_to_device(int n, void *const dst[], const void *const src[],
                                   const size_t bytes[])
{
    cudaError_t err = cudaSuccess;
#ifndef TM_EMU
    tm_staging_item staged[TM_COPY_MANY_MAX];
    int n_staged = 0;
#endif
    if (n > TM_COPY_MANY_MAX) return cudaErrorInvalidValue;
    for (int i = 0; i < n && err == cudaSuccess; ++i) {
#ifndef TM_EMU
        if (bytes[i] >= STAGING_MIN_BYTES && !is_pinned(src[i], bytes[i])) {
            staged[n_staged].dst = dst[i];
            staged[n_staged].src = src[i];
            staged[n_staged++].bytes = bytes[i];
            continue;
        }
#endif
        if (bytes[i]) err = cudaMemcpy(dst[i], src[i], bytes[i], cudaMemcpyHostToDevice);
    }
#ifndef TM_EMU
    if (err == cudaSuccess && n_staged) err = staged_copy(staged, n_staged, 1);
#endif
    return err;
}

cudaError_t tm_copy_to_device(void *dst, const void *src, size_t bytes)
{
    return tm_copy_many_to_device(1, &dst, &src, &bytes);
}

cudaError_t tm_copy_to_host(void *dst, const void *src, size_t bytes)
{
#ifndef TM_EMU
    if (bytes >= STAGING_MIN_BYTES && !is_pinned(dst, bytes)) {
        const tm_staging_item item = {dst, src, bytes};
        return staged_copy(&item, 1, 0);
    }
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
typedef struct {
    void *ptr;
    size_t bytes;
} pinned_block;

static pinned_block pinned_cache[PINNED_CACHE_BLOCKS];
static int pinned_cached;
static size_t pinned_in_use; /* bytes held by arrays and by the cache */

/* A quarter of what the process can ever have (host_memory.h: physical memory, or the cgroup
 * limit of a container, which may be far lower: pinned pages cannot be reclaimed). */
static size_t pinned_limit(void)
{
    const tm_host_memory_limits *limits = tm_host_memory_limits_get();
    const char *env = getenv("TILEDMM_PINNED_MB");
    if (env && *env) return (size_t)strtoull(env, NULL, 10) << 20;
    return limits != NULL && limits->limit ? (size_t)(limits->limit / 4) : (size_t)1 << 30;
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
        memmove(&pinned_cache[0], &pinned_cache[1],
                sizeof(pinned_block) * (PINNED_CACHE_BLOCKS - 1));
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

/* ---- Large NumPy inputs pinned in place ----
 * Staging makes the host's memory move each byte three or four times (the array read, the
 * ring written, the ring read by the DMA engine), so on a busy machine it falls well short of
 * pinned bandwidth: 72-78% for one 64-256 MiB array on the H100 VM, where the same array
 * registered with cudaHostRegister copied at 98-100% (benchmarks/register_probe.cu). But
 * registering costs more than the copy it saves (64 MiB: 1.8 ms to register and 1.5 ms to
 * unregister, against 1.2 ms to copy), so it pays only for an array that is used again. An
 * input is therefore registered the SECOND time a call sees it (as in a loop, a benchmark, a
 * training step) and stays registered while it lives.
 *
 * Safety: only memory that a NumPy array owns is registered, and the registration ends before
 * that memory is freed: a weak reference to the owning array calls unpin_callback, which NumPy
 * runs from the array's dealloc before it frees the data. While a weak reference exists NumPy
 * refuses to resize the array in place (ndarray.resize raises ValueError, as for any weakly
 * referenced array), so the registered pages stay the array's own pages for its lifetime.
 * Registration is by whole pages, so only arrays that have their pages to themselves are
 * registered (owning_array says which). Registered bytes count against the same bound as
 * pinned outputs. TILEDMM_PIN_INPUTS=0 turns this off (every large input is staged). The table
 * is read and written under pool_lock; Python calls (weak references, the callback's decref)
 * are made outside it. */
#define PIN_MIN_BYTES STAGING_MIN_BYTES
#define PIN_TRACKED_MAX 64 /* arrays tracked at once; past that, inputs are staged */

enum { PIN_SEEN = 0, PIN_REGISTERING = 1, PIN_REGISTERED = 2, PIN_REFUSED = 3 };

typedef struct {
    PyObject *owner;   /* borrowed: the entry goes when the owner dies */
    PyObject *weakref; /* owned: its callback is unpin_callback */
    void *base;        /* the page-aligned range that is (or would be) registered */
    size_t len;
    int state;
} pin_entry;

static pin_entry pin_table[PIN_TRACKED_MAX];
static int pin_count;

static int pin_index(PyObject *owner, PyObject *weakref) /* call under pool_lock */
{
    for (int i = 0; i < pin_count; ++i)
        if (owner ? pin_table[i].owner == owner : pin_table[i].weakref == weakref) return i;
    return -1;
}

/* The owner died: end its registration before NumPy frees the memory. */
static PyObject *unpin_callback(PyObject *self, PyObject *weakref)
{
    pin_entry entry = {NULL, NULL, NULL, 0, PIN_SEEN};
    (void)self;
    pthread_mutex_lock(&pool_lock);
    const int i = pin_index(NULL, weakref);
    if (i >= 0) {
        entry = pin_table[i];
        pin_table[i] = pin_table[--pin_count];
    }
    pthread_mutex_unlock(&pool_lock);
    if (entry.state == PIN_REGISTERED) {
        if (cudaHostUnregister(entry.base) != cudaSuccess) (void)cudaGetLastError();
        pthread_mutex_lock(&pool_lock);
        pinned_in_use -= entry.len;
        pthread_mutex_unlock(&pool_lock);
    }
    Py_XDECREF(entry.weakref); /* the caller holds its own reference to weakref */
    Py_RETURN_NONE;
}

static PyMethodDef unpin_def = {"_tiledmm_unpin", unpin_callback, METH_O, NULL};
static PyObject *unpin_function; /* created once, under the GIL */

/* The NumPy array whose memory `a` uses, and the page-aligned range around that memory, when
 * registering the range can disturb no one else; NULL otherwise (then `a` is staged).
 * Registration is by whole pages, and the driver refuses a direct copy that starts inside a
 * registered range and runs past it, so no other allocation may START in the range's last page
 * (a neighbour's copy by any library would fail). Views of the array and allocations that end
 * in the first page lie wholly inside the range: their copies are fine. So the memory must be
 * NumPy's own allocation (the default allocator, which is malloc) of contiguous bytes, and
 * malloc's next chunk must begin past the last page: true of large arrays, which glibc maps
 * on their own (mmap), false of arrays packed in the heap, which are not pinned. */
static PyArrayObject *owning_array(PyArrayObject *a, uintptr_t *lo, uintptr_t *hi)
{
    PyArrayObject *owner = a;
    while (PyArray_BASE(owner) && PyArray_Check(PyArray_BASE(owner)))
        owner = (PyArrayObject *)PyArray_BASE(owner);
    if (!PyArray_CHKFLAGS(owner, NPY_ARRAY_OWNDATA) ||
        !(PyArray_IS_C_CONTIGUOUS(owner) || PyArray_IS_F_CONTIGUOUS(owner)))
        return NULL;
    char *const begin = PyArray_DATA(owner), *const end = begin + PyArray_NBYTES(owner);
    const char *data = PyArray_DATA(a);
    if (data < begin || data + PyArray_NBYTES(a) > end) return NULL;
#if defined(__GLIBC__)
    PyObject *handler_capsule = PyArray_HANDLER(owner);
    const PyDataMem_Handler *handler =
        handler_capsule ? PyCapsule_GetPointer(handler_capsule, "mem_handler") : NULL;
    if (handler == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (strcmp(handler->name, "default_allocator") != 0) return NULL;
    const long page = sysconf(_SC_PAGESIZE);
    const uintptr_t mask = (uintptr_t)(page > 0 ? page : 4096) - 1;
    *lo = (uintptr_t)begin & ~mask;
    *hi = ((uintptr_t)end + mask) & ~mask;
    /* malloc_usable_size: bytes usable from begin; the next chunk's memory starts a header
     * (2 words) later, of which the first word is still ours. */
    if ((uintptr_t)begin + malloc_usable_size(begin) + sizeof(size_t) < *hi) return NULL;
    return owner;
#else
    (void)lo;
    (void)hi;
    return NULL; /* other C libraries: how malloc packs memory is not known here */
#endif
}

double tm_pin_input(PyArrayObject *a)
{
    static int enabled = -1;
    if (enabled < 0) {
        const char *env = getenv("TILEDMM_PIN_INPUTS");
        enabled = !(env && strcmp(env, "0") == 0);
    }
    const size_t bytes = (size_t)PyArray_NBYTES(a);
    if (!enabled || bytes < PIN_MIN_BYTES || is_pinned(PyArray_DATA(a), bytes)) return 0.0;
    uintptr_t lo = 0, hi = 0;
    PyArrayObject *owner = owning_array(a, &lo, &hi);
    if (owner == NULL) return 0.0;

    pthread_mutex_lock(&pool_lock);
    int i = pin_index((PyObject *)owner, NULL);
    if (i >= 0 && pin_table[i].state == PIN_SEEN) {
        /* Second sighting: register, if the bound on pinned memory allows. */
        const int fits = pinned_in_use + (hi - lo) <= pinned_limit();
        pin_table[i].state = fits ? PIN_REGISTERING : PIN_REFUSED;
        if (fits) pinned_in_use += hi - lo;
        pthread_mutex_unlock(&pool_lock);
        if (!fits) return 0.0;
        struct timespec t0, t1;
        cudaError_t err;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        Py_BEGIN_ALLOW_THREADS /* the caller's reference to `a` keeps the owner alive */
            err = cudaHostRegister((void *)lo, hi - lo, cudaHostRegisterDefault);
        Py_END_ALLOW_THREADS clock_gettime(CLOCK_MONOTONIC, &t1);
        if (err != cudaSuccess) (void)cudaGetLastError(); /* e.g. a page already registered */
        pthread_mutex_lock(&pool_lock);
        if ((i = pin_index((PyObject *)owner, NULL)) >= 0)
            pin_table[i].state = err == cudaSuccess ? PIN_REGISTERED : PIN_REFUSED;
        if (err != cudaSuccess) pinned_in_use -= hi - lo;
        pthread_mutex_unlock(&pool_lock);
        return (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
    }
    const int track = i < 0 && pin_count < PIN_TRACKED_MAX;
    pthread_mutex_unlock(&pool_lock);
    if (!track) return 0.0;

    /* First sighting: remember the owner (weakly), stage this time. */
    if (unpin_function == NULL && (unpin_function = PyCFunction_New(&unpin_def, NULL)) == NULL) {
        PyErr_Clear();
        return 0.0;
    }
    PyObject *weakref = PyWeakref_NewRef((PyObject *)owner, unpin_function);
    if (weakref == NULL) { /* cannot happen for ndarrays; then simply not pinned */
        PyErr_Clear();
        return 0.0;
    }
    pthread_mutex_lock(&pool_lock);
    const int added = pin_index((PyObject *)owner, NULL) < 0 && pin_count < PIN_TRACKED_MAX;
    if (added)
        pin_table[pin_count++] =
            (pin_entry){(PyObject *)owner, weakref, (void *)lo, hi - lo, PIN_SEEN};
    pthread_mutex_unlock(&pool_lock);
    if (!added) Py_DECREF(weakref); /* another thread tracked it meanwhile */
    return 0.0;
}

int tm_pinned_inputs(void)
{
    int n = 0;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < pin_count; ++i)
        n += pin_table[i].state == PIN_REGISTERED;
    pthread_mutex_unlock(&pool_lock);
    return n;
}
#endif

#ifdef TM_EMU
double tm_pin_input(PyArrayObject *a)
{
    (void)a; /* the emulator's device memory is host memory: nothing to pin */
    return 0.0;
}

int tm_pinned_inputs(void)
{
    return 0;
}
#endif

PyArrayObject *tm_new_output_array(int ndim, const npy_intp *shape, int typenum)
{
#ifndef TM_EMU
    const size_t bytes =
        (size_t)PyArray_MultiplyList((npy_intp *)shape, ndim) * (typenum == NPY_FLOAT32 ? 4 : 8);
    if (bytes >= PINNED_OUTPUT_MIN_BYTES) {
        pinned_block *block = PyMem_Malloc(sizeof(*block));
        if (block == NULL) return (PyArrayObject *)PyErr_NoMemory();
        *block = pinned_take(bytes);
        if (block->ptr) {
            PyObject *base =
                PyCapsule_New(block, "tiledmm.pinned_block", pinned_capsule_destructor);
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
