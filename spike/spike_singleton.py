"""The per-process Spike runtime: configure before first use, then lazily create.

One Python process has one runtime (one ``Spike``). It is created on first use
by :func:`get_spike_singleton` with the settings given to :func:`configure`
and closed by :func:`reset` or at interpreter exit.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import warnings
from typing import Callable, Iterable, List, Optional

from ._spike import Spike

__all__ = ["configure", "reset", "get_spike_singleton", "is_active"]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_spike: Optional[Spike] = None
_options: dict = {}


def _check_positive_int(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int or None, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{what} must be positive, got {value}")


def configure(
    visible_cores: Optional[Iterable[int]] = None,
    core_memory_bytes: Optional[int] = None,
    num_workers: Optional[int] = None,
) -> None:
    """Sets how the runtime will be created; call before first use.

    Args:
        visible_cores: NeuronCore ids the runtime may use (e.g. ``[0, 1]``);
            sets ``NEURON_RT_VISIBLE_CORES``. None leaves the environment as is.
        core_memory_bytes: device memory per core; None for the default
            (``NKRT_CORE_MEMORY`` or the runtime's default).
        num_workers: worker threads kernels parallelise over; None for the
            default (``NKRT_NUM_WORKERS`` or the CPU count).

    Raises:
        RuntimeError: the runtime is already active (call :func:`reset` first).
        TypeError: visible_cores is not an iterable of ints (a bare int is refused).
        ValueError: a negative or duplicate core id, an empty list, or a
            non-positive size.
    """
    cores: Optional[list] = None
    if visible_cores is not None:
        if isinstance(visible_cores, (int, str, bytes)):
            raise TypeError(
                "visible_cores must be an iterable of ints such as [0, 1], "
                f"got {type(visible_cores).__name__} {visible_cores!r}"
            )
        try:
            cores = list(visible_cores)
        except TypeError:
            raise TypeError(
                "visible_cores must be an iterable of ints such as [0, 1], "
                f"got {type(visible_cores).__name__}"
            ) from None
        for core in cores:
            if isinstance(core, bool) or not isinstance(core, int):
                raise TypeError(
                    f"visible_cores must contain ints, got {type(core).__name__} {core!r}"
                )
            if core < 0:
                raise ValueError(f"visible_cores must be non-negative, got {core}")
        if not cores:
            raise ValueError("visible_cores must name at least one core, got an empty list")
        if len(set(cores)) != len(cores):
            raise ValueError(f"visible_cores must not repeat a core, got {cores}")
    if core_memory_bytes is not None:
        _check_positive_int(core_memory_bytes, "core_memory_bytes")
    if num_workers is not None:
        _check_positive_int(num_workers, "num_workers")
    with _lock:
        if _spike is not None and not _spike.closed:
            raise RuntimeError(
                "spike.configure() must be called before the runtime is first used; "
                "call spike.reset() first to reconfigure"
            )
        if cores is not None:
            os.environ["NEURON_RT_VISIBLE_CORES"] = ",".join(str(c) for c in cores)
        _options.clear()
        if core_memory_bytes is not None:
            _options["core_memory_bytes"] = core_memory_bytes
        if num_workers is not None:
            _options["num_workers"] = num_workers
    logger.debug(
        "spike configured: visible_cores=%s core_memory_bytes=%s num_workers=%s",
        cores, core_memory_bytes, num_workers,
    )


def get_spike_singleton() -> Spike:
    """The process's Spike runtime, created on first call (thread-safe)."""
    global _spike
    spike = _spike
    if spike is not None and not spike.closed:
        return spike
    with _lock:
        if _spike is None or _spike.closed:
            _spike = Spike(0, **_options)
            logger.debug("spike runtime created: %r", _spike)
        return _spike


def is_active() -> bool:
    """True while the singleton runtime exists and is open."""
    spike = _spike
    return spike is not None and not spike.closed


_reset_hooks: List[Callable[[], None]] = []


def on_reset(hook: Callable[[], None]) -> Callable[[], None]:
    """Registers ``hook`` to run at every :func:`reset` that closes a runtime,
    before it closes (layers above forget what they loaded into it, e.g. the
    kernels of compiled graphs, which are then rebuilt on next use). Returns it."""
    _reset_hooks.append(hook)
    return hook


def reset() -> None:
    """Closes the runtime so that :func:`configure` may be called again.

    Every SpikeTensor and SpikeModel made so far becomes invalid (using one
    raises SpikeError). Emits a UserWarning when a runtime was closed. Hooks
    registered with :func:`on_reset` run first.
    """
    global _spike
    if is_active():
        for hook in list(_reset_hooks):
            hook()
    with _lock:
        spike, _spike = _spike, None
        if spike is None or spike.closed:
            return
        spike.close()
    warnings.warn(
        "spike.reset(): the runtime was closed; existing SpikeTensor and SpikeModel "
        "objects are no longer usable",
        UserWarning,
        stacklevel=2,
    )
    logger.debug("spike runtime closed by reset()")


def _close_at_exit() -> None:
    """Closes the runtime before interpreter teardown (registered with atexit)."""
    global _spike
    spike, _spike = _spike, None
    if spike is not None:
        spike.close()


atexit.register(_close_at_exit)
