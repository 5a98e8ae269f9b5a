"""Bucket policy for dynamic shapes: which padded size serves an actual size.

A compiled graph with one dynamic ("primary") dimension is compiled once per
bucket; a call with actual size ``n`` runs the kernel of the smallest bucket
``>= n`` with its inputs padded to that size.
"""
from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

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


#: What one more kernel call costs in plan_chunks' model, in rows of the dynamic
#: dimension: each call re-reads the weights and starts the kernel's parallel loops.
CHUNK_CALL_ROWS = 8


def plan_chunks(buckets: List[int], n: int, max_chunks: int = 4,
                call_rows: int = CHUNK_CALL_ROWS) -> Optional[List[Tuple[int, int, int]]]:
    """How to run actual size ``n`` as slices, each through the kernel of one
    bucket: a list of ``(start, size, bucket)`` covering ``[0, n)``, each slice
    of its bucket's size (run in place, nothing padded) except perhaps the last
    (``size < bucket``: padded). The last slice overlaps the one before where it
    can (buckets 8 and 64, ``n = 70``: rows 0 to 64, then rows 62 to 70): those
    rows are computed twice rather than padded; it is padded only when its
    bucket exceeds ``n`` (then one padded slice costs less: in practice only
    plans of one slice are padded). Only for graphs whose slices along the dynamic
    dimension are independent of each other (what makes padding safe makes
    slicing safe too).

    Of the plans that take the largest buckets that fit first, then the rest
    in its bucket (at most ``max_chunks`` slices), the one with the fewest
    rows computed, each call counting ``call_rows`` more; ties go to fewer
    calls. ``n = 200`` over power-of-two buckets: ``128 + 64 + 8`` instead of
    padding to 256. None when ``n`` exceeds every bucket (the caller picks a
    bigger one)."""
    bs = sorted(buckets)
    if n < 1 or not bs or n > bs[-1]:
        return None
    best: Optional[Tuple[int, int, List[Tuple[int, int, int]]]] = None
    chunks: List[Tuple[int, int, int]] = []
    start = 0
    for _ in range(max_chunks):
        rest = n - start
        tail = select_bucket(bs, rest)
        assert tail is not None
        # the rest, as the last slice: when a slice came before, its bucket's worth
        # of real rows ending at n (overlapping that slice: rows computed twice,
        # nothing padded), else padded
        last = (n - tail, tail, tail) if chunks and n >= tail else (start, rest, tail)
        plan = chunks + [last]
        cost = sum(b for _, _, b in plan) + call_rows * len(plan)
        if best is None or (cost, len(plan)) < best[:2]:
            best = (cost, len(plan), plan)
        fit = [b for b in bs if b <= rest]
        if not fit or fit[-1] == rest:
            break
        chunks = chunks + [(start, fit[-1], fit[-1])]
        start += fit[-1]
    assert best is not None
    return best[2]
