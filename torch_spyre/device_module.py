"""``torch.spyre``: the spyre device's module, in the shape of ``torch.cuda``.

The device is one core of the device library's runtime (``device_count()`` is
1, as on a Spyre card). Streams, events, memory statistics and generators are
the device library's (``spike_torch.device_module``); ``get_downcast_warning``
and the other names of :mod:`torch_spyre._C` are reached through this module
too, as in torch-spyre.
"""
from __future__ import annotations

import types
from typing import Any, List, Optional, Union

import torch

from spike_torch import device_module as _dev

from . import _C

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device",
    "synchronize", "manual_seed", "manual_seed_all", "seed", "initial_seed", "get_rng_state",
    "set_rng_state", "get_downcast_warning", "set_downcast_warning", "get_amp_supported_dtype",
    "device", "Stream", "Event", "stream", "current_stream", "default_stream", "set_stream", "memory",
    "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats",
    "reset_accumulated_memory_stats", "memory_stats", "empty_cache", "default_generators",
]

DeviceLike = Union[int, str, torch.device, None]


def is_available() -> bool:
    """True: the device is the host's CPU running the device library."""
    return _dev.device_count() > 0


def is_initialized() -> bool:
    """Whether the device's runtime has started."""
    return _dev.is_initialized()


def device_count() -> int:
    """Number of spyre devices: 1."""
    return min(1, _dev.device_count())


def current_device() -> int:
    """Index of the current spyre device: 0."""
    return 0


def set_device(device: DeviceLike) -> None:
    """Selects the current device; only ``0`` (or ``"spyre"``, ``"spyre:0"``) exists."""
    index = _dev._device_index(device)
    if index != 0:
        raise ValueError(f"Invalid spyre device index {index}: there is 1 spyre device, "
                         "valid indices are 0..0")
    _dev.set_device(0)


def synchronize(device: DeviceLike = None) -> None:
    """Waits for the device's queued work (kernels run in order; this returns
    when the last has finished)."""
    _dev.synchronize(device)


def manual_seed(seed: int, device: DeviceLike = None) -> None:
    """Seeds the device's random number generator."""
    _dev.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seeds the generator of every spyre device (there is one)."""
    _dev.manual_seed_all(seed)


seed = _dev.seed
initial_seed = _dev.initial_seed
get_rng_state = _dev.get_rng_state
set_rng_state = _dev.set_rng_state
default_generators = _dev.default_generators
get_downcast_warning = _C.get_downcast_warning
set_downcast_warning = _C.set_downcast_warning


def get_amp_supported_dtype() -> List[torch.dtype]:
    """Dtypes autocast may use on the device: float16 and bfloat16."""
    return [torch.float16, torch.bfloat16]


device = _dev.device
Stream = _dev.Stream
Event = _dev.Event
stream = _dev.stream
current_stream = _dev.current_stream
default_stream = _dev.default_stream
set_stream = _dev.set_stream
StreamContext = _dev.StreamContext
memory_stats = _dev.memory_stats
memory_allocated = _dev.memory_allocated
max_memory_allocated = _dev.max_memory_allocated
reset_peak_memory_stats = _dev.reset_peak_memory_stats
reset_accumulated_memory_stats = _dev.reset_accumulated_memory_stats
empty_cache = _dev.empty_cache

#: ``torch.spyre.memory``: the allocator's statistics, as in later torch-spyre
memory = types.ModuleType("torch.spyre.memory", "The spyre device's memory statistics.")
for _name in ("memory_allocated", "max_memory_allocated", "reset_peak_memory_stats",
              "reset_accumulated_memory_stats", "memory_stats", "empty_cache"):
    setattr(memory, _name, globals()[_name])


def _is_in_bad_fork() -> bool:
    return False


def _is_compiled() -> bool:
    return True


def __getattr__(name: str) -> Any:
    # torch-spyre forwards unknown names to its C++ module
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(_C, name)
    except AttributeError:
        raise AttributeError(f"module 'torch.spyre' has no attribute '{name}'") from None
