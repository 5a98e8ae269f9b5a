"""The job's hosts, for the runtime's communicator (collectives inside kernels).

Within a host the runtime's ranks meet in shared memory; between hosts the
data moves over a transport built on a ``torch.distributed`` gloo group
(spike_torch/csrc/comm_gloo.cpp). torch_to_nkipy detects the hosts and makes
the group (``torch_to_nkipy/hosts.py``); this module hands both to the
runtime::

    spike_torch.comm.set_hosts(group, host_of)   # several hosts: gloo between them
    spike_torch.comm.clear_hosts(world_size)     # one host: shared memory only

Call them on every rank, before the first collective of a kernel (a
communicator already joined keeps the hosts it was joined with).
"""
from __future__ import annotations

from typing import List, Sequence

import torch
import torch.distributed as dist

from . import _C  # noqa: F401  (loads the library that registers torch.ops.spike_torch)


def _check_host_of(host_of: Sequence[int]) -> List[int]:
    hosts = list(host_of)
    if not 1 <= len(hosts) <= 1024:
        raise ValueError(f"host_of has {len(hosts)} entries: a job has 1 to 1024 ranks")
    for r, h in enumerate(hosts):
        if isinstance(h, bool) or not isinstance(h, int):
            raise TypeError(f"host_of[{r}] must be an int, not {type(h).__name__} {h!r}")
        if not 0 <= h <= r or hosts[h] != h:
            raise ValueError(f"host_of[{r}] is {h}: each rank's host must be the lowest rank "
                             f"on that host (host_of={hosts})")
    return hosts


def set_hosts(group: dist.ProcessGroup, host_of: Sequence[int]) -> None:
    """Tells the runtime which host each rank is on and how to reach the others.

    ``host_of[r]`` is the lowest rank on rank ``r``'s host (the same list on
    every rank); ``group`` is a gloo process group over every rank of the job,
    its ranks numbered as the job's, used only for this (its messages must not
    interleave with other traffic). With one host the runtime uses shared memory
    only and ``group`` is not kept. Raises ValueError/TypeError for a malformed
    ``host_of``, RuntimeError when the group does not fit or the runtime refuses
    (its message says why).
    """
    hosts = _check_host_of(host_of)
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed ProcessGroup, not "
                        f"{type(group).__name__}")
    torch.ops.spike_torch.comm_set_hosts(group.boxed(), hosts)


def clear_hosts(world_size: int) -> None:
    """Every rank of the ``world_size`` on one host: shared memory only."""
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, not {type(world_size).__name__}")
    torch.ops.spike_torch.comm_clear_hosts(world_size)


def _exchange(group: dist.ProcessGroup, peers: Sequence[int], sends: Sequence[bool],
              buffers: Sequence[torch.Tensor]) -> None:
    """One call of the gloo transport's exchange, outside the runtime (tests)."""
    torch.ops.spike_torch._comm_gloo_exchange(group.boxed(), list(peers), [int(bool(s)) for s in sends],
                                              list(buffers))
