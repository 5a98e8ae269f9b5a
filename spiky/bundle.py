"""Bundles: one compiled model per bucket size, run without torch.

The lower door into the engine that ``torch.compile(backend="nkipy")`` uses
(the original spiky's ``register_bundle`` / ``execute_bundle`` /
``execute_pipelined``): a bundle maps bucket sizes to NEFF files compiled for
them, and ``dynamic_specs`` says which input dimension carries the dynamic
size. A call gives the inputs at their actual size (NumPy arrays or device
tensors); the engine pads them to the bucket on the device (spiky.padding:
pitched copies and memsets in the runtime), runs the bucket's model, and hands
the outputs back unpadded, as NumPy arrays or as :class:`DeviceTensor` left on
the device. Statistics go to :func:`spiky.get_stats`, as for compiled graphs.

Pipelining is double-buffered: ``execute_pipelined`` submits the execution
without waiting when its outputs stay on the device, and copies the *next*
call's inputs (``next_inputs``) into the other buffer set while the kernel
runs. The next call never trusts that prefetch blindly: its own inputs are
compared with the prefetched bytes and only what differs is copied again
(``nkrt_tensor_update``), so a prefetch saves copies but can never run a
kernel on stale inputs.
"""
from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from nkipy.runtime import DeviceTensor
from spike import SpikeModel, SpikeTensor, get_spike_singleton
from spike._dtypes import to_numpy_dtype

from .buckets import check_buckets, select_bucket
from .buffers import BufferSet
from .padding import (PadGeometry, copy_padded, copy_unpadded, pad_on_host, read_unpadded,
                      write_padded)
from .stats import record_execution

log = logging.getLogger("spiky")
_lock = threading.Lock()
_bundles: Dict[int, "Bundle"] = {}
_ids = itertools.count(1)
#: the core new bundles load on (spiky.init's device_id)
_device = [0]


def set_device(core_id: int) -> None:
    """The core that bundles registered from now on load their models on."""
    _device[0] = int(core_id)


class Bundle:
    """Models compiled for several sizes of one dynamic dimension.

    Attributes:
        bundle_id: the id ``register_bundle`` returned.
        buckets: the bucket sizes, ascending.
        bucket_to_neff: bucket size -> NEFF path.
        dynamic_specs: input index -> the dimension carrying the dynamic size;
            the first entry is the primary one (it gives the actual size when
            a call does not).
        core_id: the core the models run on.
    """

    def __init__(self, bundle_id: int, bucket_to_neff: Mapping[int, str],
                 dynamic_specs: Mapping[int, int], cc_enabled: bool, rank_id: int,
                 world_size: int, core_id: int) -> None:
        self.bundle_id = bundle_id
        self.buckets = check_buckets(list(bucket_to_neff))
        self.bucket_to_neff = {int(b): os.fspath(p) for b, p in bucket_to_neff.items()}
        self.dynamic_specs = dict(dynamic_specs)
        self.cc_enabled, self.rank_id, self.world_size = cc_enabled, rank_id, world_size
        self.core_id = core_id
        self._models: Dict[int, SpikeModel] = {}
        self._sets: Dict[int, List[BufferSet]] = {}
        self._out_dims: Optional[List[Tuple[int, ...]]] = None
        self._turn = 0
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"Bundle(id={self.bundle_id}, buckets={self.buckets}, "
                f"dynamic_specs={self.dynamic_specs}, core_id={self.core_id})")

    # -- models ----------------------------------------------------------------

    def model(self, bucket: int) -> SpikeModel:
        """The bucket's model, loaded on first use."""
        m = self._models.get(bucket)
        if m is None:
            if bucket not in self.bucket_to_neff:
                raise ValueError(f"bundle {self.bundle_id} has no bucket {bucket} "
                                 f"(its buckets: {self.buckets})")
            m = SpikeModel.load_from_neff(self.bucket_to_neff[bucket], core_id=self.core_id,
                                          cc_enabled=self.cc_enabled, rank_id=self.rank_id,
                                          world_size=self.world_size)
            self._check_dynamic_dims(bucket, m)
            self._models[bucket] = m
        return m

    def _check_dynamic_dims(self, bucket: int, m: SpikeModel) -> None:
        names = list(m.input_tensors_info)
        for i, d in self.dynamic_specs.items():
            if i >= len(names):
                raise ValueError(f"bundle {self.bundle_id}: dynamic_specs names input {i}, but "
                                 f"the model of bucket {bucket} has {len(names)} inputs")
            shape = tuple(m.input_tensors_info[names[i]].shape)
            if not -len(shape) <= d < len(shape) or shape[d] != bucket:
                raise ValueError(
                    f"bundle {self.bundle_id}: input {i} ('{names[i]}') of the model of bucket "
                    f"{bucket} has shape {list(shape)}: dimension {d} is not of the bucket's "
                    f"size {bucket}")

    def output_dims(self, bucket: int) -> List[Tuple[int, ...]]:
        """Per output, the dimensions that carry the dynamic size: those with
        each bucket's size in that bucket's model (two models compared). A
        one-bucket bundle has nothing to compare: there it is the primary
        input's dimension, where the output has the bucket's size (the
        original's rule)."""
        if self._out_dims is None:
            m = self.model(bucket)
            outs = list(m.output_tensors_info.values())
            others = [b for b in self.buckets if b != bucket]
            if not self.dynamic_specs:
                dims: List[Tuple[int, ...]] = [() for _ in outs]
            elif not others:
                d = next(iter(self.dynamic_specs.values()))
                dims = []
                for meta in outs:
                    n = len(meta.shape)
                    dims.append((d % n,) if n and -n <= d < n and meta.shape[d] == bucket
                                else ())
            else:
                o = others[0]
                other = list(self.model(o).output_tensors_info.values())
                dims = []
                for k, (a, b) in enumerate(zip(outs, other)):
                    if len(a.shape) != len(b.shape):
                        raise ValueError(
                            f"bundle {self.bundle_id}: output {k} has rank {len(a.shape)} in "
                            f"the model of bucket {bucket} and {len(b.shape)} in that of "
                            f"bucket {o}")
                    dims.append(tuple(j for j, (x, y) in enumerate(zip(a.shape, b.shape))
                                      if x == bucket and y == o))
            self._out_dims = dims
        return self._out_dims

    def select(self, actual_len: int) -> int:
        """The smallest bucket ``>= actual_len``, else the largest."""
        return select_bucket(self.buckets, actual_len) or self.buckets[-1]

    def unload(self) -> None:
        with self.lock:
            for s in self._sets.values():
                for b in s:
                    b.wait()
            for m in self._models.values():
                try:
                    m.unload()
                except Exception:     # a runtime already closed: nothing left to unload
                    pass
            self._models.clear()
            self._sets.clear()

    def flush(self) -> None:
        """Waits for every execution submitted on this bundle (raises its error)
        and forgets prefetched inputs."""
        with self.lock:
            for s in self._sets.values():
                for b in s:
                    b.wait()
                    b.prefetched = None

    # -- a call --------------------------------------------------------------------

    def _actual(self, m: SpikeModel, bucket: int, inputs: Sequence[Any], actual_len: int) -> int:
        """The call's actual size (``actual_len``, else the primary input's size),
        once the inputs are as many as the model takes."""
        names = list(m.input_tensors_info)
        if len(inputs) != len(names):
            raise ValueError(f"bundle {self.bundle_id}: the model of bucket {bucket} takes "
                             f"{len(names)} inputs ({', '.join(names)}), got {len(inputs)}")
        if actual_len:
            if actual_len < 0:
                raise ValueError(f"actual_len must be >= 0 (0: read it from the inputs), "
                                 f"not {actual_len}")
            return int(actual_len)
        if not self.dynamic_specs:
            return 0
        i, d = next(iter(self.dynamic_specs.items()))
        shape = tuple(inputs[i].shape)
        if not -len(shape) <= d < len(shape):
            raise ValueError(f"bundle {self.bundle_id}: input {i} ('{names[i]}') has shape "
                             f"{list(shape)}, without its dynamic dimension {d}")
        return int(shape[d])

    def _write_inputs(self, m: SpikeModel, bucket: int, actual: int, inputs: Sequence[Any],
                      bufs: BufferSet, pad_on_device: bool,
                      only_changes: bool) -> Dict[str, SpikeTensor]:
        """The call's device inputs by name: arrays written into ``bufs`` (padded
        to the bucket along their dynamic dimension), device tensors passed
        through or copied padded. ``inputs`` were counted by :meth:`_actual`."""
        names = list(m.input_tensors_info)
        rt = get_spike_singleton()
        out: Dict[str, SpikeTensor] = {}
        for i, (name, a) in enumerate(zip(names, inputs)):
            meta = m.input_tensors_info[name]
            shape, dtype = tuple(meta.shape), to_numpy_dtype(meta.dtype)
            d = self.dynamic_specs.get(i)
            if d is not None:
                d %= len(shape)
                want = shape[:d] + (actual,) + shape[d + 1:]
                if tuple(a.shape) != want:
                    if len(a.shape) == len(shape) and a.shape[d] != actual:
                        raise ValueError(
                            f"bundle {self.bundle_id}: input {i} ('{name}') has {a.shape[d]} "
                            f"entries along its dynamic dimension {d}, but the call's actual "
                            f"size is {actual}")
                    raise ValueError(
                        f"bundle {self.bundle_id}: input {i} ('{name}') has shape "
                        f"{list(a.shape)}, the model of bucket {bucket} takes {list(want)} "
                        f"(dimension {d} at the call's actual size)")
            pad = d is not None and actual != bucket
            if isinstance(a, SpikeTensor):
                if a.dtype != dtype:
                    raise ValueError(f"bundle {self.bundle_id}: input {i} ('{name}') is "
                                     f"{a.dtype.name}, the model takes {dtype.name}")
                if not pad:
                    out[name] = a
                    continue
                dst = DeviceTensor.empty(shape, dtype, name=name, core_id=self.core_id)
                geo = PadGeometry.of(a.shape, d, bucket, dtype.itemsize)
                if pad_on_device:
                    copy_padded(rt, a.tensor_ref, 0, dst.tensor_ref, 0, geo)
                else:
                    dst.write_from_numpy(pad_on_host(a.numpy(), shape))
                out[name] = dst
                continue
            arr = np.asarray(a)
            if arr.dtype != dtype:
                raise ValueError(f"bundle {self.bundle_id}: input {i} ('{name}') is "
                                 f"{arr.dtype.name}, the model takes {dtype.name}")
            arr = np.ascontiguousarray(arr)
            buf = bufs.buffer(name, shape, dtype)
            if not pad:
                if arr.shape != shape:
                    raise ValueError(f"bundle {self.bundle_id}: input {i} ('{name}') has shape "
                                     f"{list(arr.shape)}, the model of bucket {bucket} takes "
                                     f"{list(shape)}")
                buf.write_from_numpy(arr, only_changes=only_changes)
            elif pad_on_device:
                write_padded(rt, buf.tensor_ref, 0, arr, PadGeometry.of(arr.shape, d, bucket,
                                                                         dtype.itemsize))
            else:
                buf.write_from_numpy(pad_on_host(arr, shape))
            out[name] = buf
        return out

    def run(self, bucket: int, inputs: Sequence[Any], next_inputs: Optional[Sequence[Any]],
            pipelined: bool, pad_on_device: bool, keep_outputs_on_device: bool,
            unpad_outputs: bool, actual_len: int, save_trace: bool,
            ntff_name: str) -> List[Any]:
        t0 = time.perf_counter()
        inputs = _as_inputs(inputs)
        if next_inputs is not None:
            next_inputs = _as_inputs(next_inputs)
        with self.lock:
            m = self.model(bucket)
            actual = self._actual(m, bucket, inputs, actual_len)
            if actual > bucket:
                raise ValueError(f"bundle {self.bundle_id}: actual size {actual} exceeds the "
                                 f"bucket {bucket} (select_bucket({self.bundle_id}, {actual}) "
                                 f"gives {self.select(actual)})")
            sets = self._sets.setdefault(bucket, [BufferSet(self.core_id),
                                                  BufferSet(self.core_id)])
            asynchronous = pipelined and keep_outputs_on_device and not save_trace
            # the set a prefetch filled for exactly this call, else the next in turn
            hit = [k for k, s in enumerate(sets) if s.prefetched == (bucket, actual)]
            k = hit[0] if hit else self._turn
            bufs = sets[k]
            bufs.wait()                      # the execution that last read these buffers
            if not asynchronous:
                for s in sets:
                    s.wait()
            ins = self._write_inputs(m, bucket, actual, inputs, bufs, pad_on_device,
                                     only_changes=bufs.prefetched is not None)
            bufs.prefetched = None
            self._turn = k ^ 1
            outs = self._outputs(m, bufs, keep_outputs_on_device)
            t1 = time.perf_counter()
            if asynchronous:
                bufs.event = m.submit(ins, outs)
            else:
                m(ins, outs, save_trace=save_trace,
                  ntff_name=(ntff_name or None) if save_trace else None)
            t2 = time.perf_counter()
            if next_inputs:        # (a list: _as_inputs)
                other = sets[k ^ 1]
                other.wait()
                try:
                    nxt = self._actual(m, bucket, next_inputs, 0)
                    if not self.dynamic_specs or self.select(nxt) == bucket:
                        self._write_inputs(m, bucket, nxt, next_inputs, other, pad_on_device,
                                           only_changes=False)
                        other.prefetched = (bucket, nxt)
                except ValueError as exc:    # raised again by the call that uses them
                    log.debug("bundle %d: next_inputs not prefetched: %s", self.bundle_id, exc)
            results = self._results(m, inputs, ins, outs, bucket, actual,
                                    keep_outputs_on_device, unpad_outputs)
        t3 = time.perf_counter()
        pad_ratio = bucket / actual if self.dynamic_specs and actual else 1.0
        record_execution(bucket if self.dynamic_specs else None, pad_ratio, (t3 - t0) * 1e3,
                         (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)
        return results

    def _outputs(self, m: SpikeModel, bufs: BufferSet, keep: bool) -> Dict[str, DeviceTensor]:
        if keep:    # handed to the caller: fresh every call
            return {n: DeviceTensor.empty(meta.shape, meta.dtype, name=n, core_id=self.core_id)
                    for n, meta in m.output_tensors_info.items() if meta.alias_of is None}
        if bufs.outputs is None:
            bufs.outputs = {n: DeviceTensor.empty(meta.shape, meta.dtype, name=n,
                                                  core_id=self.core_id)
                            for n, meta in m.output_tensors_info.items()
                            if meta.alias_of is None}
        return bufs.outputs

    def _results(self, m: SpikeModel, given: Sequence[Any], ins: Dict[str, SpikeTensor],
                 outs: Dict[str, DeviceTensor], bucket: int, actual: int, keep: bool,
                 unpad: bool) -> List[Any]:
        """Every output in the model's order, unpadded where it carries the
        dynamic size (:meth:`output_dims`), as NumPy arrays or device tensors
        the caller owns. An output aliasing an input is that input updated: the
        caller's own device tensor, written back into when the kernel updated a
        padded copy of it; a copy of the bundle's buffer for an array input."""
        rt = get_spike_singleton()
        names = list(m.input_tensors_info)
        dims = self.output_dims(bucket) if actual != bucket else None
        results: List[Any] = []
        for k, (name, meta) in enumerate(m.output_tensors_info.items()):
            if meta.alias_of is None:
                results.append(self._unpadded(rt, outs[name], dims[k] if dims and unpad else (),
                                              actual, keep, fresh=True))
                continue
            i = names.index(meta.alias_of)
            src, t = given[i], ins[meta.alias_of]
            if isinstance(src, SpikeTensor):
                if t is not src:      # the kernel updated a padded copy: its real rows back
                    d = self.dynamic_specs[i] % len(t.shape)
                    geo = PadGeometry.of(src.shape, d, bucket, t.dtype.itemsize)
                    copy_unpadded(rt, t.tensor_ref, 0, src.tensor_ref, 0, geo)
                results.append(src if keep else src.numpy())
                continue
            d = self.dynamic_specs.get(i)
            pd = (d % len(t.shape),) if d is not None and actual != bucket and unpad else ()
            results.append(self._unpadded(rt, t, pd, actual, keep, fresh=False))
        return results

    def _unpadded(self, rt: Any, t: SpikeTensor, dims: Tuple[int, ...], actual: int,
                  keep: bool, fresh: bool) -> Any:
        """``t`` cut to ``actual`` along ``dims``: a device tensor (``t`` itself
        when ``fresh``, else a copy) or a NumPy array."""
        if not dims:
            if not keep:
                return t.numpy()
            if fresh:
                return t if isinstance(t, DeviceTensor) else \
                    DeviceTensor(t.tensor_ref, t.shape, t.dtype, t.name)
            r = DeviceTensor.empty(t.shape, t.dtype, name=t.name, core_id=self.core_id)
            rt.tensor_copy(t.tensor_ref, 0, r.tensor_ref, 0, t.tensor_ref.size)
            return r
        real = [actual if j in dims else n for j, n in enumerate(t.shape)]
        if len(dims) > 1:     # several padded dimensions: cut on the host
            cut = np.ascontiguousarray(t.numpy()[tuple(slice(0, n) for n in real)])
            return DeviceTensor.from_numpy(cut, name=t.name, core_id=self.core_id) if keep \
                else cut
        geo = PadGeometry.of(real, dims[0], t.shape[dims[0]], t.dtype.itemsize)
        if keep:
            r = DeviceTensor.empty(real, t.dtype, name=t.name, core_id=self.core_id)
            copy_unpadded(rt, t.tensor_ref, 0, r.tensor_ref, 0, geo)
            return r
        r = np.empty(real, t.dtype)
        read_unpadded(rt, t.tensor_ref, 0, r, geo)
        return r


def _as_inputs(inputs: Sequence[Any]) -> List[Any]:
    """The call's inputs: device tensors as they are, anything else as an array."""
    if isinstance(inputs, (np.ndarray, SpikeTensor)):
        raise TypeError(f"inputs must be a sequence of arrays or device tensors (one per "
                        f"model input), not a single {type(inputs).__name__}")
    return [a if isinstance(a, SpikeTensor) else np.asarray(a) for a in inputs]


# ---- the original's module-level functions -------------------------------------------

def register_bundle(bucket_to_neff: Mapping[int, str], dynamic_specs: Mapping[int, int],
                    cc_enabled: bool = False, rank_id: int = 0, world_size: int = 1) -> int:
    """Registers models compiled per bucket size; returns the bundle's id.

    Args:
        bucket_to_neff: bucket size -> path of the NEFF compiled for it (the
            files are checked to exist now; each is loaded on first use).
        dynamic_specs: input index -> dimension index of the dynamic size in
            that input (its size is the bucket in each model). Empty: a static
            bundle (one bucket, nothing padded). The first entry is primary.
        cc_enabled, rank_id, world_size: models with collectives (as
            ``SpikeModel.load_from_neff``).
    """
    if not isinstance(bucket_to_neff, Mapping) or not bucket_to_neff:
        raise ValueError("register_bundle needs a non-empty dict of bucket size -> NEFF path, "
                         f"got {bucket_to_neff!r}")
    check_buckets(list(bucket_to_neff))
    if not isinstance(dynamic_specs, Mapping) or any(
            isinstance(v, bool) or not isinstance(v, int) or isinstance(k, bool)
            or not isinstance(k, int) or k < 0 for k, v in dynamic_specs.items()):
        raise ValueError("dynamic_specs must be a dict of input index (>= 0) -> dimension index, "
                         f"got {dynamic_specs!r}")
    if not dynamic_specs and len(bucket_to_neff) > 1:
        raise ValueError(f"a bundle of {len(bucket_to_neff)} buckets needs dynamic_specs (which "
                         "input dimension is the dynamic size)")
    for b, p in bucket_to_neff.items():
        if not os.path.isfile(os.fspath(p)):
            raise FileNotFoundError(f"bucket {b}: NEFF file {os.fspath(p)!r} does not exist")
    with _lock:
        bid = next(_ids)
        _bundles[bid] = Bundle(bid, bucket_to_neff, dynamic_specs, bool(cc_enabled),
                               int(rank_id), int(world_size), _device[0])
    return bid


def get_bundle(bundle_id: int) -> Bundle:
    """The registered bundle of an id (ValueError naming the live ids otherwise)."""
    b = _bundles.get(bundle_id)
    if b is None:
        raise ValueError(f"no bundle with id {bundle_id!r} is registered "
                         f"(registered: {sorted(_bundles) or 'none'})")
    return b


def unregister_bundle(bundle_id: int) -> None:
    """Waits for the bundle's executions and unloads its models."""
    b = get_bundle(bundle_id)
    with _lock:
        _bundles.pop(bundle_id, None)
    b.unload()


def flush_all() -> None:
    """Flushes every registered bundle (``spiky.flush`` does this)."""
    for b in list(_bundles.values()):
        b.flush()


def unregister_all() -> None:
    """Unregisters every bundle (``spiky.close`` does this)."""
    for bid in list(_bundles):
        unregister_bundle(bid)


def execute_bundle(bundle_id: int, bucket_size: int, inputs: Sequence[Any],
                   pad_on_device: bool = True, keep_outputs_on_device: bool = True,
                   unpad_outputs: bool = True, actual_len: int = 0, save_trace: bool = False,
                   ntff_name: str = "") -> List[Any]:
    """Runs the bundle's model for ``bucket_size`` once and waits for it.

    Args:
        inputs: every model input, in the model's order: NumPy arrays (copied
            into buffers the bundle reuses) or :class:`DeviceTensor` (used in
            place), at their actual size along the dynamic dimension.
        pad_on_device: pad on the device (pitched copies); False pads a copy
            on the host first. The results are the same.
        keep_outputs_on_device: outputs as :class:`DeviceTensor` (fresh ones
            each call); False: NumPy arrays.
        unpad_outputs: cut outputs whose primary dimension has the bucket's
            size back to the actual size; False returns them padded.
        actual_len: the actual size; 0 reads it from the primary input.
        save_trace: write a Perfetto trace of the execution to ``ntff_name``
            (default ``<neff stem>.ntff``).

    Returns:
        Every model output in its order (an output aliasing an input is that
        input's updated tensor).
    """
    return get_bundle(bundle_id).run(bucket_size, inputs, None, False, pad_on_device,
                                     keep_outputs_on_device, unpad_outputs, actual_len,
                                     save_trace, ntff_name)


def execute_pipelined(bundle_id: int, bucket_size: int, inputs: Sequence[Any],
                      next_inputs: Optional[Sequence[Any]] = None, pad_on_device: bool = True,
                      keep_outputs_on_device: bool = True, unpad_outputs: bool = True,
                      actual_len: int = 0, save_trace: bool = False,
                      ntff_name: str = "") -> List[Any]:
    """:func:`execute_bundle`, double-buffered.

    With ``keep_outputs_on_device`` the execution is submitted and the call
    returns at once (reading an output waits for it; so does the next call that
    needs these buffers). ``next_inputs``, the inputs of the call that will
    follow, are copied into the other buffer set while this one runs; that call
    compares its own inputs with them and copies only what changed, so a
    prefetch never runs a kernel on stale inputs. Inputs whose actual size
    selects another bucket are not prefetched. :func:`flush_pipeline` waits for
    everything submitted.
    """
    return get_bundle(bundle_id).run(bucket_size, inputs, next_inputs, True, pad_on_device,
                                     keep_outputs_on_device, unpad_outputs, actual_len,
                                     save_trace, ntff_name)


def flush_pipeline(bundle_id: int) -> None:
    """Waits for every execution submitted on the bundle (raises the first
    error one hit) and drops what was prefetched."""
    get_bundle(bundle_id).flush()
