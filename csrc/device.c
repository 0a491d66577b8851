/* device.c: device memory that outlives a call (tiledmm.DeviceArray): a buffer owned by a
 * Python capsule that frees it, copies in and out, and the DLPack export that lets CuPy,
 * PyTorch, JAX or NumPy (on the emulator) share it without a copy. */
#include "glue.h"
#include <stdint.h>
#include <stdlib.h>

#define BUFFER_CAPSULE "tiledmm.device_buffer"

/* A capsule's context: NULL for a cudaMalloc'd buffer; for one from the stream-ordered pool
 * (tm_device_alloc) its device + 1. */
static void free_buffer(PyObject *capsule)
{
    void *ptr = PyCapsule_GetPointer(capsule, BUFFER_CAPSULE);
    const intptr_t pooled_on = (intptr_t)PyCapsule_GetContext(capsule);
    int current = 0;
    if (ptr == NULL) {
        PyErr_Clear();
    } else if (pooled_on == 0) {
        cudaFree(ptr);
    } else if (cudaGetDevice(&current) == cudaSuccess &&
               (current == pooled_on - 1 || cudaSetDevice((int)pooled_on - 1) == cudaSuccess)) {
        /* Another library may still read the buffer on a stream of its own (it came to them
         * through DLPack or __cuda_array_interface__): wait for the device, as cudaFree does,
         * then give the memory back to the pool for the next call, which cudaFree would unmap. */
        (void)cudaDeviceSynchronize();
        tm_device_free(ptr);
        if (current != pooled_on - 1) (void)cudaSetDevice(current);
    }
    (void)cudaGetLastError(); /* a free cannot be reported from a destructor */
}

static PyObject *buffer_capsule(void *ptr, int pooled)
{
    int device = 0;
    cudaError_t err = pooled ? cudaGetDevice(&device) : cudaSuccess;
    PyObject *capsule = err == cudaSuccess ? PyCapsule_New(ptr, BUFFER_CAPSULE, free_buffer) : NULL;
    if (capsule != NULL && pooled &&
        PyCapsule_SetContext(capsule, (void *)(intptr_t)(device + 1)) < 0) {
        PyCapsule_SetDestructor(capsule, NULL); /* freed below, once */
        Py_CLEAR(capsule);
    }
    if (capsule == NULL) {
        if (pooled)
            tm_device_free(ptr);
        else
            cudaFree(ptr);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();
            tm_raise_cuda_error(err, "cudaGetDevice");
        }
    }
    return capsule;
}

PyObject *tm_device_buffer_capsule(void *ptr)
{
    return buffer_capsule(ptr, 0);
}

PyObject *tm_call_buffer_capsule(void *ptr)
{
    return buffer_capsule(ptr, tm_device_pool_in_use());
}

/* ---- DLPack (https://dmlc.github.io/dlpack/latest/c_api.html), the v0.x ABI every consumer
 * accepts. Declared here: it is a 60-line header and no Python package ships it for C. ---- */
typedef struct {
    int32_t device_type, device_id;
} DLDevice;
typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
enum { kDLCPU = 1, kDLCUDA = 2, kDLFloat = 2 };

typedef struct {
    DLManagedTensor managed;
    int64_t shape[NPY_MAXDIMS];
    PyObject *owner; /* keeps the device buffer alive while a consumer uses it */
} exported_tensor;

static void dlpack_deleter(DLManagedTensor *self)
{
    exported_tensor *t = (exported_tensor *)self;
    PyGILState_STATE gil = PyGILState_Ensure(); /* consumers may call this from any thread */
    Py_XDECREF(t->owner);
    PyGILState_Release(gil);
    free(t);
}

static void dlpack_capsule_destructor(PyObject *capsule)
{
    /* Consumed capsules are renamed "used_dltensor" and the consumer calls the deleter. */
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
        if (m && m->deleter) m->deleter(m);
    }
}

/* dlpack(owner, ptr, shape, bits) -> "dltensor" capsule of a C-contiguous float array. */
PyObject *tm_dlpack_py(PyObject *self, PyObject *args)
{
    PyObject *owner, *shape;
    void *ptr;
    PyObject *ptr_obj;
    int bits, device = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO!i", &owner, &ptr_obj, &PyTuple_Type, &shape, &bits))
        return NULL;
    if ((ptr = PyLong_AsVoidPtr(ptr_obj)) == NULL && PyErr_Occurred()) return NULL;
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    if (ndim > NPY_MAXDIMS) return PyErr_Format(PyExc_ValueError, "too many dimensions");
    exported_tensor *t = calloc(1, sizeof(*t));
    if (t == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < ndim; ++i) {
        t->shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (t->shape[i] == -1 && PyErr_Occurred()) {
            free(t);
            return NULL;
        }
    }
#ifdef TM_EMU
    const int device_type = kDLCPU; /* the emulator's device memory is host memory */
#else
    const int device_type = kDLCUDA;
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        device = 0;
    }
#endif
    t->managed.dl_tensor = (DLTensor){
        ptr, {device_type, device}, (int32_t)ndim, {kDLFloat, (uint8_t)bits, 1}, t->shape, NULL, 0};
    t->managed.manager_ctx = t;
    t->managed.deleter = dlpack_deleter;
    Py_INCREF(owner);
    t->owner = owner;
    PyObject *capsule = PyCapsule_New(&t->managed, "dltensor", dlpack_capsule_destructor);
    if (capsule == NULL) dlpack_deleter(&t->managed);
    return capsule;
}

/* upload(array) -> (capsule, address): a new device buffer holding a copy of the array
 * (float32/float64, any layout: copied through a C-contiguous version). */
PyObject *tm_upload_py(PyObject *self, PyObject *args)
{
    PyObject *obj;
    void *ptr = NULL;
    cudaError_t err = cudaSuccess;
    (void)self;
    if (!PyArg_ParseTuple(args, "O", &obj)) return NULL;
    PyArrayObject *a = (PyArrayObject *)PyArray_FromAny(
        obj, NULL, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_NOTSWAPPED, NULL);
    if (a == NULL) return NULL;
    const size_t bytes = (size_t)PyArray_NBYTES(a);
    (void)tm_pin_input(a);
    Py_BEGIN_ALLOW_THREADS if (bytes)
    {
        err = cudaMalloc(&ptr, bytes);
        if (err == cudaSuccess) err = tm_copy_to_device(ptr, PyArray_DATA(a), bytes);
        if (err != cudaSuccess && ptr) {
            cudaFree(ptr);
            ptr = NULL;
        }
    }
    Py_END_ALLOW_THREADS Py_DECREF(a);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return tm_raise_cuda_error(err, "copying an array to the device");
    }
    PyObject *capsule = ptr ? tm_device_buffer_capsule(ptr) : (Py_INCREF(Py_None), Py_None);
    if (capsule == NULL) return NULL;
    return Py_BuildValue("(NN)", capsule, PyLong_FromVoidPtr(ptr));
}

/* download(address, array): copy the device bytes at address into the C-contiguous array.
 * upload_into(address, array): the other way, the array's bytes into existing device memory
 * (how an isolated user kernel's device-array outputs come back from its worker process). */
static PyObject *copy_between(PyObject *args, int to_device)
{
    PyObject *ptr_obj;
    PyArrayObject *a;
    cudaError_t err = cudaSuccess;
    if (!PyArg_ParseTuple(args, "OO!", &ptr_obj, &PyArray_Type, &a)) return NULL;
    void *ptr = PyLong_AsVoidPtr(ptr_obj);
    if (ptr == NULL && PyErr_Occurred()) return NULL;
    if (!PyArray_IS_C_CONTIGUOUS(a) || (!to_device && !PyArray_ISWRITEABLE(a)))
        return PyErr_Format(PyExc_ValueError, "%s needs a %sC-contiguous array",
                            to_device ? "upload_into" : "download", to_device ? "" : "writeable ");
    const size_t bytes = (size_t)PyArray_NBYTES(a);
    Py_BEGIN_ALLOW_THREADS if (bytes) err = to_device
                                                ? tm_copy_to_device(ptr, PyArray_DATA(a), bytes)
                                                : tm_copy_to_host(PyArray_DATA(a), ptr, bytes);
    Py_END_ALLOW_THREADS if (err != cudaSuccess)
    {
        (void)cudaGetLastError();
        return tm_raise_cuda_error(err, to_device ? "copying an array to the device"
                                                  : "copying an array to the host");
    }
    Py_RETURN_NONE;
}

PyObject *tm_download_py(PyObject *self, PyObject *args)
{
    (void)self;
    return copy_between(args, 0);
}

PyObject *tm_upload_into_py(PyObject *self, PyObject *args)
{
    (void)self;
    return copy_between(args, 1);
}

/* synchronize(): wait for all work on the device (other libraries' streams included). */
PyObject *tm_synchronize_py(PyObject *self, PyObject *unused)
{
    cudaError_t err;
    (void)self;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS err = cudaDeviceSynchronize();
    Py_END_ALLOW_THREADS if (err != cudaSuccess)
    {
        (void)cudaGetLastError();
        return tm_raise_cuda_error(err, "cudaDeviceSynchronize");
    }
    Py_RETURN_NONE;
}
