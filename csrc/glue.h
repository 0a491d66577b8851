/* glue.h: what the C glue files share. The same sources build both backends
 * (tiledmm._cuda and tiledmm._emu); TM_EMU selects the emulator's runtime. */
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tm_ARRAY_API
#ifndef TM_MODULE_INIT_FILE
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "runtime.h"
#include "registry.h"

#define TM_MAX_INPUTS 2

/* One call of one kernel: filled from Python objects with the GIL, executed without it. */
typedef struct {
    const tm_kernel_spec *spec;
    tm_problem problem;                 /* in0/in1/out hold HOST pointers until execution */
    size_t in_bytes[TM_MAX_INPUTS];
    int in_on_device[TM_MAX_INPUTS];    /* the pointer is device memory: no allocation, no copy */
    int n_inputs;
    size_t out_bytes;
    int out_on_device;                  /* keep the output on the device (job->device_out) */
    int out_ndim, out_typenum;
    npy_intp out_shape[NPY_MAXDIMS];
    int warmup, repeat;
    int flush_l2;                       /* write the L2 flush buffer before each timed launch */
    const char *l2;                     /* what was done about L2 (tm_l2_state), for Timing.l2 */

    /* filled by tm_execute */
    tm_launch_facts facts;
    const char *launch_path;            /* emu: how the last launch ran (Launch.path); cuda: "" */
    char launch_reason[160];            /* emu: why fibers, where a split was refused; else "" */
    double h2d_ms, d2h_ms;             /* h2d_ms includes pin_ms */
    double pin_ms;                      /* host time pinning inputs in place (tm_prepare_job) */
    double *samples_ms;                 /* repeat entries, owned by the job */
    int registers;                      /* per thread; 0 where the backend cannot tell */
    int static_shared_bytes;            /* as the compiler reports it; 0 where unknown */
    int blocks_per_sm;
    double occupancy;                   /* resident threads / max threads per SM */
    void *device_out;                   /* out_on_device: the output, owned by the caller now */
    cudaError_t err;
    const char *failed_step;            /* which step failed, for the message */
    size_t failed_bytes;                /* the allocation size, when a cudaMalloc failed */
} tm_job;

/* arrays.c */
const tm_kernel_spec *tm_find_kernel(const char *name);
int tm_parse_params(const tm_kernel_spec *spec, const char *fn, PyObject *params, int *values);
int tm_prepare_job(tm_job *job, const char *fn, PyObject *inputs, PyObject *device_ptrs,
                   PyObject *params, PyArrayObject *arrays[TM_MAX_INPUTS], PyArrayObject **out);

/* staging.c: host<->device copies of pageable memory through pinned staging buffers.
 * tm_copy_many_to_device copies n (at most TM_MAX_INPUTS: a call's inputs) host buffers to
 * the device, the large pageable ones through one staging pipeline. */
cudaError_t tm_copy_many_to_device(int n, void *const dst[], const void *const src[],
                                   const size_t bytes[]);
cudaError_t tm_copy_to_device(void *dst, const void *src, size_t bytes);
cudaError_t tm_copy_to_host(void *dst, const void *src, size_t bytes);
PyArrayObject *tm_new_output_array(int ndim, const npy_intp *shape, int typenum);
/* Pin a large NumPy input in place the second time a call sees it (with the GIL); returns the
 * milliseconds spent registering it (0 when nothing was done). tm_pinned_inputs: how many
 * arrays are registered now. */
double tm_pin_input(PyArrayObject *a);
int tm_pinned_inputs(void);

/* device.c: device buffers owned by Python capsules, DLPack */
PyObject *tm_device_buffer_capsule(void *ptr);
PyObject *tm_dlpack_py(PyObject *self, PyObject *args);
PyObject *tm_upload_py(PyObject *self, PyObject *args);
PyObject *tm_download_py(PyObject *self, PyObject *args);
PyObject *tm_upload_into_py(PyObject *self, PyObject *args);
PyObject *tm_host_memory_py(PyObject *self, PyObject *unused);
PyObject *tm_synchronize_py(PyObject *self, PyObject *unused);

/* Run `call`; on an error record it in `err`, name the step in `step_field`, and go to the
 * function's one cleanup label. */
#define TM_TRY(step_field, step, call)       \
    do {                                     \
        err = (call);                        \
        if (err != cudaSuccess) {            \
            (step_field) = (step);           \
            goto cleanup;                    \
        }                                    \
    } while (0)

/* timing.c */
cudaError_t tm_elapsed_ms(cudaEvent_t start, cudaEvent_t stop, double *ms);
/* The L2 flush before a timed launch (every timed launch of tm_execute and user_run): writes a
 * device buffer of twice the current device's L2 size on stream 0, to be enqueued BEFORE the
 * start event. A no-op on the emulator. tm_l2_state(flush): what Timing.l2 says ("flushed",
 * "warm", or "n/a on the emulator"). tm_release_l2_flush frees the buffers (module teardown,
 * mem_info, a failed allocation); the next flush allocates again. */
cudaError_t tm_flush_l2(int repeat_index);
const char *tm_l2_state(int flush);
void tm_release_l2_flush(void);
int tm_execute(tm_job *job);            /* call WITHOUT the GIL; returns 0 or -1 (job->err) */
void tm_release_pool_memory(void);      /* memory kept for later calls back to the driver */
void tm_job_free(tm_job *job);
int tm_copy_time(const char *kind, size_t bytes, int warmup, int repeat, int flush_l2,
                 double *samples_ms, cudaError_t *err, const char **step);
size_t job_h2d_bytes(const tm_job *job);
PyObject *tm_raise_job_error(const tm_job *job);
PyObject *tm_raise_cuda_error(cudaError_t err, const char *step);

/* user_kernels.c: kernels the user compiles at run time (tiledmm/user_kernels/kernel.py) */
PyObject *tm_user_run_py(PyObject *self, PyObject *args);
PyObject *tm_user_load_py(PyObject *self, PyObject *args);

/* result.c */
PyObject *tm_result_dict(const tm_job *job, PyObject *out);
PyObject *tm_device_properties(void);
/* The current device's multiprocessors (the emulator's: its worker threads), what the launch
 * choices of a call assume (tm_problem.sm_count). */
cudaError_t tm_current_sm_count(int *count);
PyObject *tm_registry_list(void);
