"""Which input dimension carries a dynamic size: :class:`DynamicSpec`.

A spec names one dimension of one positional input whose size varies from
call to call, with the range it may take. The first spec of a list is the
primary one: its size selects the bucket, and every other dynamic input must
have the same size (they are padded together). ``NKIPyCallable`` marks these
dimensions dynamic for ``torch.compile``; ``register_bundle`` takes them as
``{arg_idx: dim_idx}`` (:func:`to_bundle_specs`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence


@dataclass(frozen=True)
class DynamicSpec:
    """Dimension ``dim_idx`` of positional input ``arg_idx`` is dynamic, between
    ``min_size`` and ``max_size`` (None: no bound given)."""

    arg_idx: int
    dim_idx: int
    min_size: int = 1
    max_size: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("arg_idx", "dim_idx", "min_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"DynamicSpec.{name} must be an int, not {type(v).__name__}")
        if self.arg_idx < 0:
            raise ValueError(f"DynamicSpec.arg_idx must be >= 0, not {self.arg_idx}")
        if self.min_size < 1:
            raise ValueError(f"DynamicSpec.min_size must be >= 1, not {self.min_size}")
        if self.max_size is not None and (isinstance(self.max_size, bool) or
                                          not isinstance(self.max_size, int) or
                                          self.max_size < self.min_size):
            raise ValueError(f"DynamicSpec.max_size must be an int >= min_size "
                             f"({self.min_size}) or None, not {self.max_size!r}")

    def size_of(self, args: Sequence[object]) -> int:
        """The size of this dimension in a call's positional arguments."""
        if self.arg_idx >= len(args):
            raise ValueError(f"{self} names input {self.arg_idx}, but the call has "
                             f"{len(args)} inputs")
        shape = getattr(args[self.arg_idx], "shape", None)
        if shape is None or not -len(shape) <= self.dim_idx < len(shape):
            raise ValueError(f"{self}: input {self.arg_idx} has no dimension {self.dim_idx} "
                             f"(shape {None if shape is None else list(shape)})")
        return int(shape[self.dim_idx])


def check_specs(specs: Iterable[DynamicSpec]) -> List[DynamicSpec]:
    """The specs as a list; TypeError for a non-spec, ValueError for two specs
    of one input (an input has one dynamic dimension)."""
    out = list(specs)
    for s in out:
        if not isinstance(s, DynamicSpec):
            raise TypeError(f"expected DynamicSpec, got {type(s).__name__}")
    seen = [s.arg_idx for s in out]
    dup = sorted({a for a in seen if seen.count(a) > 1})
    if dup:
        raise ValueError(f"input(s) {dup} have more than one DynamicSpec: an input has one "
                         "dynamic dimension")
    return out


def to_bundle_specs(specs: Iterable[DynamicSpec]) -> Dict[int, int]:
    """``{arg_idx: dim_idx}`` in order (the primary spec first), as
    ``register_bundle`` takes them."""
    return {s.arg_idx: s.dim_idx for s in check_specs(specs)}


__all__ = ["DynamicSpec", "check_specs", "to_bundle_specs"]
