"""`T **` kernel parameters (lecture 001's `matadd_kernel(float **C, ...)`): the kernel gets a
table of row pointers into a 2-D array. The table holds addresses, so it is built where the
kernel runs, after the array has its final address there:

- emu, isolated (the default): in tiledmm's worker, in a region of the launch's shared-memory
  segment that the caller reserved for it (between guard pages like every argument), pointing
  into the array's region as the worker maps it;
- emu, isolate=False: in the caller, pointing into the (contiguous) array itself;
- cuda: on the device: the array is copied to a device buffer, then a table of its rows'
  device addresses is copied beside it; the array is copied back after the launch when the
  parameter is not const.
"""
import ctypes

import numpy as np


def row_table(backend, mod, address, rows, row_bytes, nbytes, copy_back, on_device=False,
              table=None):
    """The packed argument for a `T **` parameter whose array (rows x row_bytes, nbytes in all)
    is at `address`: host memory where the kernel runs (emu), host memory to copy to the device
    (cuda), or device memory (cuda, on_device=True). `table`: a uint64 array to fill (emu: the
    segment's region for it). Returns (packed argument, objects to keep alive until the launch
    ends, a function to call after the launch or None)."""
    offsets = np.arange(rows, dtype=np.uint64) * np.uint64(row_bytes)
    if backend == "emu":
        if table is None:
            table = np.empty(rows, np.uint64)
        table[:] = np.uint64(address) + offsets
        return ("p", None, table.ctypes.data if rows else 0, rows * 8, False), [table], None
    keep, after = [], None
    if not on_device:
        host = np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(address))
        host = host[:nbytes]
        buf, address = mod.upload(host)
        keep += [buf, host]
        if copy_back:
            def after():
                mod.download(address, host)
    if not rows:
        return ("p", None, 0, 0, False), keep, after
    tbuf, taddr = mod.upload(np.uint64(address) + offsets)
    keep.append(tbuf)
    return ("p", None, taddr, rows * 8, False), keep, after


def worker_row_table(backend, mod, arg, addresses):
    """In the worker: the packed argument for a request's ("r", region, nbytes, copy_back, rows,
    row_bytes, table_region), with its keep list and after-launch function (see row_table)."""
    _, region, nbytes, copy_back, rows, row_bytes, table_region = arg
    table = None
    if backend == "emu" and rows:
        table = np.ctypeslib.as_array((ctypes.c_uint64 * rows).from_address(
            addresses[table_region]))
    return row_table(backend, mod, addresses[region], rows, row_bytes, nbytes, copy_back,
                     table=table)
