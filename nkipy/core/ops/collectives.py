"""Collectives: all_reduce, all_gather, reduce_scatter, all_to_all.

Traced, they are recorded in the IR with their ``replica_groups``. On CPU (and
in ``run_graph``) they use the original's "duplicated data" model: every rank
of a group of n is assumed to hold the same data (all_reduce add is ``x * n``,
all_gather repeats x n times, ...). With one rank they are identities.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nkipy.core import interp as _interp
from nkipy.core.ops import _builder as B
from nkipy.core.ops._core import nkipy_op, to_value, wrap
from spike.environ import env_int

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "get_world_size",
           "normalize_reduce_op", "normalize_replica_groups"]

_REDUCE_OPS = {
    "add": "add", "sum": "add", "multiply": "multiply", "mul": "multiply", "prod": "multiply",
    "maximum": "maximum", "max": "maximum", "minimum": "minimum", "min": "minimum",
}


def get_world_size() -> int:
    """Ranks in the job: ``$WORLD_SIZE`` (torchrun sets it), else 1; a value
    that is not a positive integer is an error naming the variable."""
    return env_int("WORLD_SIZE", 1, minimum=1)


def normalize_reduce_op(op: Any) -> str:
    """np.add / np.multiply / np.maximum / np.minimum or their names -> IR name."""
    if isinstance(op, np.ufunc):
        op = op.__name__
    if isinstance(op, str) and op.lower() in _REDUCE_OPS:
        return _REDUCE_OPS[op.lower()]
    raise ValueError(f"unsupported reduce_op {op!r}; use np.add, np.multiply, np.maximum "
                     "or np.minimum")


def normalize_replica_groups(groups: Any) -> tuple[tuple[int, ...], ...]:
    """Tuple of equal-sized tuples of distinct ranks (None -> all ranks in one group)."""
    if groups is None:
        return (tuple(range(get_world_size())),)
    gs = tuple(tuple(int(r) for r in g) for g in groups)
    if not gs or any(len(g) == 0 for g in gs):
        raise ValueError("replica_groups must be a non-empty list of non-empty rank lists")
    if len({len(g) for g in gs}) != 1:
        raise ValueError(f"replica_groups must all have the same size, got {groups!r}")
    ranks = [r for g in gs for r in g]
    if len(set(ranks)) != len(ranks) or min(ranks) < 0:
        raise ValueError(f"replica_groups must list distinct non-negative ranks, got {groups!r}")
    return gs


def _n(groups: tuple) -> int:
    return len(groups[0])


def _all_reduce_cpu(data: Any, replica_groups: Any = None, reduce_op: Any = np.add,
                    **kw: Any) -> np.ndarray:
    g = normalize_replica_groups(replica_groups)
    return _interp._reduce_dup(np.asarray(data), normalize_reduce_op(reduce_op), _n(g))


@nkipy_op(cpu=_all_reduce_cpu)
def all_reduce(data: Any, replica_groups: Any = None, reduce_op: Any = np.add, **kwargs: Any) -> Any:
    """Reduces ``data`` over the ranks of each replica group."""
    v = to_value(data)
    attrs = {"reduce_op": normalize_reduce_op(reduce_op),
             "replica_groups": normalize_replica_groups(replica_groups)}
    return wrap(B.emit1("all_reduce", [v], attrs, v.shape, v.dtype))


def _all_gather_cpu(data: Any, all_gather_dim: int = 0, replica_groups: Any = None,
                    **kw: Any) -> np.ndarray:
    g = normalize_replica_groups(replica_groups)
    x = np.asarray(data)
    return np.concatenate([x] * _n(g), axis=all_gather_dim)


@nkipy_op(cpu=_all_gather_cpu)
def all_gather(data: Any, all_gather_dim: int = 0, replica_groups: Any = None,
               **kwargs: Any) -> Any:
    """Concatenates every rank's ``data`` along ``all_gather_dim``."""
    v = to_value(data)
    g = normalize_replica_groups(replica_groups)
    ax = B.normalize_axis(all_gather_dim, v.ndim)
    shape = list(v.shape)
    shape[ax] *= _n(g)
    return wrap(B.emit1("all_gather", [v], {"axis": ax, "replica_groups": g}, shape, v.dtype))


def _rs_check(shape: tuple, ax: int, n: int, what: str) -> None:
    if shape[ax] % n:
        raise ValueError(f"{what}: dimension {ax} of size {shape[ax]} is not divisible by the "
                         f"{n} ranks of a replica group")


def _reduce_scatter_cpu(data: Any, reduce_scatter_dim: int = 0, replica_groups: Any = None,
                        reduce_op: Any = np.add, **kw: Any) -> np.ndarray:
    g = normalize_replica_groups(replica_groups)
    x = np.asarray(data)
    ax = reduce_scatter_dim % x.ndim
    _rs_check(x.shape, ax, _n(g), "reduce_scatter")
    r = _interp._reduce_dup(x, normalize_reduce_op(reduce_op), _n(g))
    return np.take(r, np.arange(x.shape[ax] // _n(g)), axis=ax)


@nkipy_op(cpu=_reduce_scatter_cpu)
def reduce_scatter(data: Any, reduce_scatter_dim: int = 0, replica_groups: Any = None,
                   reduce_op: Any = np.add, **kwargs: Any) -> Any:
    """Reduces over the ranks, then each rank keeps its slice along the dim."""
    v = to_value(data)
    g = normalize_replica_groups(replica_groups)
    ax = B.normalize_axis(reduce_scatter_dim, v.ndim)
    _rs_check(v.shape, ax, _n(g), "reduce_scatter")
    shape = list(v.shape)
    shape[ax] //= _n(g)
    attrs = {"axis": ax, "reduce_op": normalize_reduce_op(reduce_op), "replica_groups": g}
    return wrap(B.emit1("reduce_scatter", [v], attrs, shape, v.dtype))


def _all_to_all_cpu(data: Any, split_dimension: int = 0, concat_dimension: int = 0,
                    replica_groups: Any = None, **kw: Any) -> np.ndarray:
    g = normalize_replica_groups(replica_groups)
    x = np.asarray(data)
    _rs_check(x.shape, split_dimension % x.ndim, _n(g), "all_to_all")
    return np.concatenate(np.split(x, _n(g), axis=split_dimension), axis=concat_dimension)


@nkipy_op(cpu=_all_to_all_cpu)
def all_to_all(data: Any, split_dimension: int = 0, concat_dimension: int = 0,
               replica_groups: Any = None, **kwargs: Any) -> Any:
    """Splits ``data`` into n chunks along ``split_dimension``, sends chunk i to rank i,
    and concatenates what it receives along ``concat_dimension``."""
    v = to_value(data)
    g = normalize_replica_groups(replica_groups)
    sa = B.normalize_axis(split_dimension, v.ndim)
    ca = B.normalize_axis(concat_dimension, v.ndim)
    _rs_check(v.shape, sa, _n(g), "all_to_all")
    shape = list(v.shape)
    shape[sa] //= _n(g)
    shape[ca] *= _n(g)
    attrs = {"split_axis": sa, "concat_axis": ca, "replica_groups": g}
    return wrap(B.emit1("all_to_all", [v], attrs, shape, v.dtype))
