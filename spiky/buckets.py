"""Bucket policy for dynamic shapes: which padded size serves an actual size.

A compiled graph with one dynamic ("primary") dimension is compiled once per
bucket; a call with actual size ``n`` runs the kernel of the smallest bucket
``>= n`` with its inputs padded to that size.
"""
from __future__ import annotations

from typing import Iterable, List, Optional

#: Bucket strategies ``infer_buckets`` knows.
STRATEGIES = ("power_of_2", "linear")

#: Step of the ``linear`` strategy.
LINEAR_STEP = 64


def next_pow2(n: int) -> int:
    """The smallest power of two ``>= n`` (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def infer_buckets(max_size: int = 2048, strategy: str = "power_of_2",
                  min_size: int = 1) -> List[int]:
    """The bucket sizes of a strategy, bounded by ``max_size``.

    ``power_of_2``: every power of two in ``[min_size, max_size]`` (a size is padded
    by less than 2x); ``linear``: multiples of 64 up to ``max_size``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown bucket strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    if max_size < 1 or min_size < 1 or min_size > max_size:
        raise ValueError(f"invalid bucket bounds min_size={min_size}, max_size={max_size}")
    if strategy == "power_of_2":
        out, b = [], next_pow2(min_size)
        while b <= max_size:
            out.append(b)
            b *= 2
        return out or [max_size]
    start = max(LINEAR_STEP, -(-min_size // LINEAR_STEP) * LINEAR_STEP)
    return list(range(start, max_size + 1, LINEAR_STEP)) or [max_size]


def check_buckets(buckets: Iterable[int]) -> List[int]:
    """Sorted unique buckets; ValueError unless a non-empty list of positive ints."""
    out = list(buckets)
    if not out or any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 for b in out):
        raise ValueError(f"buckets must be a non-empty list of positive ints, got {out!r}")
    return sorted(set(out))


def select_bucket(buckets: List[int], n: int) -> Optional[int]:
    """The smallest bucket ``>= n`` of a sorted list, or None when ``n`` exceeds them all."""
    for b in buckets:
        if b >= n:
            return b
    return None
