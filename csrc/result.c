/* result.c: what a call returns to Python (a dict the tiledmm package wraps in a Result, or
 * an exception), the device query, and the registry as Python objects. Uses the device layer
 * (launch_core.h) and nothing of timing.c, which uses nothing of this file. */
#include "glue.h"
#include <stddef.h>
#include <stdio.h>

/* The raw launch result: every field a timed launch reports, registry and user kernels alike,
 * written once. Python reads this table as the module's RAW_LAUNCH_FIELDS, ((name, kind), ...);
 * a kind says the C member's type and the Python value's:
 *   samples  double * (tm_launch_record.samples entries)  list of float
 *   number   double                                        float
 *   int      long long                                     int
 *   dim3     unsigned[3]                                   (int, int, int)
 *   text     char[] (NUL-terminated)                       str                              */
enum { RAW_SAMPLES, RAW_NUMBER, RAW_INT, RAW_DIM3, RAW_TEXT };
static const char *const raw_kind_names[] = {"samples", "number", "int", "dim3", "text"};

#define RAW(name, kind) {#name, kind, offsetof(tm_launch_record, name)}
static const struct {
    const char *name;
    int kind;
    size_t offset;
} raw_fields[] = {
    RAW(samples_ms, RAW_SAMPLES), RAW(h2d_ms, RAW_NUMBER),      RAW(d2h_ms, RAW_NUMBER),
    RAW(h2d_bytes, RAW_INT),      RAW(d2h_bytes, RAW_INT),      RAW(grid, RAW_DIM3),
    RAW(block, RAW_DIM3),         RAW(shared_bytes, RAW_INT),   RAW(static_shared_bytes, RAW_INT),
    RAW(registers, RAW_INT),      RAW(launches, RAW_INT),       RAW(blocks_per_sm, RAW_INT),
    RAW(occupancy, RAW_NUMBER),   RAW(model_bytes, RAW_NUMBER), RAW(l2, RAW_TEXT),
    RAW(path, RAW_TEXT),          RAW(path_reason, RAW_TEXT),
};
#undef RAW
#define RAW_FIELD_COUNT ((int)(sizeof raw_fields / sizeof raw_fields[0]))

static PyObject *raw_value(const tm_launch_record *r, int i)
{
    const char *at = (const char *)r + raw_fields[i].offset;
    switch (raw_fields[i].kind) {
    case RAW_SAMPLES: {
        PyObject *list = PyList_New(r->samples_ms ? r->samples : 0);
        for (int k = 0; list != NULL && r->samples_ms && k < r->samples; ++k) {
            PyObject *v = PyFloat_FromDouble(r->samples_ms[k]);
            if (v == NULL)
                Py_CLEAR(list);
            else
                PyList_SET_ITEM(list, k, v);
        }
        return list;
    }
    case RAW_NUMBER: return PyFloat_FromDouble(*(const double *)at);
    case RAW_INT: return PyLong_FromLongLong(*(const long long *)at);
    case RAW_DIM3: {
        const unsigned *d = (const unsigned *)at;
        return Py_BuildValue("(III)", d[0], d[1], d[2]);
    }
    default: return PyUnicode_FromString(at);
    }
}

int tm_launch_dict(const tm_launch_record *record, PyObject *dict)
{
    for (int i = 0; i < RAW_FIELD_COUNT; ++i) {
        PyObject *v = raw_value(record, i);
        if (v == NULL) return -1;
        const int rc = PyDict_SetItemString(dict, raw_fields[i].name, v);
        Py_DECREF(v);
        if (rc < 0) return -1;
    }
    return 0;
}

PyObject *tm_raw_launch_fields(void)
{
    PyObject *fields = PyTuple_New(RAW_FIELD_COUNT);
    for (int i = 0; fields != NULL && i < RAW_FIELD_COUNT; ++i) {
        PyObject *pair =
            Py_BuildValue("(ss)", raw_fields[i].name, raw_kind_names[raw_fields[i].kind]);
        if (pair == NULL)
            Py_CLEAR(fields);
        else
            PyTuple_SET_ITEM(fields, i, pair);
    }
    return fields;
}

/* Put `value` (a new reference, or NULL after an error) in the dict under `key`. */
static int put(PyObject *dict, const char *key, PyObject *value)
{
    if (value == NULL) return -1;
    int rc = PyDict_SetItemString(dict, key, value);
    Py_DECREF(value);
    return rc;
}

/* Bytes a registry call copies to the device (its host inputs). */
static size_t job_h2d_bytes(const tm_job *job)
{
    size_t bytes = 0;
    for (int i = 0; i < job->n_inputs; ++i)
        if (!job->in_on_device[i]) bytes += job->in_bytes[i];
    return bytes;
}

PyObject *tm_result_dict(const tm_job *job, PyObject *out)
{
    /* The record as the core left it, with what a registry call says also when it ran nothing
     * (an empty problem): the bytes it would copy, what was done about L2, the traffic model. */
    tm_launch_record r = job->record;
    r.h2d_bytes = (long long)job_h2d_bytes(job);
    r.d2h_bytes = job->out_on_device ? 0 : (long long)job->out_bytes;
    snprintf(r.l2, sizeof r.l2, "%s", tm_l2_state(job->flush_l2));
    /* Models are asked only about problems a kernel ran on (never empty ones). */
    r.model_bytes = job->spec->global_bytes && job->facts.launches > 0
                        ? job->spec->global_bytes(&job->problem)
                        : 0.0;
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    if (tm_launch_dict(&r, d) < 0 || PyDict_SetItemString(d, "out", out) < 0 ||
        put(d, "out_address", PyLong_FromVoidPtr(job->device_out)) < 0 ||
        put(d, "out_shape", PyArray_IntTupleFromIntp(job->out_ndim, job->out_shape)) < 0 ||
        put(d, "out_dtype",
            PyUnicode_FromString(job->out_typenum == NPY_FLOAT32 ? "float32" : "float64")) < 0 ||
        put(d, "problem", Py_BuildValue("(LLL)", job->problem.M, job->problem.N, job->problem.K)) <
            0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
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
    const tm_launch_failure *f = &job->failure;
    const char *name = cudaGetErrorName(f->err), *text = cudaGetErrorString(f->err);
    if (f->err == cudaErrorMemoryAllocation) {
        size_t free_bytes = 0, total_bytes = 0;
        (void)cudaMemGetInfo(&free_bytes, &total_bytes);
        (void)cudaGetLastError();
        return PyErr_Format(PyExc_MemoryError,
                            "kernel '%s': device out of memory: %s of %zu bytes failed "
                            "(%zu of %zu bytes free); use smaller arrays",
                            job->spec->name, f->step, f->bytes, free_bytes, total_bytes);
    }
    if (f->err == cudaErrorNoDevice || f->err == cudaErrorInsufficientDriver)
        return tm_raise_cuda_error(f->err, f->step);
#ifdef TM_EMU
    const char *detail = tm_emu_last_error_detail();
    if (detail && *detail)
        return PyErr_Format(PyExc_RuntimeError, "kernel '%s': %s failed: %s: %s\n%s",
                            job->spec->name, f->step, name, text, detail);
#endif
    return PyErr_Format(PyExc_RuntimeError, "kernel '%s': %s failed: %s: %s", job->spec->name,
                        f->step, name, text);
}

/* The lecture's device query, as raw runtime fields. Called with the GIL held: these are
 * quick host-side queries. */
PyObject *tm_device_properties(void)
{
    struct cudaDeviceProp p;
    int device = 0, count = 0, clock_khz = 0, mem_clock_khz = 0, driver = 0, runtime = 0;
    cudaError_t err;
    if ((err = cudaGetDeviceCount(&count)) != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return tm_raise_cuda_error(err == cudaSuccess ? cudaErrorNoDevice : err,
                                   "cudaGetDeviceCount");
    }
    if ((err = cudaGetDevice(&device)) != cudaSuccess ||
        (err = cudaGetDeviceProperties(&p, device)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device)) !=
            cudaSuccess ||
        (err = cudaDriverGetVersion(&driver)) != cudaSuccess ||
        (err = cudaRuntimeGetVersion(&runtime)) != cudaSuccess) {
        (void)cudaGetLastError();
        return tm_raise_cuda_error(err, "device query");
    }
    return Py_BuildValue(
        "{s:i,s:s,s:(ii),s:i,s:n,s:n,s:n,s:n,s:n,s:i,s:i,s:i,s:i,s:i,s:(iii),s:(iii),s:n,"
        "s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}",
        "device", device, "name", p.name, "compute_capability", p.major, p.minor, "multiprocessors",
        p.multiProcessorCount, "total_global_mem", (Py_ssize_t)p.totalGlobalMem,
        "shared_mem_per_block", (Py_ssize_t)p.sharedMemPerBlock, "shared_mem_per_block_optin",
        (Py_ssize_t)p.sharedMemPerBlockOptin, "shared_mem_per_multiprocessor",
        (Py_ssize_t)p.sharedMemPerMultiprocessor, "total_const_mem", (Py_ssize_t)p.totalConstMem,
        "regs_per_block", p.regsPerBlock, "regs_per_multiprocessor", p.regsPerMultiprocessor,
        "warp_size", p.warpSize, "max_threads_per_block", p.maxThreadsPerBlock,
        "max_threads_per_multiprocessor", p.maxThreadsPerMultiProcessor, "max_threads_dim",
        p.maxThreadsDim[0], p.maxThreadsDim[1], p.maxThreadsDim[2], "max_grid_size",
        p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2], "l2_cache_bytes",
        (Py_ssize_t)p.l2CacheSize, "max_blocks_per_multiprocessor", p.maxBlocksPerMultiProcessor,
        "clock_khz", clock_khz, "memory_clock_khz", mem_clock_khz, "memory_bus_width_bits",
        p.memoryBusWidth, "driver_version", driver, "runtime_version", runtime, "device_count",
        count, "async_engine_count", p.asyncEngineCount);
}

static PyObject *dtype_names(int mask)
{
    if (mask == (TM_F32 | TM_F64)) return Py_BuildValue("(ss)", "float32", "float64");
    return Py_BuildValue("(s)", mask == TM_F32 ? "float32" : "float64");
}

PyObject *tm_registry_list(void)
{
    PyObject *rows = PyList_New(tm_registry_size);
    if (rows == NULL) return NULL;
    for (int i = 0; i < tm_registry_size; ++i) {
        const tm_kernel_spec *k = &tm_registry[i];
        PyObject *params = PyTuple_New(k->n_params);
        if (params == NULL) goto fail;
        for (int j = 0; j < k->n_params; ++j) {
            const tm_param_spec *ps = &k->params[j];
            PyObject *values = PyTuple_New(ps->n_values);
            if (values == NULL) {
                Py_DECREF(params);
                goto fail;
            }
            for (int v = 0; v < ps->n_values; ++v)
                PyTuple_SET_ITEM(values, v, PyLong_FromLong(ps->values[v]));
            PyObject *param = Py_BuildValue("{s:s,s:i,s:N,s:s}", "name", ps->name, "default",
                                            ps->default_value, "values", values, "doc", ps->doc);
            if (param == NULL) {
                Py_DECREF(params);
                goto fail;
            }
            PyTuple_SET_ITEM(params, j, param);
        }
        PyObject *row = Py_BuildValue("{s:s,s:s,s:N,s:N,s:s,s:s}", "name", k->name, "family",
                                      k->family, "dtypes", dtype_names(k->dtypes), "params", params,
                                      "lecture", k->lecture, "summary", k->summary);
        if (row == NULL) goto fail;
        PyList_SET_ITEM(rows, i, row);
    }
    return rows;
fail:
    Py_DECREF(rows);
    return NULL;
}
