"""spike_torch: the PyTorch device "nkipy" over the spike runtime.

``import spike_torch`` registers the device (PrivateUse1 renamed "nkipy"),
connects PyTorch's allocator to the spike singleton's nkrt runtime and installs
``torch.nkipy``. Tensors then live in device memory::

    x = torch.randn(10, 10, device="nkipy")
    y = torch.ones(3).to("nkipy")
    z = x.cpu()

Environment: ``LOCAL_RANK`` picks the core when no cores were configured;
``SPIKE_TORCH_DEBUG=1`` turns on debug logging; ``SPIKE_TORCH_FALLBACK_WARN=0``
silences the once-per-operator CPU-fallback warnings. See docs/spike_torch.md.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from typing import Any, Dict, Iterable, Optional, Tuple

import torch

import spike
from spike import spike_singleton

from . import _env

logger = logging.getLogger("spike_torch")
logger.addHandler(logging.NullHandler())
if _env.debug_enabled():
    logger.setLevel(logging.DEBUG)
    if not logging.getLogger().handlers:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter("[spike_torch] %(levelname)s %(message)s"))
        logger.addHandler(_handler)

DEVICE_NAME = "nkipy"


def _library_for() -> Optional[str]:
    """None when this import makes the nkipy device (PrivateUse1 is free or
    already "nkipy"); "spyre" when torch_spyre loads the device library for its
    own device. Any other holder of PrivateUse1 is an ImportError: PyTorch has
    one PrivateUse1 device per process."""
    holder = torch._C._get_privateuse1_backend_name()
    if holder in ("privateuseone", DEVICE_NAME):
        return None
    spyre = sys.modules.get("torch_spyre")
    if holder == "spyre" and getattr(spyre, "_LOADING_DEVICE_LIBRARY", False):
        return holder
    raise ImportError(
        f"spike_torch: this process's PrivateUse1 device is already '{holder}'"
        + (" (torch_spyre, loaded by `import torch` through its autoload entry point, or "
           "imported)" if holder == "spyre" else "")
        + f"; the '{DEVICE_NAME}' device and the '{holder}' device cannot share a process: "
        f"use '{DEVICE_NAME}' in a separate process"
        + (" (or set TORCH_DEVICE_BACKEND_AUTOLOAD=0 there)" if holder == "spyre" else ""))


#: "spyre" when torch_spyre loaded this package as its device library (then
#: nothing here registers the nkipy device), else None.
LIBRARY_FOR = _library_for()

# LOCAL_RANK picks the core when no cores were configured.
if ("LOCAL_RANK" in os.environ and "NEURON_RT_VISIBLE_CORES" not in os.environ
        and not spike_singleton.is_active()):
    try:
        spike.configure([int(os.environ["LOCAL_RANK"])])
        logger.debug("LOCAL_RANK=%s: using NeuronCore %s", os.environ["LOCAL_RANK"],
                     os.environ["LOCAL_RANK"])
    except ValueError as exc:
        raise ValueError(f"LOCAL_RANK must be a non-negative int, got "
                         f"{os.environ['LOCAL_RANK']!r}") from exc

from . import _C  # noqa: E402  (loads the C++ library: allocator, guard, hooks, kernels)

_C.lib.spike_torch_set_options(int(_env.debug_enabled()), int(_env.fallback_warnings_enabled()))
if LIBRARY_FOR is None:
    _C.set_personality(DEVICE_NAME, tiled=False)

from . import device_module  # noqa: E402

_init_lock = threading.Lock()
_registered = False


def _register() -> None:
    global _registered
    with _init_lock:
        if _registered:
            return
        if torch._C._get_privateuse1_backend_name() != DEVICE_NAME:
            torch.utils.rename_privateuse1_backend(DEVICE_NAME)
        if not hasattr(torch, DEVICE_NAME):
            torch._register_device_module(DEVICE_NAME, device_module)
        if not hasattr(torch.Tensor, DEVICE_NAME):
            torch.utils.generate_methods_for_privateuse1_backend(
                for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True)
        _registered = True


if LIBRARY_FOR is None:
    _register()
spike.get_spike_singleton()  # the runtime the device's memory comes from

from . import _ops  # noqa: E402,F401  (Python kernels: random fills, printing)
from . import _module_ties  # noqa: E402

_module_ties.install()  # tied parameters survive .to("nkipy") and .cpu()
from . import _generic  # noqa: E402  (the fallback: generated device kernels, else the CPU)

# ---- public API ----------------------------------------------------------------

is_available = device_module.is_available
device_count = device_module.device_count
current_device = device_module.current_device
set_device = device_module.set_device
synchronize = device_module.synchronize
memory_stats = device_module.memory_stats


def op_stats() -> Dict[str, int]:
    """Where eager operators on the nkipy device ran, counted since import:
    ``device_calls`` (a device kernel generated from the ATen op registry
    computed the result; ``fast_calls`` of them ran straight from the C++ call
    cache), ``cpu_fallback_calls`` (copied to the host, run by PyTorch's CPU
    kernel, copied back) and ``compiles`` (device kernels compiled for new
    signatures)."""
    fast = _C.eager_cache.eager_stats()["fast_calls"]
    return {"device_calls": _generic.stats["device_calls"] + fast,
            "fast_calls": fast,
            "cpu_fallback_calls": _generic.stats["cpu_fallback_calls"],
            "compiles": _generic.stats["compiles"]}


def empty_cache() -> None:
    """Returns the caching allocator's unused blocks to the runtime."""
    device_module.empty_cache()


def get_cached_blocks(device: Optional[int] = None) -> int:
    """Number of free blocks held by the caching allocator (all devices if None)."""
    return int(_C.lib.spike_torch_cached_blocks(-1 if device is None else int(device)))


def _pool_device(device: Any) -> int:
    """-1 (all devices) for None, else the checked index of an int, ``"nkipy:i"``
    or ``torch.device``."""
    if device is None:
        return -1
    return device_module._check_index(device_module._device_index(device))


def memory_pool_stats(device: Optional[Any] = None) -> Dict[str, int]:
    """Figures of the caching allocator's device-memory pool.

    ``device``: an index, ``"nkipy:i"`` or ``torch.device``; None sums all devices.
    Returns a dict of ints:

    * ``used_bytes``: bytes in blocks held by live tensors (block sizes, i.e.
      requests rounded up to 512 bytes, or the whole block when the remainder was
      too small to split off);
    * ``cached_bytes``: reserved bytes not in use (free blocks kept by the cache),
      ``total_bytes - used_bytes``;
    * ``total_bytes``: bytes reserved from the runtime (the sum of the segments);
    * ``allocation_count``: allocations served (non-empty ones, cumulative);
    * ``reuse_count``: allocations served from a cached free block, without asking
      the runtime for memory;
    * ``cache_hit_count``: the reuses whose free block had exactly the rounded size
      (no split, no slack);
    * ``cache_miss_count``: allocations that found no fitting cached block and took
      a new segment from the runtime.

    ``allocation_count == reuse_count + cache_miss_count`` and
    ``cache_hit_count <= reuse_count``. The counters restart at 0 after
    ``torch.nkipy.reset_accumulated_memory_stats(device)`` and when the runtime
    is closed (``spike_torch.reset()``).
    """
    return _C.pool_stats(_pool_device(device))


def trim_memory_pool(target_bytes: int = 0, device: Optional[Any] = None) -> int:
    """Gives cached memory back to the runtime until at most ``target_bytes``
    bytes stay cached (on ``device``, or summed over all devices if None).

    Only entirely free segments can be released: free blocks inside segments that
    also hold live tensors stay cached, so the cached bytes may remain above the
    target. The smallest free segment covering the remaining excess is released
    if there is one, else the largest, and so on. ``trim_memory_pool(0)`` releases
    every free segment, like ``empty_cache()``. Returns the bytes released.
    Raises ``TypeError`` unless ``target_bytes`` is an int and ``ValueError`` if it
    is negative.
    """
    if isinstance(target_bytes, bool) or not isinstance(target_bytes, int):
        raise TypeError(f"trim_memory_pool: target_bytes must be an int, got "
                        f"{type(target_bytes).__name__}")
    if target_bytes < 0:
        raise ValueError(f"trim_memory_pool: target_bytes must be >= 0, got {target_bytes}")
    target = min(target_bytes, (1 << 63) - 1)
    return int(_C.lib.spike_torch_trim(_pool_device(device), target))


def _check_tensor(tensor: Any) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != DEVICE_NAME:
        raise ValueError(f"expected a tensor on the nkipy device, got one on {tensor.device}")
    return tensor


def get_nrt_tensor(tensor: torch.Tensor) -> "spike.NrtTensor":
    """An NrtTensor over the device memory of ``tensor``'s data (from its first
    element, ``nbytes`` of a contiguous tensor, else to the end of the storage).

    The NrtTensor is a non-owning slice: it keeps the allocation alive and can be
    passed to ``Spike.execute``/``SpikeModel`` as input or output.
    """
    _check_tensor(tensor)
    _C.check_live([tensor], "get_nrt_tensor")
    rt = spike.get_spike_singleton()
    if tensor.is_contiguous():
        size = tensor.numel() * tensor.element_size()
    else:
        size = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
    return rt.slice_from_address(tensor.data_ptr(), size)


def get_tensor_info(tensor_or_ptr: Any) -> Tuple[int, int, int]:
    """``(allocation_address, allocation_size, core_id)`` of the nkrt allocation
    holding a tensor's data (or a device address), found by range lookup."""
    if isinstance(tensor_or_ptr, torch.Tensor):
        _C.check_live([_check_tensor(tensor_or_ptr)], "get_tensor_info")
        address = tensor_or_ptr.data_ptr()
    elif isinstance(tensor_or_ptr, int) and not isinstance(tensor_or_ptr, bool):
        address = tensor_or_ptr
    else:
        raise TypeError(f"expected an nkipy tensor or an address, got "
                        f"{type(tensor_or_ptr).__name__}")
    return spike.get_spike_singleton().lookup_address(address)


def configure(visible_cores: Optional[Iterable[int]] = None, **kwargs: Any) -> None:
    """spike.configure(): set the visible cores (and memory) before first use."""
    spike.configure(visible_cores, **kwargs)


def reset() -> None:
    """Drops the allocator's cache, then closes the runtime (spike.reset()).

    nkipy tensors still alive become unusable (using them raises an error);
    freeing them is harmless. The next allocation brings up a new runtime.
    """
    _C.lib.spike_torch_empty_cache(-1)
    spike.reset()
    _C.lib.spike_torch_drop_runtime()
    device_module._generators.clear()


def _at_exit() -> None:
    # Runs before spike's own atexit handler (registered earlier): give cached
    # memory back while the runtime is still open.
    try:
        _C.lib.spike_torch_empty_cache(-1)
    except Exception:  # pragma: no cover - best effort at shutdown
        pass


atexit.register(_at_exit)

__all__ = [
    "device_count", "current_device", "set_device", "is_available", "synchronize",
    "empty_cache", "get_cached_blocks", "get_nrt_tensor", "get_tensor_info", "configure",
    "reset", "memory_stats", "memory_pool_stats", "trim_memory_pool", "DEVICE_NAME",
    "op_stats",
]

if LIBRARY_FOR is not None:
    # Loaded as torch_spyre's device library: spike_torch's own API is the
    # nkipy device's, which this process does not have.
    _NKIPY_API = frozenset(__all__) - {"DEVICE_NAME"}
    for _public in _NKIPY_API:
        globals().pop(_public, None)

    def __getattr__(name: str) -> Any:
        if name not in _NKIPY_API:     # submodules are still imported on demand
            raise AttributeError(f"module 'spike_torch' has no attribute '{name}'")
        raise ImportError(
            f"spike_torch.{name}: this process's PrivateUse1 device is '{LIBRARY_FOR}' "
            f"(torch_spyre); the '{DEVICE_NAME}' device needs a separate process")
