/* result.c: what a call returns to Python (a dict the tiledmm package wraps in a Result),
 * the device query, and the registry as Python objects. */
#include "glue.h"

/* Build a dict from "key", value pairs; steals nothing, returns NULL on any failure. */
static int put(PyObject *dict, const char *key, PyObject *value)
{
    if (value == NULL) return -1;
    int rc = PyDict_SetItemString(dict, key, value);
    Py_DECREF(value);
    return rc;
}

PyObject *tm_result_dict(const tm_job *job, PyObject *out)
{
    const tm_launch_facts *f = &job->facts;
    PyObject *d = PyDict_New(), *samples = NULL;
    if (d == NULL) return NULL;
    if ((samples = PyList_New(job->samples_ms ? job->repeat : 0)) == NULL) goto fail;
    for (int i = 0; job->samples_ms && i < job->repeat; ++i) {
        PyObject *v = PyFloat_FromDouble(job->samples_ms[i]);
        if (v == NULL) goto fail;
        PyList_SET_ITEM(samples, i, v);
    }
    const size_t h2d_bytes = job_h2d_bytes(job), d2h_bytes = job->out_on_device ? 0 : job->out_bytes;
    if (put(d, "samples_ms", samples) < 0) { samples = NULL; goto fail; }
    samples = NULL;
    if (PyDict_SetItemString(d, "out", out) < 0 ||
        put(d, "out_address", PyLong_FromVoidPtr(job->device_out)) < 0 ||
        put(d, "out_shape", PyArray_IntTupleFromIntp(job->out_ndim, job->out_shape)) < 0 ||
        put(d, "out_dtype", PyUnicode_FromString(job->out_typenum == NPY_FLOAT32 ? "float32"
                                                                                 : "float64")) < 0 ||
        put(d, "problem", Py_BuildValue("(LLL)", job->problem.M, job->problem.N, job->problem.K)) < 0 ||
        put(d, "h2d_ms", PyFloat_FromDouble(job->h2d_ms)) < 0 ||
        put(d, "d2h_ms", PyFloat_FromDouble(job->d2h_ms)) < 0 ||
        put(d, "h2d_bytes", PyLong_FromSize_t(h2d_bytes)) < 0 ||
        put(d, "d2h_bytes", PyLong_FromSize_t(d2h_bytes)) < 0 ||
        put(d, "grid", Py_BuildValue("(III)", f->grid[0], f->grid[1], f->grid[2])) < 0 ||
        put(d, "block", Py_BuildValue("(III)", f->block[0], f->block[1], f->block[2])) < 0 ||
        put(d, "shared_bytes", PyLong_FromSize_t(f->shared_bytes)) < 0 ||
        put(d, "static_shared_bytes", PyLong_FromLong(job->static_shared_bytes)) < 0 ||
        put(d, "registers", PyLong_FromLong(job->registers)) < 0 ||
        put(d, "launches", PyLong_FromLong(f->launches)) < 0 ||
        put(d, "path", PyUnicode_FromString(job->launch_path ? job->launch_path : "")) < 0 ||
        put(d, "path_reason", PyUnicode_FromString(job->launch_reason)) < 0 ||
        put(d, "blocks_per_sm", PyLong_FromLong(job->blocks_per_sm)) < 0 ||
        put(d, "occupancy", PyFloat_FromDouble(job->occupancy)) < 0 ||
        put(d, "l2", PyUnicode_FromString(job->l2 ? job->l2 : tm_l2_state(job->flush_l2))) < 0 ||
        /* Models are asked only about problems a kernel ran on (never empty ones). */
        put(d, "model_bytes", PyFloat_FromDouble(job->spec->global_bytes && f->launches > 0
                                                     ? job->spec->global_bytes(&job->problem)
                                                     : 0.0)) < 0)
        goto fail;
    return d;
fail:
    Py_XDECREF(samples);
    Py_DECREF(d);
    return NULL;
}

cudaError_t tm_current_sm_count(int *count)
{
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess && *count <= 0) err = cudaErrorInvalidDevice;
    return err;
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
        "device", device, "name", p.name, "compute_capability", p.major, p.minor,
        "multiprocessors", p.multiProcessorCount, "total_global_mem", (Py_ssize_t)p.totalGlobalMem,
        "shared_mem_per_block", (Py_ssize_t)p.sharedMemPerBlock,
        "shared_mem_per_block_optin", (Py_ssize_t)p.sharedMemPerBlockOptin,
        "shared_mem_per_multiprocessor", (Py_ssize_t)p.sharedMemPerMultiprocessor,
        "total_const_mem", (Py_ssize_t)p.totalConstMem, "regs_per_block", p.regsPerBlock,
        "regs_per_multiprocessor", p.regsPerMultiprocessor, "warp_size", p.warpSize,
        "max_threads_per_block", p.maxThreadsPerBlock,
        "max_threads_per_multiprocessor", p.maxThreadsPerMultiProcessor,
        "max_threads_dim", p.maxThreadsDim[0], p.maxThreadsDim[1], p.maxThreadsDim[2],
        "max_grid_size", p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2],
        "l2_cache_bytes", (Py_ssize_t)p.l2CacheSize, "max_blocks_per_multiprocessor",
        p.maxBlocksPerMultiProcessor, "clock_khz", clock_khz, "memory_clock_khz", mem_clock_khz,
        "memory_bus_width_bits", p.memoryBusWidth, "driver_version", driver, "runtime_version",
        runtime, "device_count", count, "async_engine_count", p.asyncEngineCount);
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
            if (values == NULL) { Py_DECREF(params); goto fail; }
            for (int v = 0; v < ps->n_values; ++v)
                PyTuple_SET_ITEM(values, v, PyLong_FromLong(ps->values[v]));
            PyObject *param = Py_BuildValue("{s:s,s:i,s:N,s:s}", "name", ps->name, "default",
                                            ps->default_value, "values", values, "doc", ps->doc);
            if (param == NULL) { Py_DECREF(params); goto fail; }
            PyTuple_SET_ITEM(params, j, param);
        }
        PyObject *row = Py_BuildValue("{s:s,s:s,s:N,s:N,s:s,s:s,s:O}", "name", k->name, "family",
                                      k->family, "dtypes", dtype_names(k->dtypes), "params",
                                      params, "lecture", k->lecture, "summary", k->summary,
                                      "needs_scratch", k->scratch_bytes ? Py_True : Py_False);
        if (row == NULL) goto fail;
        PyList_SET_ITEM(rows, i, row);
    }
    return rows;
fail:
    Py_DECREF(rows);
    return NULL;
}
