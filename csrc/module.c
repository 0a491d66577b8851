/* module.c: the extension's method table and init. Built twice, as tiledmm._cuda (real GPU)
 * and tiledmm._emu (CPU emulator); TM_MODULE names it. Import touches no device, so the
 * `cuda` build imports on machines with no GPU or driver; errors come at the first call. */
#define TM_MODULE_INIT_FILE
#include "glue.h"
#include <stdlib.h>
#include <string.h>

#ifndef TM_MODULE
#error "build with -DTM_MODULE=_cuda or -DTM_MODULE=_emu"
#endif
#define TM_STR_(x) #x
#define TM_STR(x) TM_STR_(x)
#define TM_CAT_(a, b) a##b
#define TM_CAT(a, b) TM_CAT_(a, b)

/* run(kernel, inputs, device_ptrs, params, warmup, repeat, out_on_device[, flush_l2=True])
 * -> dict; see tiledmm/_core.py. device_ptrs[i] is None for a host array, else the device
 * address of input i (which is then a placeholder of the right shape and dtype), or
 * (address, stream): the stream to wait for before reading it (None: it is ready; an int as
 * __cuda_array_interface__ v3's "stream"); a bare address waits for the whole device. With
 * out_on_device the dict's "out" is a capsule owning the device output instead of an ndarray.
 * flush_l2: flush the L2 cache before each timed launch (launch_core.c); the dict's "l2" says what
 * was done. */
static PyObject *tm_run(PyObject *self, PyObject *args)
{
    const char *name;
    PyObject *inputs, *device_ptrs, *params, *result = NULL, *out_obj = NULL;
    PyArrayObject *arrays[TM_MAX_INPUTS] = {NULL, NULL}, *out = NULL;
    tm_job job = {0};
    int rc;
    (void)self;

    job.flush_l2 = 1;
    if (!PyArg_ParseTuple(args, "sO!O!O!iip|p", &name, &PyTuple_Type, &inputs, &PyTuple_Type,
                          &device_ptrs, &PyTuple_Type, &params, &job.warmup, &job.repeat,
                          &job.out_on_device, &job.flush_l2))
        return NULL;
    if ((job.spec = tm_find_kernel(name)) == NULL)
        return PyErr_Format(PyExc_ValueError, "unknown kernel '%s'", name);
    if (job.warmup < 0 || job.repeat < 1)
        return PyErr_Format(PyExc_ValueError, "warmup must be >= 0 and repeat >= 1, got %d and %d",
                            job.warmup, job.repeat);
    if (tm_prepare_job(&job, job.spec->family, inputs, device_ptrs, params, arrays, &out) < 0)
        return NULL;

    /* Nothing to compute (an empty output, or K = 0 / an empty sum): NumPy's answer is zeros
     * and no kernel runs. */
    if (job.problem.M * job.problem.N == 0 || job.problem.K == 0) {
        if (job.out_on_device) {
            cudaError_t err = cudaSuccess;
            if (job.out_bytes) {
                Py_BEGIN_ALLOW_THREADS if ((err = tm_device_alloc(&job.device_out,
                                                                  job.out_bytes)) == cudaSuccess)
                    err = cudaMemset(job.device_out, 0, job.out_bytes);
                if (err != cudaSuccess) {
                    tm_device_free(job.device_out);
                    job.device_out = NULL;
                }
                Py_END_ALLOW_THREADS
            }
            if (err != cudaSuccess) {
                (void)cudaGetLastError();
                tm_raise_cuda_error(err, "allocating the device output");
                goto done;
            }
        } else {
            PyArray_FILLWBYTE(out, 0); /* all-zero bytes are 0.0 in IEEE float32/float64 */
        }
    } else {
        Py_BEGIN_ALLOW_THREADS rc = tm_execute(&job);
        Py_END_ALLOW_THREADS if (rc != 0)
        {
            tm_raise_job_error(&job);
            goto done;
        }
    }
    if (job.out_on_device)
        out_obj =
            job.device_out ? tm_call_buffer_capsule(job.device_out) : (Py_INCREF(Py_None), Py_None);
    else
        out_obj = (Py_INCREF(out), (PyObject *)out);
    if (out_obj != NULL) result = tm_result_dict(&job, out_obj);
done:
    Py_XDECREF(out_obj);
    tm_job_free(&job);
    Py_XDECREF(arrays[0]);
    Py_XDECREF(arrays[1]);
    Py_XDECREF(out);
    return result;
}

/* copy_time(kind, bytes, warmup, repeat[, flush_l2=True]) -> list of ms: reference copies
 * timed with events (kind "d2d", "h2d_pinned" or "d2h_pinned"), the bandwidths bench reports
 * against; the L2 flushed before each timed copy unless flush_l2 is false. */
static PyObject *tm_copy_time_py(PyObject *self, PyObject *args)
{
    Py_ssize_t bytes;
    const char *kind;
    int warmup, repeat, rc, flush_l2 = 1;
    cudaError_t err;
    const char *step = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "snii|p", &kind, &bytes, &warmup, &repeat, &flush_l2)) return NULL;
    if (bytes <= 0 || warmup < 0 || repeat < 1)
        return PyErr_Format(PyExc_ValueError,
                            "copy_time: need bytes > 0, warmup >= 0, repeat >= 1");
    if (strcmp(kind, "d2d") && strcmp(kind, "h2d_pinned") && strcmp(kind, "d2h_pinned"))
        return PyErr_Format(PyExc_ValueError, "copy_time: unknown kind '%s'", kind);
    double *samples = calloc((size_t)repeat, sizeof(double));
    if (samples == NULL) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS rc =
        tm_copy_time(kind, (size_t)bytes, warmup, repeat, flush_l2, samples, &err, &step);
    Py_END_ALLOW_THREADS PyObject *result = NULL;
    if (rc == 0 && (result = PyList_New(repeat)) != NULL) {
        for (int i = 0; i < repeat; ++i) {
            PyObject *v = PyFloat_FromDouble(samples[i]);
            if (v == NULL) {
                Py_CLEAR(result);
                break;
            }
            PyList_SET_ITEM(result, i, v);
        }
    } else if (rc != 0) {
        tm_raise_cuda_error(err, step);
    }
    free(samples);
    return result;
}

/* traffic_model(kernel, dtype_bits, M, N, K, params, sm_count) -> (bytes, (bm, bn) or None):
 * the registry's model of the kernel's global-memory traffic (loads + stores), the same
 * function a call's model_bytes comes from, and its block tile (row's block_tile; None where
 * the row has none); tm.model.traffic_bytes and block_tile ask this. sm_count <= 0: the
 * current device's (the emulator's worker threads), as a call would use. */
static PyObject *tm_traffic_model_py(PyObject *self, PyObject *args)
{
    const char *name;
    int bits, sm_count;
    long long M, N, K;
    PyObject *params;
    tm_problem problem;
    const tm_kernel_spec *spec;
    (void)self;
    if (!PyArg_ParseTuple(args, "siLLLO!i", &name, &bits, &M, &N, &K, &PyTuple_Type, &params,
                          &sm_count))
        return NULL;
    if ((spec = tm_find_kernel(name)) == NULL)
        return PyErr_Format(PyExc_ValueError, "unknown kernel '%s'; tm.kernels() lists them", name);
    if (spec->global_bytes == NULL)
        return PyErr_Format(PyExc_ValueError, "kernel '%s' has no traffic model", name);
    if (bits != 32 && bits != 64)
        return PyErr_Format(PyExc_ValueError, "traffic_model: dtype_bits must be 32 or 64, got %d",
                            bits);
    if (!(spec->dtypes & (bits == 32 ? TM_F32 : TM_F64)))
        return PyErr_Format(PyExc_ValueError, "kernel '%s' does not run in float%d", name, bits);
    if (M < 0 || N < 0 || K < 0)
        return PyErr_Format(PyExc_ValueError,
                            "traffic_model: M, N, K must be >= 0, got %lld, %lld, %lld", M, N, K);
    memset(&problem, 0, sizeof problem);
    problem.dtype = bits == 32 ? TM_F32 : TM_F64;
    problem.M = M;
    problem.N = N;
    problem.K = K;
    if (tm_parse_params(spec, "traffic_model", params, problem.params) < 0) return NULL;
    if (sm_count <= 0) {
        cudaError_t err = tm_current_sm_count(&sm_count);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();
            return tm_raise_cuda_error(err, "asking the device's multiprocessor count "
                                            "(pass sm_count= to tm.model.traffic_bytes)");
        }
    }
    problem.sm_count = sm_count;
    const double bytes = spec->global_bytes(&problem);
    if (spec->block_tile == NULL) return Py_BuildValue("(dO)", bytes, Py_None);
    long long bm = 0, bn = 0;
    spec->block_tile(&problem, &bm, &bn);
    return Py_BuildValue("(d(LL))", bytes, bm, bn);
}

static PyObject *tm_registry_py(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return tm_registry_list();
}

static PyObject *tm_device_info_py(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return tm_device_properties();
}

/* device_count() -> (count, error name or None); never raises for a missing device. */
static PyObject *tm_device_count_py(PyObject *self, PyObject *unused)
{
    int count = 0;
    cudaError_t err;
    (void)self;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS err = cudaGetDeviceCount(&count);
    Py_END_ALLOW_THREADS if (err != cudaSuccess)
    {
        (void)cudaGetLastError();
        return Py_BuildValue("(is)", 0, cudaGetErrorName(err));
    }
    return Py_BuildValue("(iO)", count, Py_None);
}

/* mem_info() -> (free_bytes, total_bytes) of the current device. */
static PyObject *tm_mem_info_py(PyObject *self, PyObject *unused)
{
    size_t free_bytes = 0, total_bytes = 0;
    cudaError_t err;
    (void)self;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    tm_release_pool_memory(); /* memory kept for the next call counts as free */
    tm_release_l2_flush();
    err = cudaMemGetInfo(&free_bytes, &total_bytes);
    Py_END_ALLOW_THREADS if (err != cudaSuccess)
    {
        (void)cudaGetLastError();
        return tm_raise_cuda_error(err, "cudaMemGetInfo");
    }
    return Py_BuildValue("(nn)", (Py_ssize_t)free_bytes, (Py_ssize_t)total_bytes);
}

/* pinned_inputs() -> how many NumPy input arrays are registered (pinned in place) now. */
static PyObject *tm_pinned_inputs_py(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong(tm_pinned_inputs());
}

#ifdef TM_EMU
static PyObject *tm_emu_threads_py(PyObject *self, PyObject *args)
{
    int n = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "|i", &n)) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "threads must be >= 1, got %d", n);
    if (n > 0) tm_emu_set_threads(n);
    return PyLong_FromLong(tm_emu_threads());
}
#endif

static PyMethodDef tm_methods[] = {
    {"run", tm_run, METH_VARARGS,
     "run(kernel, inputs, device_ptrs, params, warmup, repeat, out_on_device[, flush_l2]) -> dict"},
    {"registry", tm_registry_py, METH_NOARGS, "registry() -> list of kernel rows"},
    {"traffic_model", tm_traffic_model_py, METH_VARARGS,
     "traffic_model(kernel, dtype_bits, M, N, K, params, sm_count) -> (bytes, (bm, bn) or None)"},
    {"device_properties", tm_device_info_py, METH_NOARGS, "the runtime's device query"},
    {"device_count", tm_device_count_py, METH_NOARGS, "device_count() -> (count, error)"},
    {"copy_time", tm_copy_time_py, METH_VARARGS,
     "copy_time(kind, bytes, warmup, repeat[, flush_l2]) -> [ms]"},
    {"upload", tm_upload_py, METH_VARARGS, "upload(array) -> (capsule, address)"},
    {"download", tm_download_py, METH_VARARGS, "download(address, array): device -> array"},
    {"upload_into", tm_upload_into_py, METH_VARARGS,
     "upload_into(address, array): array -> device"},
    {"host_memory", tm_host_memory_py, METH_NOARGS,
     "host_memory() -> (limit, source, available, why)"},
    {"dlpack", tm_dlpack_py, METH_VARARGS, "dlpack(owner, address, shape, bits) -> capsule"},
    {"synchronize", tm_synchronize_py, METH_NOARGS, "wait for all work on the device"},
    {"mem_info", tm_mem_info_py, METH_NOARGS, "mem_info() -> (free, total) bytes"},
    {"pinned_inputs", tm_pinned_inputs_py, METH_NOARGS,
     "pinned_inputs() -> input arrays pinned in place now"},
    {"user_run", tm_user_run_py, METH_VARARGS,
     "user_run(handle, grid, block, shared, args, warmup, repeat[, flush_l2]) -> dict"},
    {"user_load", tm_user_load_py, METH_VARARGS, "user_load(image, name) -> (library, kernel)"},
#ifdef TM_EMU
    {"threads", tm_emu_threads_py, METH_VARARGS, "threads([n]) -> worker threads for blocks"},
#endif
    {NULL, NULL, 0, NULL},
};

/* Module teardown: device memory the module keeps for its lifetime goes back (the L2 flush
 * buffers; the stream-ordered pool's memory goes with the context). */
static void tm_module_free(void *module)
{
    (void)module;
    tm_release_l2_flush();
    tm_release_launch_cache();
}

static struct PyModuleDef tm_module = {
    PyModuleDef_HEAD_INIT,
    "tiledmm." TM_STR(TM_MODULE),
    "tiledmm kernels, one backend",
    -1,
    tm_methods,
    NULL,
    NULL,
    NULL,
    tm_module_free,
};

PyMODINIT_FUNC TM_CAT(PyInit_, TM_MODULE)(void)
{
    import_array();
    PyObject *m = PyModule_Create(&tm_module);
    if (m == NULL) return NULL;
#ifdef TM_EMU
    const char *backend = "emu";
#else
    const char *backend = "cuda";
#endif
    /* The raw launch result's fields, ((name, kind), ...): result.c's one table. */
    PyObject *fields = tm_raw_launch_fields();
    if (PyModule_AddStringConstant(m, "BACKEND", backend) < 0 || fields == NULL ||
        PyModule_AddObject(m, "RAW_LAUNCH_FIELDS", fields) < 0) {
        Py_XDECREF(fields);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
