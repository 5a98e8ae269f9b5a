"""The device memory pool: spike_torch's caching allocator, the stack's one allocator.

Compiled graphs take their device buffers (padded inputs, outputs, staging)
from the same pool as ``nkipy`` tensors, so these figures cover both.
"""
from __future__ import annotations

from typing import Dict, Optional

#: Keys of ``get_memory_stats()``.
MEMORY_STAT_KEYS = ("used_bytes", "cached_bytes", "total_bytes", "allocation_count",
                    "reuse_count", "cache_hit_count", "cache_miss_count")


def get_memory_stats(device: Optional[int] = None) -> Dict[str, int]:
    """Pool figures of one device core (``None``: all): ``used_bytes`` (live
    blocks), ``cached_bytes`` (reserved but free), ``total_bytes`` (reserved from
    the runtime), ``allocation_count``, ``reuse_count`` (served from cached
    blocks), ``cache_hit_count`` (a cached block of exactly the size),
    ``cache_miss_count`` (a new segment from the runtime)."""
    import spike_torch

    stats = spike_torch.memory_pool_stats(device)
    return {k: int(stats[k]) for k in MEMORY_STAT_KEYS}


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
