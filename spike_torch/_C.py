"""Loads the C++ part of spike_torch (``_nkipy_device.so``) and connects it to
the spike runtime through spike's C API capsule.

The shared library is a plain (non-Python) library: loading it runs the static
registrations (allocator, device guard, hooks, aten kernels);
its few ``extern "C"`` entry points are called through ctypes. One of them
return CPython module objects Python calls directly: :data:`kernel_calls`, the
per-call path of compiled kernels on nkipy tensors (``kernel_call``,
``run_kernel_call``), and :data:`eager_cache`, the C++ cache of the device's
eager ops.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Iterable

import torch  # noqa: F401  (loads libtorch_cpu/libc10 before our library)

from spike import _spike

_HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY_PATH = os.path.join(_HERE, "_nkipy_device.so")

if not os.path.isfile(LIBRARY_PATH):
    raise ImportError(
        f"spike_torch's C++ library is missing ({LIBRARY_PATH}); build it with `make venv` "
        "(or `make spike_torch/_nkipy_device.so`)"
    )

lib = ctypes.CDLL(LIBRARY_PATH)

lib.spike_torch_init.argtypes = [ctypes.c_void_p]
lib.spike_torch_init.restype = ctypes.c_int
lib.spike_torch_set_options.argtypes = [ctypes.c_int, ctypes.c_int]
lib.spike_torch_set_options.restype = None
lib.spike_torch_get_device.argtypes = []
lib.spike_torch_get_device.restype = ctypes.c_int
lib.spike_torch_set_device.argtypes = [ctypes.c_int]
lib.spike_torch_set_device.restype = None
lib.spike_torch_device_count.argtypes = []
lib.spike_torch_device_count.restype = ctypes.c_int
lib.spike_torch_empty_cache.argtypes = [ctypes.c_int]
lib.spike_torch_empty_cache.restype = None
lib.spike_torch_cached_blocks.argtypes = [ctypes.c_int]
lib.spike_torch_cached_blocks.restype = ctypes.c_int64
lib.spike_torch_memory_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
lib.spike_torch_memory_stats.restype = ctypes.c_int
lib.spike_torch_pool_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
lib.spike_torch_pool_stats.restype = ctypes.c_int
lib.spike_torch_trim.argtypes = [ctypes.c_int, ctypes.c_int64]
lib.spike_torch_trim.restype = ctypes.c_int64
lib.spike_torch_reset_peak.argtypes = [ctypes.c_int]
lib.spike_torch_reset_peak.restype = None
lib.spike_torch_reset_accumulated.argtypes = [ctypes.c_int]
lib.spike_torch_reset_accumulated.restype = None
lib.spike_torch_drop_runtime.argtypes = []
lib.spike_torch_drop_runtime.restype = None
lib.spike_torch_debug_log.argtypes = [ctypes.c_char_p]
lib.spike_torch_debug_log.restype = None
lib.spike_torch_pinned_synchronize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
lib.spike_torch_pinned_synchronize.restype = ctypes.c_int
lib.spike_torch_pinned_empty_cache.argtypes = []
lib.spike_torch_pinned_empty_cache.restype = None
lib.spike_torch_pinned_stats.argtypes = [ctypes.POINTER(ctypes.c_int64)]
lib.spike_torch_pinned_stats.restype = None
lib.spike_torch_storage_live.argtypes = [ctypes.c_void_p]
lib.spike_torch_storage_live.restype = ctypes.c_int
lib.spike_torch_set_personality.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                            ctypes.c_size_t]
lib.spike_torch_set_personality.restype = ctypes.c_int
_I64P = ctypes.POINTER(ctypes.c_int64)
lib.spike_torch_stick_default.argtypes = [_I64P, ctypes.c_int, ctypes.c_int, _I64P, ctypes.c_int,
                                          _I64P, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
lib.spike_torch_stick_default.restype = ctypes.c_int
lib.spike_torch_stick_device_dtype.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
lib.spike_torch_stick_device_dtype.restype = ctypes.c_int
lib.spike_torch_storage_layout.argtypes = [ctypes.c_void_p, _I64P, ctypes.c_int]
lib.spike_torch_storage_layout.restype = ctypes.c_int
lib.spike_torch_set_storage_layout.argtypes = [ctypes.c_void_p, _I64P, ctypes.c_int,
                                               ctypes.c_char_p, ctypes.c_size_t]
lib.spike_torch_set_storage_layout.restype = ctypes.c_int
lib.spike_torch_storage_rw.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64,
                                       ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p,
                                       ctypes.c_size_t]
lib.spike_torch_storage_rw.restype = ctypes.c_int
lib.spike_torch_storage_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                                         ctypes.c_char_p, ctypes.c_size_t]
lib.spike_torch_storage_copy.restype = ctypes.c_int
lib.spike_torch_downcast_warning.argtypes = [ctypes.c_int]
lib.spike_torch_downcast_warning.restype = ctypes.c_int
lib.spike_torch_stick_log.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
lib.spike_torch_stick_log.restype = None
lib.spike_torch_serve_op.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
lib.spike_torch_serve_op.restype = ctypes.c_int


def check_live(tensors: Iterable[Any], what: str) -> None:
    """Raises RuntimeError if a tensor's memory belongs to a runtime closed since
    it was made (``spike_torch.reset()``): its device address may by now hold
    another tensor's data, so reading it would be silently wrong."""
    for t in tensors:
        if not lib.spike_torch_storage_live(t.untyped_storage()._cdata):
            raise RuntimeError(
                f"{what}: NRT_CLOSED: the spike runtime this tensor's memory belonged to is "
                "closed (after spike.reset() or at interpreter exit); its data is gone: create "
                "the tensor again")


def _capi_pointer() -> int:
    capsule = _spike._nkrt_capi()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get.restype = ctypes.c_void_p
    return get(capsule, b"spike._spike.nkrt_capi")


if lib.spike_torch_init(_capi_pointer()) != 0:
    raise ImportError("spike_torch: spike's C API is older than the one spike_torch was built for")

_py_module = ctypes.PyDLL(LIBRARY_PATH).spike_torch_py_module
_py_module.argtypes = []
_py_module.restype = ctypes.py_object
#: ``kernel_call(model, core, inputs, outputs, results)`` describes how to call
#: a loaded kernel on nkipy tensors; ``run_kernel_call(call, args)`` runs it (see
#: spike_torch/csrc/kernel_call.cpp).
kernel_calls = _py_module()

_eager_module = ctypes.PyDLL(LIBRARY_PATH).spike_torch_eager_py_module
_eager_module.argtypes = []
_eager_module.restype = ctypes.py_object
#: The C++ call cache of eager ops (``eager_register``, ``eager_clear``,
#: ``eager_stats``; see spike_torch/csrc/eager.cpp).
eager_cache = _eager_module()

_memory_module = ctypes.PyDLL(LIBRARY_PATH).spike_torch_memory_py_module
_memory_module.argtypes = []
_memory_module.restype = ctypes.py_object
#: The caching allocator's memory history and snapshots (``record_history``,
#: ``snapshot``; see spike_torch/csrc/memory_snapshot.cpp).
memory_history = _memory_module()

def set_personality(name: str, tiled: bool) -> None:
    """Gives the device library its personality (once per process): the device's
    name and its storage, strided (nkipy) or 128-byte stick tiles (spyre).
    Raises ImportError when another front end already set one."""
    error = ctypes.create_string_buffer(512)
    if lib.spike_torch_set_personality(name.encode(), int(tiled), error, len(error)) != 0:
        raise ImportError(f"the '{name}' device: {error.value.decode()}; PyTorch has one "
                          "PrivateUse1 device per process: use a separate process")


def checked(fn: Any, *args: Any) -> int:
    """Calls a ``(..., char* err, size_t n)`` entry point; raises RuntimeError
    with its message when it returns -1."""
    error = ctypes.create_string_buffer(1024)
    r = fn(*args, error, len(error))
    if r < 0:
        raise RuntimeError(error.value.decode())
    return r


def serve_op(name: str) -> None:
    """Makes the C++ fallback (and its call cache) the PrivateUse1 kernel of
    aten op ``name`` ("add.Tensor"), which PyTorch would otherwise run through
    a composite kernel."""
    error = ctypes.create_string_buffer(512)
    if lib.spike_torch_serve_op(name.encode(), error, len(error)) != 0:
        raise RuntimeError(f"spike_torch: cannot serve aten::{name}: {error.value.decode()}")


_STATS = ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes", "allocation",
          "segment", "active")
STAT_KEYS = tuple(
    f"{name}.all.{kind}" for name in _STATS for kind in ("current", "peak", "allocated", "freed")
) + (
    "inactive_split.all.current",
    "inactive_split_bytes.all.current",
    "num_alloc_retries",
    "num_ooms",
    "num_device_alloc",
    "num_device_free",
    "num_cached_blocks",
)


def _read_stats(fill, keys: tuple, device: int) -> dict:
    """The figures a ``spike_torch_*_stats(device, out, capacity)`` call writes, by key
    (zeros when it writes none)."""
    buf = (ctypes.c_int64 * len(keys))()
    if fill(device, buf, len(keys)) == 0:
        return {key: 0 for key in keys}
    return {key: int(buf[i]) for i, key in enumerate(keys)}


def memory_stats(device: int) -> dict:
    return _read_stats(lib.spike_torch_memory_stats, STAT_KEYS, device)


# Order of the values spike_torch_pool_stats() writes.
POOL_STAT_KEYS = ("used_bytes", "cached_bytes", "total_bytes", "allocation_count", "reuse_count",
                  "cache_hit_count", "cache_miss_count")


def pool_stats(device: int) -> dict:
    """Memory-pool figures of one device (all devices summed if ``device`` < 0)."""
    return _read_stats(lib.spike_torch_pool_stats, POOL_STAT_KEYS, device)


def pinned_synchronize() -> None:
    """Waits for every non_blocking copy from pinned memory (RuntimeError with
    the runtime's message when one failed)."""
    err = ctypes.create_string_buffer(1024)
    if lib.spike_torch_pinned_synchronize(err, len(err)) != 0:
        raise RuntimeError(err.value.decode(errors="replace"))


def pinned_stats() -> dict:
    """Pinned host memory: bytes in live blocks, bytes cached, blocks freed
    while a copy still read them."""
    out = (ctypes.c_int64 * 3)()
    lib.spike_torch_pinned_stats(out)
    return {"live_bytes": out[0], "cached_bytes": out[1], "pending_blocks": out[2]}
