"""The device memory pool: spike_torch's caching allocator, and every other byte
the stack holds on the device.

``nkipy`` tensors and the buffers of compiled graphs called with them come
from the pool. A few holders allocate from the runtime directly: the
persistent device buffers of compiled graphs called with CPU tensors, kernel
outputs made by ``DeviceKernel`` and ``SpikeTensor`` objects. The figures of
:func:`get_memory_stats` count those as used memory too, from the runtime's
own accounting, so nothing the stack holds is missing from them.
"""
from __future__ import annotations

from typing import Dict, Optional

#: Keys of ``get_memory_stats()``.
MEMORY_STAT_KEYS = ("used_bytes", "cached_bytes", "total_bytes", "allocation_count",
                    "reuse_count", "cache_hit_count", "cache_miss_count")


def get_memory_stats(device: Optional[int] = None) -> Dict[str, int]:
    """Device-memory figures of one core (``None``: all): ``used_bytes`` (live
    pool blocks plus memory held outside the pool), ``cached_bytes`` (reserved
    by the pool but free), ``total_bytes`` (everything the stack holds from the
    runtime); and the pool's counters: ``allocation_count``, ``reuse_count``
    (served from cached blocks), ``cache_hit_count`` (a cached block of exactly
    the size), ``cache_miss_count`` (a new segment from the runtime)."""
    import spike
    import spike_torch

    stats = {k: int(v) for k, v in spike_torch.memory_pool_stats(device).items()}
    rt = spike.get_spike_singleton()
    cores = range(rt.core_count) if device is None else [spike_torch._pool_device(device)]
    held = sum(int(rt.memory_stats(c)["allocated_bytes"]) for c in cores)
    # the pool's segments are runtime allocations too; the rest is held outside it
    outside = max(held - stats["total_bytes"], 0)
    stats["used_bytes"] += outside
    stats["total_bytes"] += outside
    return {k: stats[k] for k in MEMORY_STAT_KEYS}


def trim_memory_pool(target_bytes: int = 0, device: Optional[int] = None) -> int:
    """Releases cached (free) memory back to the runtime until at most
    ``target_bytes`` stay cached, as far as whole free segments allow; returns
    the bytes released."""
    import spike_torch

    return int(spike_torch.trim_memory_pool(target_bytes, device))


def clear_memory_pool() -> int:
    """Releases all cached memory of every device (``trim_memory_pool(0)``)."""
    return trim_memory_pool(0, None)


def empty_cache() -> None:
    """The original's name for ``clear_memory_pool()``."""
    clear_memory_pool()


def get_cached_blocks(device: Optional[int] = None) -> int:
    """Free blocks the pool holds."""
    import spike_torch

    return int(spike_torch.get_cached_blocks(device))
