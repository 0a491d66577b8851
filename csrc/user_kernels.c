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
 *            ("p", host ndarray or None, device address, nbytes, copy_back)  a pointer: a host
 *                  array is copied to a fresh device buffer (and back when copy_back), else the
 *                  device address is passed as it is
 *            ("s", bytes)  a scalar, its bytes exactly as the parameter's type lays them out
 *   Copies are timed with events as in timing.c; `warmup` untimed then `repeat` timed launches,
 *   each after timing.c's L2 flush unless flush_l2 is false.
 * user_load(image, lowered_name) -> (library capsule, kernel address)   cuda only: loads a CUBIN
 *   or PTX image with the runtime's library API (CUDA 12.8+), no driver API needed. */
#include "glue.h"
#include <stdlib.h>
#include <string.h>

#define TM_USER_MAX_ARGS 64
#define TM_USER_DEFAULT_SHARED (48 * 1024)

typedef struct {
    int is_ptr, copy_back;
    void *host;       /* host data (ndarray) or NULL */
    void *dev;        /* the device pointer passed to the kernel */
    int owned;        /* dev was allocated here */
    size_t bytes;
    union { unsigned char raw[16]; void *ptr; long long ll; double d; } value;
} user_arg;

typedef struct {
    void *handle;
    dim3 grid, block;
    size_t shared;
    int nargs, warmup, repeat, flush_l2;
    user_arg args[TM_USER_MAX_ARGS];
    double h2d_ms, d2h_ms, *samples_ms;
    size_t h2d_bytes, d2h_bytes;
    int registers, static_shared, blocks_per_sm;
    double occupancy;
    cudaError_t err;
    const char *step;
    size_t failed_bytes;
    char detail[4096];
    char path_report[256]; /* emu: the last launch's "path\nreason" (see the top) */
} user_job;

#ifdef TM_EMU
typedef int (*user_launcher)(const unsigned *, const unsigned *, size_t, void **, const size_t *, int,
                             int, char *, size_t);
#endif

#define UTRY(what, call) TM_TRY(job->step, what, call)

static cudaError_t user_launch(user_job *job, void **argv, const size_t *sizes)
{
#ifdef TM_EMU
    unsigned g[3] = {job->grid.x, job->grid.y, job->grid.z}, b[3] = {job->block.x, job->block.y, job->block.z};
    user_launcher fn = (user_launcher)job->handle;
    job->detail[0] = '\0';
    const int rc = fn(g, b, job->shared, argv, sizes, tm_emu_threads(), tm_emu_strict_exit(),
                      job->detail, sizeof job->detail);
    job->detail[sizeof job->detail - 1] = '\0';
    if (rc == 0) { /* detail holds the path report: kept apart from the error details */
        snprintf(job->path_report, sizeof job->path_report, "%s", job->detail);
        job->detail[0] = '\0';
    }
    return (cudaError_t)rc;
#else
    (void)sizes;
    cudaError_t err = cudaLaunchKernel((const void *)job->handle, job->grid, job->block, argv,
                                       job->shared, 0);
    return err != cudaSuccess ? err : cudaGetLastError();
#endif
}

static int user_execute(user_job *job)
{
    cudaEvent_t start = NULL, stop = NULL;
    cudaError_t err = cudaSuccess;
    void *argv[TM_USER_MAX_ARGS];
    size_t sizes[TM_USER_MAX_ARGS];
    int any_device = 0;
    struct cudaFuncAttributes attr;
    const void *func = (const void *)job->handle;

    UTRY("cudaEventCreate", cudaEventCreate(&start));
    UTRY("cudaEventCreate", cudaEventCreate(&stop));
    for (int i = 0; i < job->nargs; ++i) {
        user_arg *a = &job->args[i];
        sizes[i] = a->bytes;
        argv[i] = &a->value;
        if (!a->is_ptr) continue;
        if (a->host == NULL) { any_device = 1; continue; }
        if (a->bytes) {
            err = cudaMalloc(&a->dev, a->bytes);
            if (err != cudaSuccess) {
                a->dev = NULL;
                job->step = "cudaMalloc (kernel argument)";
                job->failed_bytes = a->bytes;
                goto cleanup;
            }
            a->owned = 1;
        }
        a->value.ptr = a->dev;
        job->h2d_bytes += a->bytes;
    }
    if (any_device) UTRY("cudaDeviceSynchronize", cudaDeviceSynchronize());
    if (job->h2d_bytes) {
        UTRY("cudaEventRecord", cudaEventRecord(start, 0));
        for (int i = 0; i < job->nargs; ++i)
            if (job->args[i].owned)
                UTRY("copy to the device",
                     tm_copy_to_device(job->args[i].dev, job->args[i].host, job->args[i].bytes));
        UTRY("cudaEventRecord", cudaEventRecord(stop, 0));
        UTRY("timing the copy to the device", tm_elapsed_ms(start, stop, &job->h2d_ms));
    }
    if (job->shared > TM_USER_DEFAULT_SHARED)
        UTRY("cudaFuncSetAttribute (dynamic shared memory)",
             cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)job->shared));
    for (int i = 0; i < job->warmup; ++i) {
        UTRY("kernel launch", user_launch(job, argv, sizes));
        UTRY("kernel execution", cudaDeviceSynchronize());
    }
    for (int i = 0; i < job->repeat; ++i) {
        if (job->flush_l2)
            UTRY("the L2 flush before a timed launch (warm_l2=True skips it)", tm_flush_l2(i));
        UTRY("cudaEventRecord", cudaEventRecord(start, 0));
        UTRY("kernel launch", user_launch(job, argv, sizes));
        UTRY("cudaEventRecord", cudaEventRecord(stop, 0));
        UTRY("kernel execution", tm_elapsed_ms(start, stop, &job->samples_ms[i]));
    }
    /* Launch facts: registers and static shared memory from the runtime (0 on the emulator). */
    if (cudaFuncGetAttributes(&attr, func) == cudaSuccess) {
        job->registers = attr.numRegs;
        job->static_shared = (int)attr.sharedSizeBytes;
    }
    {
        int device = 0, per_sm = 0, blocks = 0;
        const int threads = (int)(job->block.x * job->block.y * job->block.z);
        if (cudaGetDevice(&device) == cudaSuccess &&
            cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device) == cudaSuccess &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, func, threads, job->shared) == cudaSuccess) {
            job->blocks_per_sm = blocks;
            job->occupancy = per_sm ? (double)blocks * threads / per_sm : 0.0;
        }
        (void)cudaGetLastError();
    }
    {
        int any_back = 0;
        for (int i = 0; i < job->nargs; ++i) any_back |= job->args[i].owned && job->args[i].copy_back;
        if (any_back) {
            UTRY("cudaEventRecord", cudaEventRecord(start, 0));
            for (int i = 0; i < job->nargs; ++i) {
                user_arg *a = &job->args[i];
                if (!a->owned || !a->copy_back) continue;
                UTRY("copy to the host", tm_copy_to_host(a->host, a->dev, a->bytes));
                job->d2h_bytes += a->bytes;
            }
            UTRY("cudaEventRecord", cudaEventRecord(stop, 0));
            UTRY("timing the copy to the host", tm_elapsed_ms(start, stop, &job->d2h_ms));
        } else {
            UTRY("kernel execution", cudaDeviceSynchronize());
        }
    }
cleanup:
    for (int i = 0; i < job->nargs; ++i)
        if (job->args[i].owned) {
            cudaFree(job->args[i].dev);
            job->args[i].owned = 0;
        }
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    job->err = err;
#ifdef TM_EMU
    if (err != cudaSuccess && job->detail[0] == '\0') {
        const char *d = tm_emu_last_error_detail();
        if (d) snprintf(job->detail, sizeof job->detail, "%s", d);
    }
#endif
    if (err != cudaSuccess) (void)cudaGetLastError();
    return err == cudaSuccess ? 0 : -1;
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
    d->x = (unsigned)v[0]; d->y = (unsigned)v[1]; d->z = (unsigned)v[2];
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
    PyObject *host, *addr;
    Py_ssize_t nbytes;
    int copy_back;
    if (!PyArg_ParseTuple(item, "sOOnp", &kind, &host, &addr, &nbytes, &copy_back)) return -1;
    a->is_ptr = 1;
    a->copy_back = copy_back;
    a->bytes = (size_t)nbytes;
    if (host != Py_None) {
        if (!PyArray_Check(host) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)host) ||
            (size_t)PyArray_NBYTES((PyArrayObject *)host) != a->bytes ||
            (copy_back && !PyArray_ISWRITEABLE((PyArrayObject *)host))) {
            PyErr_Format(PyExc_ValueError,
                         "argument %d: need a C-contiguous ndarray of %zd bytes (writeable for "
                         "an output)", index, nbytes);
            return -1;
        }
        a->host = PyArray_DATA((PyArrayObject *)host);
    } else {
        a->dev = PyLong_AsVoidPtr(addr);
        if (a->dev == NULL && PyErr_Occurred()) return -1;
    }
    a->value.ptr = a->dev;
    return 0;
}

static PyObject *user_result(const user_job *job)
{
    /* emu: the last launch's path and reason (cuda: both "") */
    const char *reason = strchr(job->path_report, '\n');
    const int path_len = reason ? (int)(reason - job->path_report) : 0;
    reason = reason ? reason + 1 : "";
    PyObject *samples = PyList_New(job->repeat);
    if (samples == NULL) return NULL;
    for (int i = 0; i < job->repeat; ++i) {
        PyObject *v = PyFloat_FromDouble(job->samples_ms[i]);
        if (v == NULL) { Py_DECREF(samples); return NULL; }
        PyList_SET_ITEM(samples, i, v);
    }
    return Py_BuildValue(
        "{s:N,s:d,s:d,s:n,s:n,s:(III),s:(III),s:n,s:i,s:i,s:i,s:i,s:d,s:d,s:s,s:s#,s:s}",
        "samples_ms", samples,
        "h2d_ms", job->h2d_ms, "d2h_ms", job->d2h_ms, "h2d_bytes", (Py_ssize_t)job->h2d_bytes,
        "d2h_bytes", (Py_ssize_t)job->d2h_bytes, "grid", job->grid.x, job->grid.y, job->grid.z,
        "block", job->block.x, job->block.y, job->block.z, "shared_bytes",
        (Py_ssize_t)(job->shared + (size_t)job->static_shared), "static_shared_bytes",
        job->static_shared, "registers", job->registers, "launches", 1, "blocks_per_sm",
        job->blocks_per_sm, "occupancy", job->occupancy, "model_bytes", 0.0, "l2",
        tm_l2_state(job->flush_l2), "path", job->path_report, (Py_ssize_t)path_len, "path_reason", reason);
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
    if (parse_dim3(grid_obj, &job->grid, "grid") < 0 || parse_dim3(block_obj, &job->block, "block") < 0)
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
    if ((job->samples_ms = calloc((size_t)job->repeat, sizeof(double))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* The argument tuple (and so every host array) stays referenced by the caller. */
    Py_BEGIN_ALLOW_THREADS
    rc = user_execute(job);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        const char *name = cudaGetErrorName(job->err), *text = cudaGetErrorString(job->err);
        if (job->err == cudaErrorMemoryAllocation)
            PyErr_Format(PyExc_MemoryError, "device out of memory during %s (%zu bytes)%s%s",
                         job->step, job->failed_bytes, job->detail[0] ? ": " : "", job->detail);
        else if (job->err == cudaErrorNoDevice || job->err == cudaErrorInsufficientDriver)
            tm_raise_cuda_error(job->err, job->step);
        else
            PyErr_Format(PyExc_RuntimeError, "%s failed: %s: %s%s%s", job->step, name, text,
                         job->detail[0] ? "\n" : "", job->detail);
        goto done;
    }
    result = user_result(job);
done:
    free(job->samples_ms);
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
    (void)image; (void)image_size; (void)name;
    return PyErr_Format(PyExc_RuntimeError, "user_load is for the cuda backend");
#elif CUDART_VERSION < 12080
    (void)image; (void)image_size; (void)name;
    return PyErr_Format(PyExc_RuntimeError,
                        "tiledmm was built with CUDA %d; loading run-time compiled kernels needs "
                        "the runtime library API of CUDA 12.8 or later", CUDART_VERSION);
#else
    cudaLibrary_t lib = NULL;
    cudaKernel_t kernel = NULL;
    cudaError_t err;
    Py_BEGIN_ALLOW_THREADS
    err = cudaLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0);
    if (err == cudaSuccess) err = cudaLibraryGetKernel(&kernel, lib, name);
    Py_END_ALLOW_THREADS
    if (err != cudaSuccess) {
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
