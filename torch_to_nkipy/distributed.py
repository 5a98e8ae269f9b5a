"""The ``torch.distributed`` backend ``"nkipy"``: ``init_process_group("nkipy")``.

What the seed's distributed example writes::

    torch.distributed.init_process_group("nkipy")
    init_nkipy_backend(rank=dist.get_rank(), world_size=dist.get_world_size())

The process group serves eager collectives (``dist.all_reduce``, ``all_gather``,
``broadcast``, ``reduce``, ``reduce_scatter``, ``all_to_all``, ``gather``,
``scatter``, ``barrier``, ``send``/``recv``, ``isend``/``irecv``,
``batch_isend_irecv`` and the object collectives) on CPU and ``nkipy`` tensors.

Collectives of the whole world (all_reduce, broadcast, reduce, all_gather,
reduce_scatter, all_to_all with equal splits) on contiguous CPU or ``nkipy``
tensors run on the runtime's shared-memory communicator, the one collectives
inside compiled graphs use (rank i of the world group is rank i of the
communicator): directly on the tensors' memory (``nkipy`` tensors live in
host-visible device memory), after the device work queued before them, with
the GIL released. Everything else (groups smaller than the world, gather and
scatter, point to point, dtypes the communicator does not reduce, bitwise ops,
non-contiguous tensors) goes through a gloo group built on the same store, with
``nkipy`` tensors staged through host copies. Point-to-point operations are
asynchronous: their Work completes when the transfer has (a receive into an
``nkipy`` tensor is written back then).

Registered when ``torch_to_nkipy`` is imported (:func:`register`).
"""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, Callable, List, Optional

import torch
import torch.distributed as dist

from spike_torch.dtypes import FLOAT8, TORCH_DTYPES, runtime_code

BACKEND = "nkipy"


class _Work(dist._Work):
    """A Work: done already (``inner`` None), or pending on a gloo Work, with
    ``on_done`` (e.g. a write-back into an ``nkipy`` tensor) run once when that
    completes, before the Work reports completion."""

    def __init__(self, result: Any, inner: Optional[dist._Work] = None,
                 on_done: Optional[Callable[[], None]] = None, keep: Any = None) -> None:
        super().__init__()
        self._result = result
        self._inner = inner
        self._on_done = on_done
        self._keep = keep                     # host copies the transfer reads or writes
        self._lock = threading.Lock()
        self._wait_lock = threading.Lock()
        self._waiter: Optional[threading.Thread] = None
        self._future: torch.futures.Future = torch.futures.Future()
        if inner is None:
            self._future.set_result(result)

    def _settle(self, error: Optional[BaseException]) -> None:
        """Runs on_done (if the transfer succeeded) and completes the future, once."""
        with self._lock:
            if self._future.done():
                return
            if error is None and self._on_done is not None:
                try:
                    self._on_done()
                except BaseException as e:  # noqa: BLE001  (reported through the Work)
                    error = e
            self._keep = self._on_done = None
            if error is None:
                self._future.set_result(self._result)
            else:
                self._future.set_exception(error)

    def _raise_if_failed(self) -> None:
        if self._future.done():
            self._future.wait()             # raises the transfer's error, if any

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:  # noqa: B008
        # one caller at a time waits on the transfer (gloo's must be waited once);
        # the others find it settled
        with self._wait_lock:
            if self._inner is not None and not self._future.done():
                try:
                    if timeout == timedelta(0):
                        self._inner.wait()
                    else:
                        self._inner.wait(timeout)
                except BaseException as e:  # noqa: BLE001
                    self._settle(e)
                    raise
                self._settle(None)
        self._raise_if_failed()
        return True

    def is_completed(self) -> bool:
        """Whether the operation (and a receive's write-back) is done. gloo's
        transfers say so only to a waiter, so the first poll starts one (a thread)."""
        if not self._future.done():
            self._start_waiter()
        return self._future.done()

    def is_success(self) -> bool:
        if not self.is_completed():
            return False
        try:
            self._future.wait()
        except BaseException:  # noqa: BLE001
            return False
        return True

    def exception(self) -> Any:
        if not self.is_completed():
            return None
        try:
            self._future.wait()
        except BaseException as e:  # noqa: BLE001
            return e
        return None

    def get_future(self) -> torch.futures.Future:
        """A future completed (with the result, or the transfer's error) when the
        operation is, without anyone calling wait: a helper thread waits for it."""
        self._start_waiter()
        return self._future

    def _start_waiter(self) -> None:
        with self._lock:
            if not self._future.done() and self._waiter is None:
                self._waiter = threading.Thread(target=self._wait_quietly, daemon=True,
                                                name="nkipy-pg-work")
                self._waiter.start()

    def _wait_quietly(self) -> None:
        try:
            self.wait()
        except BaseException:  # noqa: BLE001  (the future carries it)
            pass


def _done(result: Any) -> _Work:
    return _Work(result)


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


# ---- the runtime's communicator --------------------------------------------------

# nkrt/neff_abi.h: the collective kinds, reduce ops and dtypes
_ALL_REDUCE, _ALL_GATHER, _ALL_TO_ALL, _REDUCE_SCATTER, _BROADCAST = range(5)
_OPS = {dist.ReduceOp.SUM: 0, dist.ReduceOp.PRODUCT: 1, dist.ReduceOp.MAX: 2,
        dist.ReduceOp.MIN: 3}
# what the communicator reduces as gloo does (bool and float64 go to gloo)
_REDUCIBLE = {torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
              torch.int32, torch.int64}


def _integer_avg_error(dtype: torch.dtype) -> RuntimeError:
    """The error eager PyTorch gives for ReduceOp.AVG on an integer tensor (gloo
    divides the sum in place: ``div_`` refuses to cast the float quotient)."""
    try:
        torch.zeros(1, dtype=dtype).div_(2)
    except RuntimeError as e:
        return e
    return RuntimeError(f"ReduceOp.AVG is not supported for {dtype}")  # pragma: no cover


def _is_avg(op: Any) -> bool:
    return op == dist.ReduceOp.AVG


class _Communicator:
    """The runtime's communicator as the world group uses it: ``rank`` of ``size``."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
        self._missing: set = set()              # kinds this runtime does not have yet

    @staticmethod
    def for_group(store: Any, rank: int, size: int) -> Optional["_Communicator"]:
        """The communicator for a group of every rank of the job (the name all
        ranks join, $NKRT_CC_ID, agreed through the group's store if not set);
        None for a smaller group or one process."""
        if size < 2:
            return None
        if dist.is_initialized() and (size != dist.get_world_size() or
                                      rank != dist.get_rank()):
            return None
        from .config import _communicator_id

        return _Communicator(rank, size) if _communicator_id(size, store) else None

    def has(self, kind: int) -> bool:
        return kind not in self._missing

    def run(self, kind: int, dtype: torch.dtype, op: int, src: torch.Tensor, dst: torch.Tensor,
            count: int) -> bool:
        """One collective of ``count`` elements per block on the tensors' memory.
        False if this runtime lacks the kind (nothing ran: every rank says so)."""
        import spike
        from spike import _spike

        spike.get_spike_singleton()
        try:
            _spike._comm_collective(kind, runtime_code(dtype), op, self.rank, self.size,
                                    src.data_ptr(), dst.data_ptr(), count)
        except _spike.NrtError as e:
            if kind in (_REDUCE_SCATTER, _BROADCAST) and "unknown collective kind" in str(e):
                self._missing.add(kind)
                return False
            raise
        return True


def _direct(*tensors: torch.Tensor) -> bool:
    """Tensors the communicator can work on in place: contiguous, on the CPU or
    an nkipy device, one dtype it knows (not an 8-bit float: gloo's host copies
    answer for those, as for a CPU tensor)."""
    dt = tensors[0].dtype
    return dt in TORCH_DTYPES and dt not in FLOAT8 and all(
        t.dtype == dt and t.device.type in ("cpu", BACKEND) and t.is_contiguous()
        for t in tensors)


class NkipyProcessGroup(dist.ProcessGroup):
    """The ``"nkipy"`` process group: the runtime's communicator for collectives
    of the whole world, gloo (over host copies of ``nkipy`` tensors) for the rest."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta,
                 group_name: str = "") -> None:
        super().__init__(rank, size)
        self._group_name = group_name
        self._group_desc = ""
        self._comm = _Communicator.for_group(store, rank, size)
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
        return _done(outputs)

    def _reduce_op(self, tensor: torch.Tensor, op: Any) -> Optional[int]:
        """The communicator's op for ``op`` on ``tensor``'s dtype (AVG: SUM, then
        divided); None when gloo must do it. Integer AVG raises as eager does."""
        if _is_avg(op):
            if not tensor.is_floating_point() and not tensor.is_complex():
                raise _integer_avg_error(tensor.dtype)
            op = dist.ReduceOp.SUM
        if self._comm is None or tensor.dtype not in _REDUCIBLE:
            return None
        for known, code in _OPS.items():
            if op == known:
                return code
        return None

    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> dist._Work:
        opts = opts or dist.AllreduceOptions()
        (t,) = tensors
        code = self._reduce_op(t, opts.reduceOp)
        if code is not None and _direct(t):
            self._comm.run(_ALL_REDUCE, t.dtype, code, t, t, t.numel())
            if _is_avg(opts.reduceOp):
                with torch.no_grad():
                    t.div_(self.size())
            return _done(tensors)
        return self._staged(self._gloo.allreduce, tensors, opts)

    def _broadcast_into(self, t: torch.Tensor, root: int) -> bool:
        """Every rank's ``t`` = the root's, on the communicator (its broadcast, else
        an all_gather of which the root's block is kept: exact either way)."""
        if self._comm is None or not _direct(t):
            return False
        n = t.numel()
        if self._comm.has(_BROADCAST) and self._comm.run(_BROADCAST, t.dtype, root, t, t, n):
            return True
        every = torch.empty(self.size() * n, dtype=t.dtype, device=t.device)
        self._comm.run(_ALL_GATHER, t.dtype, 0, t, every, n)
        with torch.no_grad():
            t.view(-1).copy_(every[root * n:(root + 1) * n])
        return True

    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> dist._Work:
        opts = opts or dist.BroadcastOptions()
        if len(tensors) == 1 and opts.rootTensor == 0 and \
                self._broadcast_into(tensors[0], opts.rootRank):
            return _done(tensors)
        return self._staged(self._gloo.broadcast, tensors, opts)

    def reduce(self, tensors: List[torch.Tensor], opts: Any) -> dist._Work:
        (t,) = tensors
        code = self._reduce_op(t, opts.reduceOp)
        if code is not None and opts.rootTensor == 0 and _direct(t):
            # the root's tensor gets the result; the others' stay as they were
            dst = t if self.rank() == opts.rootRank else torch.empty_like(t)
            self._comm.run(_ALL_REDUCE, t.dtype, code, t, dst, t.numel())
            if _is_avg(opts.reduceOp) and dst is t:
                with torch.no_grad():
                    t.div_(self.size())
            return _done(tensors)
        return self._staged(self._gloo.reduce, tensors, opts)

    def _gather_into(self, output: torch.Tensor, input: torch.Tensor) -> bool:  # noqa: A002
        if self._comm is None or not _direct(output, input) or \
                output.numel() != self.size() * input.numel():
            return False
        self._comm.run(_ALL_GATHER, input.dtype, 0, input, output, input.numel())
        return True

    def allgather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor],
                  opts: Any = None) -> dist._Work:
        opts = opts or dist.AllgatherOptions()
        if len(inputs) == 1 and len(output_lists) == 1 and \
                len(output_lists[0]) == self.size() and _direct(inputs[0]):
            (inp,), (outs,) = inputs, output_lists
            if all(o.dtype == inp.dtype and o.numel() == inp.numel() for o in outs):
                flat = torch.empty(self.size() * inp.numel(), dtype=inp.dtype, device=inp.device)
                if self._gather_into(flat, inp):
                    with torch.no_grad():
                        for o, block in zip(outs, flat.split(inp.numel())):
                            o.copy_(block.view(o.shape))
                    return _done(output_lists)
        return self._staged(self._gloo.allgather, output_lists, inputs, opts)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                        opts: Any = None) -> dist._Work:
        if self._gather_into(output, input):
            return _done(output)
        return self._staged(self._gloo._allgather_base, output, input,
                            opts or dist.AllgatherOptions())

    all_gather_single = _allgather_base     # the names newer torch calls

    def all_gather_single_coalesced(self, outputs: List[torch.Tensor],
                                    inputs: List[torch.Tensor], opts: Any = None) -> dist._Work:
        """One all_gather per (output, input) pair: eager functional collectives
        (``funcol.all_gather_tensor`` and DTensor's Shard->Replicate) come here."""
        for output, input in zip(outputs, inputs):  # noqa: A001
            self._allgather_base(output, input, opts).wait()
        return _done(outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _scatter_reduced(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                         reduce_op: Any) -> bool:
        """Block ``rank`` of the reduction of ``input`` (``size`` blocks) into ``output``,
        on the communicator (its reduce_scatter, else an all_reduce of the whole)."""
        code = self._reduce_op(input, reduce_op)
        n = output.numel()
        if code is None or not _direct(output, input) or input.numel() != self.size() * n:
            return False
        if not (self._comm.has(_REDUCE_SCATTER) and
                self._comm.run(_REDUCE_SCATTER, input.dtype, code, input, output, n)):
            whole = torch.empty_like(input)
            self._comm.run(_ALL_REDUCE, input.dtype, code, input, whole, input.numel())
            with torch.no_grad():
                output.view(-1).copy_(whole[self.rank() * n:(self.rank() + 1) * n])
        if _is_avg(reduce_op):
            with torch.no_grad():
                output.div_(self.size())
        return True

    def reduce_scatter(self, outputs: List[torch.Tensor], input_lists: List[List[torch.Tensor]],
                       opts: Any = None) -> dist._Work:
        opts = opts or dist.ReduceScatterOptions()
        if len(outputs) == 1 and len(input_lists) == 1 and len(input_lists[0]) == self.size():
            (out,), (ins,) = outputs, input_lists
            if _direct(out) and all(i.dtype == out.dtype and i.numel() == out.numel()
                                    and i.device == out.device for i in ins):
                flat = torch.cat([i.reshape(-1) for i in ins])
                if self._scatter_reduced(out, flat, opts.reduceOp):
                    return _done(outputs)
        return self._staged(self._gloo.reduce_scatter, outputs, input_lists, opts)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                             opts: Any = None) -> dist._Work:
        opts = opts or dist.ReduceScatterOptions()
        if self._scatter_reduced(output, input, opts.reduceOp):
            return _done(output)
        return self._staged(self._gloo._reduce_scatter_base, output, input, opts)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_single_coalesced(self, outputs: List[torch.Tensor],
                                        inputs: List[torch.Tensor],
                                        opts: Any = None) -> dist._Work:
        """One reduce_scatter per pair (eager ``funcol.reduce_scatter_tensor``)."""
        for output, input in zip(outputs, inputs):  # noqa: A001
            self._reduce_scatter_base(output, input, opts).wait()
        return _done(outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> dist._Work:
        """One all_reduce per tensor (eager ``funcol.all_reduce_coalesced``)."""
        one = dist.AllreduceOptions()
        if opts is not None:
            one.reduceOp = opts.reduceOp
        for t in tensors:
            self.allreduce([t], one).wait()
        return _done(tensors)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                      output_split_sizes: List[int], input_split_sizes: List[int],
                      opts: Any = None) -> dist._Work:
        n = self.size()
        even = all(not sizes or len(set(sizes)) == 1 for sizes in
                   (output_split_sizes, input_split_sizes))
        if self._comm is not None and even and _direct(output, input) and \
                input.numel() == output.numel() and input.numel() % n == 0 and \
                (input.dim() == 0 or input.numel() == 0 or input.shape[0] % n == 0):
            self._comm.run(_ALL_TO_ALL, input.dtype, 0, input, output, input.numel() // n)
            return _done(output)
        return self._staged(self._gloo.alltoall_base, output, input, output_split_sizes,
                            input_split_sizes, opts or dist.AllToAllOptions())

    all_to_all_single = alltoall_base

    def alltoall(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                 opts: Any = None) -> dist._Work:
        """dist.all_to_all: tensor i goes to rank i (through alltoall_base)."""
        device = inputs[0].device if inputs else torch.device("cpu")
        if not all(t.device == device for t in list(inputs) + list(outputs)):
            device = torch.device("cpu")
        flat_in = torch.cat([t.to(device).reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=flat_in.dtype,
                               device=device)
        self.alltoall_base(flat_out, flat_in, [t.numel() for t in outputs],
                           [t.numel() for t in inputs], opts or dist.AllToAllOptions()).wait()
        _write_back(outputs, list(torch.split(flat_out, [t.numel() for t in outputs])))
        return _done(outputs)

    def gather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor],
               opts: Any) -> dist._Work:
        return self._staged(self._gloo.gather, output_lists, inputs, opts)

    def scatter(self, outputs: List[torch.Tensor], input_lists: List[List[torch.Tensor]],
                opts: Any) -> dist._Work:
        return self._staged(self._gloo.scatter, outputs, input_lists, opts)

    def barrier(self, opts: Any = None) -> dist._Work:
        self._gloo.barrier(opts if opts is not None else dist.BarrierOptions()).wait()
        return _done(None)

    # point to point: asynchronous on gloo; the Work completes with the transfer

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0) -> dist._Work:
        host = _to_host(tensors)      # a snapshot of nkipy tensors, kept until sent
        return _Work(tensors, self._gloo.send(host, dst, tag), keep=host)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0) -> dist._Work:
        host = _to_host(tensors)
        on_done = None if all(h is t for h, t in zip(host, tensors)) else \
            (lambda: _write_back(tensors, host))
        return _Work(tensors, self._gloo.recv(host, src, tag), on_done=on_done, keep=host)


def _create(opts: Any, backend_options: Any = None) -> NkipyProcessGroup:
    """c10d's extended creator API: the group's name comes with the options."""
    return NkipyProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                             opts.group_id)


def register() -> None:
    """Makes ``torch.distributed.init_process_group("nkipy")`` available (idempotent)."""
    if not dist.is_available() or BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", BACKEND])
