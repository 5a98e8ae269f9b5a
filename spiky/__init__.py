"""spiky: the runtime for graphs compiled with ``torch.compile(backend="nkipy")``.

Dynamic-shape buckets with padding done by the device, pipelined execution,
per-function options, execution statistics, the device memory pool and
execution profiles. The backend itself is ``spiky.torch.init_nkipy_backend``
(the same one as ``torch_to_nkipy.init_nkipy_backend``)::

    import spiky
    from spiky.torch import init_nkipy_backend

    init_nkipy_backend()
    compiled = torch.compile(model, backend="nkipy", dynamic=True)
    ...
    print(spiky.get_stats().bucket_hits, spiky.get_memory_stats()["used_bytes"])

This package is torch-graph agnostic: torch_to_nkipy's executor uses its
pieces (buckets, padding, stats, profiles); ``spiky.torch`` is the facade
over the backend. The lower door, for code that drives buckets itself:
bundles of NEFFs per bucket (``register_bundle``, ``execute_bundle``,
``execute_pipelined``; :mod:`spiky.bundle`), and, over the backend,
``NKIPyCallable`` / ``spiky.compile`` (:mod:`spiky.callable`).
"""
from typing import Optional, Sequence, Union

from nkipy.runtime import DeviceTensor

from . import buckets as _buckets
from .buckets import check_buckets, infer_buckets, next_pow2
from . import bundle as _bundle
from .bundle import (Bundle, execute_bundle, execute_pipelined, flush_pipeline, get_bundle,
                     register_bundle, unregister_bundle)
from .memory import (MEMORY_STAT_KEYS, clear_memory_pool, empty_cache, get_cached_blocks,
                     get_memory_stats, trim_memory_pool)
from .padding import PaddingMetadata, attach_metadata, get_metadata
from .profiling import ExecutionProfile
from .stats import RuntimeStats, get_stats, reset_stats


def select_bucket(buckets_or_bundle: Union[Sequence[int], int], n: int) -> Optional[int]:
    """The bucket that serves actual size ``n``.

    ``select_bucket(bundle_id, n)`` (the original's form): the registered
    bundle's smallest bucket ``>= n``, else its largest.
    ``select_bucket(buckets, n)`` over a sorted list: the smallest bucket
    ``>= n``, or None when ``n`` exceeds them all."""
    if isinstance(buckets_or_bundle, int) and not isinstance(buckets_or_bundle, bool):
        return get_bundle(buckets_or_bundle).select(n)
    return _buckets.select_bucket(list(buckets_or_bundle), n)


def init(device_id: int = 0) -> None:
    """Starts the device runtime (the spike singleton) and the ``nkipy`` torch device;
    ``device_id`` becomes the current device (bundles registered later load
    their models on it)."""
    import spike_torch

    spike_torch.set_device(device_id)
    _bundle.set_device(device_id)


def is_initialized() -> bool:
    """Whether the device runtime is running."""
    from spike.spike_singleton import is_active

    return is_active()


def close() -> None:
    """Waits for pipelined work, then shuts the device runtime down: live device
    tensors become unusable; compiled functions reload their kernels and the next
    use starts a new runtime."""
    import sys

    flush()
    _bundle.unregister_all()
    kernel = sys.modules.get("torch_to_nkipy.kernel")
    if kernel is not None:
        kernel.clear_loaded_kernels()
    import spike_torch

    spike_torch.reset()


def device_count() -> int:
    """Device cores visible to this process."""
    import spike_torch

    return spike_torch.device_count()


def flush() -> None:
    """Waits until every execution submitted by pipelined compiled functions is
    done; raises the first error one of them hit."""
    import sys

    kernel = sys.modules.get("torch_to_nkipy.kernel")
    if kernel is not None:
        kernel.flush_all()
    _bundle.flush_all()


def __getattr__(name: str):
    # the doors over torch_to_nkipy load on first use: importing spiky alone
    # imports no backend (and torch_to_nkipy itself imports spiky)
    import importlib

    if name in ("NKIPyCallable", "CallableConfig", "compile", "callable"):
        mod = importlib.import_module("spiky.callable")
        return mod if name == "callable" else getattr(mod, name)
    if name == "utils":
        return importlib.import_module("spiky.utils")
    raise AttributeError(f"module 'spiky' has no attribute {name!r}")


__all__ = ["NKIPyCallable", "CallableConfig", "compile", "utils", "DeviceTensor", "Bundle", "register_bundle", "unregister_bundle", "execute_bundle",
           "execute_pipelined", "flush_pipeline", "get_bundle", "init", "close", "is_initialized", "device_count", "flush", "get_stats",
           "reset_stats", "RuntimeStats", "get_memory_stats", "trim_memory_pool",
           "clear_memory_pool", "empty_cache", "get_cached_blocks", "MEMORY_STAT_KEYS",
           "PaddingMetadata", "attach_metadata", "get_metadata", "ExecutionProfile",
           "infer_buckets", "select_bucket", "next_pow2", "check_buckets"]
