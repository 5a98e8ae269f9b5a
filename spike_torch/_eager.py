"""Eager compute on the nkipy device through kernels compiled by nkipy.

Each supported ATen op has a NumPy-style kernel; the first call with given
(op, shapes, dtypes, core, static arguments) traces and compiles it with
nkipy (``DeviceKernel.compile_and_load``, content-addressed compile cache),
later calls reuse the loaded kernel. Inputs and outputs are the device
memory of the torch tensors themselves, wrapped as non-owning NrtTensor
slices (``Spike.slice_from_address``): no data goes through the host.

Calls these kernels cannot serve (mixed or other dtypes, complex, empty
tensors, tensors on several devices) go to the generic path
(:mod:`spike_torch._generic`): a kernel generated from the ATen op registry,
else the CPU. Every other op reaches the generic path directly.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch._prims_common import canonicalize_dim

import spike

from . import _C, _generic, device_module

logger = logging.getLogger("spike_torch")

try:
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    _BF16 = None

_NP_DTYPES = {torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16)}
if _BF16 is not None:
    _NP_DTYPES[torch.bfloat16] = _BF16

_lib = device_module.Library("aten", "IMPL")  # kernels never compiled by Dynamo
_cache: Dict[Tuple[Any, ...], Any] = {}
_cache_lock = threading.Lock()
stats = {"device_calls": 0, "compiles": 0}


def clear_cache() -> None:
    """Forgets the loaded eager kernels (the compile cache on disk stays)."""
    with _cache_lock:
        _cache.clear()


def _kernel(name: str, fn: Callable[..., Any], inputs: Sequence[torch.Tensor],
            static: Tuple[Any, ...], core: int) -> Any:
    from nkipy.runtime import DeviceKernel

    key = (name, static, core, id(spike.get_spike_singleton()),
           tuple((tuple(t.shape), t.dtype) for t in inputs))
    kern = _cache.get(key)
    if kern is not None and kern.model_ref.loaded:
        return kern
    with _cache_lock:
        kern = _cache.get(key)
        if kern is None or not kern.model_ref.loaded:
            arrays = [np.zeros(tuple(t.shape), _NP_DTYPES[t.dtype]) for t in inputs]
            kern = DeviceKernel.compile_and_load(fn, *arrays, name=f"nkipy_eager_{name}",
                                                 core_id=core)
            _cache[key] = kern
            stats["compiles"] += 1
            logger.debug("eager kernel %s compiled for %s", name, key[-1])
    return kern


def _slice(rt: Any, t: torch.Tensor) -> Any:
    return rt.slice_from_address(t.data_ptr(), t.numel() * t.element_size())


def _launch(name: str, fn: Callable[..., Any], inputs: List[torch.Tensor],
            out: torch.Tensor, static: Tuple[Any, ...] = ()) -> torch.Tensor:
    core = (out[0] if isinstance(out, (list, tuple)) else out).device.index
    inputs = [t.contiguous() for t in inputs]
    kern = _kernel(name, fn, inputs, static, core)
    # Shapes and dtypes are those the kernel was compiled for (they are in the
    # cache key), so the tensors go straight to Spike.execute as NrtTensor
    # slices of their own device memory, without SpikeModel's I/O validation.
    rt = spike.get_spike_singleton()
    names = kern._input_names if hasattr(kern, "_input_names") else None
    if names is None:
        names = kern._input_names = list(kern.input_tensors_info)
    outs = out if isinstance(out, (list, tuple)) else [out]
    _C.check_live(inputs + list(outs), f"nkipy {name}")
    rt.execute(kern.model_ref, {n: _slice(rt, t) for n, t in zip(names, inputs)},
               {f"output{i}": _slice(rt, o) for i, o in enumerate(outs)})
    stats["device_calls"] += 1
    return out


def _host(op: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], device: torch.device) -> Any:
    """A call the hand-written kernel does not serve: the generic path takes it
    (a kernel generated from the ATen op registry, else the CPU, with the
    once-per-operator warning)."""
    return _generic.call(op, tuple(args), kwargs)


def _device_tensors(args: Sequence[Any]) -> Optional[List[torch.Tensor]]:
    """The tensor args if all are nkipy tensors of one device and one supported
    dtype (0-dim CPU tensors are moved over), else None."""
    ts = [a for a in args if isinstance(a, torch.Tensor)]
    first = next((t for t in ts if t.device.type == "nkipy"), None)
    if first is None:
        return None
    dev = first.device
    out = []
    for t in ts:
        if t.device != dev:
            if t.device.type == "cpu" and t.dim() == 0:
                # a CPU scalar (e.g. a wrapped Python number) takes the device
                # tensor's floating dtype, as PyTorch's type promotion gives
                if first.dtype.is_floating_point and not t.dtype.is_complex:
                    t = t.to(first.dtype)
                t = t.to(dev)
            else:
                raise RuntimeError("Expected all tensors to be on the same device, but found "
                                   f"at least two devices, {dev} and {t.device}!")
        out.append(t)
    dtypes = {t.dtype for t in out}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _NP_DTYPES:
        return None
    if any(t.numel() == 0 for t in out):
        return None
    return out


# ---- kernels --------------------------------------------------------------------

def _binary(np_fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def k(x0, x1):
        return np_fn(x0, x1)
    return k


def _unary(np_fn: Callable[[Any], Any]) -> Callable[..., Any]:
    def k(x0):
        return np_fn(x0)
    return k


def _relu(x):
    return np.maximum(x, np.zeros((), x.dtype) if hasattr(x, "dtype") else 0.0)


def _register_binary(opname: str, np_fn: Callable[[Any, Any], Any], has_alpha: bool = False,
                     scalar_other: bool = False) -> None:
    op = getattr(torch.ops.aten, opname.split(".")[0])
    op = getattr(op, opname.split(".")[1] if "." in opname else "default")
    kernel = _binary(np_fn)

    def impl(self: torch.Tensor, other: Any, *rest: Any, **kwargs: Any) -> torch.Tensor:
        alpha = kwargs.get("alpha", rest[0] if rest else 1)
        # wrapped numbers arrive as Python scalars: make them 0-dim CPU tensors
        # (_device_tensors gives them the device tensor's dtype)
        args = [a if isinstance(a, torch.Tensor) else
                torch.tensor(a) if isinstance(a, (bool, int, float)) else None
                for a in (self, other)]
        ts = _device_tensors(args) if all(a is not None for a in args) else None
        if ts is not None and len(ts) != 2:
            ts = None
        if ts is None or isinstance(alpha, (complex, bool)):
            return _host(op, (self, other) + rest, kwargs, _dev_of(self, other))
        shape = _broadcast(ts[0].shape, ts[1].shape)
        out = torch.empty(shape, dtype=ts[0].dtype, device=ts[0].device)
        if has_alpha and alpha != 1:
            scale = float(alpha)

            def scaled(x0, x1):
                return np_fn(x0, x1 * scale)

            return _launch(f"{opname}_alpha", scaled, ts, out, (scale,))
        return _launch(opname, kernel, ts, out)

    _lib.impl(opname, impl, "PrivateUse1")


def _broadcast(a: Sequence[int], b: Sequence[int]) -> Tuple[int, ...]:
    """NumPy/PyTorch broadcasting of two shapes (torch.broadcast_shapes is slow)."""
    if tuple(a) == tuple(b):
        return tuple(a)
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                               f"({y}) at non-singleton dimension")
        out.append(y if x == 1 else x)
    return tuple(out)


def _dev_of(*xs: Any) -> torch.device:
    for x in xs:
        if isinstance(x, torch.Tensor) and x.device.type == "nkipy":
            return x.device
    return torch.device("nkipy", _C.lib.spike_torch_get_device())


def _register_unary(opname: str, np_fn: Callable[[Any], Any]) -> None:
    op = getattr(torch.ops.aten, opname).default
    kernel = _unary(np_fn)

    def impl(self: torch.Tensor) -> torch.Tensor:
        ts = _device_tensors([self])
        if ts is None:
            return _host(op, (self,), {}, self.device)
        out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        return _launch(opname, kernel, ts, out)

    _lib.impl(opname, impl, "PrivateUse1")


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


_register_binary("add.Tensor", np.add, has_alpha=True)
_register_binary("sub.Tensor", np.subtract, has_alpha=True)
_register_binary("mul.Tensor", np.multiply)
_register_binary("div.Tensor", np.divide)
_register_binary("maximum", np.maximum)
_register_binary("minimum", np.minimum)

for _name, _fn in (("neg", np.negative), ("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt),
                   ("rsqrt", _rsqrt), ("abs", np.abs), ("tanh", np.tanh),
                   ("sigmoid", _sigmoid), ("relu", _relu), ("sin", np.sin), ("cos", np.cos)):
    _register_unary(_name, _fn)


def _norm_dim(dim: int, ndim: int) -> int:
    """``dim`` in [0, ndim), or PyTorch's IndexError ("Dimension out of range
    (expected to be in range of [-3, 2], but got -4)"): wrapping it silently
    reduced over another dimension where the CPU raises."""
    return canonicalize_dim(ndim, dim)


def _norm_dims(dims: Optional[Sequence[int]], ndim: int) -> Tuple[int, ...]:
    if dims is None or len(dims) == 0:
        return tuple(range(ndim))
    axes = [_norm_dim(d, ndim) for d in dims]
    for a in axes:
        if axes.count(a) > 1:
            raise RuntimeError(f"dim {a} appears multiple times in the list of dims")
    return tuple(sorted(axes))


def _register_reduction(opname: str, np_name: str) -> None:
    base, overload = opname.split(".")
    op = getattr(getattr(torch.ops.aten, base), overload)

    def impl(self: torch.Tensor, dim: Optional[Sequence[int]] = None, keepdim: bool = False,
             *, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        ts = _device_tensors([self])
        if ts is None or self.dim() == 0 or (dtype is not None and dtype != self.dtype):
            kwargs = {"dtype": dtype} if dtype is not None else {}
            return _host(op, (self, dim, keepdim), kwargs, self.device)
        axes = _norm_dims(dim, self.dim())
        np_fn = getattr(np, np_name)

        def k(x0):
            return np_fn(x0, axis=axes, keepdims=keepdim)

        shape = [1 if i in axes else s for i, s in enumerate(self.shape)] if keepdim else \
            [s for i, s in enumerate(self.shape) if i not in axes]
        out = torch.empty(shape, dtype=self.dtype, device=self.device)
        return _launch(f"{np_name}_{axes}_{keepdim}", k, ts, out, (axes, keepdim))

    _lib.impl(opname, impl, "PrivateUse1")


_register_reduction("sum.dim_IntList", "sum")
_register_reduction("mean.dim", "mean")


def _amax(self: torch.Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    ts = _device_tensors([self])
    if ts is None or self.dim() == 0:
        return _host(torch.ops.aten.amax.default, (self, dim, keepdim), {}, self.device)
    axes = _norm_dims(dim, self.dim())

    def k(x0):
        return np.max(x0, axis=axes, keepdims=keepdim)

    shape = [1 if i in axes else s for i, s in enumerate(self.shape)] if keepdim else \
        [s for i, s in enumerate(self.shape) if i not in axes]
    out = torch.empty(shape, dtype=self.dtype, device=self.device)
    return _launch(f"amax_{axes}_{keepdim}", k, ts, out, (axes, keepdim))


_lib.impl("amax", _amax, "PrivateUse1")


def _mm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    ts = _device_tensors([self, mat2])
    if ts is None:
        return _host(torch.ops.aten.mm.default, (self, mat2), {}, _dev_of(self, mat2))
    out = torch.empty(self.shape[0], mat2.shape[1], dtype=self.dtype, device=self.device)
    return _launch("mm", _binary(np.matmul), ts, out)


def _bmm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    ts = _device_tensors([self, mat2])
    if ts is None:
        return _host(torch.ops.aten.bmm.default, (self, mat2), {}, _dev_of(self, mat2))
    out = torch.empty(self.shape[0], self.shape[1], mat2.shape[2], dtype=self.dtype,
                      device=self.device)
    return _launch("bmm", _binary(np.matmul), ts, out)


_lib.impl("mm", _mm, "PrivateUse1")
_lib.impl("bmm", _bmm, "PrivateUse1")


def _softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    ts = _device_tensors([self])
    if ts is None or half_to_float or self.dim() == 0:
        return _host(torch.ops.aten._softmax.default, (self, dim, half_to_float), {}, self.device)
    axis = _norm_dim(dim, self.dim())

    def k(x0):
        m = np.max(x0, axis=axis, keepdims=True)
        e = np.exp(x0 - m)
        return e / np.sum(e, axis=axis, keepdims=True)

    out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    return _launch(f"softmax_{axis}", k, ts, out, (axis,))


_lib.impl("_softmax", _softmax, "PrivateUse1")


def _register_inplace(opname: str, functional: Any) -> None:
    """``x.op_(y)`` = the device kernel of ``op`` then a device copy into ``x``
    (when the result has x's shape and dtype; otherwise the generic path)."""
    base, _, overload = opname.partition(".")
    op = getattr(getattr(torch.ops.aten, base), overload or "default")

    def impl(self: torch.Tensor, other: Any, *rest: Any, **kwargs: Any) -> torch.Tensor:
        other_ok = not isinstance(other, torch.Tensor) or other.dtype == self.dtype
        if self.device.type == "nkipy" and other_ok:
            shape = _broadcast(self.shape, other.shape if isinstance(
                other, torch.Tensor) else ())
            if shape == self.shape:
                r = functional(self, other, *rest, **kwargs)
                if r.dtype == self.dtype and r.device == self.device:
                    return self.copy_(r)
        return _host(op, (self, other) + rest, kwargs, self.device)

    _lib.impl(opname, impl, "PrivateUse1")


_register_inplace("add_.Tensor", torch.ops.aten.add.Tensor)
_register_inplace("sub_.Tensor", torch.ops.aten.sub.Tensor)
_register_inplace("mul_.Tensor", torch.ops.aten.mul.Tensor)
_register_inplace("div_.Tensor", torch.ops.aten.div.Tensor)


def _layer_norm(input: torch.Tensor, normalized_shape: Sequence[int],
                weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                eps: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    op = torch.ops.aten.native_layer_norm.default
    args = [input] + [t for t in (weight, bias) if t is not None]
    ts = _device_tensors(args)
    k = len(normalized_shape)
    if ts is None or input.dtype != torch.float32 or k == 0 or input.dim() < k:
        return _host(op, (input, normalized_shape, weight, bias, eps), {}, input.device)
    axes = tuple(range(input.dim() - k, input.dim()))
    has_w, has_b = weight is not None, bias is not None
    eps = float(eps)

    def kernel(x0, *params):
        mean = np.mean(x0, axis=axes, keepdims=True)
        xc = x0 - mean
        var = np.mean(xc * xc, axis=axes, keepdims=True)
        rstd = 1.0 / np.sqrt(var + eps)
        y = xc * rstd
        i = 0
        if has_w:
            y = y * params[i]
            i += 1
        if has_b:
            y = y + params[i]
        return y, mean, rstd

    stat_shape = list(input.shape[: input.dim() - k]) + [1] * k
    outs = [torch.empty(input.shape, dtype=input.dtype, device=input.device),
            torch.empty(stat_shape, dtype=input.dtype, device=input.device),
            torch.empty(stat_shape, dtype=input.dtype, device=input.device)]
    _launch(f"layer_norm_{k}_{has_w}_{has_b}", kernel, ts, outs, (axes, has_w, has_b, eps))
    return outs[0], outs[1], outs[2]


_lib.impl("native_layer_norm", _layer_norm, "PrivateUse1")


def _addmm(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *,
           beta: Any = 1, alpha: Any = 1) -> torch.Tensor:
    """``beta * self + alpha * (mat1 @ mat2)`` (``nn.Linear`` with a bias)."""
    ts = _device_tensors([self, mat1, mat2])
    if ts is None or any(isinstance(v, (complex, bool)) for v in (beta, alpha)) or \
            mat1.dim() != 2 or mat2.dim() != 2:
        return _host(torch.ops.aten.addmm.default, (self, mat1, mat2),
                     {"beta": beta, "alpha": alpha}, _dev_of(self, mat1, mat2))
    b, a = float(beta), float(alpha)
    # half precision: the product, scaling and sum in float32, rounded once, as
    # PyTorch's CPU addmm (a half GEMM output would round the product first)
    half = mat1.dtype in (torch.float16, torch.bfloat16)

    def k(x0, x1, x2):
        dtype = x1.dtype
        if half:
            x0, x1, x2 = (x.astype(np.float32) for x in (x0, x1, x2))
        y = np.matmul(x1, x2)
        if a != 1.0:
            y = y * a
        if b != 0.0:
            y = y + (x0 if b == 1.0 else x0 * b)
        return y.astype(dtype) if half else y

    out = torch.empty(mat1.shape[0], mat2.shape[1], dtype=mat1.dtype, device=mat1.device)
    return _launch("addmm", k, ts, out, (b, a, half))


_lib.impl("addmm", _addmm, "PrivateUse1")
