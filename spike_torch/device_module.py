"""``torch.nkipy``: the device module of the nkipy device, shaped like ``torch.cuda``."""
from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union

import torch

from . import _C

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "synchronize",
    "empty_cache", "memory_stats", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "reset_accumulated_memory_stats", "get_device_name", "get_device_properties",
    "get_device_capability", "get_amp_supported_dtype", "manual_seed", "manual_seed_all",
    "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
    "get_rng_state_all", "set_rng_state_all", "is_initialized", "init", "default_generators",
    "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream",
    "StreamContext",
]

logger = logging.getLogger("spike_torch")

DeviceLike = Union[int, str, torch.device, None]


def _name() -> str:
    """The device's name: "nkipy", or "spyre" when torch_spyre loaded the device
    library (PrivateUse1 is renamed before any tensor exists)."""
    return torch._C._get_privateuse1_backend_name()
_F = TypeVar("_F", bound=Callable[..., Any])


# ---- Dynamo ------------------------------------------------------------------
#
# torch.cuda's RNG functions live in torch's own directory, which Dynamo never
# compiles: a compiled region that calls one graph-breaks and runs it eagerly,
# and a frame of it entered while Dynamo is active (PyTorch's freeze_rng_state
# calls get_rng_state under no_dispatch(), where compiling a frame asserts) is
# run as it is. This module is outside torch, so its RNG functions and the
# device's Python kernels (see Library) are wrapped to behave the same way: a
# traced call graph-breaks (``_torchdynamo_disable``), the wrapper's own frame is
# never compiled, and the function runs with Dynamo off (torch._dynamo.disable).
# Importing torch._dynamo costs about a second, so it is not imported here: while
# it is not imported, nothing can compile a frame and the function runs directly.

def _skip_frames_of(code: Any) -> None:
    """Marks ``code`` so that Dynamo's frame hook runs its frames unchanged (its
    callees still go through the hook, where the wrapper turns Dynamo off)."""
    from torch._C._dynamo import eval_frame as ef

    ef.set_code_exec_strategy(code, ef._FrameExecStrategy(ef._FrameAction.SKIP,
                                                          ef._FrameAction.DEFAULT))


_RNG_REASON = "the nkipy device's RNG state is read and written outside graphs, as torch.cuda's is"


def _dynamo_disabled(fn: _F, reason: str = _RNG_REASON) -> _F:
    """``fn`` as Dynamo sees ``torch.cuda.get_rng_state``: never traced or compiled.

    Used on ``torch.nkipy``'s RNG functions (generator state lives outside any
    graph) and on the device's Python kernels (:class:`Library`)."""

    disabled: List[Callable] = []   # fn under torch._dynamo.disable, made on first need

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None or not hasattr(dynamo, "disable"):
            return fn(*args, **kwargs)
        if not disabled:
            disabled.append(dynamo.disable(fn, recursive=True, wrapping=False))
        return disabled[0](*args, **kwargs)

    wrapper._torchdynamo_disable = True  # type: ignore[attr-defined]
    wrapper._torchdynamo_disable_msg = reason  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


try:
    _skip_frames_of(_dynamo_disabled(lambda: None).__code__)  # one code object for all wrappers
except (AttributeError, TypeError):  # pragma: no cover - a PyTorch without this hook
    def _dynamo_disabled(fn: _F, reason: str = _RNG_REASON) -> _F:  # type: ignore[no-redef]
        return torch._disable_dynamo(fn)  # lazy import of torch._dynamo on first call


class Library(torch.library.Library):
    """``torch.library.Library`` whose Python kernels Dynamo never compiles.

    The device's Python kernels (eager device kernels, random fills) run when a
    compiled region hands an op back to eager mode (a graph break); Dynamo's
    frame hook is still on there and would otherwise trace the kernel's own
    Python (kernel compilation, generator state) as user code."""

    def impl(self, op_name: Any, fn: Callable, dispatch_key: str = "", *args: Any,
             **kwargs: Any) -> None:
        return super().impl(op_name, _dynamo_disabled(fn, "a kernel of the nkipy device"),
                            dispatch_key, *args, **kwargs)

    def fallback(self, fn: Callable, dispatch_key: str = "", *, with_keyset: bool = False) -> None:
        return super().fallback(_dynamo_disabled(fn, "the nkipy device's fallback"),
                                dispatch_key, with_keyset=with_keyset)


def is_available() -> bool:
    """True when at least one NeuronCore is visible."""
    return device_count() > 0


def device_count() -> int:
    """Number of nkipy devices (visible NeuronCores of the spike runtime)."""
    return int(_C.lib.spike_torch_device_count())


def current_device() -> int:
    """Index of the current nkipy device of this thread."""
    return int(_C.lib.spike_torch_get_device())


def _device_index(dev: DeviceLike, optional: bool = True) -> int:
    if dev is None:
        if optional:
            return current_device()
        raise ValueError("a device index is required")
    if isinstance(dev, str):
        dev = torch.device(dev)
    if isinstance(dev, torch.device):
        if dev.type != _name():
            raise ValueError(f"expected an nkipy device, got {dev}")
        return current_device() if dev.index is None else dev.index
    if isinstance(dev, bool) or not isinstance(dev, int):
        raise TypeError(f"device must be an int, a str or a torch.device, got {type(dev).__name__}")
    return dev


def _check_index(index: int) -> int:
    count = device_count()
    if not 0 <= index < count:
        raise ValueError(
            f"Invalid nkipy device index {index}: there are {count} nkipy device(s), "
            f"valid indices are 0..{count - 1}"
        )
    return index


def set_device(dev: DeviceLike) -> None:
    """Sets the current nkipy device of this thread (ValueError outside [0, device_count()))."""
    index = _check_index(_device_index(dev))
    _C.lib.spike_torch_set_device(index)


class device:
    """Context manager that makes ``dev`` the current nkipy device, restoring it on exit."""

    def __init__(self, dev: DeviceLike) -> None:
        self.idx = -1 if dev is None else _device_index(dev)
        self.prev_idx = -1

    def __enter__(self) -> "device":
        if self.idx >= 0:
            self.prev_idx = current_device()
            if self.idx != self.prev_idx:
                set_device(self.idx)
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self.idx >= 0 and self.prev_idx != self.idx:
            _C.lib.spike_torch_set_device(self.prev_idx)
        return False


# ---- streams and events ------------------------------------------------------
#
# The device runs each core's work in order on one queue, copies are synchronous
# and eager kernels complete when they return (the device guard, csrc/guard.cpp).
# So every stream of a device is that queue (stream id 0): code written for CUDA
# streams runs with the ordering it asks for (and more), events complete when
# recorded, and elapsed_time measures the host time between two recordings.


class _OfThisDevice(type):
    """``isinstance(x, torch.nkipy.Stream)``: a ``torch.Stream`` of the nkipy
    device (likewise for Event). The classes make PyTorch's own objects: its C
    functions (``wait_stream``, ``elapsed_time``) accept those exact types only."""

    _base: Any = None

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._base) and obj.device.type == _name()


class Stream(metaclass=_OfThisDevice):
    """A stream of the nkipy device (``torch.cuda.Stream``'s shape): makes a
    ``torch.Stream`` on the device, the core's one in-order queue whatever
    ``priority`` says."""

    _base = torch.Stream

    def __new__(cls, device: DeviceLike = None, priority: int = 0) -> torch.Stream:
        idx = _check_index(_device_index(device))
        return torch.Stream(device=torch.device(_name(), idx), priority=priority)


class Event(metaclass=_OfThisDevice):
    """An event of the nkipy device (``torch.cuda.Event``'s shape): makes a
    ``torch.Event`` that is complete when recorded; with ``enable_timing=True``,
    ``elapsed_time`` gives the milliseconds between two recordings."""

    _base = torch.Event

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> torch.Event:
        return torch.Event(device=_name(), enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(dev: DeviceLike = None) -> torch.Stream:
    """The current stream of a device (the current device by default)."""
    idx = _check_index(_device_index(dev))
    return torch.accelerator.current_stream(torch.device(_name(), idx))


def default_stream(dev: DeviceLike = None) -> torch.Stream:
    """The default stream of a device: the same queue as every other stream."""
    return current_stream(dev)


def set_stream(stream: torch.Stream) -> None:
    """Makes ``stream`` current on its device."""
    if stream is None:
        return
    if stream.device.type != _name():
        raise ValueError(f"set_stream needs a stream of the nkipy device, got one of "
                         f"{stream.device.type!r}")
    torch.accelerator.set_stream(stream)


class StreamContext:
    """``with torch.nkipy.stream(s):`` runs the block with ``s`` current (None: no change)."""

    def __init__(self, stream: Optional[torch.Stream]) -> None:
        self.stream = stream
        self.prev: Optional[torch.Stream] = None

    def __enter__(self) -> "StreamContext":
        if self.stream is not None:
            self.prev = current_stream(self.stream.device_index)
            set_stream(self.stream)
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self.prev is not None:
            set_stream(self.prev)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """The context manager that makes ``stream`` current for a block."""
    return StreamContext(stream)


def synchronize(dev: DeviceLike = None) -> None:
    """Waits for the device's work: kernels and copies complete before they
    return, but for ``non_blocking`` copies from pinned memory, which this
    waits for (raising the error of one that failed)."""
    _check_index(_device_index(dev))
    _C.pinned_synchronize()


def empty_cache() -> None:
    """Returns the allocator's unused cached memory to the runtime (all devices)."""
    _C.lib.spike_torch_empty_cache(-1)


def memory_stats(dev: DeviceLike = None) -> Dict[str, int]:
    """Caching-allocator statistics of a device, with ``torch.cuda.memory_stats`` keys."""
    index = _check_index(_device_index(dev))
    return dict(sorted(_C.memory_stats(index).items()))


def memory_allocated(dev: DeviceLike = None) -> int:
    return memory_stats(dev)["allocated_bytes.all.current"]


def max_memory_allocated(dev: DeviceLike = None) -> int:
    return memory_stats(dev)["allocated_bytes.all.peak"]


def memory_reserved(dev: DeviceLike = None) -> int:
    return memory_stats(dev)["reserved_bytes.all.current"]


def max_memory_reserved(dev: DeviceLike = None) -> int:
    return memory_stats(dev)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(dev: DeviceLike = None) -> None:
    _C.lib.spike_torch_reset_peak(_check_index(_device_index(dev)))


def reset_accumulated_memory_stats(dev: DeviceLike = None) -> None:
    _C.lib.spike_torch_reset_accumulated(_check_index(_device_index(dev)))


def mem_get_info(dev: DeviceLike = None) -> Tuple[int, int]:
    """``(free, total)`` bytes of a device's memory, as ``torch.cuda.mem_get_info``:
    the runtime's capacity and what no allocation of any user holds."""
    return torch.accelerator.get_memory_info(_check_index(_device_index(dev)))


_HISTORY_ENABLED = (None, "state", "all")
_HISTORY_CONTEXT = (None, "state", "alloc", "all")
_HISTORY_STACKS = ("python", "all")


def _record_memory_history(enabled: Optional[str] = "all", context: Optional[str] = "all",
                           stacks: str = "all", max_entries: int = sys.maxsize,
                           device: DeviceLike = None) -> None:
    """Starts (or, with ``enabled=None``, stops) recording the caching
    allocator's history, as ``torch.cuda.memory._record_memory_history``.

    Args:
        enabled: ``"all"``: a trace of every allocation, free and segment
            (device) allocation, for :func:`_snapshot`'s ``device_traces``
            (started afresh); ``"state"``: only the stack of each live block;
            None: record nothing from now on (what was recorded stays).
        context: whose stacks are kept: ``"alloc"`` or ``"state"``: of
            allocations; ``"all"``: of frees too; None: none.
        stacks: ``"python"`` frames, or ``"all"``: C++ frames too.
        max_entries: the trace keeps the newest this many events per device.
        device: accepted for torch.cuda's signature: every device records.
    """
    if enabled not in _HISTORY_ENABLED:
        raise ValueError(f"enabled must be one of {_HISTORY_ENABLED}, not {enabled!r}")
    if context not in _HISTORY_CONTEXT:
        raise ValueError(f"context must be one of {_HISTORY_CONTEXT}, not {context!r}")
    if stacks not in _HISTORY_STACKS:
        raise ValueError(f"stacks must be one of {_HISTORY_STACKS}, not {stacks!r}")
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
        raise ValueError(f"max_entries must be an int >= 1, not {max_entries!r}")
    if device is not None:
        _check_index(_device_index(device))
    on = enabled is not None
    _C.memory_history.record_history(enabled == "all", on and context is not None,
                                     on and context == "all", stacks == "all",
                                     min(max_entries, 2**63 - 1))


def _snapshot(dev: DeviceLike = None) -> Dict[str, Any]:
    """The allocator's state in torch.cuda's snapshot format: ``segments`` (each
    with its ``blocks``, their states and allocation stacks) and
    ``device_traces`` (the events recorded since ``_record_memory_history``);
    PyTorch's memory visualizer (https://pytorch.org/memory_viz) and
    ``torch.cuda._memory_viz`` read it."""
    snap = _C.memory_history.snapshot()
    snap["device_traces"] = snap["device_traces"][:max(device_count(), 1)]
    snap["allocator_settings"] = {"expandable_segments": False,
                                  "max_split_size": -1, "garbage_collection_threshold": 0.0}
    return snap


def memory_snapshot(dev: DeviceLike = None) -> List[Dict[str, Any]]:
    """Every segment of the caching allocator with its blocks (all devices), as
    ``torch.cuda.memory_snapshot``."""
    return _snapshot()["segments"]


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Writes :func:`_snapshot` as a pickle (for https://pytorch.org/memory_viz
    or ``python -m torch.cuda._memory_viz trace_plot FILE``); the file is
    created private and never through a symbolic link."""
    import pickle

    from spike.safe_files import write_private

    write_private(filename, pickle.dumps(_snapshot()))


def memory_summary(dev: DeviceLike = None, abbreviated: bool = False) -> str:
    """A table of the caching allocator's statistics for a device, in the shape
    of ``torch.cuda.memory_summary``: current, peak, allocated and freed amounts
    of allocated, active, requested and reserved memory, allocations, active
    allocations, segments and non-releasable (split) blocks; then the counts of
    runtime allocations, frees and out-of-memory retries."""
    index = _check_index(_device_index(dev))
    st = memory_stats(index)

    def size(n: int) -> str:
        if abs(n) < 1024:
            return f"{n} B"
        v = float(n)
        for unit in ("KiB", "MiB", "GiB", "TiB"):
            v /= 1024
            if abs(v) < 1024 or unit == "TiB":
                break
        return f"{v:.1f} {unit}"

    rows = [("Allocated memory", "allocated_bytes", size),
            ("Active memory", "active_bytes", size),
            ("Requested memory", "requested_bytes", size),
            ("Reserved memory", "reserved_bytes", size),
            ("Allocations", "allocation", str), ("Active allocs", "active", str),
            ("Device reserved segments", "segment", str)]
    line = "=" * 75
    out = [line, f" nkipy memory summary, device ID {index:<3d} | "
           f"{get_device_name(index)}", "-" * 75,
           f" {'Metric':<25}| {'Cur Usage':>10} | {'Peak Usage':>10} | "
           f"{'Tot Alloc':>10} | {'Tot Freed':>10}", "-" * 75]
    for label, key, fmt in rows:
        vals = [fmt(st[f"{key}.all.{k}"]) for k in ("current", "peak", "allocated", "freed")]
        out.append(f" {label:<25}| {vals[0]:>10} | {vals[1]:>10} | {vals[2]:>10} | "
                   f"{vals[3]:>10}")
    if not abbreviated:
        out += ["-" * 75,
                f" {'Non-releasable memory':<25}| {size(st['inactive_split_bytes.all.current']):>10}",
                f" {'Non-releasable allocs':<25}| {st['inactive_split.all.current']:>10}",
                f" {'Runtime allocations':<25}| {st['num_device_alloc']:>10}",
                f" {'Runtime frees':<25}| {st['num_device_free']:>10}",
                f" {'Allocation retries':<25}| {st['num_alloc_retries']:>10}",
                f" {'Out-of-memory errors':<25}| {st['num_ooms']:>10}"]
    out.append(line)
    return "\n".join(out) + "\n"


def get_device_name(dev: DeviceLike = None) -> str:
    return f"AWS Neuron Core {_check_index(_device_index(dev))} (nkrt CPU driver)"


def get_device_capability(dev: DeviceLike = None) -> tuple:
    _check_index(_device_index(dev))
    return (1, 0)


class _DeviceProperties:
    def __init__(self, index: int) -> None:
        import spike

        rt = spike.get_spike_singleton()
        self.name = get_device_name(index)
        self.device_index = index
        self.total_memory = int(rt.core_memory_bytes)
        self.major, self.minor = 1, 0
        self.multi_processor_count = int(rt.num_workers)

    def __getitem__(self, key: str) -> Any:  # the original returned a dict
        return getattr(self, key)

    def __repr__(self) -> str:
        return (f"_NkipyDeviceProperties(name='{self.name}', device_index={self.device_index}, "
                f"total_memory={self.total_memory // (1 << 20)}MB)")


def get_device_properties(dev: DeviceLike = None) -> _DeviceProperties:
    return _DeviceProperties(_check_index(_device_index(dev)))


def get_amp_supported_dtype() -> List[torch.dtype]:
    return [torch.float32, torch.float16, torch.bfloat16]


# ---- random number generators ------------------------------------------------

_generators: Dict[int, torch.Generator] = {}


def default_generator(index: Optional[int] = None) -> torch.Generator:
    """The default generator of nkipy device ``index`` (current device if None).

    Random fills of nkipy tensors (``normal_``, ``uniform_``, ``random_``,
    ``bernoulli_``, ``exponential_``, so ``torch.randn(..., device="nkipy")``)
    draw from it when no generator is passed; ``torch.manual_seed`` seeds it.
    """
    index = _check_index(current_device() if index is None else index)
    gen = _generators.get(index)
    if gen is None:
        gen = torch.Generator(device=f"{_name()}:{index}")
        gen.manual_seed(torch.initial_seed())
        _generators[index] = gen
    return gen


class _DefaultGenerators:
    """``torch.nkipy.default_generators[i]``, like ``torch.cuda.default_generators``."""

    def __len__(self) -> int:
        return device_count()

    @_dynamo_disabled
    def __getitem__(self, index: int) -> torch.Generator:
        return default_generator(index)


default_generators = _DefaultGenerators()


@_dynamo_disabled
def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    default_generator().manual_seed(int(seed))


@_dynamo_disabled
def manual_seed_all(seed: int) -> None:
    """Seeds every device's default generator (called by ``torch.manual_seed``)."""
    for i in range(device_count()):
        default_generator(i).manual_seed(int(seed))


@_dynamo_disabled
def seed() -> None:
    default_generator().seed()


@_dynamo_disabled
def seed_all() -> None:
    for i in range(device_count()):
        default_generator(i).seed()


@_dynamo_disabled
def initial_seed() -> int:
    return default_generator().initial_seed()


@_dynamo_disabled
def get_rng_state(dev: DeviceLike = None) -> torch.Tensor:
    return default_generator(_device_index(dev)).get_state()


@_dynamo_disabled
def set_rng_state(new_state: torch.Tensor, dev: DeviceLike = None) -> None:
    default_generator(_device_index(dev)).set_state(new_state)


@_dynamo_disabled
def get_rng_state_all() -> List[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


@_dynamo_disabled
def set_rng_state_all(new_states: List[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def is_initialized() -> bool:
    return True


def init() -> None:
    """Initialises the device (already done by ``import spike_torch``)."""


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    pass
