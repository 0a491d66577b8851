/* arrays.c: NumPy argument checking and conversion. Kernels see contiguous row-major
 * float32 or float64 buffers; anything else is copied here (F-order, strided, negative
 * strides) or refused with a message that says what to do (dtype policy in README). */
#include "glue.h"
#include <stdio.h>
#include <string.h>

#include "emu/host_memory.h"

const tm_kernel_spec *tm_find_kernel(const char *name)
{
    for (int i = 0; i < tm_registry_size; ++i)
        if (strcmp(tm_registry[i].name, name) == 0) return &tm_registry[i];
    return NULL;
}

static const char *input_label(const tm_kernel_spec *spec, int index)
{
    if (strcmp(spec->family, "reduce") == 0) return "x";
    if (strcmp(spec->family, "matmul") == 0) return index == 0 ? "A" : "B";
    return index == 0 ? "a" : "b";
}

/* The float type the kernel runs in: float32 if every input is float32, float64 if any is
 * float64 (NumPy's promotion, which loses nothing). Every other dtype is a TypeError. */
static int common_float_type(PyArrayObject *arrays[], int n, const tm_kernel_spec *spec,
                             const char *fn)
{
    int typenum = NPY_FLOAT32;
    for (int i = 0; i < n; ++i) {
        int t = PyArray_TYPE(arrays[i]);
        if (t == NPY_FLOAT64)
            typenum = NPY_FLOAT64;
        else if (t != NPY_FLOAT32) {
            PyObject *dtype_str = PyObject_Str((PyObject *)PyArray_DESCR(arrays[i]));
            if (dtype_str == NULL) return -1;
            PyErr_Format(PyExc_TypeError,
                         "%s: %s has dtype %U; tiledmm kernels run in float32 or float64. "
                         "Convert explicitly, e.g. %s.astype(numpy.float32)",
                         fn, input_label(spec, i), dtype_str, input_label(spec, i));
            Py_DECREF(dtype_str);
            return -1;
        }
    }
    int wanted = typenum == NPY_FLOAT32 ? TM_F32 : TM_F64;
    if (!(spec->dtypes & wanted)) {
        PyErr_Format(PyExc_TypeError, "%s: kernel '%s' does not support %s; use float%s inputs", fn,
                     spec->name, typenum == NPY_FLOAT32 ? "float32" : "float64",
                     typenum == NPY_FLOAT32 ? "64" : "32");
        return -1;
    }
    return typenum;
}

/* bytes = count * itemsize, refusing sizes that do not fit in size_t (MemoryError). */
static int checked_bytes(npy_intp count, int itemsize, size_t *bytes, const char *fn)
{
    if (count < 0 || __builtin_mul_overflow((size_t)count, (size_t)itemsize, bytes)) {
        PyErr_Format(PyExc_MemoryError, "%s: array of %zd elements is too large", fn, count);
        return -1;
    }
    return 0;
}

/* Raise ValueError "<fn>: <what> ... shape (a, b)"; the shape tuple is built and released here. */
static int shape_error(const char *fn, const char *what, PyArrayObject *a, PyArrayObject *b)
{
    PyObject *sa = PyArray_IntTupleFromIntp(PyArray_NDIM(a), PyArray_DIMS(a));
    PyObject *sb = b ? PyArray_IntTupleFromIntp(PyArray_NDIM(b), PyArray_DIMS(b)) : NULL;
    if (sa != NULL && (b == NULL || sb != NULL)) {
        if (b)
            PyErr_Format(PyExc_ValueError, "%s: %s: %R and %R", fn, what, sa, sb);
        else
            PyErr_Format(PyExc_ValueError, "%s: %s, got shape %R", fn, what, sa);
    }
    Py_XDECREF(sa);
    Py_XDECREF(sb);
    return -1;
}

static int shape_matmul(tm_job *job, const char *fn, PyArrayObject *a[], npy_intp out_shape[],
                        int *out_ndim)
{
    for (int i = 0; i < 2; ++i) {
        if (PyArray_NDIM(a[i]) != 2)
            return shape_error(fn,
                               i ? "B must be a 2-D matrix (reshape a vector to (n, 1) or "
                                   "(1, n))"
                                 : "A must be a 2-D matrix (reshape a vector to (n, 1) or "
                                   "(1, n))",
                               a[i], NULL);
    }
    npy_intp M = PyArray_DIM(a[0], 0), K = PyArray_DIM(a[0], 1);
    npy_intp K2 = PyArray_DIM(a[1], 0), N = PyArray_DIM(a[1], 1);
    if (K != K2) {
        PyErr_Format(PyExc_ValueError,
                     "%s: inner dimensions differ: A is %zd x %zd and B is %zd x %zd "
                     "(A's columns must equal B's rows)",
                     fn, M, K, K2, N);
        return -1;
    }
    job->problem.M = M;
    job->problem.N = N;
    job->problem.K = K;
    out_shape[0] = M;
    out_shape[1] = N;
    *out_ndim = 2;
    return 0;
}

static int shape_reduce(tm_job *job, PyArrayObject *a[], npy_intp out_shape[], int *out_ndim)
{
    job->problem.M = PyArray_SIZE(a[0]);
    job->problem.N = 1;
    job->problem.K = 1;
    out_shape[0] = 1;
    *out_ndim = 1;
    return 0;
}

static int shape_elementwise(tm_job *job, const char *fn, PyArrayObject *a[], npy_intp out_shape[],
                             int *out_ndim)
{
    int nd = PyArray_NDIM(a[0]);
    if (nd != PyArray_NDIM(a[1]) ||
        !PyArray_CompareLists(PyArray_DIMS(a[0]), PyArray_DIMS(a[1]), nd))
        return shape_error(fn, "shapes differ (tiledmm does not broadcast)", a[0], a[1]);
    for (int d = 0; d < nd; ++d)
        out_shape[d] = PyArray_DIM(a[0], d);
    *out_ndim = nd;
    /* M x N with N the last dimension (1-D: M = 1), so mat_add sees rows and columns. */
    npy_intp size = PyArray_SIZE(a[0]);
    job->problem.N = nd ? PyArray_DIM(a[0], nd - 1) : 1;
    job->problem.M = job->problem.N ? size / job->problem.N : 0;
    job->problem.K = 1;
    return 0;
}

/* The kernel's parameters from a tuple of ints, each one of its registry row's values, into
 * `values` (TM_MAX_PARAMS); ValueError and -1 otherwise. */
int tm_parse_params(const tm_kernel_spec *spec, const char *fn, PyObject *params, int *values)
{
    if (!PyTuple_Check(params) || PyTuple_GET_SIZE(params) != spec->n_params) {
        PyErr_Format(PyExc_ValueError, "%s: kernel '%s' takes %d parameter(s)", fn, spec->name,
                     spec->n_params);
        return -1;
    }
    for (int i = 0; i < spec->n_params; ++i) {
        long v = PyLong_AsLong(PyTuple_GET_ITEM(params, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        int allowed = 0;
        for (int j = 0; j < spec->params[i].n_values; ++j)
            allowed |= spec->params[i].values[j] == v;
        if (!allowed) {
            PyErr_Format(PyExc_ValueError, "%s: %s=%ld is not allowed for kernel '%s'", fn,
                         spec->params[i].name, v, spec->name);
            return -1;
        }
        values[i] = (int)v;
    }
    return 0;
}

/* Requests below this are not compared with the memory available now: reading it costs a few
 * small file reads, and a call this small cannot be what pushes a process over its limit. */
#define CHECK_AVAILABLE_FROM ((size_t)64 << 20)

/* Refuse, before allocating anything, a call whose host buffers cannot exist: an output with
 * more elements than an array can index (ValueError, as NumPy says), or new host memory
 * larger than what the process can get (MemoryError). New host memory is the contiguous copies
 * of host inputs and the host output, and on the emulator also its "device" buffers (host
 * memory too) for host inputs and the output; device inputs need none. What the process can
 * get is host_memory.h's: the limit (physical memory, the cgroup limit of a container or a
 * JupyterHub pod, TILEDMM_HOST_MEMORY_LIMIT) and, for large calls, the memory available now
 * (reclaimable cache counted as available). Without this a zero-stride view of 2^40 elements
 * would be copied until the OS kills the process, since Linux overcommits memory. */
static int check_host_memory(const char *fn, PyArrayObject *arrays[], const int on_device[], int n,
                             int typenum, const npy_intp out_shape[], int out_ndim,
                             int out_on_device)
{
    const size_t itemsize = typenum == NPY_FLOAT32 ? 4 : 8;
    size_t out_elements = 1, out_bytes, needed = 0, bytes;
    char message[1600], why[TM_HM_PATH + 160]; /* PyErr_Format has no %g */
    for (int d = 0; d < out_ndim; ++d)
        if (__builtin_mul_overflow(out_elements, (size_t)out_shape[d], &out_elements) ||
            out_elements > (size_t)NPY_MAX_INTP) {
            PyErr_Format(PyExc_ValueError,
                         "%s: the output would have more elements than an "
                         "array can hold",
                         fn);
            return -1;
        }
    if (__builtin_mul_overflow(out_elements, itemsize, &out_bytes)) out_bytes = SIZE_MAX;
#ifdef TM_EMU
    const int out_buffers = out_on_device ? 1 : 2; /* emulated device buffer, host output */
    const int in_buffers = 1;                       /* emulated device buffer (+ copy below) */
#else
    const int out_buffers = out_on_device ? 0 : 1;
    const int in_buffers = 0;
#endif
    for (int b = 0; b < out_buffers; ++b)
        if (__builtin_add_overflow(needed, out_bytes, &needed)) needed = SIZE_MAX;
    for (int i = 0; i < n; ++i) {
        PyArrayObject *a = arrays[i];
        if (on_device[i]) continue; /* a placeholder: nothing is allocated for it */
        const int copied = PyArray_TYPE(a) != typenum || !PyArray_IS_C_CONTIGUOUS(a) ||
                           !PyArray_ISALIGNED(a) || !PyArray_ISNOTSWAPPED(a);
        if (__builtin_mul_overflow((size_t)PyArray_SIZE(a), itemsize, &bytes)) bytes = SIZE_MAX;
        for (int b = 0; b < in_buffers + copied; ++b)
            if (__builtin_add_overflow(needed, bytes, &needed)) needed = SIZE_MAX;
    }
    const tm_host_memory_limits *limits = tm_host_memory_limits_get();
    if (limits != NULL && limits->limit && needed > limits->limit) {
        snprintf(message, sizeof(message),
                 "%s: out of memory: this call needs %.3g GB of new "
                 "host memory (contiguous copies and the output%s); the process can have at "
                 "most %.3g GB (%s). Use smaller arrays, or inputs already of the call's dtype and "
                 "C-contiguous (no copies)",
                 fn, (double)needed / 1e9,
#ifdef TM_EMU
                 ", and the emulated device's buffers, which are host memory",
#else
                 "",
#endif
                 (double)limits->limit / 1e9, limits->source);
        PyErr_SetString(PyExc_MemoryError, message);
        return -1;
    }
    if (needed >= CHECK_AVAILABLE_FROM) {
        const unsigned long long available = tm_host_memory_available(why, sizeof(why));
        if (needed > available) {
            snprintf(message, sizeof(message),
                     "%s: out of memory: this call needs %.3g GB of "
                     "new host memory (contiguous copies and the output%s) but only %.3g GB are "
                     "available now (%s). Free memory (del large arrays, close other "
                     "notebooks) or use smaller arrays",
                     fn, (double)needed / 1e9,
#ifdef TM_EMU
                     ", and the emulated device's buffers, which are host memory",
#else
                     "",
#endif
                     (double)available / 1e9, why);
            PyErr_SetString(PyExc_MemoryError, message);
            return -1;
        }
    }
    return 0;
}

/* One entry of run()'s device_ptrs: None (a host input), an address (device memory; the
 * producer's stream is not known, so the device is waited for), or (address, stream) with
 * stream None (ready: no wait) or an int as __cuda_array_interface__ v3's "stream" (1: the
 * legacy default stream, 2: the per-thread one, else a cudaStream_t), which is waited for. */
static int device_input(PyObject *entry, tm_job *job, int i, void **ptr, const char *fn)
{
    PyObject *address = entry, *stream = NULL;
    job->in_on_device[i] = entry != Py_None;
    job->in_wait[i] = TM_WAIT_DEVICE;
    job->in_stream[i] = 0;
    if (entry == Py_None) return 0;
    if (PyTuple_Check(entry)) {
        if (PyTuple_GET_SIZE(entry) != 2) {
            PyErr_Format(PyExc_TypeError, "%s: a device input is (address, stream)", fn);
            return -1;
        }
        address = PyTuple_GET_ITEM(entry, 0);
        stream = PyTuple_GET_ITEM(entry, 1);
    }
    if ((*ptr = PyLong_AsVoidPtr(address)) == NULL && PyErr_Occurred()) return -1;
    if (stream == Py_None) {
        job->in_wait[i] = TM_WAIT_NONE;
    } else if (stream != NULL) {
        void *handle = PyLong_AsVoidPtr(stream);
        if (handle == NULL && PyErr_Occurred()) return -1;
        job->in_wait[i] = TM_WAIT_STREAM;
        job->in_stream[i] = (uintptr_t)handle;
    }
    return 0;
}

/* Fill the job from Python inputs. On success arrays[] and *out are new references (the
 * caller releases them); on failure everything taken here is released and -1 returned.
 * device_ptrs holds, per input, None (a host array) or the address of device memory; for
 * those the input is a placeholder (a zero-stride array of the right shape and dtype) that
 * serves the shape and dtype checks and is never read. With job->out_on_device no host
 * output is made (*out stays NULL). */
int tm_prepare_job(tm_job *job, const char *fn, PyObject *inputs, PyObject *device_ptrs,
                   PyObject *params, PyArrayObject *arrays[TM_MAX_INPUTS], PyArrayObject **out)
{
    const tm_kernel_spec *spec = job->spec;
    int is_matmul = strcmp(spec->family, "matmul") == 0;
    int is_reduce = strcmp(spec->family, "reduce") == 0;
    int n = is_reduce ? 1 : 2;
    npy_intp out_shape[NPY_MAXDIMS];
    int out_ndim = 0, typenum, itemsize;
    void *device_ptr[TM_MAX_INPUTS] = {NULL, NULL};

    arrays[0] = arrays[1] = NULL;
    *out = NULL;
    if (!PyTuple_Check(inputs) || PyTuple_GET_SIZE(inputs) != n || !PyTuple_Check(device_ptrs) ||
        PyTuple_GET_SIZE(device_ptrs) != n) {
        PyErr_Format(PyExc_TypeError, "%s: expected %d input array(s)", fn, n);
        return -1;
    }
    for (int i = 0; i < n; ++i)
        if (device_input(PyTuple_GET_ITEM(device_ptrs, i), job, i, &device_ptr[i], fn) < 0)
            return -1;
    if (tm_parse_params(job->spec, fn, params, job->problem.params) < 0) return -1;
    /* First as they are (no copy), to check dtypes and shapes before converting anything. */
    for (int i = 0; i < n; ++i) {
        PyObject *obj = PyTuple_GET_ITEM(inputs, i);
        arrays[i] = (PyArrayObject *)PyArray_FromAny(obj, NULL, 0, 0, 0, NULL);
        if (arrays[i] == NULL) goto fail;
    }
    if ((typenum = common_float_type(arrays, n, spec, fn)) < 0) goto fail;
    if (is_matmul   ? shape_matmul(job, fn, arrays, out_shape, &out_ndim)
        : is_reduce ? shape_reduce(job, arrays, out_shape, &out_ndim)
                    : shape_elementwise(job, fn, arrays, out_shape, &out_ndim))
        goto fail;
    if (check_host_memory(fn, arrays, job->in_on_device, n, typenum, out_shape, out_ndim,
                          job->out_on_device) < 0)
        goto fail;
    /* Now the buffers the kernel reads: C-contiguous, aligned, native, of the common type.
     * Device inputs cannot be converted here: they must already be of that type. */
    for (int i = 0; i < n; ++i) {
        if (job->in_on_device[i]) {
            if (PyArray_TYPE(arrays[i]) != typenum) {
                PyErr_Format(PyExc_TypeError,
                             "%s: device input %s is float%d but the call runs in float%d; "
                             "convert it on the device first",
                             fn, input_label(spec, i),
                             PyArray_TYPE(arrays[i]) == NPY_FLOAT32 ? 32 : 64,
                             typenum == NPY_FLOAT32 ? 32 : 64);
                goto fail;
            }
            continue;
        }
        PyArrayObject *converted = (PyArrayObject *)PyArray_FromAny(
            (PyObject *)arrays[i], PyArray_DescrFromType(typenum), 0, 0,
            NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_NOTSWAPPED, NULL);
        if (converted == NULL) goto fail;
        Py_SETREF(arrays[i], converted);
        job->pin_ms += tm_pin_input(arrays[i]);
    }
    job->out_ndim = out_ndim;
    job->out_typenum = typenum;
    memcpy(job->out_shape, out_shape, sizeof(npy_intp) * (size_t)out_ndim);
    if (!job->out_on_device) {
        *out = tm_new_output_array(out_ndim, out_shape, typenum);
        if (*out == NULL) goto fail;
    }

    itemsize = typenum == NPY_FLOAT32 ? 4 : 8;
    job->problem.dtype = typenum == NPY_FLOAT32 ? TM_F32 : TM_F64;
    job->n_inputs = n;
    for (int i = 0; i < n; ++i)
        if (checked_bytes(PyArray_SIZE(arrays[i]), itemsize, &job->in_bytes[i], fn) < 0) goto fail;
    if (checked_bytes(PyArray_MultiplyList(out_shape, out_ndim), itemsize, &job->out_bytes, fn) < 0)
        goto fail;
    job->problem.in0 = job->in_on_device[0] ? device_ptr[0] : PyArray_DATA(arrays[0]);
    job->problem.in1 = n < 2                  ? NULL
                       : job->in_on_device[1] ? device_ptr[1]
                                              : PyArray_DATA(arrays[1]);
    job->problem.out = *out ? PyArray_DATA(*out) : NULL;
    return 0;

fail:
    Py_CLEAR(arrays[0]);
    Py_CLEAR(arrays[1]);
    Py_CLEAR(*out);
    return -1;
}

/* host_memory() -> (limit, limit_source, available, available_why): what the process can ever
 * have and what it can have now, as check_host_memory reads them (Python's guards for memory
 * tiledmm allocates itself: the shared file user kernels' arguments cross in). */
PyObject *tm_host_memory_py(PyObject *self, PyObject *unused)
{
    char why[TM_HM_PATH + 160];
    unsigned long long available;
    (void)self;
    (void)unused;
    const tm_host_memory_limits *limits = tm_host_memory_limits_get();
    Py_BEGIN_ALLOW_THREADS available = tm_host_memory_available(why, sizeof(why));
    Py_END_ALLOW_THREADS return Py_BuildValue("(KsKs)", limits ? limits->limit : 0ULL,
                                              limits ? limits->source : "", available, why);
}
