/* user_kernels.c: launching a kernel the user wrote (tiledmm/user_kernels/kernel.py compiles it).
 *
 * user_run(handle, grid, block, shared_bytes, args, warmup, repeat[, flush_l2=True]) -> dict
 *          (as tm_run's, "l2" included)
 *   handle   cuda: a cudaKernel_t from user_load; emu: the address of the generated launcher
 *            `int launch(const unsigned grid[3], const unsigned block[3], size_t shared,
 *                        void **args, const size_t *sizes, int threads, int strict,
 *                        char *detail, size_t detail_size)` in the user's shared object;
 *            `detail` is the emulator's report of a failed launch, or after a launch that ran
 *            "path\nreason" (tiledmm_kernel.h's tm_user_finish): the dict's "path", "path_reason".
 *   args     one tuple per kernel parameter:
 *            ("p", host ndarray or None, device address, nbytes, copy_back[, stream])  a
 *                  pointer: a host array is copied to a fresh device buffer (and back when
 *                  copy_back), else the device address is passed as it is, after waiting for
 *                  `stream` (None: ready; an int as __cuda_array_interface__ v3's "stream";
 *                  left out: the whole device)
 *            ("s", bytes)  a scalar, its bytes exactly as the parameter's type lays them out
 *   Run by the timed-launch core (launch_core.h), as the registry's kernels are: copies timed
 *   with events, `warmup` untimed then `repeat` timed launches, each after the L2 flush unless
 *   flush_l2 is false.
 * user_load(image, lowered_name) -> (library capsule, kernel address)   cuda only: loads a CUBIN
 *   or PTX image with the runtime's library API (CUDA 12.8+), no driver API needed. */
#include "glue.h"
#include "tm_limits.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TM_USER_MAX_ARGS 64

typedef struct {
    int is_ptr, copy_back;
    void *host;       /* host data (ndarray) or NULL */
    void *dev;        /* device memory given (host == NULL) */
    int wait;         /* given device memory: TM_WAIT_* (launch_core.h) */
    uintptr_t stream; /* TM_WAIT_STREAM: the producer's stream */
    size_t bytes;
    union {
        unsigned char raw[16];
        void *ptr;
        long long ll;
        double d;
    } value;
} user_arg;

typedef struct {
    void *handle;
    dim3 grid, block;
    size_t shared;
    int nargs, warmup, repeat, flush_l2;
    user_arg args[TM_USER_MAX_ARGS];
    tm_launch_buffer buffers[TM_USER_MAX_ARGS];
    int buffer_of[TM_USER_MAX_ARGS]; /* pointer argument -> its buffer */
    void *argv[TM_USER_MAX_ARGS];
    size_t sizes[TM_USER_MAX_ARGS];
    tm_launch_record record;
    tm_launch_failure failure;
    char detail[4096];
    char path_report[256]; /* emu: the last launch's "path\nreason" (see the top) */
} user_job;

#ifdef TM_EMU
typedef int (*user_launcher)(const unsigned *, const unsigned *, size_t, void **, const size_t *,
                             int, int, char *, size_t);
#endif

/* After allocation: pointer arguments hold their device buffers; a kernel that asks for more
 * dynamic shared memory than the default opts in. */
static cudaError_t user_prepare(void *ctx, const char **step)
{
    user_job *job = ctx;
    for (int i = 0; i < job->nargs; ++i)
        if (job->args[i].is_ptr) job->args[i].value.ptr = job->buffers[job->buffer_of[i]].dev;
    *step = "cudaFuncSetAttribute (dynamic shared memory)";
    if (job->shared > TM_SHARED_DEFAULT_BYTES)
        return cudaFuncSetAttribute((const void *)job->handle,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)job->shared);
    return cudaSuccess;
}

static cudaError_t user_launch(void *ctx, tm_launch_facts *facts)
{
    user_job *job = ctx;
    const unsigned g[3] = {job->grid.x, job->grid.y, job->grid.z};
    const unsigned b[3] = {job->block.x, job->block.y, job->block.z};
    for (int d = 0; d < 3; ++d) {
        facts->grid[d] = g[d];
        facts->block[d] = b[d];
    }
    facts->shared_bytes = facts->dynamic_shared_bytes = job->shared;
    facts->func = job->handle;
    facts->launches = 1;
#ifdef TM_EMU
    user_launcher fn = (user_launcher)job->handle;
    job->detail[0] = '\0';
    const int rc = fn(g, b, job->shared, job->argv, job->sizes, tm_emu_threads(),
                      tm_emu_strict_exit(), job->detail, sizeof job->detail);
    job->detail[sizeof job->detail - 1] = '\0';
    if (rc == 0) { /* detail holds the path report: kept apart from the error details */
        snprintf(job->path_report, sizeof job->path_report, "%s", job->detail);
        job->detail[0] = '\0';
    }
    return (cudaError_t)rc;
#else
    cudaError_t err = cudaLaunchKernel((const void *)job->handle, job->grid, job->block, job->argv,
                                       job->shared, 0);
    return err != cudaSuccess ? err : cudaGetLastError();
#endif
}

static int user_execute(user_job *job)
{
    tm_launch_request request = {0};
    tm_launch_facts facts;
    int n = 0, rc;
    for (int i = 0; i < job->nargs; ++i) {
        user_arg *a = &job->args[i];
        job->sizes[i] = a->bytes;
        job->argv[i] = &a->value;
        if (!a->is_ptr) continue;
        tm_launch_buffer *b = &job->buffers[n];
        job->buffer_of[i] = n++;
        memset(b, 0, sizeof *b);
        b->bytes = a->bytes;
        if (a->host == NULL) { /* device memory: passed as it is */
            b->dev = a->dev;
            b->wait = a->wait;
            b->stream = a->stream;
            continue;
        }
        b->host_in = a->host;
        b->host_out = a->copy_back ? a->host : NULL;
        b->step = "cudaMalloc (kernel argument)";
    }
    request.launch = user_launch;
    request.prepare = user_prepare;
    request.ctx = job;
    request.buffers = job->buffers;
    request.n_buffers = n;
    request.warmup = job->warmup;
    request.repeat = job->repeat;
    request.flush_l2 = job->flush_l2;
    request.facts_required = 0;  /* registers and static shared memory: 0 where unknown */
    request.facts_cacheable = 0; /* a handle may name another kernel once its library is gone */
    rc = tm_timed_launch(&request, &job->record, &facts, &job->failure);
    if (rc == 0) {
        /* the static shared memory too; emu: the last launch's path and reason (cuda: "") */
        const char *reason = strchr(job->path_report, '\n');
        const int path_len = reason ? (int)(reason - job->path_report) : 0;
        job->record.shared_bytes += job->record.static_shared_bytes;
        snprintf(job->record.path, sizeof job->record.path, "%.*s", path_len, job->path_report);
        snprintf(job->record.path_reason, sizeof job->record.path_reason, "%s",
                 reason ? reason + 1 : "");
    }
#ifdef TM_EMU
    if (rc != 0 && job->detail[0] == '\0') {
        const char *d = tm_emu_last_error_detail();
        if (d) snprintf(job->detail, sizeof job->detail, "%s", d);
    }
#endif
    return rc;
}

static int parse_dim3(PyObject *obj, dim3 *d, const char *what)
{
    unsigned long long v[3] = {1, 1, 1};
    if (!PyArg_ParseTuple(obj, "KKK", &v[0], &v[1], &v[2])) {
        PyErr_Format(PyExc_ValueError, "%s must be 3 non-negative integers", what);
        return -1;
    }
    for (int i = 0; i < 3; ++i)
        if (v[i] > 0xffffffffull) {
            PyErr_Format(PyExc_ValueError, "%s[%d] = %llu is too large", what, i, v[i]);
            return -1;
        }
    d->x = (unsigned)v[0];
    d->y = (unsigned)v[1];
    d->z = (unsigned)v[2];
    return 0;
}

static int parse_arg(PyObject *item, user_arg *a, int index)
{
    const char *kind;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 2 ||
        (kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(item, 0))) == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "argument %d: malformed descriptor", index);
        return -1;
    }
    if (kind[0] == 's') {
        char *buf;
        Py_ssize_t n;
        if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(item, 1), &buf, &n) < 0) return -1;
        if (n <= 0 || n > (Py_ssize_t)sizeof a->value) {
            PyErr_Format(PyExc_ValueError, "argument %d: scalar of %zd bytes", index, n);
            return -1;
        }
        memcpy(a->value.raw, buf, (size_t)n);
        a->bytes = (size_t)n;
        return 0;
    }
    PyObject *host, *addr, *stream = NULL;
    Py_ssize_t nbytes;
    int copy_back;
    if (!PyArg_ParseTuple(item, "sOOnp|O", &kind, &host, &addr, &nbytes, &copy_back, &stream))
        return -1;
    a->is_ptr = 1;
    a->copy_back = copy_back;
    a->bytes = (size_t)nbytes;
    if (host != Py_None) {
        if (!PyArray_Check(host) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)host) ||
            (size_t)PyArray_NBYTES((PyArrayObject *)host) != a->bytes ||
            (copy_back && !PyArray_ISWRITEABLE((PyArrayObject *)host))) {
            PyErr_Format(PyExc_ValueError,
                         "argument %d: need a C-contiguous ndarray of %zd bytes (writeable for "
                         "an output)",
                         index, nbytes);
            return -1;
        }
        a->host = PyArray_DATA((PyArrayObject *)host);
    } else {
        a->dev = PyLong_AsVoidPtr(addr);
        if (a->dev == NULL && PyErr_Occurred()) return -1;
        a->wait = stream == NULL      ? TM_WAIT_DEVICE
                  : stream == Py_None ? TM_WAIT_NONE
                                      : TM_WAIT_STREAM;
        if (a->wait == TM_WAIT_STREAM) {
            void *handle = PyLong_AsVoidPtr(stream);
            if (handle == NULL && PyErr_Occurred()) return -1;
            a->stream = (uintptr_t)handle;
        }
    }
    a->value.ptr = a->dev;
    return 0;
}

PyObject *tm_user_run_py(PyObject *self, PyObject *args)
{
    PyObject *handle_obj, *grid_obj, *block_obj, *arg_list, *result = NULL;
    Py_ssize_t shared;
    user_job *job;
    int rc;
    (void)self;
    job = calloc(1, sizeof *job);
    if (job == NULL) return PyErr_NoMemory();
    job->flush_l2 = 1;
    if (!PyArg_ParseTuple(args, "OO!O!nO!ii|p", &handle_obj, &PyTuple_Type, &grid_obj,
                          &PyTuple_Type, &block_obj, &shared, &PyTuple_Type, &arg_list,
                          &job->warmup, &job->repeat, &job->flush_l2))
        goto done;
    if ((job->handle = PyLong_AsVoidPtr(handle_obj)) == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null kernel handle");
        goto done;
    }
    if (parse_dim3(grid_obj, &job->grid, "grid") < 0 ||
        parse_dim3(block_obj, &job->block, "block") < 0)
        goto done;
    if (shared < 0 || job->warmup < 0 || job->repeat < 1) {
        PyErr_Format(PyExc_ValueError, "need shared_bytes >= 0, warmup >= 0, repeat >= 1");
        goto done;
    }
    job->shared = (size_t)shared;
    job->nargs = (int)PyTuple_GET_SIZE(arg_list);
    if (job->nargs > TM_USER_MAX_ARGS) {
        PyErr_Format(PyExc_ValueError, "at most %d kernel arguments", TM_USER_MAX_ARGS);
        goto done;
    }
    for (int i = 0; i < job->nargs; ++i)
        if (parse_arg(PyTuple_GET_ITEM(arg_list, i), &job->args[i], i) < 0) goto done;
    /* The argument tuple (and so every host array) stays referenced by the caller. */
    Py_BEGIN_ALLOW_THREADS rc = user_execute(job);
    Py_END_ALLOW_THREADS if (rc != 0)
    {
        const tm_launch_failure *f = &job->failure;
        const char *name = cudaGetErrorName(f->err), *text = cudaGetErrorString(f->err);
        if (f->err == cudaErrorMemoryAllocation)
            PyErr_Format(PyExc_MemoryError, "device out of memory during %s (%zu bytes)%s%s",
                         f->step, f->bytes, job->detail[0] ? ": " : "", job->detail);
        else if (f->err == cudaErrorNoDevice || f->err == cudaErrorInsufficientDriver)
            tm_raise_cuda_error(f->err, f->step);
        else
            PyErr_Format(PyExc_RuntimeError, "%s failed: %s: %s%s%s", f->step, name, text,
                         job->detail[0] ? "\n" : "", job->detail);
        goto done;
    }
    if ((result = PyDict_New()) != NULL && tm_launch_dict(&job->record, result) < 0)
        Py_CLEAR(result);
done:
    tm_launch_record_free(&job->record);
    free(job);
    return result;
}

/* ---- loading compiled code (cuda) ---- */
#define LIBRARY_CAPSULE "tiledmm.user_library"

#if !defined(TM_EMU) && CUDART_VERSION >= 12080
static void free_library(PyObject *capsule)
{
    void *lib = PyCapsule_GetPointer(capsule, LIBRARY_CAPSULE);
    if (lib) {
        cudaLibraryUnload((cudaLibrary_t)lib);
        (void)cudaGetLastError();
    }
}
#endif

PyObject *tm_user_load_py(PyObject *self, PyObject *args)
{
    const char *image, *name;
    Py_ssize_t image_size;
    (void)self;
    if (!PyArg_ParseTuple(args, "y#s", &image, &image_size, &name)) return NULL;
#if defined(TM_EMU)
    (void)image;
    (void)image_size;
    (void)name;
    return PyErr_Format(PyExc_RuntimeError, "user_load is for the cuda backend");
#elif CUDART_VERSION < 12080
    (void)image;
    (void)image_size;
    (void)name;
    return PyErr_Format(PyExc_RuntimeError,
                        "tiledmm was built with CUDA %d; loading run-time compiled kernels needs "
                        "the runtime library API of CUDA 12.8 or later",
                        CUDART_VERSION);
#else
    cudaLibrary_t lib = NULL;
    cudaKernel_t kernel = NULL;
    cudaError_t err;
    Py_BEGIN_ALLOW_THREADS err = cudaLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0);
    if (err == cudaSuccess) err = cudaLibraryGetKernel(&kernel, lib, name);
    Py_END_ALLOW_THREADS if (err != cudaSuccess)
    {
        if (lib) cudaLibraryUnload(lib);
        (void)cudaGetLastError();
        return tm_raise_cuda_error(err, "loading the compiled kernel (cudaLibraryLoadData)");
    }
    PyObject *capsule = PyCapsule_New(lib, LIBRARY_CAPSULE, free_library);
    if (capsule == NULL) {
        cudaLibraryUnload(lib);
        return NULL;
    }
    return Py_BuildValue("(NN)", capsule, PyLong_FromVoidPtr(kernel));
#endif
}
