"""Execution statistics of compiled graphs (process-wide, thread-safe).

Every call of a compiled graph records one execution: the bucket it ran in,
how much padding that cost, and where the time went (host-to-device copies and
padding, the kernel, device-to-host copies and unpadding). Compiles (kernels
built by the C compiler or loaded from the cache for a new bucket or
signature) are counted too, and so is how each graph the backend receives was
lowered: fully to the device, or with CPU partitions (``graphs_compiled``,
``graphs_partitioned``, ``cpu_partition_ops``).
"""
from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence


@dataclass
class RuntimeStats:
    """A snapshot of the counters (``spiky.get_stats()``); times in milliseconds."""

    total_executions: int = 0
    total_compile_count: int = 0
    bucket_hits: Dict[int, int] = field(default_factory=dict)
    total_pad_ratio_sum: float = 0.0      # sum over executions of padded size / actual size
    total_execution_time_ms: float = 0.0  # whole calls: copies, padding, kernel, unpadding
    min_execution_time_ms: float = 0.0
    max_execution_time_ms: float = 0.0
    total_h2d_time_ms: float = 0.0        # inputs to the device, padding included
    total_nrt_exec_time_ms: float = 0.0   # the kernels themselves
    total_d2h_time_ms: float = 0.0        # outputs back (or unpadded on the device)
    graphs_compiled: int = 0              # FX graphs (forward, backward) the backend lowered
    graphs_partitioned: int = 0           # ... of which some ops run in CPU partitions
    cpu_partition_ops: Dict[str, int] = field(default_factory=dict)  # op -> graphs with it on the CPU

    @property
    def mean_pad_ratio(self) -> float:
        """Average padded/actual size over executions (1.0: no padding)."""
        return self.total_pad_ratio_sum / self.total_executions if self.total_executions else 0.0

    @property
    def mean_execution_time_ms(self) -> float:
        return self.total_execution_time_ms / self.total_executions if self.total_executions \
            else 0.0


_lock = threading.Lock()
_stats = RuntimeStats()


def record_execution(bucket: Optional[int], pad_ratio: float, total_ms: float, h2d_ms: float,
                     exec_ms: float, d2h_ms: float) -> None:
    """Adds one execution (called by the engine after each call); ``bucket`` is
    None for a graph without dynamic shapes."""
    with _lock:
        s = _stats
        s.total_executions += 1
        if bucket is not None:
            s.bucket_hits[bucket] = s.bucket_hits.get(bucket, 0) + 1
        s.total_pad_ratio_sum += pad_ratio
        s.total_execution_time_ms += total_ms
        if s.total_executions == 1 or total_ms < s.min_execution_time_ms:
            s.min_execution_time_ms = total_ms
        if total_ms > s.max_execution_time_ms:
            s.max_execution_time_ms = total_ms
        s.total_h2d_time_ms += h2d_ms
        s.total_nrt_exec_time_ms += exec_ms
        s.total_d2h_time_ms += d2h_ms


def record_compile() -> None:
    """Counts one kernel made ready for a new bucket or input signature."""
    with _lock:
        _stats.total_compile_count += 1


def record_graph(cpu_ops: Sequence[str]) -> None:
    """Counts one FX graph the backend lowered; ``cpu_ops`` are the names of
    the ops it left to CPU partitions (empty: fully lowered to the device)."""
    with _lock:
        _stats.graphs_compiled += 1
        if cpu_ops:
            _stats.graphs_partitioned += 1
            for name in set(cpu_ops):
                _stats.cpu_partition_ops[name] = _stats.cpu_partition_ops.get(name, 0) + 1


def get_stats() -> RuntimeStats:
    """A copy of the statistics collected since start or the last ``reset_stats()``."""
    with _lock:
        return copy.deepcopy(_stats)


def reset_stats() -> None:
    """Sets every counter back to zero."""
    global _stats
    with _lock:
        _stats = RuntimeStats()
