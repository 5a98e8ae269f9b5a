"""Hand-written nkipy kernels as torch custom ops inside compiled graphs, and
``mark_subgraph_identity`` for cutting graphs into per-layer kernels.

A custom kernel is a NumPy-style nkipy kernel function registered under the
name of a torch custom op::

    @NKIOpRegistry.register("mylib::scaled_add")
    def scaled_add_kernel(a, b):
        return a + 2 * b

    @torch.library.custom_op("mylib::scaled_add", mutates_args=())
    def scaled_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return scaled_add_kernel(a, b)          # eager: runs the kernel on the device

    @scaled_add.register_fake
    def _(a, b):
        return torch.empty_like(a)

Inside ``torch.compile(backend="nkipy")`` graphs the op is lowered to a call of
the kernel function in the generated source, so it is traced into (and fused
with) the surrounding kernel.
"""
from __future__ import annotations

import hashlib
import inspect
import logging
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

log = logging.getLogger("torch_to_nkipy")


class NKIPyCustomKernelError(RuntimeError):
    """A registered custom kernel failed while being traced or run."""


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


class NKIKernelWrapper:
    """A registered kernel: call it with NumPy arrays (host), tracer tensors
    (inside a kernel being traced) or torch tensors (compiled and run on the
    device). ``kernel[grid](...)`` is accepted for source compatibility."""

    def __init__(self, func: Callable[..., Any], op_name: str, compiler_args: str = "",
                 alias_map: Optional[Dict[int, int]] = None) -> None:
        self.func = func
        self.op_name = op_name
        self.grid: Tuple = ()
        self.compiler_args = compiler_args
        self.alias_map = dict(alias_map or {})
        self.__name__ = getattr(func, "__name__", "custom_kernel")
        self.__doc__ = getattr(func, "__doc__", None)
        self._loaded: Dict[Tuple, Any] = {}
        self._lock = threading.Lock()
        try:
            src = inspect.getsource(func)
        except (OSError, TypeError):
            src = repr(func)
        self.source_hash = hashlib.sha256(src.encode()).hexdigest()[:16]

    def __getitem__(self, grid: Any) -> "NKIKernelWrapper":
        self.grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        return self

    def trace_call(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the kernel function; failures name the custom op."""
        try:
            return self.func(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - re-raised with context
            raise NKIPyCustomKernelError(
                f"custom nkipy kernel {self.__name__!r} registered for {self.op_name} failed: "
                f"{type(e).__name__}: {e}") from e

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not any(_is_tensor(a) for a in args):
            return self.trace_call(*args, **kwargs)
        return self._run_on_device(args, kwargs)

    def _run_on_device(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        from nkipy.runtime import DeviceKernel

        from . import device
        from .config import get_nkipy_backend_config, is_nkipy_backend_initialized

        arrays = [device.torch_to_numpy(a) if _is_tensor(a) else a for a in args]
        sig = tuple((tuple(a.shape), str(a.dtype)) if _is_tensor(a) else ("V", repr(a))
                    for a in args) + tuple(sorted((k, repr(v)) for k, v in kwargs.items()))
        core, build_dir = 0, None
        if is_nkipy_backend_initialized():
            cfg = get_nkipy_backend_config()
            core, build_dir = cfg.device_core, f"{cfg.nkipy_cache}/custom_kernels"
        with self._lock:
            k = self._loaded.get(sig)
            if k is None:
                func = self.trace_call
                try:
                    k = DeviceKernel.compile_and_load(
                        func, *arrays, name=self.__name__, build_dir=build_dir,
                        additional_compiler_args=self.compiler_args, core_id=core, **kwargs)
                except NKIPyCustomKernelError:
                    raise
                except Exception as e:  # noqa: BLE001
                    raise NKIPyCustomKernelError(
                        f"custom nkipy kernel {self.__name__!r} registered for {self.op_name} "
                        f"failed to compile: {type(e).__name__}: {e}") from e
                self._loaded[sig] = k
        names = list(k.input_tensors_info)
        tensor_args = [a for a in args if _is_tensor(a)]
        inputs = {n: device.to_device(t, core) for n, t in zip(names, tensor_args)}
        outs = k(inputs=inputs)
        dev = tensor_args[0].device
        results = [device.from_device(d, None, dev) for n, d in outs.items()
                   if k.output_tensors_info[n].alias_of is None]
        for n, meta in k.output_tensors_info.items():
            if meta.alias_of is not None:
                device.write_back(tensor_args[names.index(meta.alias_of)], inputs[meta.alias_of])
        return results[0] if len(results) == 1 else tuple(results)


_KERNELS: Dict[str, NKIKernelWrapper] = {}
_PROCESSED: set = set()


class NKIOpRegistry:
    """Custom nkipy kernels by torch custom op name (class-level registry)."""

    _default_compiler_args = ""
    _default_opt_level = ""

    @staticmethod
    def canonicalize_custom_op_name(name: str) -> str:
        """``"lib::op"`` -> ``"torch.ops.lib.op.default"``."""
        if name.startswith("torch.ops."):
            return name if name.count(".") >= 4 else name + ".default"
        name = name.replace("::", ".")
        if name.count(".") == 1:
            name += ".default"
        return "torch.ops." + name

    @classmethod
    def register(cls, custom_op_name: str, compiler_args: str = "",
                 alias_map: Optional[Dict[int, int]] = None) -> Callable[[Callable], NKIKernelWrapper]:
        name = cls.canonicalize_custom_op_name(custom_op_name)
        if name in _KERNELS:
            raise AssertionError(f"custom op {name} already has a registered nkipy kernel")
        if alias_map:
            log.warning("alias_map for %s is FRAGILE: outputs are written into inputs %s",
                        name, alias_map)

        def deco(fn: Callable) -> NKIKernelWrapper:
            w = NKIKernelWrapper(fn, name, compiler_args or cls._default_compiler_args, alias_map)
            _KERNELS[name] = w
            return w

        return deco

    @classmethod
    def is_registered(cls, name: str, canonicalize: bool = False) -> bool:
        return (cls.canonicalize_custom_op_name(name) if canonicalize else name) in _KERNELS

    @classmethod
    def get_nki_kernel(cls, name: str, canonicalize: bool = False) -> NKIKernelWrapper:
        key = cls.canonicalize_custom_op_name(name) if canonicalize else name
        if key not in _KERNELS:
            raise KeyError(f"no nkipy kernel is registered for custom op {name}")
        return _KERNELS[key]

    @classmethod
    def unregister(cls, name: str) -> None:
        _KERNELS.pop(cls.canonicalize_custom_op_name(name), None)

    @classmethod
    def set_default_compiler_args(cls, args: str) -> None:
        cls._default_compiler_args = args

    @classmethod
    def get_default_compiler_args(cls) -> str:
        return cls._default_compiler_args

    @classmethod
    def set_default_opt_level(cls, level: str) -> None:
        cls._default_opt_level = level

    @classmethod
    def get_default_opt_level(cls) -> str:
        return cls._default_opt_level

    @staticmethod
    def add_processed_kernel_hash(h: str) -> None:
        _PROCESSED.add(h)

    @staticmethod
    def is_processed(h: str) -> bool:
        return h in _PROCESSED

    @staticmethod
    def reset_processed_kernels() -> None:
        _PROCESSED.clear()


def custom_kernel_for(qual: str) -> Optional[NKIKernelWrapper]:
    """The registered kernel for an FX target's qualified name (``mylib.op.default``)."""
    return _KERNELS.get("torch.ops." + qual)


def call_custom(qual: str, *args: Any, **kwargs: Any) -> Any:
    """What generated source calls for a custom op."""
    return _KERNELS["torch.ops." + qual].trace_call(*args, **kwargs)


# ---- mark_subgraph_identity --------------------------------------------------

@torch.library.custom_op("nkipy::mark_subgraph_identity", mutates_args=())
def mark_subgraph_identity(x: torch.Tensor) -> torch.Tensor:
    """Identity that marks a cut point: compiled graphs are split into one
    kernel per marked region (identical regions share one kernel)."""
    return x.clone()


@mark_subgraph_identity.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _mark_backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    return grad


mark_subgraph_identity.register_autograd(_mark_backward)
