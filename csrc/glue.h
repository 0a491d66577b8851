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

#include <stdint.h>
#include "launch_core.h" /* runtime.h, registry.h: the device layer */

#define TM_MAX_INPUTS 2

/* One call of one kernel: filled from Python objects with the GIL, executed without it. */
typedef struct {
    const tm_kernel_spec *spec;
    tm_problem problem;                 /* in0/in1/out hold HOST pointers until execution */
    size_t in_bytes[TM_MAX_INPUTS];
    int in_on_device[TM_MAX_INPUTS];    /* the pointer is device memory: no allocation, no copy */
    int in_wait[TM_MAX_INPUTS];         /* device inputs: TM_WAIT_* (launch_core.h) */
    uintptr_t in_stream[TM_MAX_INPUTS]; /* TM_WAIT_STREAM: the producer's stream */
    int n_inputs;
    size_t out_bytes;
    int out_on_device;                  /* keep the output on the device (job->device_out) */
    int out_ndim, out_typenum;
    npy_intp out_shape[NPY_MAXDIMS];
    int warmup, repeat;
    int flush_l2;                       /* write the L2 flush buffer before each timed launch */
    double pin_ms;                      /* host time pinning inputs in place (tm_prepare_job) */

    /* filled by tm_execute */
    tm_launch_record record;            /* the raw launch result (result.c adds the job's own) */
    tm_launch_facts facts;
    void *device_out;                   /* out_on_device: the output (tm_device_alloc's), the
                                         * caller's now */
    tm_launch_failure failure;          /* what failed, for the message */
} tm_job;

/* arrays.c */
const tm_kernel_spec *tm_find_kernel(const char *name);
int tm_parse_params(const tm_kernel_spec *spec, const char *fn, PyObject *params, int *values);
int tm_prepare_job(tm_job *job, const char *fn, PyObject *inputs, PyObject *device_ptrs,
                   PyObject *params, PyArrayObject *arrays[TM_MAX_INPUTS], PyArrayObject **out);

/* staging.c (its copies are launch_core.h's): NumPy outputs in pinned memory, inputs pinned
 * in place. */
PyArrayObject *tm_new_output_array(int ndim, const npy_intp *shape, int typenum);
/* Pin a large NumPy input in place the second time a call sees it (with the GIL); returns the
 * milliseconds spent registering it (0 when nothing was done). tm_pinned_inputs: how many
 * arrays are registered now. */
double tm_pin_input(PyArrayObject *a);
int tm_pinned_inputs(void);

/* device.c: device buffers owned by Python capsules, DLPack. tm_device_buffer_capsule owns a
 * cudaMalloc'd buffer, tm_call_buffer_capsule one from tm_device_alloc (a call's output). */
PyObject *tm_device_buffer_capsule(void *ptr);
PyObject *tm_call_buffer_capsule(void *ptr);
PyObject *tm_dlpack_py(PyObject *self, PyObject *args);
PyObject *tm_upload_py(PyObject *self, PyObject *args);
PyObject *tm_download_py(PyObject *self, PyObject *args);
PyObject *tm_upload_into_py(PyObject *self, PyObject *args);
PyObject *tm_host_memory_py(PyObject *self, PyObject *unused);
PyObject *tm_synchronize_py(PyObject *self, PyObject *unused);

/* Run `call`; on an error record it in `err`, name the step in `step_field`, and go to the
 * function's one cleanup label. */
#define TM_TRY(step_field, step, call) \
    do {                               \
        err = (call);                  \
        if (err != cudaSuccess) {      \
            (step_field) = (step);     \
            goto cleanup;              \
        }                              \
    } while (0)

/* timing.c: registry kernels on the timed-launch core, and bench's reference copies */
int tm_execute(tm_job *job);            /* call WITHOUT the GIL; returns 0 or -1 (job->failure) */
void tm_job_free(tm_job *job);
int tm_copy_time(const char *kind, size_t bytes, int warmup, int repeat, int flush_l2,
                 double *samples_ms, cudaError_t *err, const char **step);

/* user_kernels.c: kernels the user compiles at run time (tiledmm/user_kernels/kernel.py) */
PyObject *tm_user_run_py(PyObject *self, PyObject *args);
PyObject *tm_user_load_py(PyObject *self, PyObject *args);

/* result.c: what a call returns to Python. The raw launch result's fields are one table
 * there: tm_launch_dict puts a record's into a dict, tm_raw_launch_fields lists them as
 * ((name, kind), ...) (the module's RAW_LAUNCH_FIELDS); tm_result_dict is a registry call's
 * dict (the record's fields, then out, out_address, out_shape, out_dtype, problem). */
int tm_launch_dict(const tm_launch_record *record, PyObject *dict);
PyObject *tm_raw_launch_fields(void);
PyObject *tm_result_dict(const tm_job *job, PyObject *out);
PyObject *tm_raise_job_error(const tm_job *job);
PyObject *tm_raise_cuda_error(cudaError_t err, const char *step);
PyObject *tm_device_properties(void);
PyObject *tm_registry_list(void);
