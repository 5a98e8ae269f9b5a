"""SpikeModel: a loaded NEFF with validated, name-keyed execution."""
from __future__ import annotations

import logging
import os
from typing import Dict, List, Mapping, Optional, Union

from ._dtypes import dtype_name, to_numpy_dtype
from ._spike import ExecutionEvent, NrtModel, SystemTraceSession, TensorMetadata, ensure_usable
from ._types import BenchmarkResult
from .spike_singleton import get_spike_singleton
from .spike_tensor import SpikeTensor

__all__ = ["SpikeModel"]

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

#: The suffix the original stack gives an input that an output aliases
#: (``a_input.must_alias_input``); SpikeModel accepts it beside the plain name.
ALIAS_INPUT_SUFFIX = ".must_alias_input"


class SpikeModel:
    """A NEFF loaded on one core, called with dicts of :class:`SpikeTensor`.

    Attributes:
        model_ref: the underlying NrtModel.
        name: model name.
        neff_path: path the NEFF was loaded from.
        input_tensors_info: input name -> TensorMetadata (size, dtype, shape, alias_of).
        output_tensors_info: output name -> TensorMetadata.
    """

    def __init__(
        self,
        model_ref: NrtModel,
        name: Optional[str] = None,
        neff_path: Optional[PathLike] = None,
    ) -> None:
        """Wraps a loaded NrtModel and reads its tensor metadata."""
        if not isinstance(model_ref, NrtModel):
            raise TypeError(f"model_ref must be an NrtModel, got {type(model_ref).__name__}")
        # The runtime this model belongs to: after spike.reset() it is closed
        # and every use raises SpikeError (no new runtime is brought up).
        self._spike = get_spike_singleton()
        info = self._spike.get_tensor_info(model_ref)
        self.model_ref = model_ref
        self.name: str = name if name is not None else model_ref.name
        self.neff_path: str = os.fspath(neff_path) if neff_path is not None else model_ref.neff_path
        self.input_tensors_info: Dict[str, TensorMetadata] = dict(info.inputs)
        self.output_tensors_info: Dict[str, TensorMetadata] = dict(info.outputs)
        # what a well-formed call looks like, for the fast path of __call__
        self._core = model_ref.core_id
        self._in_specs = {k: (tuple(m.shape), self._np_dtype(m.dtype))
                          for k, m in self.input_tensors_info.items()}
        self._out_specs = {k: (tuple(m.shape), self._np_dtype(m.dtype))
                           for k, m in self.output_tensors_info.items()}
        self._has_aliases = any(m.alias_of is not None for m in self.output_tensors_info.values())
        self._required_outputs = {k for k, m in self.output_tensors_info.items()
                                  if m.alias_of is None}
        # the original stack's NEFFs name an input that an output aliases
        # "<name>.must_alias_input": that name is accepted for it too
        self._alias_input_names = {f"{m.alias_of}{ALIAS_INPUT_SUFFIX}": m.alias_of
                                   for m in self.output_tensors_info.values()
                                   if m.alias_of is not None}

    @staticmethod
    def _np_dtype(name: str):
        try:
            return to_numpy_dtype(name)
        except TypeError:  # e.g. bfloat16 without ml_dtypes: only the slow path checks it
            return None

    @classmethod
    def load_from_neff(
        cls,
        neff_path: PathLike,
        name: Optional[str] = None,
        core_id: int = 0,
        cc_enabled: bool = False,
        rank_id: int = 0,
        world_size: int = 1,
    ) -> "SpikeModel":
        """Loads a NEFF file on ``core_id`` (collective parameters optional).

        Raises NrtError when the file is missing or not a valid NEFF.
        """
        path = os.fspath(neff_path)
        ref = get_spike_singleton().load_model(
            path,
            core_id=core_id,
            cc_enabled=cc_enabled,
            rank_id=rank_id,
            world_size=world_size,
            name=name,
        )
        logger.debug("loaded %s on core %d as %r", path, core_id, ref.name)
        return cls(ref, name=name, neff_path=path)

    # ---- properties ------------------------------------------------------

    @property
    def core_id(self) -> int:
        """Logical core the model runs on."""
        return self.model_ref.core_id

    @property
    def is_collective(self) -> bool:
        """True when loaded with cc_enabled."""
        return self.model_ref.is_collective

    def unload(self) -> None:
        """Unloads the model now; later calls raise SpikeError."""
        ensure_usable(self.model_ref)
        self._spike.unload_model(self.model_ref)

    def __repr__(self) -> str:
        return (
            f"SpikeModel(name={self.name!r}, neff_path={self.neff_path!r}, "
            f"core_id={self.core_id}, inputs={list(self.input_tensors_info)}, "
            f"outputs={list(self.output_tensors_info)})"
        )

    # ---- outputs ---------------------------------------------------------

    def allocate_output_tensors(self) -> List[SpikeTensor]:
        """Allocates one tensor per output that does not alias an input.

        Returned in the model's output order; aliased outputs are skipped
        because the kernel writes them into their input tensor.
        """
        return list(self._allocate_outputs().values())

    def _allocate_outputs(self) -> Dict[str, SpikeTensor]:
        ensure_usable(self.model_ref)
        spike = self._spike
        outputs: Dict[str, SpikeTensor] = {}
        for name, meta in self.output_tensors_info.items():
            if meta.alias_of is not None:
                continue
            ref = spike.allocate_tensor(meta.size, core_id=self.core_id, name=name)
            outputs[name] = SpikeTensor(ref, tuple(meta.shape), meta.dtype, name)
        return outputs

    # ---- validation ------------------------------------------------------

    def _canonical_inputs(self, inputs: Mapping[str, SpikeTensor]) -> Mapping[str, SpikeTensor]:
        """``inputs`` with every ``<name>.must_alias_input`` key renamed to the
        aliased input's own name (unknown keys are left for _check_names)."""
        if not self._alias_input_names or not isinstance(inputs, Mapping) or not any(
                k in self._alias_input_names for k in inputs):
            return inputs
        out: Dict[str, SpikeTensor] = {}
        for k, v in inputs.items():
            name = self._alias_input_names.get(k, k)
            if name in out:
                raise ValueError(
                    f"input '{name}' of model '{self.name}' is given twice (as '{name}' and "
                    f"'{name}{ALIAS_INPUT_SUFFIX}'): pass one of them")
            out[name] = v
        return out

    def _check_names(self, kind: str, given: Mapping[str, object],
                     expected: Mapping[str, TensorMetadata], optional: set) -> None:
        if not isinstance(given, Mapping):
            raise TypeError(
                f"{kind}s must be a dict of name -> SpikeTensor, got {type(given).__name__}"
            )
        unknown = [k for k in given if k not in expected]
        if unknown:
            raise ValueError(
                f"unknown {kind} name(s) {unknown} for model '{self.name}'; "
                f"expected {kind}s: {list(expected)}"
            )
        missing = [k for k in expected if k not in given and k not in optional]
        if missing:
            raise ValueError(
                f"missing {kind}(s) {missing} for model '{self.name}'; "
                f"expected {kind}s: {list(expected)}"
            )

    def _check_tensor(self, kind: str, name: str, tensor: object, meta: TensorMetadata) -> None:
        if not isinstance(tensor, SpikeTensor):
            raise TypeError(
                f"{kind} '{name}' of model '{self.name}' must be a SpikeTensor, "
                f"got {type(tensor).__name__}"
            )
        if tuple(tensor.shape) != tuple(meta.shape):
            raise ValueError(
                f"{kind} '{name}' of model '{self.name}': expected shape {tuple(meta.shape)}, "
                f"got {tuple(tensor.shape)}"
            )
        if dtype_name(tensor.dtype) != meta.dtype:
            raise ValueError(
                f"{kind} '{name}' of model '{self.name}': expected dtype {meta.dtype}, "
                f"got {dtype_name(tensor.dtype)}"
            )
        if tensor.core_id != self.core_id:
            raise ValueError(
                f"{kind} '{name}' of model '{self.name}': expected a tensor on core "
                f"{self.core_id}, got core {tensor.core_id}"
            )

    def _validate_io(self, inputs: Mapping[str, SpikeTensor],
                     outputs: Mapping[str, SpikeTensor]) -> None:
        """Checks names, shapes, dtypes and core placement; raises ValueError/TypeError."""
        self._check_names("input", inputs, self.input_tensors_info, set())
        aliased = {k for k, m in self.output_tensors_info.items() if m.alias_of is not None}
        self._check_names("output", outputs, self.output_tensors_info, aliased)
        for name, tensor in inputs.items():
            self._check_tensor("input", name, tensor, self.input_tensors_info[name])
        for name, tensor in outputs.items():
            self._check_tensor("output", name, tensor, self.output_tensors_info[name])

    def _well_formed(self, given: object, specs: dict, every: bool) -> bool:
        """True when `given` is a plain dict of SpikeTensors matching `specs`
        exactly (names, shapes, dtypes, core); the checks of _validate_io,
        without building any error message."""
        if type(given) is not dict or (every and len(given) != len(specs)):
            return False
        core = self._core
        for name, t in given.items():
            spec = specs.get(name)
            if spec is None or not isinstance(t, SpikeTensor):
                return False
            if t.shape != spec[0] or t.dtype != spec[1] or t.tensor_ref.core_id != core:
                return False
        return True

    def _bind_outputs(self, inputs: Mapping[str, SpikeTensor],
                      outputs: Mapping[str, SpikeTensor]) -> Dict[str, SpikeTensor]:
        """The outputs, with every aliased output not given bound to its input."""
        bound = dict(outputs)
        for name, meta in self.output_tensors_info.items():
            if meta.alias_of is not None and name not in bound:
                bound[name] = inputs[meta.alias_of]
        return bound

    # ---- execution -------------------------------------------------------

    def __call__(
        self,
        inputs: Mapping[str, SpikeTensor],
        outputs: Optional[Mapping[str, SpikeTensor]] = None,
        save_trace: bool = False,
        ntff_name: Optional[PathLike] = None,
    ) -> Optional[Dict[str, SpikeTensor]]:
        """Runs the model once.

        Args:
            inputs: input name -> SpikeTensor (every input).
            outputs: output name -> SpikeTensor; aliased outputs may be left
                out (they are written into their input). None allocates them.
            save_trace: write a Chrome trace of the execution to ``ntff_name``
                (default ``<neff stem>.ntff``).

        Returns:
            When ``outputs`` is None, the dict output name -> SpikeTensor
            (an aliased output is its input's tensor); otherwise None.
        """
        ensure_usable(self.model_ref)
        allocate = outputs is None
        if (not allocate and self._well_formed(inputs, self._in_specs, True)
                and self._well_formed(outputs, self._out_specs, not self._has_aliases)
                and (not self._has_aliases or outputs.keys() >= self._required_outputs)):
            # the common case: nothing to report, so skip the message-building checks
            bound = self._bind_outputs(inputs, outputs) if self._has_aliases else outputs
        else:
            inputs = self._canonical_inputs(inputs)
            self._check_names("input", inputs, self.input_tensors_info, set())
            if allocate:
                outputs = self._allocate_outputs()
            self._validate_io(inputs, outputs)
            bound = self._bind_outputs(inputs, outputs)
        if save_trace and ntff_name is None:
            ntff_name = self._default_ntff_name()
        self._spike.execute(
            self.model_ref,
            {k: v.tensor_ref for k, v in inputs.items()},
            {k: v.tensor_ref for k, v in bound.items()},
            ntff_name=ntff_name,
            save_trace=save_trace,
        )
        if save_trace:
            logger.info("trace of '%s' written to %s", self.name, ntff_name)
        return bound if allocate else None

    def submit(
        self,
        inputs: Mapping[str, SpikeTensor],
        outputs: Mapping[str, SpikeTensor],
    ) -> ExecutionEvent:
        """Queues one execution on the model's core and returns at once.

        Validated as ``__call__`` (names, shapes, dtypes, cores); ``outputs``
        is required (allocate them with :meth:`allocate_output_tensors`),
        aliased outputs may be left out. The tensors are bound and retained
        by the runtime at submission. Synchronous copies touching their bytes
        (``SpikeTensor.numpy()``, ``write_from_numpy()``, ...) wait for the
        execution, so outputs can be handed on before it finishes.

        Returns:
            An :class:`ExecutionEvent`: ``wait(timeout=None)`` raises the
            execution's error as ``__call__`` would; ``done`` polls.
        """
        ensure_usable(self.model_ref)
        if outputs is None:
            raise TypeError(
                f"SpikeModel.submit of model '{self.name}' needs its outputs: pass a dict of "
                f"output name -> SpikeTensor (allocate_output_tensors() makes them)"
            )
        if (self._well_formed(inputs, self._in_specs, True)
                and self._well_formed(outputs, self._out_specs, not self._has_aliases)
                and (not self._has_aliases or outputs.keys() >= self._required_outputs)):
            bound = self._bind_outputs(inputs, outputs) if self._has_aliases else outputs
        else:
            inputs = self._canonical_inputs(inputs)
            self._validate_io(inputs, outputs)
            bound = self._bind_outputs(inputs, outputs)
        return self._spike.execute_async(
            self.model_ref,
            {k: v.tensor_ref for k, v in inputs.items()},
            {k: v.tensor_ref for k, v in bound.items()},
        )

    def _default_ntff_name(self) -> str:
        stem = os.path.splitext(os.path.basename(self.neff_path))[0] or self.name
        return f"{stem}.ntff"

    def benchmark(
        self,
        inputs: Mapping[str, SpikeTensor],
        outputs: Optional[Mapping[str, SpikeTensor]] = None,
        warmup_iter: int = 5,
        benchmark_iter: int = 5,
        mode: str = "device",
    ) -> BenchmarkResult:
        """Times repeated executions.

        ``mode="host"`` times each call on the host clock (Spike.benchmark);
        ``mode="device"`` takes the durations of the executions from a trace
        session (the runtime's nc_exec_running start/stop timestamps).
        """
        if mode not in ("device", "host"):
            raise ValueError(f"mode must be 'device' or 'host', got {mode!r}")
        for what, value, low in (("warmup_iter", warmup_iter, 0),
                                 ("benchmark_iter", benchmark_iter, 1)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{what} must be an int, got {type(value).__name__}")
            if value < low:
                raise ValueError(f"{what} must be >= {low}, got {value}")
        ensure_usable(self.model_ref)
        if outputs is None:
            outputs = self._allocate_outputs()
        self._validate_io(inputs, outputs)
        bound = self._bind_outputs(inputs, outputs)
        spike = self._spike
        in_refs = {k: v.tensor_ref for k, v in inputs.items()}
        out_refs = {k: v.tensor_ref for k, v in bound.items()}
        if mode == "host":
            return spike.benchmark(self.model_ref, in_refs, out_refs,
                                   warmup_iterations=warmup_iter,
                                   benchmark_iterations=benchmark_iter)
        for _ in range(warmup_iter):
            spike.execute(self.model_ref, in_refs, out_refs)
        with SystemTraceSession(spike, self.core_id) as session:
            for _ in range(benchmark_iter):
                spike.execute(self.model_ref, in_refs, out_refs)
        durations = _exec_durations_ms(session.drain_events(), self.model_ref.name)
        if len(durations) < benchmark_iter:
            raise RuntimeError(
                f"device benchmark of '{self.name}': the trace has {len(durations)} complete "
                f"executions, expected {benchmark_iter}"
            )
        return BenchmarkResult.from_durations(durations[-benchmark_iter:], warmup_iter)


def _exec_durations_ms(events: List[dict], model_name: Optional[str] = None) -> List[float]:
    """Durations (ms) of the nc_exec_running start/stop pairs, in start order.

    Pairs are matched by tracking_id; with ``model_name``, only executions of
    that model count.
    """
    starts: Dict[object, int] = {}
    durations: List[tuple] = []
    for event in events:
        if event.get("event_type") != "nc_exec_running":
            continue
        if model_name is not None and event.get("name") not in (None, model_name):
            continue
        key = event.get("tracking_id")
        stamp = int(event.get("data", {}).get("nc_timestamp_ns", 0))
        if event.get("phase") == "start":
            starts[key] = stamp
        elif event.get("phase") == "stop" and key in starts:
            begin = starts.pop(key)
            durations.append((begin, (stamp - begin) / 1e6))
    durations.sort()
    return [d for _, d in durations]
