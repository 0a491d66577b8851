/* timing.c: registry kernels on the timed-launch core (launch_core.h), and the reference
 * copies bench compares with. No Python here: tm_execute is called without the GIL, and
 * result.c turns its job into Python objects. */
#include "glue.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What the core's callbacks of one registry call share. */
typedef struct {
    tm_job *job;
    tm_problem device_problem; /* the job's problem with device pointers */
    tm_launch_buffer *in[TM_MAX_INPUTS], *out, *scratch;
} registry_call;

/* After allocation: the kernel reads the device buffers. */
static cudaError_t registry_prepare(void *ctx, const char **step)
{
    registry_call *c = ctx;
    (void)step;
    c->device_problem.in0 = c->in[0]->dev;
    c->device_problem.in1 = c->in[1] ? c->in[1]->dev : NULL;
    c->device_problem.out = c->out->dev;
    c->device_problem.scratch = c->scratch->dev;
    return cudaSuccess;
}

static cudaError_t registry_launch(void *ctx, tm_launch_facts *facts)
{
    registry_call *c = ctx;
    return (cudaError_t)c->job->spec->launch(&c->device_problem, facts);
}

int tm_execute(tm_job *job)
{
    const tm_kernel_spec *spec = job->spec;
    tm_launch_buffer buffers[TM_MAX_INPUTS + 2];
    registry_call call = {job, job->problem, {NULL, NULL}, NULL, NULL};
    tm_launch_request request = {0};
    const void *h_in[TM_MAX_INPUTS] = {job->problem.in0, job->problem.in1};
    int n = 0, rc;

    memset(buffers, 0, sizeof buffers);
    /* The launcher's choices and the byte model (res.model_bytes) read this one count. */
    if (job->problem.sm_count <= 0) {
        cudaError_t err = tm_current_sm_count(&job->problem.sm_count);
        if (err != cudaSuccess) {
            job->failure.err = err;
            job->failure.step = "cudaDeviceGetAttribute (multiprocessors)";
            (void)cudaGetLastError();
            return -1;
        }
    }
    call.device_problem.sm_count = job->problem.sm_count;
    for (int i = 0; i < job->n_inputs; ++i) {
        tm_launch_buffer *b = call.in[i] = &buffers[n++];
        b->bytes = job->in_bytes[i];
        if (job->in_on_device[i]) {
            b->dev = (void *)h_in[i]; /* device inputs are not ours */
            b->wait = job->in_wait[i];
            b->stream = job->in_stream[i];
        } else {
            b->host_in = h_in[i];
            b->step = "cudaMalloc (input)";
        }
    }
    call.out = &buffers[n++];
    call.out->bytes = job->out_bytes;
    call.out->allocate = 1;
    call.out->keep = job->out_on_device; /* a DeviceArray's: the caller owns it after */
    call.out->host_out = job->out_on_device ? NULL : job->problem.out;
    call.out->step = "cudaMalloc (output)";
    call.scratch = &buffers[n++];
    call.scratch->allocate = 1;
    call.scratch->bytes =
        spec->scratch_bytes ? (size_t)spec->scratch_bytes(&call.device_problem) : 0;
    call.scratch->step = "cudaMalloc (scratch)";

    request.launch = registry_launch;
    request.prepare = registry_prepare;
    request.ctx = &call;
    request.buffers = buffers;
    request.n_buffers = n;
    request.warmup = job->warmup;
    request.repeat = job->repeat;
    request.flush_l2 = job->flush_l2;
    request.pin_ms = job->pin_ms;
    request.facts_required = 1;
    request.facts_cacheable = 1; /* the registry's kernels live as long as the module */
    rc = tm_timed_launch(&request, &job->record, &job->facts, &job->failure);
    if (rc == 0) {
        if (job->out_on_device) job->device_out = call.out->dev;
#ifdef TM_EMU
        if (job->facts.launches > 0) {
            snprintf(job->record.path, sizeof job->record.path, "%s", tm_emu_last_launch_path());
            snprintf(job->record.path_reason, sizeof job->record.path_reason, "%s",
                     tm_emu_last_launch_reason());
        }
#endif
    }
    return rc;
}

void tm_job_free(tm_job *job)
{
    tm_launch_record_free(&job->record);
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
    const enum cudaMemcpyKind direction = d2d         ? cudaMemcpyDeviceToDevice
                                          : to_device ? cudaMemcpyHostToDevice
                                                      : cudaMemcpyDeviceToHost;
    cudaEvent_t start = NULL, stop = NULL;
    cudaError_t err = cudaSuccess;
    *step = NULL;

    COPY_TRY("cudaEventCreate", cudaEventCreate(&start));
    COPY_TRY("cudaEventCreate", cudaEventCreate(&stop));
    COPY_TRY("cudaMalloc (copy source)", cudaMalloc(d2d || to_device ? &dst : &src, bytes));
    if (d2d)
        COPY_TRY("cudaMalloc (copy destination)", cudaMalloc(&src, bytes));
    else
        COPY_TRY("cudaHostAlloc", pinned_alloc(&host, bytes));
    if (!d2d) *(to_device ? &src : &dst) = host;
    if (to_device)
        memset(src, 1, bytes);
    else
        COPY_TRY("cudaMemset", cudaMemset(src, 1, bytes));
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
