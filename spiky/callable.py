"""``NKIPyCallable`` and ``spiky.compile``: a model run by the backend's engine
with options given in code, without writing ``torch.compile`` yourself.

Both are doors onto the one engine of ``torch.compile(backend="nkipy")``
(torch_to_nkipy: capture, lowering, bucket kernels, padding, pipelining): the
model is compiled by that backend with the options the config gives, and the
dimensions ``DynamicSpec`` names are marked dynamic on every call so that they
run in buckets. Like ``spiky.torch``, this module is a facade reaching up into
torch_to_nkipy (the one upward import the layering allows for spiky).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

from torch_to_nkipy import backend as _backend  # noqa: F401  (registers "nkipy")
from torch_to_nkipy.config import (get_nkipy_backend_config, init_nkipy_backend,
                                   is_nkipy_backend_initialized)
from torch_to_nkipy.options import validate_options

from .buckets import check_buckets, infer_buckets
from .utils.dynamic_shapes import DynamicSpec, check_specs

log = logging.getLogger("spiky")


@dataclass(frozen=True)
class CallableConfig:
    """How an :class:`NKIPyCallable` runs (the keys of ``torch.compile``'s
    ``options`` for the nkipy backend, under the original spiky's names).

    Attributes:
        buckets: bucket sizes of the primary dynamic dimension; None: from the
            primary ``DynamicSpec``'s ``max_size`` when it has one, else from
            the backend config's strategy.
        dynamic_specs: the dynamic dimensions (the first is primary); empty:
            every input is static (one kernel per input shape).
        jit_enabled: a size above every bucket compiles a new bucket
            ``next_pow2(n)``; False makes it a ValueError.
        pipelined: submit without waiting, inputs double-buffered.
        pad_on_device: pad on the device (False: on the host).
        keep_outputs_on_device: outputs as ``nkipy`` tensors.
        unpad_outputs: cut padded outputs back to the actual size (False:
            padded outputs carrying ``PaddingMetadata``).
        input_layout: ``"padded"`` accepts inputs already padded, carrying
            ``PaddingMetadata``.
        save_ntff, save_ntff_dir: write a Perfetto profile of each execution.
    """

    buckets: Optional[Tuple[int, ...]] = None
    dynamic_specs: Tuple[DynamicSpec, ...] = ()
    jit_enabled: bool = True
    pipelined: bool = False
    pad_on_device: bool = True
    keep_outputs_on_device: bool = False
    unpad_outputs: bool = True
    input_layout: str = "auto"
    save_ntff: bool = False
    save_ntff_dir: str = "./ntff_dir"

    def __post_init__(self) -> None:
        if self.buckets is not None:
            object.__setattr__(self, "buckets", tuple(check_buckets(self.buckets)))
        object.__setattr__(self, "dynamic_specs", tuple(check_specs(self.dynamic_specs)))
        for f in fields(self):
            if f.type == "bool" and not isinstance(getattr(self, f.name), bool):
                raise TypeError(f"CallableConfig.{f.name} must be a bool, not "
                                f"{type(getattr(self, f.name)).__name__}")
        self.options()     # the rest is checked as torch.compile's options are

    def options(self) -> Dict[str, Any]:
        """The ``torch.compile(backend="nkipy", options=...)`` this config means."""
        opts: Dict[str, Any] = {
            "jit": self.jit_enabled, "pipelined": self.pipelined,
            "pad_on_device": self.pad_on_device,
            "keep_outputs_on_device": self.keep_outputs_on_device,
            "unpad_outputs": self.unpad_outputs, "input_layout": self.input_layout,
            "save_ntff": self.save_ntff, "save_ntff_dir": self.save_ntff_dir}
        buckets = self.buckets
        if buckets is None and self.dynamic_specs and self.dynamic_specs[0].max_size:
            p = self.dynamic_specs[0]
            cfg = get_nkipy_backend_config()
            strategy = cfg.bucket_strategy if cfg is not None else "power_of_2"
            buckets = tuple(infer_buckets(p.max_size, strategy, p.min_size))
        if buckets is not None:
            opts["buckets"] = list(buckets)
        return validate_options(opts)


def _ensure_backend() -> None:
    if not is_nkipy_backend_initialized():
        log.info("spiky: starting the nkipy backend with its defaults (init_nkipy_backend())")
        init_nkipy_backend()


class NKIPyCallable:
    """A model or function run by the nkipy backend with a :class:`CallableConfig`.

    ``NKIPyCallable(fn, config)(*args)`` compiles ``fn`` on the first call
    (and per new bucket or static shape), marking the dimensions of
    ``config.dynamic_specs`` dynamic; calls take positional tensors (CPU or
    ``nkipy``) and return what ``fn`` returns. Starts the backend with its
    defaults if ``init_nkipy_backend`` was not called.
    """

    def __init__(self, fn: Callable[..., Any], config: Optional[CallableConfig] = None) -> None:
        if not callable(fn):
            raise TypeError(f"NKIPyCallable needs a callable (an nn.Module or a function), "
                            f"not {type(fn).__name__}")
        if config is not None and not isinstance(config, CallableConfig):
            raise TypeError(f"config must be a CallableConfig, not {type(config).__name__}")
        self.fn = fn
        self.config = config or CallableConfig()
        self._options: Optional[Dict[str, Any]] = None    # None: config.options()
        self._compiled: Optional[Callable[..., Any]] = None

    def _mark(self, args: Sequence[Any]) -> None:
        specs = self.config.dynamic_specs
        if not specs:
            return
        primary = specs[0].size_of(args)
        for s in specs:
            n = s.size_of(args)
            if n != primary:
                raise ValueError(f"{s}: size {n}, but the primary {specs[0]} has size "
                                 f"{primary}: dynamic inputs share one size")
            if n < s.min_size or (s.max_size is not None and n > s.max_size
                                  and not self.config.jit_enabled):
                raise ValueError(f"{s}: size {n} is outside [{s.min_size}, {s.max_size}]")
            # Dynamo reads only non-negative indices (a -1 would be ignored)
            torch._dynamo.maybe_mark_dynamic(args[s.arg_idx], s.dim_idx % args[s.arg_idx].dim())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._compiled is None:
            _ensure_backend()
            opts = self._options if self._options is not None else self.config.options()
            self._compiled = torch.compile(self.fn, backend="nkipy", options=opts)
        self._mark(args)
        return self._compiled(*args, **kwargs)

    def flush(self) -> None:
        """Waits for every pipelined execution (``spiky.flush()``)."""
        from . import flush

        flush()

    def close(self) -> None:
        """Waits for pending work and drops this callable's compiled function
        (the next call compiles again, from the kernel cache). Dynamo's own
        cache entries, kept per code object and shared with other compiled
        callers of the same code, stay until ``torch._dynamo.reset()``."""
        self.flush()
        self._compiled = None


class _SpikyCompiled(NKIPyCallable):
    """What ``spiky.compile`` returns: inference only (gradients off), positional
    inputs only."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"a spiky.compile'd model takes positional inputs only, got "
                            f"keyword argument(s) {sorted(kwargs)}")
        with torch.no_grad():
            return super().__call__(*args)


def compile(model: Callable[..., Any], *, options: Optional[Dict[str, Any]] = None
            ) -> NKIPyCallable:
    """``model`` compiled for inference by the nkipy backend with ``options``
    (the keys of ``torch.compile(backend="nkipy", options=...)``, checked now).

    The result runs under ``torch.no_grad()`` and takes positional inputs;
    ``flush()`` waits for pipelined work, ``close()`` drops the compiled code.
    """
    opts = validate_options(options)
    if not callable(model):
        raise TypeError(f"spiky.compile needs a callable (an nn.Module or a function), "
                        f"not {type(model).__name__}")
    if "buckets" in opts:
        opts["buckets"] = list(check_buckets(opts["buckets"]))
    out = _SpikyCompiled(model)
    out._options = opts
    return out


__all__ = ["CallableConfig", "NKIPyCallable", "compile", "DynamicSpec"]
