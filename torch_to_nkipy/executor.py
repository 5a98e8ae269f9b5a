"""Running a built kernel on torch tensors (the other half of :mod:`.kernel`,
which builds and caches kernels).

:class:`Executor` takes a call's inputs in (copied into persistent device
buffers, padded to a bucket, or passed through), runs the kernel, and hands the
outputs back (read back, unpadded, or left on the device); :class:`PadCall`
describes one bucketed call.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from nkipy.runtime import DeviceTensor
from spike._dtypes import to_numpy_dtype
from spike_torch._C import kernel_calls
from spike_torch.dtypes import FLOAT8, TORCH_DTYPES
from spiky.buffers import BufferSet
from spiky.padding import (PadGeometry, PaddingMetadata, attach_metadata, copy_padded,
                           copy_unpadded, get_metadata, pad_on_host, read_unpadded,
                           write_padded)
from spiky.profiling import now_ns
from spiky.stats import record_execution

from . import device
from .options import ExecOptions

if TYPE_CHECKING:
    from .kernel import NKIPyKernel


@dataclass
class PadCall:
    """One call of a bucket kernel: actual size ``actual`` of the dynamic dimension
    run at ``bucket``; which inputs (by argument index) and outputs (by position)
    carry that dimension; values of SymInt outputs at the actual size."""

    bucket: int
    actual: int
    in_pad: Dict[int, Any]
    out_pad: Dict[int, Any]
    symint_outputs: Dict[int, int]


class Executor:
    """Runs one kernel on torch tensors: inputs in (copied, padded or passed
    through), the kernel, outputs out (read back, unpadded, or left on the
    device), in-place mutations written back, statistics and profiles recorded.

    Inputs on the ``nkipy`` device are passed to the kernel without copies (a
    padded copy is made on the device when padding is needed); CPU inputs are
    written into persistent device buffers. Outputs are ``nkipy`` tensors when
    the inputs are, or with ``keep_outputs_on_device``; CPU tensors otherwise.
    With ``pipelined``, device outputs and CPU inputs to copy in, the execution
    is submitted without waiting: the call returns while the kernel runs and the
    next call's input copies overlap it (two buffer sets alternate). Any later use of the outputs
    waits for the kernel (the runtime orders copies and executions touching
    the same memory), so no stale data can be read.
    """

    def __init__(self, kernel: "NKIPyKernel") -> None:
        self.k = kernel
        self.core = kernel.device_kernel.core_id
        self.sets = [BufferSet(self.core), BufferSet(self.core)]
        self.turn = 0
        self.lock = threading.Lock()
        dk = kernel.device_kernel
        self.out_specs = [(n, tuple(m.shape), m.dtype) for n, m in dk.output_tensors_info.items()
                          if m.alias_of is None]
        self.in_specs = {n: (tuple(m.shape), to_numpy_dtype(m.dtype))
                         for n, m in dk.input_tensors_info.items()}
        import spike
        import spike_torch  # noqa: F401  (the "nkipy" torch device outputs may live on)

        self.out_dev = torch.device(device.DEVICE_TYPE, self.core)
        self.rt = spike.get_spike_singleton()
        self._alias_srcs = set(kernel.aliases.values())
        # the fast paths' bindings (None: that kind of call takes the general path)
        self._plan = self._fast_plan()          # CPU tensors
        self._dplan = self._device_plan()       # nkipy tensors

    # -- inputs --------------------------------------------------------------

    def _input(self, p: str, a: torch.Tensor, pd: Any, pad: Optional[PadCall],
               opts: ExecOptions, bufs: BufferSet) -> Tuple[DeviceTensor, Any]:
        """The device tensor for parameter ``p`` and, when padded, its geometry."""
        if pd is not None and opts.input_layout == "padded":
            meta = get_metadata(a)
            if meta is not None:
                if a.shape[pd.dim] == pd.mult * pad.bucket:
                    pd = None                               # already padded to the bucket
                else:
                    a = a.narrow(pd.dim, 0, pd.mult * meta.original_size)
        if pd is not None and a.shape[pd.dim] > pd.mult * pad.bucket:
            raise ValueError(
                f"input {p} has {a.shape[pd.dim]} entries along its dynamic dimension {pd.dim} "
                f"but the call's dynamic size is {pad.actual} (bucket {pad.bucket}): a padded "
                f"input without PaddingMetadata? (input_layout={opts.input_layout!r})")
        if pd is None:
            if not a.is_cpu:
                return device.to_device(a, self.core), None
            arr = device.torch_to_numpy(a)
            buf = bufs.buffer(p, arr.shape, arr.dtype)
            buf.write_from_numpy(arr, only_changes=True)   # weights: usually unchanged
            return buf, None
        shape, np_dtype = self.in_specs[p]
        geo = PadGeometry.of(tuple(a.shape), pd.dim, pd.mult * pad.bucket, np_dtype.itemsize)
        if not a.is_cpu:
            src = device.to_device(a, self.core)
            dst = device.empty_for_output(shape, np_dtype, self.out_dev)
            if opts.pad_on_device:
                copy_padded(self.rt, src.tensor_ref, 0, dst.tensor_ref, 0, geo)
            else:
                dst.write_from_numpy(pad_on_host(src.numpy(), shape))
            return dst, geo
        arr = device.torch_to_numpy(a)
        buf = bufs.buffer(p, shape, np_dtype)
        if opts.pad_on_device:
            write_padded(self.rt, buf.tensor_ref, 0, arr, geo)
        else:
            buf.write_from_numpy(pad_on_host(arr, shape))
        return buf, geo

    # -- outputs -------------------------------------------------------------

    def _unpad(self, d: DeviceTensor, pd: Any, pad: PadCall, dt: Optional[torch.dtype],
               out_dev: torch.device) -> torch.Tensor:
        shape = list(d.shape)
        shape[pd.dim] = pd.mult * pad.actual
        geo = PadGeometry.of(shape, pd.dim, d.shape[pd.dim], d.dtype.itemsize)
        ddt = device.torch_dtype(d.dtype)
        r = torch.empty(shape, dtype=ddt, device=out_dev)
        if device.is_nkipy(out_dev):
            copy_unpadded(self.rt, d.tensor_ref, 0, device.to_device(r, self.core).tensor_ref, 0,
                          geo)
        else:
            read_unpadded(self.rt, d.tensor_ref, 0, device.torch_to_numpy(r), geo)
        return r if dt is None or r.dtype == dt else r.to(dt)

    def _write_back_unpadded(self, dst: torch.Tensor, d: DeviceTensor, pd: Any,
                             pad: PadCall) -> None:
        real = self._unpad(d, pd, pad, dst.dtype, dst.device)
        if dst.shape[pd.dim] != real.shape[pd.dim]:    # a padded input: its real rows
            dst = dst.narrow(pd.dim, 0, real.shape[pd.dim])
        with torch.no_grad():
            dst.copy_(real.reshape(dst.shape))

    # -- a call ----------------------------------------------------------------

    def _fast_inputs(self) -> Optional[Tuple[Any, ...]]:
        """(argument index, parameter, shape, NumPy dtype, torch dtype) of every
        input in the model's order, or None when one has a dtype the fast paths
        do not take."""
        ins = []
        for p in self.k.device_kernel.input_tensors_info:
            shape, np_dtype = self.in_specs[p]
            if np_dtype.name not in _FAST_DTYPES:
                return None
            ins.append((self.k.param_index[p], p, shape, np_dtype, _FAST_DTYPES[np_dtype.name]))
        return tuple(ins)

    def _fast_plan(self) -> Optional[Tuple[Any, ...]]:
        """Precomputed bindings for calls on CPU tensors: no padding, no aliasing,
        no constant tensor outputs (None when the kernel is not like that; Python
        values the graph returns, such as the ``None`` gradients of a backward
        graph, are fine): (inputs, outputs, results, model), inputs and outputs
        in the model's order, results in the graph's."""
        k = self.k
        ins = self._fast_inputs()
        if ins is None or k.aliases or len(k.out_names) != len(k.tensor_out_pos) or any(
                isinstance(v, (np.ndarray, torch.Tensor)) for v in k.static_outputs.values()):
            return None
        outs = []
        results: List[Any] = [None] * k.n_outputs
        for j, (pos, name) in enumerate(zip(k.tensor_out_pos, k.out_names)):
            shape, dt = next((sh, d) for n, sh, d in self.out_specs if n == name)
            want = k.out_dtypes[pos] if pos < len(k.out_dtypes) else None
            if dt not in _FAST_DTYPES or (want is not None and want != _FAST_DTYPES[dt]):
                return None
            outs.append((name, torch.Size(shape), _FAST_DTYPES[dt]))
            results[pos] = ("output", j)
        for pos, val in k.static_outputs.items():
            results[pos] = ("value", val)
        if any(r is None for r in results):
            return None
        return ins, tuple(outs), results, k.device_kernel.model_ref

    def _cpu_call(self) -> Any:
        """The native call for CPU tensors (``kernel_calls``), made on first use:
        where the runtime's kernels address host memory (the CPU driver), the
        kernel reads the CPU inputs where they lie and writes fresh CPU outputs,
        no copies; otherwise it stages them through persistent device buffers
        (so kernels only ever called on nkipy tensors allocate no buffers)."""
        call = self.__dict__.get("_cpu_call_made")
        if call is None:
            ins, outs, results, model = self._plan
            inputs = [(i, shape, dt) for i, _, shape, _, dt in ins]
            outputs = [(shape, dt) for _, shape, dt in outs]
            if kernel_calls.host_addressable():
                call = self._cpu_call_made = kernel_calls.kernel_call(
                    model, self.core, inputs, outputs, results, "host")
                return call
            bufs = self.sets[0]
            if bufs.outputs is None:
                bufs.outputs = dict(zip([n for n, _, _ in self.out_specs],
                                        self.k.device_kernel.allocate_output_tensors()))
            in_addrs = [bufs.buffer(p, shape, np_dt).tensor_ref.va
                        for _, p, shape, np_dt, _ in ins]
            out_addrs = [bufs.outputs[name].tensor_ref.va for name, _, _ in outs]
            call = self._cpu_call_made = kernel_calls.kernel_call(
                model, self.core, inputs, outputs, results, (in_addrs, out_addrs))
        return call

    def _run_fast(self, args: Sequence[Any], plan: Tuple[Any, ...]) -> Optional[List[Any]]:
        """The common call on CPU tensors, in one native call (see ``_cpu_call``):
        the kernel on the CPU tensors themselves, or through persistent device
        buffers (only the blocks that differ written, without the GIL), each
        output a fresh CPU tensor (None: an input is not what the kernel was
        built for)."""
        if self.sets[0].event is not None or self.sets[1].event is not None:
            return None
        call = self._cpu_call()
        t0 = time.perf_counter()
        results = kernel_calls.run_kernel_call(call, args)
        if results is not None:
            ms = (time.perf_counter() - t0) * 1e3
            record_execution(None, 1.0, ms, 0.0, ms, 0.0)
        return results

    def _device_plan(self) -> Optional[Any]:
        """The native call for nkipy tensors (``spike_torch._C.kernel_calls``), or
        None when the kernel needs the general path: inputs in the model's order
        (every dtype as it is: 64-bit ones are computed in 64 bits), fresh outputs, outputs written into their
        input (KV caches, buffers), which result is which, constants."""
        k = self.k
        ins = self._fast_inputs()
        if ins is None or any(isinstance(v, np.ndarray) for v in k.static_outputs.values()):
            return None
        dk = k.device_kernel
        by_name = {p: (i, dt) for i, p, _, _, dt in ins}
        inputs = []
        for i, p, shape, _, dt in ins:
            if k.arg_dtypes[i] is not dt:
                return None
            inputs.append((i, shape, dt))
        outputs: List[Any] = []
        index = {}
        for name, m in dk.output_tensors_info.items():
            if m.alias_of is not None:
                outputs.append(None)
                continue
            dt = _FAST_DTYPES.get(m.dtype)
            if dt is None:
                return None
            index[name] = len(outputs)
            outputs.append((tuple(m.shape), dt))
        results: List[Any] = [None] * k.n_outputs
        for pos, name in zip(k.tensor_out_pos, k.out_names):
            want = k.out_dtypes[pos] if pos < len(k.out_dtypes) else None
            if name in k.aliases:
                i, dt = by_name[k.aliases[name]]
                results[pos] = ("arg", i)
            else:
                dt = outputs[index[name]][1]
                results[pos] = ("output", index[name])
            if want is not None and want != dt:
                return None
        for pos, val in k.static_outputs.items():
            results[pos] = ("value", val)
        if any(r is None for r in results):
            return None
        self._dslots = ({pos: (r[1], outputs[r[1]]) for pos, r in enumerate(results)
                         if r[0] == "output"}, len(outputs))
        return kernel_calls.kernel_call(dk.model_ref, self.core, inputs, outputs, results)

    def _run_fast_device(self, args: Sequence[Any], plan: Any) -> Optional[List[Any]]:
        """The common call on nkipy tensors, in one native call: each input's own
        memory, fresh nkipy outputs, in-place outputs written straight into their
        input, one execution by address (None: an input is not what the kernel
        was built for). Nothing is copied in, so there is nothing to overlap:
        the kernel runs inline even when pipelined (submitting to the core's
        queue thread costs more than it saves)."""
        if self.sets[0].event is not None or self.sets[1].event is not None:
            for b in self.sets:
                b.wait()
        t0 = time.perf_counter()
        results = kernel_calls.run_kernel_call(plan, args)
        if results is not None:
            ms = (time.perf_counter() - t0) * 1e3
            record_execution(None, 1.0, ms, 0.0, ms, 0.0)
        return results

    def output_slots(self, on_cpu: bool) -> Optional[Tuple[Dict[int, Any], int]]:
        """For :meth:`run_into`: each tensor result's position -> (kernel output
        index, (sizes, torch dtype)), and the number of kernel outputs; None when
        calls on such tensors (CPU or nkipy) have no fast path."""
        if not on_cpu:
            return self.__dict__.get("_dslots") if self._dplan is not None else None
        if self._plan is None:
            return None
        slots = self.__dict__.get("_cslots")
        if slots is None:
            outs, results = self._plan[1], self._plan[2]
            slots = self._cslots = ({pos: (r[1], (tuple(outs[r[1]][1]), outs[r[1]][2]))
                                     for pos, r in enumerate(results) if r[0] == "output"},
                                    len(outs))
        return slots

    def run_into(self, args: Sequence[Any], into: Dict[int, torch.Tensor], on_cpu: bool,
                 bucket: Optional[int] = None) -> Optional[List[Any]]:
        """A call through the fast path (CPU tensors read in place, or nkipy
        tensors) whose tensor results at the positions of ``into`` are written
        into those tensors (contiguous views of bigger ones are fine: a slice of
        a bucketed call's output); None when the call cannot take that path.
        Recorded in spiky's statistics as an execution of ``bucket`` (unpadded)."""
        slots = self.output_slots(on_cpu)
        if slots is None:
            return None
        index, n_out = slots
        targets: List[Any] = [None] * n_out
        for pos, t in into.items():
            targets[index[pos][0]] = t
        call = self._cpu_call() if on_cpu else self._dplan
        with self.lock:
            for b in self.sets:
                b.wait()
            t0 = time.perf_counter()
            results = kernel_calls.run_kernel_call(call, args, targets)
            if results is not None:
                ms = (time.perf_counter() - t0) * 1e3
                record_execution(bucket, 1.0, ms, 0.0, ms, 0.0)
        return results

    def run(self, args: Sequence[Any], pad: Optional[PadCall], opts: ExecOptions,
            profile: Optional[Any]) -> List[Any]:
        k = self.k
        if pad is None and profile is None and k.tensor_arg_idx:
            if not args[k.tensor_arg_idx[0]].is_cpu:
                fast, plan = self._run_fast_device, self._dplan
            elif not opts.keep_outputs_on_device:
                fast, plan = self._run_fast, self._plan
            else:
                plan = None
            if plan is not None:
                with self.lock:
                    res = fast(args, plan)
                if res is not None:
                    return res
        t0 = time.perf_counter()
        p0 = profile and now_ns()
        idx = k.tensor_arg_idx
        on_dev = [not args[i].is_cpu for i in idx]
        keep = any(on_dev) or opts.keep_outputs_on_device
        out_dev = self.out_dev if keep else torch.device("cpu")
        # submitted without waiting when outputs stay on the device and some input is
        # copied in (the copy of the next call is what overlaps this kernel)
        asynchronous = opts.pipelined and keep and not all(on_dev)
        with self.lock:
            bufs = self.sets[self.turn]
            if asynchronous:
                self.turn ^= 1
                bufs.wait()          # the execution that last read this buffer set
            else:
                for s in self.sets:
                    s.wait()
            inputs: Dict[str, DeviceTensor] = {}
            padded: Dict[str, Any] = {}
            for p, i in k.param_index.items():
                pd = pad.in_pad.get(i) if pad is not None else None
                inputs[p], geo = self._input(p, args[i], pd, pad, opts, bufs)
                if geo is not None:
                    padded[p] = pd
            if keep:
                outs = {n: device.empty_for_output(shape, dt, self.out_dev)
                        for n, shape, dt in self.out_specs}
            else:
                if bufs.outputs is None:
                    bufs.outputs = dict(zip([n for n, _, _ in self.out_specs],
                                            k.device_kernel.allocate_output_tensors()))
                outs = bufs.outputs
            t1 = time.perf_counter()
            p1 = profile and now_ns()
            if asynchronous:
                bufs.event = k.device_kernel.submit(inputs, outs)
            else:
                k.device_kernel(inputs=inputs, outputs=outs)
            t2 = time.perf_counter()
            p2 = profile and now_ns()
            results: List[Any] = [None] * k.n_outputs
            for pos, name in zip(k.tensor_out_pos, k.out_names):
                dt = k.out_dtypes[pos] if pos < len(k.out_dtypes) else None
                d = outs[name] if name in outs else inputs[k.aliases[name]]
                pd = pad.out_pad.get(pos) if pad is not None else None
                if pd is not None and opts.output_layout == "unpad":
                    results[pos] = self._unpad(d, pd, pad, dt, out_dev)
                    continue
                r = device.from_device(d, dt, out_dev)
                if pd is not None:
                    attach_metadata(r, PaddingMetadata(pad.actual, pad.bucket, pd.dim, (pos,)))
                results[pos] = r
            for name, src in k.aliases.items():
                i = k.param_index[src]
                if src in padded:
                    self._write_back_unpadded(args[i], inputs[src], padded[src], pad)
                else:
                    device.write_back(args[i], inputs[src])
        for pos, val in k.static_outputs.items():
            if pad is not None and pos in pad.symint_outputs:
                val = pad.symint_outputs[pos]
            elif isinstance(val, np.ndarray):   # a constant tensor returned as is
                dt = k.out_dtypes[pos] if pos < len(k.out_dtypes) else None
                val = device.numpy_to_torch(val.copy(), dt)
            results[pos] = val
        t3 = time.perf_counter()
        if pad is not None:
            record_execution(pad.bucket, pad.bucket / max(pad.actual, 1), (t3 - t0) * 1e3,
                             (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)
        else:
            record_execution(None, 1.0, (t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3,
                             (t3 - t2) * 1e3)
        if profile:
            p3 = now_ns()
            what = f"bucket {pad.bucket} (actual {pad.actual})" if pad is not None else "static"
            profile.span("inputs" + (" (pad)" if pad is not None else ""), p0, p1)
            profile.span(f"execute kernel_{k.hash}" + (" (submitted)" if asynchronous else ""),
                         p1, p2, shape=what)
            profile.span("outputs" + (" (unpad)" if pad is not None else ""), p2, p3)
        return results

    def flush(self) -> None:
        """Waits for every execution this executor submitted (raises its error)."""
        with self.lock:
            for s in self.sets:
                s.wait()


#: the dtypes (by name) the fast paths bind: every kernel dtype but bfloat16 and the
#: 8-bit floats, which NumPy has no native type for
_FAST_DTYPES = {name: t for t, name in TORCH_DTYPES.items()
                if t != torch.bfloat16 and t not in FLOAT8}


def run_sliced(parts: Sequence[Tuple["NKIPyKernel", int, int, int]], args: Sequence[Any],
               in_pad: Dict[int, Any], out_pad: Dict[int, Any], n: int,
               opts: ExecOptions) -> Optional[List[Any]]:
    """One bucketed call of actual size ``n`` run as consecutive slices along the
    leading dynamic dimension: ``parts`` are (kernel, start, size, bucket), a
    slice of its bucket's size run in place (inputs read where they lie, outputs
    written straight into their slice of the result), a smaller last one padded
    as usual and copied into its slice. None when the call cannot run that way
    (no fast path for these tensors): the caller pads it whole."""
    first = parts[0][0].executor
    on_cpu = args[next(iter(in_pad))].is_cpu
    if on_cpu and opts.keep_outputs_on_device:
        return None
    slots = first.output_slots(on_cpu)
    if slots is None or set(slots[0]) != set(out_pad):
        return None
    dev = torch.device("cpu") if on_cpu else first.out_dev
    outs = {}
    for pos, (_, (shape, dt)) in slots[0].items():
        pd = out_pad[pos]
        outs[pos] = torch.empty((pd.mult * n,) + tuple(shape[1:]), dtype=dt, device=dev)
    res: Optional[List[Any]] = None
    for k, start, size, bucket in parts:
        part = list(args)
        for i, pd in in_pad.items():
            part[i] = args[i].narrow(0, pd.mult * start, pd.mult * size)
        if size == bucket:
            r = k.executor.run_into(part, {pos: t.narrow(0, out_pad[pos].mult * start,
                                                            out_pad[pos].mult * size)
                                           for pos, t in outs.items()}, on_cpu, bucket)
            if r is None:
                return None
        else:
            r = k.executor.run(part, PadCall(bucket, size, in_pad, out_pad, {}), opts, None)
            with torch.no_grad():
                for pos, t in outs.items():
                    t.narrow(0, out_pad[pos].mult * start,
                             out_pad[pos].mult * size).copy_(r[pos])
        if res is None:
            res = list(r)
    assert res is not None
    for pos, t in outs.items():
        res[pos] = t
    return res
