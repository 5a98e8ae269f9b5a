"""Python numbers where an eager op's schema has a Tensor: how the device's
fallback (:mod:`spike_torch._generic`) turns them into the 0-dim tensors of
the op's traced graph, with the dtype and precision the CPU's kernels give
them. ``info`` is the op's ``_generic._OpInfo`` (its ``name`` and
``tensor_args``)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch


def _first_tensor(items: Sequence[Any]) -> Optional[torch.Tensor]:
    for a in items:
        if isinstance(a, torch.Tensor):
            return a
        if isinstance(a, (list, tuple)):
            t = _first_tensor(a)
            if t is not None:
                return t
    return None


def unwrap(info: Any, args: Sequence[Any], kwargs: Dict[str, Any],
           make: Callable[[Any, torch.dtype], torch.Tensor]) -> Tuple[list, dict]:
    """``args``/``kwargs`` with every Python number given for a Tensor argument
    made a 0-dim tensor by ``make(value, dtype)``.

    A scalar that C++ wrapped into a tensor (``fmod(x, 0.75)`` calls
    ``fmod.Tensor_out`` with a "wrapped number") reaches a Python fallback as a
    Python number, which the op itself does not accept. Its dtype is the one
    type promotion gives it beside the first tensor argument, so the result
    has the dtype the wrapped number gives (``int_tensor + 0.5`` is float32,
    not float64)."""
    args, kwargs = list(args), dict(kwargs)
    first = _first_tensor(list(args) + list(kwargs.values()))
    for pos, name in info.tensor_args:
        in_kw = name in kwargs
        v = kwargs[name] if in_kw else args[pos] if pos < len(args) else None
        if isinstance(v, (bool, int, float, complex)):
            dtype = torch.result_type(first, v) if first is not None else \
                torch.tensor(v).dtype
            if in_kw:
                kwargs[name] = make(v, dtype)
            else:
                args[pos] = make(v, dtype)
    return args, kwargs


#: ops whose CPU kernels read a scalar or 0-dim second operand beside
#: float16/bfloat16 tensors in float32 (their "opmath" type,
#: "original_scalar_value"), not rounded to the half type first (add and sub
#: round it, and alpha, to the half type first); the code generator's
#: promotion of 0-dim operands follows the same set
OPMATH_SECOND = frozenset({"aten::mul", "aten::mul_", "aten::div", "aten::div_"})


def _opmath(info: Any) -> bool:
    """Whether ``info``'s op is one of :data:`OPMATH_SECOND` (any overload: only
    the Tensor, out= and rounding-mode ones take a number for a Tensor)."""
    return info.name.split(".")[0] in OPMATH_SECOND


def _outside(v: int, dt: torch.dtype) -> bool:
    """Whether the int ``v`` lies outside integer dtype ``dt``'s range."""
    if dt.is_floating_point or dt.is_complex or dt == torch.bool:
        return False
    info = torch.iinfo(dt)
    return not info.min <= v <= info.max


#: ops whose result for an integer tensor and a Python int is a float (they
#: compute in floating point): there the int keeps its value
_FLOAT_RESULT = frozenset({
    "aten::div", "aten::div_", "aten::true_divide", "aten::true_divide_", "aten::copysign",
    "aten::copysign_", "aten::xlogy", "aten::xlogy_", "aten::special_xlogy",
    "aten::special_xlog1py", "aten::atan2", "aten::atan2_", "aten::arctan2", "aten::arctan2_",
    "aten::float_power", "aten::float_power_"})


def wrap_int(v: int, dt: torch.dtype) -> int:
    """The Python int ``v`` converted to integer dtype ``dt`` as the CPU converts
    a scalar (modulo 2**bits: -3 in uint8 is 253, 300 in int8 is 44)."""
    info = torch.iinfo(dt)
    span = info.max - info.min + 1
    return (v - info.min) % span + info.min


def maker(info: Any, args: Sequence[Any],
          kwargs: Optional[Dict[str, Any]] = None) -> Callable[[Any, torch.dtype], torch.Tensor]:
    """How a call's Python scalar becomes a 0-dim tensor in its traced graph: of
    the dtype type promotion gives it, except a float or int beside half
    tensors in a mul/div, which is float32 (as the CPU kernel takes it; the
    result's dtype is the half type all the same, set by a tensor with
    dimensions, by the written tensor, or by :func:`opmath_call`)."""
    first = args[0] if args else None     # the scalar is the second operand
    opmath = _opmath(info) and isinstance(first, torch.Tensor)
    float_result = info.name.split(".")[0] in _FLOAT_RESULT and \
        (kwargs or {}).get("rounding_mode") is None

    def make(v: Any, dt: torch.dtype) -> torch.Tensor:
        if opmath and dt in (torch.float16, torch.bfloat16) and not isinstance(v, bool):
            dt = torch.float32
        if isinstance(v, bool):
            # a bool stays one (its dtype promotes nothing), so the op's own
            # checks see it: "Subtraction ... with a bool tensor is not supported"
            dt = torch.bool
        elif isinstance(v, int) and _outside(v, dt):
            # an int the integer dtype cannot hold: an op computing in floats
            # takes its value (uint8 200 / -3 is -66.7), one computing in the
            # integer type converts it there as the CPU does (uint8 + -3 adds 253)
            if float_result:
                dt = torch.int64
            else:
                v = wrap_int(v, dt)
        return torch.full((), v, dtype=dt)

    return make


def opmath_call(info: Any, op: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
    """``op(*args, **kwargs)``; for a mul/div (functional or out=) of a 0-dim half
    tensor by a Python scalar, traced as float32 by :func:`maker`, the
    product in float32 rounded once to the half type, as the CPU computes it,
    then written to ``out`` (an in-place form rounds into self by itself)."""
    first = args[0] if args else None
    if not _opmath(info) or "_." in info.name or \
            not isinstance(first, torch.Tensor) or first.dim() != 0 or \
            first.dtype not in (torch.float16, torch.bfloat16):
        return op(*args, **kwargs)
    packet = getattr(torch.ops.aten, info.name.split("::")[1].split(".")[0])
    functional = packet.Tensor_mode if "mode" in info.name else packet.Tensor
    res = functional(*args[:2], **{k: v for k, v in kwargs.items() if k != "out"})
    res = res.to(first.dtype)
    if "out" not in kwargs:
        return res
    out = kwargs["out"]
    if out.shape != res.shape:
        out.resize_(res.shape)
    return out.copy_(res)


def has_numbers(info: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> bool:
    """Whether a Python number stands for one of the call's Tensor arguments."""
    for pos, name in info.tensor_args:
        v = kwargs[name] if name in kwargs else args[pos] if pos < len(args) else None
        if isinstance(v, (bool, int, float, complex)):
            return True
    return False
