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
from typing import Any, Callable, List, Sequence

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


def _host(t: torch.Tensor) -> torch.Tensor:
    """t itself when on the CPU, else a CPU copy."""
    return t if t.device.type == "cpu" else t.detach().to("cpu")


def _back(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Writes a CPU result into dst when dst is not that CPU tensor."""
    if dst is not src:
        with torch.no_grad():
            dst.copy_(src)


class NkipyProcessGroup(dist.ProcessGroup):
    """The ``"nkipy"`` process group: gloo over host copies of ``nkipy`` tensors."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta,
                 group_name: str = "") -> None:
        super().__init__(rank, size)
        self._group_name = group_name
        self._group_desc = ""
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("nkipy/gloo", store), rank, size,
                                           timeout)

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

    def _run(self, op: Callable[..., Any], tensors: Sequence[torch.Tensor],
             *args: Any) -> List[torch.Tensor]:
        """op(host copies of tensors, *args), then the results written back."""
        host = [_host(t) for t in tensors]
        op(host, *args).wait()
        for t, h in zip(tensors, host):
            _back(t, h)
        return list(tensors)

    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> dist._Work:
        opts = opts if opts is not None else dist.AllreduceOptions()
        return _DoneWork(self._run(self._gloo.allreduce, tensors, opts))

    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> dist._Work:
        opts = opts if opts is not None else dist.BroadcastOptions()
        return _DoneWork(self._run(self._gloo.broadcast, tensors, opts))

    def reduce(self, tensors: List[torch.Tensor], opts: Any) -> dist._Work:
        return _DoneWork(self._run(self._gloo.reduce, tensors, opts))

    def allgather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor],
                  opts: Any = None) -> dist._Work:
        opts = opts if opts is not None else dist.AllgatherOptions()
        host_out = [[_host(t) for t in lst] for lst in output_lists]
        self._gloo.allgather(host_out, [_host(t) for t in inputs], opts).wait()
        for lst, hl in zip(output_lists, host_out):
            for t, h in zip(lst, hl):
                _back(t, h)
        return _DoneWork(output_lists)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                        opts: Any = None) -> dist._Work:
        opts = opts if opts is not None else dist.AllgatherOptions()
        host = _host(output)
        self._gloo._allgather_base(host, _host(input), opts).wait()
        _back(output, host)
        return _DoneWork(output)

    all_gather_single = _allgather_base     # the names newer torch calls

    def reduce_scatter(self, outputs: List[torch.Tensor], input_lists: List[List[torch.Tensor]],
                       opts: Any = None) -> dist._Work:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        host_out = [_host(t) for t in outputs]
        self._gloo.reduce_scatter(host_out, [[_host(t) for t in lst] for lst in input_lists],
                                  opts).wait()
        for t, h in zip(outputs, host_out):
            _back(t, h)
        return _DoneWork(outputs)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                             opts: Any = None) -> dist._Work:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        host = _host(output)
        self._gloo._reduce_scatter_base(host, _host(input), opts).wait()
        _back(output, host)
        return _DoneWork(output)

    reduce_scatter_single = _reduce_scatter_base

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                      output_split_sizes: List[int], input_split_sizes: List[int],
                      opts: Any = None) -> dist._Work:
        opts = opts if opts is not None else dist.AllToAllOptions()
        host = _host(output)
        self._gloo.alltoall_base(host, _host(input), output_split_sizes, input_split_sizes,
                                 opts).wait()
        _back(output, host)
        return _DoneWork(output)

    all_to_all_single = alltoall_base

    def alltoall(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                 opts: Any = None) -> dist._Work:
        """dist.all_to_all: tensor i goes to rank i (through alltoall_base)."""
        flat_in = torch.cat([_host(t).reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=flat_in.dtype)
        self._gloo.alltoall_base(flat_out, flat_in, [t.numel() for t in outputs],
                                 [t.numel() for t in inputs],
                                 opts if opts is not None else dist.AllToAllOptions()).wait()
        for t, part in zip(outputs, torch.split(flat_out, [t.numel() for t in outputs])):
            _back(t, part.view(t.shape))
        return _DoneWork(outputs)

    def gather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor],
               opts: Any) -> dist._Work:
        host_out = [[_host(t) for t in lst] for lst in output_lists]
        self._gloo.gather(host_out, [_host(t) for t in inputs], opts).wait()
        for lst, hl in zip(output_lists, host_out):
            for t, h in zip(lst, hl):
                _back(t, h)
        return _DoneWork(output_lists)

    def scatter(self, outputs: List[torch.Tensor], input_lists: List[List[torch.Tensor]],
                opts: Any) -> dist._Work:
        host_out = [_host(t) for t in outputs]
        self._gloo.scatter(host_out, [[_host(t) for t in lst] for lst in input_lists],
                           opts).wait()
        for t, h in zip(outputs, host_out):
            _back(t, h)
        return _DoneWork(outputs)

    def barrier(self, opts: Any = None) -> dist._Work:
        self._gloo.barrier(opts if opts is not None else dist.BarrierOptions()).wait()
        return _DoneWork(None)

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0) -> dist._Work:
        self._gloo.send([_host(t) for t in tensors], dst, tag).wait()
        return _DoneWork(tensors)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0) -> dist._Work:
        return _DoneWork(self._run(lambda host: self._gloo.recv(host, src, tag), tensors))


def _create(opts: Any, backend_options: Any = None) -> NkipyProcessGroup:
    """c10d's extended creator API: the group's name comes with the options."""
    return NkipyProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                             opts.group_id)


def register() -> None:
    """Makes ``torch.distributed.init_process_group("nkipy")`` available (idempotent)."""
    if not dist.is_available() or BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", BACKEND])
