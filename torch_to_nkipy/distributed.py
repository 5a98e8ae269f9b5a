"""The ``torch.distributed`` backend ``"nkipy"``: ``init_process_group("nkipy")``.

What the seed's distributed example writes::

    torch.distributed.init_process_group("nkipy")
    init_nkipy_backend(rank=dist.get_rank(), world_size=dist.get_world_size())

The process group serves eager collectives (``dist.all_reduce``, ``all_gather``,
``broadcast``, ``reduce``, ``reduce_scatter``, ``all_to_all``, ``gather``,
``scatter``, ``barrier``, ``send``/``recv`` and the object collectives) on CPU and ``nkipy`` tensors: ``nkipy`` tensors are
staged through host memory (a copy each way) and the data moves with a gloo group
built on the same store. Collectives inside *compiled* graphs do not come here:
the kernels run them through the runtime's communicator (docs/runtime.md).

Registered when ``torch_to_nkipy`` is imported (:func:`register`).
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, List

import torch
import torch.distributed as dist

BACKEND = "nkipy"


class _DoneWork(dist._Work):
    """A collective that has already completed (every call here is synchronous)."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self._future: torch.futures.Future = torch.futures.Future()
        self._future.set_result(result)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:  # noqa: B008
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future


def _to_host(x: Any) -> Any:
    """Tensors (in lists, at any depth) on the CPU: themselves, or CPU copies."""
    if isinstance(x, torch.Tensor):
        return x if x.device.type == "cpu" else x.detach().to("cpu")
    if isinstance(x, list):
        return [_to_host(v) for v in x]
    return x


def _write_back(dst: Any, host: Any) -> None:
    """Writes host results into the caller's tensors that are not those results."""
    if isinstance(dst, torch.Tensor):
        if dst is not host:
            with torch.no_grad():
                dst.copy_(host.view(dst.shape))
    elif isinstance(dst, list):
        for d, h in zip(dst, host):
            _write_back(d, h)


class NkipyProcessGroup(dist.ProcessGroup):
    """The ``"nkipy"`` process group: gloo over host copies of ``nkipy`` tensors."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta,
                 group_name: str = "") -> None:
        super().__init__(rank, size)
        self._group_name = group_name
        self._group_desc = ""
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("nkipy/gloo", store), rank, size,
                                           timeout)
        if size > 1 and not dist.is_initialized():   # the default group: the whole job
            from .hosts import setup_hosts

            setup_hosts(store, rank, size)   # the runtime's hosts (docs/distributed.md)

    def getBackendName(self) -> str:  # noqa: N802  (c10d's name)
        return BACKEND

    # c10d keeps a Python group's name and description through these overrides
    # (functional collectives find groups by name)
    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    def getGroupName(self) -> str:  # noqa: N802
        return self._group_name

    def _set_group_desc(self, desc: str) -> None:
        self._group_desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._group_desc

    def name(self) -> str:
        return BACKEND

    @staticmethod
    def _staged(op: Callable[..., Any], outputs: Any, *args: Any) -> dist._Work:
        """op(outputs, *args) with every tensor on the host, then the outputs
        (a tensor or lists of them) written back."""
        host = _to_host(outputs)
        op(host, *[_to_host(a) for a in args]).wait()
        _write_back(outputs, host)
        return _DoneWork(outputs)

    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> dist._Work:
        return self._staged(self._gloo.allreduce, tensors, opts or dist.AllreduceOptions())

    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> dist._Work:
        return self._staged(self._gloo.broadcast, tensors, opts or dist.BroadcastOptions())

    def reduce(self, tensors: List[torch.Tensor], opts: Any) -> dist._Work:
        return self._staged(self._gloo.reduce, tensors, opts)

    def allgather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor],
                  opts: Any = None) -> dist._Work:
        return self._staged(self._gloo.allgather, output_lists, inputs,
                            opts or dist.AllgatherOptions())

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                        opts: Any = None) -> dist._Work:
        return self._staged(self._gloo._allgather_base, output, input,
                            opts or dist.AllgatherOptions())

    all_gather_single = _allgather_base     # the names newer torch calls

    def reduce_scatter(self, outputs: List[torch.Tensor], input_lists: List[List[torch.Tensor]],
                       opts: Any = None) -> dist._Work:
        return self._staged(self._gloo.reduce_scatter, outputs, input_lists,
                            opts or dist.ReduceScatterOptions())

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                             opts: Any = None) -> dist._Work:
        return self._staged(self._gloo._reduce_scatter_base, output, input,
                            opts or dist.ReduceScatterOptions())

    reduce_scatter_single = _reduce_scatter_base

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                      output_split_sizes: List[int], input_split_sizes: List[int],
                      opts: Any = None) -> dist._Work:
        return self._staged(self._gloo.alltoall_base, output, input, output_split_sizes,
                            input_split_sizes, opts or dist.AllToAllOptions())

    all_to_all_single = alltoall_base

    def alltoall(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                 opts: Any = None) -> dist._Work:
        """dist.all_to_all: tensor i goes to rank i (through alltoall_base)."""
        flat_in = torch.cat([_to_host(t).reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=flat_in.dtype)
        self._gloo.alltoall_base(flat_out, flat_in, [t.numel() for t in outputs],
                                 [t.numel() for t in inputs],
                                 opts or dist.AllToAllOptions()).wait()
        _write_back(outputs, list(torch.split(flat_out, [t.numel() for t in outputs])))
        return _DoneWork(outputs)

    def gather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor],
               opts: Any) -> dist._Work:
        return self._staged(self._gloo.gather, output_lists, inputs, opts)

    def scatter(self, outputs: List[torch.Tensor], input_lists: List[List[torch.Tensor]],
                opts: Any) -> dist._Work:
        return self._staged(self._gloo.scatter, outputs, input_lists, opts)

    def barrier(self, opts: Any = None) -> dist._Work:
        self._gloo.barrier(opts if opts is not None else dist.BarrierOptions()).wait()
        return _DoneWork(None)

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0) -> dist._Work:
        self._gloo.send(_to_host(tensors), dst, tag).wait()
        return _DoneWork(tensors)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0) -> dist._Work:
        return self._staged(lambda host: self._gloo.recv(host, src, tag), tensors)


def _create(opts: Any, backend_options: Any = None) -> NkipyProcessGroup:
    """c10d's extended creator API: the group's name comes with the options."""
    return NkipyProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                             opts.group_id)


def register() -> None:
    """Makes ``torch.distributed.init_process_group("nkipy")`` available (idempotent)."""
    if not dist.is_available() or BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", BACKEND])
