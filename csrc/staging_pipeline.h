/* staging_pipeline.h: the pipelined copy between pageable host memory and the device through a
 * ring of pinned staging buffers, and the multi-threaded memcpy (plain or with non-temporal
 * stores) that fills and empties the buffers. Shared by csrc/staging.c (the `cuda` backend,
 * with its tuned constants) and benchmarks/staging_probe.cu (which times this same code over a
 * grid of settings), so that the probe measures what ships.
 *
 * Plain C that also compiles as C++. The includer declares the CUDA runtime API first
 * (glue.h's runtime.h, or cuda_runtime.h); never included by the emulator build. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
/* Non-temporal stores: decided at compile time (x86-64 with GCC or Clang: SSE2 always, AVX2
 * where the CPU has it, chosen at run time); memcpy elsewhere. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TM_STREAM_STORES 1
#include <immintrin.h>
#endif

/* How the host copies into a staging buffer (copies out of one, device to host, use memcpy). */
enum {
    TM_COPY_LIBC = 0,        /* memcpy: ordinary stores, each destination line read first */
    TM_COPY_STREAM = 1,      /* non-temporal stores (AVX2 where the CPU has it, else SSE2) */
    TM_COPY_STREAM_SSE2 = 2, /* non-temporal 16-byte stores even where AVX2 exists (probe) */
    TM_COPY_LIBC_PIECES = 3 /* memcpy in TM_COPY_PIECE_BYTES pieces handed out as threads free up */
};

/* TM_COPY_LIBC_PIECES: why pieces. With one static share per thread a chunk is as slow as its
 * slowest thread, and with as many threads as cores one of them often shares its core with
 * another process's thread (NumPy's BLAS pool, the CUDA driver's): whole calls then ran at half
 * speed. Small pieces taken in turn let the other threads cover for a descheduled one. */
#define TM_COPY_PIECE_BYTES ((size_t)256 << 10)

#define TM_STAGING_RING_MAX 8

typedef struct {
    size_t first_chunk; /* the pipeline's first chunk; each next one doubles, up to `chunk` */
    size_t chunk; /* every later chunk, and the size of each ring buffer */
    int ring; /* staging buffers, so chunks in flight: 1 .. TM_STAGING_RING_MAX */
    int threads; /* host threads per chunk's memcpy */
    int copy_kind; /* host to device: TM_COPY_* into the staging buffers */
} tm_staging_plan;

/* One copy of a pipeline: device and host pointers, by direction. */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} tm_staging_item;

#ifdef TM_STREAM_STORES
/* Non-temporal copy of n bytes (a multiple of 64) to a 64-byte-aligned d; any alignment of s. */
static inline void tm_stream_body_sse2(char *d, const char *s, size_t n)
{
    for (; n; n -= 64, d += 64, s += 64) {
        const __m128i x0 = _mm_loadu_si128((const __m128i *)s);
        const __m128i x1 = _mm_loadu_si128((const __m128i *)(s + 16));
        const __m128i x2 = _mm_loadu_si128((const __m128i *)(s + 32));
        const __m128i x3 = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, x0);
        _mm_stream_si128((__m128i *)(d + 16), x1);
        _mm_stream_si128((__m128i *)(d + 32), x2);
        _mm_stream_si128((__m128i *)(d + 48), x3);
    }
}

__attribute__((target("avx2"))) static inline void tm_stream_body_avx2(char *d, const char *s,
                                                                       size_t n)
{
    for (; n >= 128; n -= 128, d += 128, s += 128) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)s);
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(s + 32));
        const __m256i x2 = _mm256_loadu_si256((const __m256i *)(s + 64));
        const __m256i x3 = _mm256_loadu_si256((const __m256i *)(s + 96));
        _mm256_stream_si256((__m256i *)d, x0);
        _mm256_stream_si256((__m256i *)(d + 32), x1);
        _mm256_stream_si256((__m256i *)(d + 64), x2);
        _mm256_stream_si256((__m256i *)(d + 96), x3);
    }
    if (n) { /* one 64-byte line left */
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)s);
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(s + 32));
        _mm256_stream_si256((__m256i *)d, x0);
        _mm256_stream_si256((__m256i *)(d + 32), x1);
    }
}
#endif

/* Whether TM_COPY_STREAM uses AVX2 on this machine (else SSE2, or memcpy off x86-64). */
static inline int tm_stream_uses_avx2(void)
{
#ifdef TM_STREAM_STORES
    return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

/* One thread's copy of `kind`. Streaming stores bypass the caches and skip the read of each
 * destination line that ordinary stores make (the staging buffer is read by the DMA engine,
 * never by this CPU); the unaligned head and the tail go through memcpy, and the sfence makes
 * the stores visible before the caller hands the buffer to the DMA engine. */
static inline void tm_copy_bytes(void *dst, const void *src, size_t bytes, int kind)
{
#ifdef TM_STREAM_STORES
    if (kind != TM_COPY_LIBC && bytes >= 4096) {
        char *d = (char *)dst;
        const char *s = (const char *)src;
        const size_t head = (size_t)(-(uintptr_t)d & 63);
        const size_t body = (bytes - head) & ~(size_t)63;
        memcpy(d, s, head);
        if (kind == TM_COPY_STREAM && tm_stream_uses_avx2())
            tm_stream_body_avx2(d + head, s + head, body);
        else
            tm_stream_body_sse2(d + head, s + head, body);
        memcpy(d + head + body, s + head + body, bytes - head - body);
        _mm_sfence();
        return;
    }
#endif
    (void)kind;
    memcpy(dst, src, bytes);
}

/* memcpy with `threads` threads (one core's copy is slower than the PCIe link): each thread's
 * share is the ceiling of bytes / threads rounded up to a cache line, so the shares cover every
 * byte (rounding the floor up could fall short of the end) and each starts 64-byte aligned
 * relative to dst. */
static inline void tm_parallel_copy(void *dst, const void *src, size_t bytes, int threads, int kind)
{
#ifdef _OPENMP
    if (threads > 1 && kind == TM_COPY_LIBC_PIECES) {
        const long long pieces =
            (long long)((bytes + TM_COPY_PIECE_BYTES - 1) / TM_COPY_PIECE_BYTES);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (long long p = 0; p < pieces; ++p) {
            const size_t begin = (size_t)p * TM_COPY_PIECE_BYTES;
            const size_t n =
                bytes - begin < TM_COPY_PIECE_BYTES ? bytes - begin : TM_COPY_PIECE_BYTES;
            memcpy((char *)dst + begin, (const char *)src + begin, n);
        }
        return;
    }
    if (threads > 1) {
        const size_t part = ((bytes + (size_t)threads - 1) / (size_t)threads + 63) & ~(size_t)63;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int t = 0; t < threads; ++t) {
            const size_t begin = (size_t)t * part;
            if (begin < bytes) {
                const size_t n = bytes - begin < part ? bytes - begin : part;
                tm_copy_bytes((char *)dst + begin, (const char *)src + begin, n, kind);
            }
        }
        return;
    }
#endif
    (void)threads;
    tm_copy_bytes(dst, src, bytes, kind);
}

/* Copy every item (host to device, or device to host) through ONE pipeline: the host fills
 * (or empties) one staging buffer while the DMA engine moves the others, and the items follow
 * each other through the same ring, so the pipeline fills and drains once per call, not once
 * per array. Chunks start at plan->first_chunk and double up to plan->chunk (a short first
 * chunk lets the first DMA start early). ring[plan->ring] are pinned buffers of plan->chunk
 * bytes and done[plan->ring] events (no timing), all idle; `stream` carries the copies.
 * Returns the first error; on every path it waits for each DMA it started before returning, so
 * no copy still targets a buffer the caller gives back. */
static inline cudaError_t tm_staged_pipeline(const tm_staging_plan *plan, void *const *ring,
                                             const cudaEvent_t *done, const tm_staging_item *items,
                                             int n_items, int to_device, cudaStream_t stream)
{
    char *pending_dst[TM_STAGING_RING_MAX] = {NULL}; /* device to host: where a slot's chunk goes */
    size_t pending_bytes[TM_STAGING_RING_MAX] = {0};
    const size_t depth = (size_t)plan->ring;
    size_t chunk =
        plan->first_chunk && plan->first_chunk < plan->chunk ? plan->first_chunk : plan->chunk;
    size_t issued = 0; /* chunks started, over all items */
    /* Out of the staging buffers always with ordinary stores (the destination is read next). */
    const int out_kind =
        plan->copy_kind == TM_COPY_LIBC_PIECES ? TM_COPY_LIBC_PIECES : TM_COPY_LIBC;
    cudaError_t err = cudaSuccess;

    for (int i = 0; i < n_items && err == cudaSuccess; ++i) {
        char *dst = (char *)items[i].dst;
        const char *src = (const char *)items[i].src;
        const size_t bytes = items[i].bytes;
        for (size_t offset = 0; offset < bytes && err == cudaSuccess;) {
            const int slot = (int)(issued % depth);
            const size_t n = bytes - offset < chunk ? bytes - offset : chunk;
            /* The slot's previous DMA must be finished before its buffer is reused. */
            if ((err = cudaEventSynchronize(done[slot])) != cudaSuccess) break;
            if (pending_bytes[slot]) { /* device to host: empty the chunk this slot brought back */
                tm_parallel_copy(pending_dst[slot], ring[slot], pending_bytes[slot], plan->threads,
                                 out_kind);
                pending_bytes[slot] = 0;
            }
            if (to_device) {
                tm_parallel_copy(ring[slot], src + offset, n, plan->threads, plan->copy_kind);
                err = cudaMemcpyAsync(dst + offset, ring[slot], n, cudaMemcpyHostToDevice, stream);
            } else {
                err = cudaMemcpyAsync(ring[slot], src + offset, n, cudaMemcpyDeviceToHost, stream);
                if (err == cudaSuccess) {
                    pending_dst[slot] = dst + offset;
                    pending_bytes[slot] = n;
                }
            }
            if (err == cudaSuccess) err = cudaEventRecord(done[slot], stream);
            ++issued;
            offset += n;
            if (chunk < plan->chunk) chunk = 2 * chunk < plan->chunk ? 2 * chunk : plan->chunk;
        }
    }
    /* Drain the ring in chunk order, also on the error path (without copying out then). */
    for (size_t c = issued > depth ? issued - depth : 0; c < issued; ++c) {
        const int slot = (int)(c % depth);
        const cudaError_t sync = cudaEventSynchronize(done[slot]);
        if (err == cudaSuccess) err = sync;
        if (err == cudaSuccess && pending_bytes[slot])
            tm_parallel_copy(pending_dst[slot], ring[slot], pending_bytes[slot], plan->threads,
                             out_kind);
    }
    return err;
}
