"""Lowerings of the ``_c10d_functional`` collectives inside compiled graphs.

They belong to the backend (they read its configuration and process groups), so
they live here and register into the one ATen op registry of
:mod:`spike_torch.lowering`; generated sources reach them as ``aten.<name>``
like every other entry.
"""
from __future__ import annotations

import numpy as np

from nkipy.core import ops
from nkipy.core.language import bfloat16
from spike_torch.lowering.aten_numpy import cast, _shape
from spike_torch.lowering.registry import AtenOpRegistry

reg = AtenOpRegistry.register

_REDUCE = {"sum": np.add, "avg": np.add, "product": np.multiply, "max": np.maximum,
           "min": np.minimum}


def _world_group(group_name) -> list:
    """The replica groups of a torch process group: one group of every rank of
    the job (the kernel runs on every rank, so its collectives do too)."""
    from ..config import require_nkipy_backend_config

    ws = require_nkipy_backend_config().world_size
    ranks = list(range(ws))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        from torch.distributed.distributed_c10d import _resolve_process_group

        ranks = list(dist.get_process_group_ranks(_resolve_process_group(group_name)))
    if sorted(ranks) != list(range(ws)):
        raise NotImplementedError(
            f"collectives in compiled graphs run over every rank of the job; process group "
            f"{group_name!r} has ranks {ranks} of {ws}")
    return [ranks]


def _reduce_op(reduce_op):
    op = str(reduce_op).lower()
    if op not in _REDUCE:
        raise NotImplementedError(f"collective reduce_op {reduce_op!r} is not supported "
                                  f"(supported: {', '.join(_REDUCE)})")
    return op


def _check_avg(op, x) -> None:
    """AVG on an integer (or bool) tensor raises what eager PyTorch raises."""
    if op == "avg" and not np.issubdtype(np.dtype(x.dtype), np.floating) and \
            np.dtype(x.dtype) != np.dtype(bfloat16):
        import torch

        from ..distributed import _integer_avg_error

        raise _integer_avg_error(torch.from_numpy(np.zeros(1, np.dtype(x.dtype))).dtype)


@reg("_c10d_functional.all_reduce.default")
def all_reduce(x, reduce_op, group_name):
    op, groups = _reduce_op(reduce_op), _world_group(group_name)
    _check_avg(op, x)
    r = ops.all_reduce(x, replica_groups=groups, reduce_op=_REDUCE[op])
    return cast(r / len(groups[0]), x.dtype) if op == "avg" else r


@reg("_c10d_functional.all_gather_into_tensor.default")
def all_gather_into_tensor(x, group_size, group_name):
    groups = _world_group(group_name)
    if len(groups[0]) != group_size:
        raise NotImplementedError(f"all_gather over {group_size} of {len(groups[0])} ranks")
    return ops.all_gather(x, all_gather_dim=0, replica_groups=groups)


@reg("_c10d_functional.reduce_scatter_tensor.default")
def reduce_scatter_tensor(x, reduce_op, group_size, group_name):
    op, groups = _reduce_op(reduce_op), _world_group(group_name)
    _check_avg(op, x)
    if len(groups[0]) != group_size:
        raise NotImplementedError(f"reduce_scatter over {group_size} of {len(groups[0])} ranks")
    r = ops.reduce_scatter(x, reduce_scatter_dim=0, replica_groups=groups,
                           reduce_op=_REDUCE[op])
    return cast(r / group_size, x.dtype) if op == "avg" else r


@reg("_c10d_functional.all_to_all_single.default")
def all_to_all_single(x, output_split_sizes, input_split_sizes, group_name):
    groups = _world_group(group_name)
    n = len(groups[0])
    even = all(sizes is None or len(set(sizes)) <= 1
               for sizes in (output_split_sizes, input_split_sizes))
    if even:
        return ops.all_to_all(x, split_dimension=0, concat_dimension=0, replica_groups=groups)
    # unequal splits: every block padded to the input's first dimension (the same on
    # every rank, or the runtime refuses the collective: ranks out of step), one
    # all_to_all, then the received blocks cut to their sizes and joined
    d0, rest = _shape(x)[0], _shape(x)[1:]
    ins = list(input_split_sizes) if input_split_sizes is not None else [d0 // n] * n
    outs = list(output_split_sizes) if output_split_sizes is not None else [d0 // n] * n
    if len(ins) != n or len(outs) != n or sum(ins) != d0:
        raise ValueError(f"all_to_all_single: split sizes {ins} / {outs} for {n} ranks and an "
                         f"input of {d0} rows")
    blocks, start = [], 0
    for k in ins:
        b = x[start:start + k]
        if k < d0:
            b = np.pad(b, [(0, d0 - k)] + [(0, 0)] * len(rest), constant_values=0)
        blocks.append(b)
        start += k
    got = ops.all_to_all(np.concatenate(blocks, axis=0), split_dimension=0, concat_dimension=0,
                         replica_groups=groups)
    parts = [got[j * d0:j * d0 + k] for j, k in enumerate(outs) if k > 0]
    if not parts:
        return got[0:0]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


@reg("_c10d_functional.broadcast.default")
def broadcast(x, src, group_name):
    """The root's tensor on every rank: an all_gather of which the root's block is
    kept (exact; the runtime's broadcast kind is not reachable from nkipy's ops)."""
    groups = _world_group(group_name)
    if src not in groups[0]:
        raise ValueError(f"broadcast from rank {src}, not in its group {groups[0]}")
    shp = _shape(x)
    flat = np.reshape(x, (1,) + shp)
    every = ops.all_gather(flat, all_gather_dim=0, replica_groups=groups)
    i = groups[0].index(src)
    return np.reshape(every[i:i + 1], shp)
