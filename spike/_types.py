"""Plain data types of the spike package that need no runtime."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Sequence

__all__ = ["BenchmarkResult"]


@dataclass
class BenchmarkResult:
    """Timing of repeated executions of one model, in milliseconds.

    ``std_dev_ms`` is the population standard deviation of ``durations_ms``.
    """

    mean_ms: float
    min_ms: float
    max_ms: float
    std_dev_ms: float
    iterations: int
    warmup_iterations: int
    durations_ms: List[float] = field(default_factory=list)

    @classmethod
    def from_durations(
        cls, durations_ms: Sequence[float], warmup_iterations: int = 0
    ) -> "BenchmarkResult":
        """Builds the summary of per-iteration durations (milliseconds).

        Raises ValueError for an empty sequence or a negative duration.
        """
        values = [float(d) for d in durations_ms]
        if not values:
            raise ValueError("BenchmarkResult needs at least one duration, got none")
        if any(v < 0 or math.isnan(v) for v in values):
            raise ValueError(f"durations must be non-negative numbers, got {values}")
        n = len(values)
        mean = math.fsum(values) / n
        variance = math.fsum((v - mean) ** 2 for v in values) / n
        return cls(
            mean_ms=mean,
            min_ms=min(values),
            max_ms=max(values),
            std_dev_ms=math.sqrt(variance),
            iterations=n,
            warmup_iterations=int(warmup_iterations),
            durations_ms=values,
        )

    def __str__(self) -> str:
        return (
            f"{self.iterations} iterations (+{self.warmup_iterations} warmup): "
            f"mean {self.mean_ms:.4f} ms, min {self.min_ms:.4f} ms, "
            f"max {self.max_ms:.4f} ms, std {self.std_dev_ms:.4f} ms"
        )
