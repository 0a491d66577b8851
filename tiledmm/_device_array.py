"""Arrays that stay on the device between calls, and other libraries' device arrays as inputs.

`tm.to_device(x)` copies a NumPy array to the device once; kernels then read it in place and,
with `output="device"` (the default when any input is on the device), leave their result
there: no copies, and the timing shows none. A DeviceArray exports
`__cuda_array_interface__` and DLPack, so CuPy, PyTorch and others use it without a copy;
CuPy arrays and PyTorch CUDA tensors (anything with `__cuda_array_interface__`) are accepted
as inputs the same way. On the `emu` backend "device" memory is host memory: DLPack exports
it as CPU memory (so `numpy.from_dlpack` shares it) and there is no CUDA array interface.
"""
import math
import operator

import numpy as np

from . import _backend

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class DeviceArray:
    """A C-contiguous float32/float64 array in device memory, owned by this object.

    Its shape, dtype, strides, address and backend describe memory allocated once, so they are
    read-only (assigning one raises AttributeError, as NumPy and CuPy do for what cannot
    change): `reshape` gives a view with another shape, and `get().astype(...)` another dtype.
    """

    def __init__(self, buffer, address, shape, dtype, backend):
        self._buffer = buffer  # capsule that frees the memory; None for an empty array
        self._address = address
        self._shape = tuple(int(n) for n in shape)
        self._dtype = np.dtype(dtype)
        self._backend = backend

    @property
    def shape(self):
        """The dimensions (a tuple; read-only: use reshape for a view with another shape)."""
        return self._shape

    @property
    def dtype(self):
        """The element type, float32 or float64 (read-only)."""
        return self._dtype

    @property
    def strides(self):
        """Bytes between consecutive elements along each dimension (C-contiguous; read-only)."""
        return _c_strides(self._shape, self._dtype.itemsize)

    @property
    def address(self):
        """The device address of the first element (read-only)."""
        return self._address

    @property
    def backend(self):
        """The backend whose memory this is, "cuda" or "emu" (read-only)."""
        return self._backend

    @property
    def ndim(self):
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self):
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        """Bytes of device memory the elements take."""
        return self.size * self.dtype.itemsize

    def get(self):
        """A NumPy copy of the array."""
        out = np.empty(self.shape, self.dtype)
        if self.size:
            _backend.module(self.backend).download(self.address, out)
        return out

    def __array__(self, dtype=None, copy=None):
        """numpy.asarray(d): a NumPy copy, as get()."""
        out = self.get()
        return out if dtype is None else out.astype(dtype, copy=False)

    def reshape(self, *shape):
        """A view with another shape (same memory, same owner)."""
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        shape = _reshape_target(tuple(shape), self.shape, self.size)
        view = DeviceArray(self._buffer, self.address, shape, self.dtype, self.backend)
        view._base = self
        return view

    @property
    def __cuda_array_interface__(self):
        """The CUDA array interface (version 3) for CuPy, PyTorch, Numba (cuda backend only)."""
        if self.backend != "cuda":
            raise AttributeError("an emu DeviceArray is host memory: use DLPack or numpy.asarray")
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.address, False),
                "strides": None, "version": 3}

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule sharing the memory (CUDA memory on cuda, CPU memory on emu)."""
        # tiledmm's work is finished when its calls return (they synchronise), so any
        # consumer stream may use the memory at once.
        return _backend.module(self.backend).dlpack(self, self.address, self.shape,
                                                    self.dtype.itemsize * 8)

    def __dlpack_device__(self):
        """(2, 0) for CUDA device 0 on cuda; (1, 0), the CPU, on emu."""
        return (2, 0) if self.backend == "cuda" else (1, 0)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, backend={self.backend!r})"


def to_device(x, backend=None):
    """Copy a float32/float64 array (any layout; array-likes too) to the device, once.
    Returns a DeviceArray; a DeviceArray given is returned as is.

    >>> A = np.ones((2, 3), np.float32); B = np.ones((3, 2), np.float32)
    >>> dA, dB = tm.to_device(A, backend="emu"), tm.to_device(B, backend="emu")
    >>> res = tm.matmul(dA, dB, backend="emu")     # read in place, result left on the device
    >>> res.out, res.timing.copies
    (DeviceArray(shape=(2, 2), dtype=float32, backend='emu'), ())
    >>> res.out.get()
    array([[3., 3.],
           [3., 3.]], dtype=float32)
    """
    mod, name = _backend.resolve(backend)
    if isinstance(x, DeviceArray):
        return x
    a = np.asarray(x)
    if a.dtype not in _DTYPES:
        raise TypeError(f"to_device: dtype {a.dtype}; tiledmm keeps float32 or float64 on the "
                        f"device. Convert explicitly, e.g. x.astype(numpy.float32)")
    buffer, address = mod.upload(a)
    return DeviceArray(buffer, address, a.shape, a.dtype, name)


# A device input whose producer named no stream: the call waits for the whole device.
WAIT_DEVICE = object()


class DeviceInput:
    """How a device-resident input reaches the C glue: a placeholder for the checks (a
    zero-stride array of the right shape and dtype, no memory), its device address, and what the
    call waits for before reading it: `stream` is __cuda_array_interface__ v3's "stream" (None:
    ready; 1 the legacy default stream, 2 per-thread, else a cudaStream_t), or WAIT_DEVICE."""

    def __init__(self, address, shape, dtype, owner, stream=WAIT_DEVICE):
        self.address = address
        self.placeholder = np.broadcast_to(np.zeros((), dtype), shape)
        self.owner = owner  # keeps the memory alive for the call
        self.stream = stream

    def pointer(self):
        """What the C glue's run() takes: the bare address (wait for the device) or
        (address, stream)."""
        return self.address if self.stream is WAIT_DEVICE else (self.address, self.stream)


def as_device_input(x, backend):
    """A DeviceInput for a DeviceArray or an object with __cuda_array_interface__, else None."""
    if isinstance(x, DeviceArray):
        if x.backend != backend:
            raise ValueError(f"this array lives on the {x.backend!r} backend, the call runs on "
                             f"{backend!r}")
        return DeviceInput(x.address, x.shape, x.dtype, x)
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception as exc:  # PyTorch raises for tensors that require grad
        raise TypeError(f"cannot read the CUDA array interface of this input: {exc}") from exc
    if backend != "cuda":
        raise ValueError("a CUDA device array (CuPy, PyTorch...) needs backend='cuda'")
    dtype = np.dtype(cai["typestr"])
    if dtype not in _DTYPES:
        raise TypeError(f"device input has dtype {dtype}; tiledmm kernels run in float32 or "
                        f"float64. Convert it on the device first")
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is not None and tuple(strides) != _c_strides(shape, dtype.itemsize) and \
            math.prod(shape) > 1:
        raise ValueError("device input is not C-contiguous; make a contiguous copy on the device "
                         "first (e.g. cupy.ascontiguousarray(x) or x.contiguous())")
    # v3's "stream" says where the producer wrote it (a stream wait instead of a device-wide
    # synchronisation); an older interface, or none given, means waiting for the device.
    stream = cai["stream"] if cai.get("version", 0) >= 3 and "stream" in cai else WAIT_DEVICE
    if stream is not WAIT_DEVICE and stream is not None and not isinstance(stream, int):
        stream = WAIT_DEVICE
    return DeviceInput(cai["data"][0], shape, dtype, x, stream)


def _reshape_target(shape, old_shape, size):
    """The shape a reshape to `shape` gives (one -1 is inferred, as in NumPy); ValueError when
    it is not a shape of `size` elements."""
    try:
        dims = [operator.index(n) for n in shape]
    except TypeError:
        raise TypeError(f"reshape: the shape must be integers, got {shape!r}") from None
    unknown = [i for i, n in enumerate(dims) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in dims):
        raise ValueError(f"cannot reshape {old_shape} to {tuple(dims)}: dimensions must be "
                         f">= 0, with at most one -1")
    known = math.prod(n for n in dims if n != -1)
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape {old_shape} to {tuple(dims)}")
        dims[unknown[0]] = size // known
    elif known != size:
        raise ValueError(f"cannot reshape {old_shape} to {tuple(dims)}")
    return tuple(dims)


def _c_strides(shape, itemsize):
    """The byte strides of a C-contiguous array of this shape (computed, not allocated)."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))
