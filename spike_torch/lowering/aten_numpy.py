"""NumPy-style implementations of ATen ops (the registry's entries).

Every function here is plain NumPy on arrays and nkipy kernel code on tracer
tensors: generated ``nkipy_func`` sources call them as ``aten.<name>(...)``.
Arguments follow the ATen schemas; dtypes arrive as NumPy dtypes, 64-bit ones
as such: kernels are traced with PyTorch's semantics
(:func:`nkipy.core.dtypes.torch_semantics`), so int64 and float64 are computed
in 64 bits and an integer division by zero fails the execution as eager does.
"""
from __future__ import annotations

import math
import operator
import os
from typing import Any, Sequence

import numpy as np

from nkipy.core import ops
from nkipy.core.language import bfloat16
from spike._dtypes import to_numpy_dtype
from spike.safe_files import check_trusted

from .._numbers import wrap_int
from .._scalar_slots import check_fits
from ..dtypes import torch_dtype
from .registry import AtenOpRegistry

reg = AtenOpRegistry.register

def dt(name: str) -> np.dtype:
    """A dtype name of the runtime (spike_torch.dtypes) as a NumPy dtype (bfloat16
    from ml_dtypes)."""
    return to_numpy_dtype(name)


def acc_dtype(x: Any) -> np.dtype:
    """The dtype normalisations and attention compute in: float64 for float64
    operands (exact as eager), else float32."""
    return np.dtype(np.float64) if np.dtype(x.dtype) == np.float64 else np.dtype(np.float32)


def cast(x: Any, dtype: np.dtype) -> Any:
    """``x`` in ``dtype`` (no-op when it already is)."""
    if not hasattr(x, "dtype"):
        return ops.full((), x, dtype)
    return x if x.dtype == dtype else x.astype(dtype)


def load_constant(directory: str, fname: str, dtype: Any = None) -> np.ndarray:
    """A graph constant saved beside the generated source (bfloat16 stored as uint16)."""
    path = os.path.join(directory, fname)
    with open(path, "rb") as f:
        check_trusted(path, "cached constant", os.fstat(f.fileno()))
        a = np.load(f, allow_pickle=False)
    return a.view(dt(dtype)) if dtype else a


def _ax(dim: Any, ndim: int) -> Any:
    """A reduction's NumPy axis: None for all dimensions (also for a 0-d
    tensor, whose dim 0 / -1 torch accepts)."""
    if dim is None or ndim == 0:
        return None
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:
            return None
        return tuple(d % max(ndim, 1) for d in dim)
    return dim % max(ndim, 1)


def _shape(x: Any) -> tuple:
    return tuple(np.shape(x))


# ---- elementwise -------------------------------------------------------------

#: Unary ops whose result is floating: PyTorch computes them on an integer or
#: bool input in the default float dtype (float32), as the FX graph's output
#: dtype says -- never in the input's integer dtype (np.reciprocal of an int is 0).
_FLOATING_UNARY = {
    "aten.cos.default", "aten.sin.default", "aten.exp.default", "aten.log.default",
    "aten.log1p.default", "aten.reciprocal.default", "aten.sqrt.default", "aten.tanh.default",
    "aten.expm1.default", "aten.exp2.default", "aten.log2.default", "aten.log10.default",
    "aten.tan.default", "aten.asin.default", "aten.acos.default", "aten.atan.default",
    "aten.sinh.default", "aten.cosh.default", "aten.erf.default", "aten.rsqrt.default",
    "aten.sigmoid.default"}


def _fkind(x: Any) -> str:
    """NumPy's kind letter of ``x``'s dtype, with "f" for bfloat16 too (ml_dtypes
    gives it "V"): a sign test on "f" alone took bfloat16 for an integer type."""
    d = np.dtype(x.dtype)
    return "f" if d == _BF16 else d.kind


_BF16 = np.dtype(bfloat16)
_HALF_FLOATS = (np.dtype(np.float16), _BF16)


def _opmath(fn, x, y):
    """``fn(x, y)`` (an add, sub, mul or div) as PyTorch's CPU kernels compute it
    on float16/bfloat16: in float32, a Python scalar second operand taken as
    float32 (not first rounded to the half type: x * 1e-7 would be 19 % off),
    one rounding of the result to the half type. A scalar first operand is
    rounded to the half type first, as the CPU kernels do; other operands:
    ``fn(x, y)`` itself."""
    arrays = [v for v in (x, y) if hasattr(v, "dtype")]
    if not arrays or not hasattr(x, "dtype") or any(isinstance(v, bool) for v in (x, y)):
        return fn(x, y)
    kinds = {np.dtype(v.dtype) for v in arrays}
    if len(kinds) != 1 or next(iter(kinds)) not in _HALF_FLOATS:
        return fn(x, y)
    f32 = np.dtype(np.float32)
    up = [cast(v, f32) if hasattr(v, "dtype") else np.float32(v) for v in (x, y)]
    return cast(fn(*up), next(iter(kinds)))


def _is_integral(x: Any) -> bool:
    dt = np.dtype(getattr(x, "dtype", np.float32))
    return dt.kind in "iub"


def _unary(name: str, fn):
    if name not in _FLOATING_UNARY:
        reg(name)(fn)
        return

    def floating(x):
        return fn(cast(x, np.dtype(np.float32)) if _is_integral(x) else x)

    floating.__name__ = name.split(".")[1]
    reg(name)(floating)


for _n, _f in {
    "aten.abs.default": np.abs, "aten.cos.default": np.cos, "aten.sin.default": np.sin,
    "aten.exp.default": np.exp, "aten.floor.default": np.floor, "aten.log.default": np.log,
    "aten.log1p.default": np.log1p, "aten.neg.default": np.negative,
    "aten.reciprocal.default": np.reciprocal, "aten.sqrt.default": np.sqrt,
    "aten.tanh.default": np.tanh, "aten.bitwise_not.default": np.invert,
    "aten.logical_not.default": np.logical_not, "aten.ceil.default": np.ceil,
    "aten.trunc.default": np.trunc, "aten.round.default": np.round,
    "aten.expm1.default": np.expm1, "aten.exp2.default": np.exp2, "aten.log2.default": np.log2,
    "aten.log10.default": np.log10, "aten.tan.default": np.tan, "aten.asin.default": np.arcsin,
    "aten.acos.default": np.arccos, "aten.atan.default": np.arctan, "aten.sinh.default": np.sinh,
    "aten.cosh.default": np.cosh, "aten.isnan.default": np.isnan, "aten.isinf.default": np.isinf,
    "aten.erf.default": ops.erf, "aten.rsqrt.default": ops.rsqrt,
    "aten.sigmoid.default": ops.sigmoid,
}.items():
    _unary(_n, _f)


@reg("aten.sign.default")
def sign(x):
    """torch.sign: (x > 0) - (x < 0) on floats, so NaN and -0.0 give +0.0
    (np.sign kept NaN and -0.0: sign(nan) was nan where eager gives 0)."""
    if np.dtype(x.dtype) == np.dtype(np.bool_):
        return np.copy(x)                   # the sign of a bool is itself
    if _is_integral(x):
        return np.sign(x)
    dtype = np.dtype(x.dtype)
    return cast(x > 0, dtype) - cast(x < 0, dtype)


@reg("aten.relu.default")
def relu(x):
    # x where it is not below zero, as the CPU keeps it: relu(-0.0) is -0.0
    # (a maximum with 0 gives +0.0), relu(nan) is nan
    return np.where(x < 0, 0, x).astype(x.dtype)


def _as_half(x, y, v):
    """A Python scalar ``v`` (the second operand or alpha) of ``x + alpha * y``
    as PyTorch's add and sub take it where both tensors are of one half type
    (float16 or bfloat16), so that the op computes in it: rounded to that type
    (through float32) before the sum is computed in float32 (``x + 0.1`` in
    float16 adds 0.0999755859375). With operands of other float dtypes (a
    float16 tensor plus a float32 one) the scalar is taken as it is."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and hasattr(x, "dtype") and \
            np.dtype(x.dtype) in _HALF_FLOATS and \
            (not hasattr(y, "dtype") or np.dtype(y.dtype) == np.dtype(x.dtype)):
        return float(np.float32(v).astype(x.dtype))
    return v


def _widened(x, y):
    """``(x, y)`` in the float32/float64 type two float operands of different
    types compute in (float16 with bfloat16 or float32, ...), so that a scaled
    operand (``alpha * y``) is not first rounded to its own narrower type; other
    operands as they are."""
    if not (hasattr(x, "dtype") and hasattr(y, "dtype")) or _fkind(x) != "f" or \
            _fkind(y) != "f" or np.dtype(x.dtype) == np.dtype(y.dtype):
        return x, y
    if (x.ndim == 0) != (y.ndim == 0):      # a 0-dim operand takes the other's type
        return x, y
    dx, dy = np.dtype(x.dtype), np.dtype(y.dtype)
    wide = np.dtype(np.float32) if {dx, dy} <= set(_HALF_FLOATS) else np.promote_types(dx, dy)
    return cast(x, wide), cast(y, wide)


def _scaled(fn, x, y, alpha):
    """``fn(x, alpha * y)`` (add or sub) as PyTorch's CPU kernels compute it: an
    integer or bool ``y`` beside a half-type ``x`` in that type (the op's),
    scalars rounded as :func:`_as_half` says, operands of two float types
    widened before ``alpha`` scales one, half types in float32."""
    if hasattr(x, "dtype") and hasattr(y, "dtype") and np.dtype(x.dtype) in _HALF_FLOATS and \
            _fkind(y) in "iub":
        y = cast(y, np.dtype(x.dtype))
    y, alpha = _as_half(x, y, y), _as_half(x, y, alpha)
    if alpha == 1:
        return _opmath(fn, x, y)
    x, y = _widened(x, y)
    return _opmath(lambda a, b: fn(a, b * alpha), x, y)


@reg("aten.add.Tensor", "aten.add.Scalar")
def add(x, y, alpha=1):
    return _scaled(np.add, x, y, alpha)


def _no_bool_subtraction(x: Any, y: Any) -> None:
    """The CPU refuses a subtraction with a bool operand (a Python bool too)."""
    for v in (x, y):
        if isinstance(v, bool) or np.dtype(getattr(v, "dtype", np.int64)) == np.bool_:
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not "
                               "supported. If you are trying to invert a mask, use the `~` or "
                               "`logical_not()` operator instead.")


@reg("aten.sub.Tensor", "aten.sub.Scalar")
def sub(x, y, alpha=1):
    _no_bool_subtraction(x, y)
    return _scaled(np.subtract, x, y, alpha)


@reg("aten.rsub.Scalar", "aten.rsub.Tensor")
def rsub(x, y, alpha=1):
    _no_bool_subtraction(x, y)
    return np.subtract(y, x if alpha == 1 else x * alpha)


@reg("aten.mul.Tensor", "aten.mul.Scalar")
def mul(x, y):
    return _opmath(np.multiply, x, y)


@reg("aten.div.Tensor", "aten.div.Scalar")
def div(x, y):
    return _opmath(np.divide, x, y)


@reg("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div_mode(x, y, rounding_mode=None):
    """Division rounded as ``rounding_mode`` says; on float16/bfloat16 in float32
    with a Python scalar divisor taken as float32, rounded once (the CPU's
    kernels: 7 // 0.1 in float16 is 69, from 0.1 in float32, not 70)."""
    if rounding_mode is None:
        return _opmath(np.divide, x, y)
    if rounding_mode == "floor":
        return _opmath(np.floor_divide, x, y)
    if _is_float(x, y):
        return _opmath(lambda a, b: np.trunc(np.divide(a, b)), x, y)
    return _int_trunc_div(x, y)


def _is_float(x, y) -> bool:
    return any(isinstance(v, float) or (hasattr(v, "dtype") and _fkind(v) == "f")
               for v in (x, y))


def _int_trunc_div(x, y):
    """Integer division rounding toward zero, exact in the integer dtype (a
    float division would round large int64 values)."""
    q = np.floor_divide(x, y)
    r = np.remainder(x, y)      # floor's remainder: nonzero with the divisor's sign
    # rounded down where it should be rounded up: a nonzero remainder whose sign
    # (the divisor's) is not the dividend's
    return q + ((r != 0) & (np.sign(r) != np.sign(x))).astype(q.dtype)


def _fits(v: Any, like: Any) -> None:
    """Raises the CPU's error for a Python number ``v`` that a kernel converts
    to ``like``'s dtype with an overflow check (a fill value, a clamp bound, a
    half or integer power's exponent) and that overflows it."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and hasattr(like, "dtype"):
        check_fits(v, torch_dtype(np.dtype(like.dtype)))


def _no_bool_operands(name: str, x: Any, y: Any) -> None:
    """remainder and fmod have no bool kernel on the CPU."""
    def is_bool(v: Any) -> bool:
        return isinstance(v, bool) or np.dtype(getattr(v, "dtype", np.int64)) == np.bool_

    if is_bool(x) and is_bool(y):
        raise NotImplementedError(f'"{name}_cpu" not implemented for \'Bool\'')


@reg("aten.remainder.Tensor", "aten.remainder.Scalar")
def remainder(x, y):
    _no_bool_operands("remainder", x, y)
    return np.remainder(x, y)


@reg("aten.fmod.Tensor", "aten.fmod.Scalar")
def fmod(x, y):
    _no_bool_operands("fmod", x, y)
    return np.fmod(x, y)


@reg("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor")
def power(x, y):
    if not hasattr(y, "dtype"):
        # the CPU converts the exponent to an integer or half base's dtype
        if _fkind(x) in "iu" and isinstance(y, int) and not isinstance(y, bool):
            if y < 0:
                raise RuntimeError("Integers to negative integer powers are not allowed.")
            _fits(y, x)
        elif np.dtype(x.dtype) in _HALF_FLOATS:
            _fits(y, x)
    if not hasattr(y, "dtype") and y == 2:
        return x * x
    if not hasattr(y, "dtype") and y == 0.5:
        return np.sqrt(x)
    return np.power(x, y)


@reg("aten.pow.Scalar")
def pow_scalar(x, y):
    # a float base with an integer exponent tensor is a float32 power (PyTorch's
    # promotion): 2.0 ** -2 is 0.25, not the integer 0
    if isinstance(x, float) and _is_integral(y):
        y = cast(y, np.dtype(np.float32))
    # an integer base with a bool exponent is an int64 power (2 ** True is 2)
    base = np.dtype(np.int64) if np.dtype(y.dtype) == np.bool_ and not isinstance(x, float) \
        else y.dtype
    return np.power(ops.full((), x, base), y)


@reg("aten.minimum.default")
def minimum(x, y):
    return np.minimum(x, y)


@reg("aten.maximum.default")
def maximum(x, y):
    return np.maximum(x, y)


@reg("aten.atan2.default")
def atan2(x, y):
    # computed in the result's floating type, as PyTorch does: a float
    # operand's dtype (an integer operand takes it), float32 for two integer
    # or bool operands (NumPy would compute those in float16: pi/2 as 1.5703)
    fx = _fkind(x) == "f"
    fy = _fkind(y) == "f"
    if not fx and not fy:
        x, y = cast(x, np.dtype(np.float32)), cast(y, np.dtype(np.float32))
    elif not fx:
        x = cast(x, np.dtype(y.dtype))
    elif not fy:
        y = cast(y, np.dtype(x.dtype))
    return np.arctan2(x, y)


def _int_scalar_in(v: Any, like: Any) -> Any:
    """A Python int compared with an integer tensor ``like``, converted to its
    dtype as the CPU converts it (wrapping: -3 beside uint8 is 253), where NumPy
    would compare the values."""
    if isinstance(v, int) and not isinstance(v, bool) and _fkind(like) in "iu" and \
            -2 ** 63 <= v < 2 ** 64:
        return wrap_int(v, torch_dtype(np.dtype(like.dtype)))
    return v


def _comparison(fn):
    def compare(x, y):
        if hasattr(x, "dtype"):
            y = _int_scalar_in(y, x)
        return fn(x, y)
    return compare


for _n, _f in {
    "aten.eq": np.equal, "aten.ne": np.not_equal, "aten.ge": np.greater_equal,
    "aten.gt": np.greater, "aten.le": np.less_equal, "aten.lt": np.less,
}.items():
    reg(_n + ".Tensor", _n + ".Scalar")(_comparison(_f))


def _bitwise(logical, bitwise):
    def fn(x, y):
        if getattr(x, "dtype", None) == np.bool_ and getattr(y, "dtype", np.bool_) == np.bool_:
            return logical(x, y)
        return bitwise(x, y)
    return fn


reg("aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar")(_bitwise(np.logical_and, np.bitwise_and))
reg("aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar")(_bitwise(np.logical_or, np.bitwise_or))
reg("aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar")(_bitwise(np.logical_xor, np.bitwise_xor))
reg("aten.logical_and.default")(np.logical_and)
reg("aten.logical_or.default")(np.logical_or)
reg("aten.logical_xor.default")(np.logical_xor)


@reg("aten.clamp.default", "aten.clamp.Tensor")
def clamp(x, min=None, max=None):
    if not (_fkind(x) in "iu" and (isinstance(min, float) or isinstance(max, float))):
        _fits(min, x)      # (an integer tensor clamped by a float computes in float)
        _fits(max, x)
        # an int bound in the tensor's dtype, as the CPU converts it (uint8 -3: 253)
        min, max = _int_scalar_in(min, x), _int_scalar_in(max, x)
    if min is not None:
        x = np.maximum(x, min)
    if max is not None:
        x = np.minimum(x, max)
    return x


@reg("aten.clamp_min.default")
def clamp_min(x, min):
    return clamp(x, min=min)


@reg("aten.clamp_max.default")
def clamp_max(x, max):
    return clamp(x, max=max)


@reg("aten.hardtanh.default")
def hardtanh(x, min_val=-1.0, max_val=1.0):
    return np.minimum(np.maximum(x, min_val), max_val)


@reg("aten.leaky_relu.default")
def leaky_relu(x, negative_slope=0.01):
    return np.where(x > 0, x, _opmath(np.multiply, x, negative_slope))


@reg("aten.gelu.default")
def gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + ops.erf(x * 0.7071067811865476))


@reg("aten.silu.default")
def silu(x):
    return x * ops.sigmoid(x)


@reg("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def where(c, x, y):
    return np.where(c, x, y)


@reg("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def masked_fill(x, mask, value):
    _fits(value, x)
    return np.where(mask, value, x).astype(x.dtype)


# ---- backward helpers ------------------------------------------------------

@reg("aten.threshold_backward.default")
def threshold_backward(grad, x, threshold):
    return np.where(x <= threshold, 0, grad).astype(grad.dtype)


@reg("aten.sigmoid_backward.default")
def sigmoid_backward(grad, y):
    return grad * (1 - y) * y


@reg("aten.tanh_backward.default")
def tanh_backward(grad, y):
    return grad * (1 - y * y)


@reg("aten._softmax_backward_data.default")
def softmax_backward(grad, y, dim, input_dtype):
    return (grad - np.sum(grad * y, axis=dim, keepdims=True)) * y


@reg("aten._log_softmax_backward_data.default")
def log_softmax_backward(grad, y, dim, input_dtype):
    return grad - np.exp(y) * np.sum(grad, axis=dim, keepdims=True)


# ---- casts, copies, creation ---------------------------------------------------

@reg("prims.convert_element_type.default")
def convert_element_type(x, dtype):
    return cast(x, dtype)


@reg("aten._to_copy.default")
def to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None):
    return np.copy(x) if dtype is None else cast(x, dtype)


@reg("aten.clone.default", "aten.lift_fresh_copy.default")
def clone(x, memory_format=None):
    return np.copy(x)


@reg("aten.alias.default", "aten.detach.default", "_c10d_functional.wait_tensor.default")
def alias(x):
    return x


@reg("aten.copy.default")
def copy(x, src, non_blocking=False):
    return np.broadcast_to(cast(src, x.dtype), _shape(x)) + np.zeros_like(x)


@reg("aten.copy_.default")
def copy_(x, src, non_blocking=False):
    x[...] = src
    return x


def _default_dtype(value: Any, dtype: Any) -> Any:
    if dtype is not None:
        return dtype
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    if isinstance(value, int):
        return np.dtype(np.int32)
    return np.dtype(np.float32)


@reg("aten.full.default")
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    return ops.full(tuple(size), fill_value, _default_dtype(fill_value, dtype))


@reg("aten.full_like.default")
def full_like(x, fill_value, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
    return ops.full(_shape(x), fill_value, dtype or x.dtype)


@reg("aten.scalar_tensor.default")
def scalar_tensor(s, dtype=None, layout=None, device=None, pin_memory=None):
    return ops.full((), s, dtype or np.dtype(np.float32))


@reg("aten.empty_permuted.default")
def empty_permuted(size, physical_layout, dtype=None, layout=None, device=None, pin_memory=None):
    return ops.zeros(tuple(size), dtype or np.dtype(np.float32))


@reg("aten.empty.memory_format")
def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return ops.zeros(tuple(size), dtype or np.dtype(np.float32))


@reg("aten.empty_strided.default")
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return ops.zeros(tuple(size), dtype or np.dtype(np.float32))


@reg("aten.arange.start_step")
def arange(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    if dtype is None:
        dtype = np.dtype(np.int32) if all(isinstance(v, int) for v in (start, end, step)) \
            else np.dtype(np.float32)
    return ops.arange(start, end, step, dtype=dtype)


@reg("prims.iota.default")
def iota(length, start, step, dtype=None, device=None, requires_grad=False):
    return ops.arange(start, start + length * step, step, dtype=dtype or np.dtype(np.int32))


@reg("aten.fill.Scalar")
def fill(x, value):
    return ops.full(_shape(x), value, x.dtype)


# ---- linear algebra -------------------------------------------------------------

@reg("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def mm(x, y):
    return np.matmul(x, y)


def _scaled_sum(prod, bias, beta, alpha):
    """``beta * bias + alpha * prod`` as PyTorch's add{mm,mv,bmm} compute it: on
    integer tensors the scalars are first cast to the integer type (0.6 is 0),
    and ``beta == 0`` ignores ``bias`` (a NaN or inf in it does not propagate)."""
    if _is_integral(prod):
        beta, alpha = int(beta), int(alpha)
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod    # bias broadcasts to the product's shape: nothing else to add
    return prod + (bias if beta == 1 else bias * beta)


def _half(x: Any) -> bool:
    return np.dtype(x.dtype) in (np.dtype(np.float16), dt("bfloat16"))


@reg("aten.addmm.default")
def addmm(bias, x, y, beta=1, alpha=1):
    if _half(x):   # in float32, rounded once, as PyTorch's CPU addmm
        f = np.dtype(np.float32)
        return cast(_scaled_sum(np.matmul(cast(x, f), cast(y, f)), cast(bias, f), beta, alpha),
                    x.dtype)
    return _scaled_sum(np.matmul(x, y), bias, beta, alpha)


@reg("aten.embedding.default")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return np.take(weight, _in_range(indices, _shape(weight)[0], 0), axis=0)


# ---- reductions and normalisation -----------------------------------------

@reg("aten.sum.dim_IntList")
def sum_dim(x, dim, keepdim=False, dtype=None):
    return np.sum(x, axis=_ax(dim, x.ndim), keepdims=keepdim, dtype=dtype)


@reg("aten.sum.default")
def sum_all(x, dtype=None):
    return np.sum(x, dtype=dtype)


def _mean_input(x: Any, dtype: Any) -> Any:
    """``x`` in the dtype ``mean(x, dtype=dtype)`` sums it in: an integer or
    bool tensor asked for a float16/bfloat16 mean is summed in float32 (the
    CPU's accumulation type; each element rounded to the half type first
    overflows: int32 100000 is inf in float16), the result rounded after."""
    if dtype is None:
        return x
    if np.dtype(dtype) in _HALF_FLOATS and _fkind(x) != "f":
        return cast(x, np.dtype(np.float32))
    return cast(x, dtype)


@reg("aten.mean.dim")
def mean_dim(x, dim, keepdim=False, dtype=None):
    return np.mean(_mean_input(x, dtype), axis=_ax(dim, x.ndim), keepdims=keepdim)


@reg("aten.mean.default")
def mean_all(x, dtype=None):
    return np.mean(_mean_input(x, dtype))


def _val(a: Any) -> Any:
    """The example value (a FakeTensor) of an FX node argument, or None."""
    return a.meta.get("val") if hasattr(a, "meta") else None


def _int_acc(x: Any, dtype: Any) -> Any:
    """The dtype eager multiplies integer and bool elements in when no dtype is
    given: int64 (a product computed in int8/int16/int32 wraps, then widened,
    was off by multiples of 2**32)."""
    if dtype is None and (np.issubdtype(np.dtype(x.dtype), np.integer)
                          or np.dtype(x.dtype) == np.bool_):
        return np.dtype(np.int64)
    return dtype


def _prod_not_half(node: Any) -> bool:
    """prod of float16/bfloat16 runs on the CPU: eager rounds its vectorised
    partial products to the half dtype as it goes (bfloat16 0.7891 where the
    device's once-rounded 0.8086 is the nearer to the true 0.8104), and no
    order of the device's reduction reproduces that."""
    import torch

    v = _val(node.args[0])
    dtype = node.kwargs.get("dtype")
    return v is not None and v.dtype not in (torch.float16, torch.bfloat16) and \
        dtype not in (torch.float16, torch.bfloat16)


@reg("aten.prod.default", supports=_prod_not_half)
def prod_all(x, dtype=None):
    dtype = _int_acc(x, dtype)
    return np.prod(x if dtype is None else cast(x, dtype), dtype=dtype)


@reg("aten.prod.dim_int", supports=_prod_not_half)
def prod_dim(x, dim, keepdim=False, dtype=None):
    dtype = _int_acc(x, dtype)
    return np.prod(x if dtype is None else cast(x, dtype), axis=_ax(dim, x.ndim),
                   keepdims=keepdim, dtype=dtype)


@reg("aten.var.correction")
def var(x, dim=None, correction=None, keepdim=False):
    return np.var(x, axis=_ax(dim, x.ndim), ddof=1 if correction is None else correction,
                  keepdims=keepdim)


@reg("aten.amax.default")
def amax(x, dim=(), keepdim=False):
    return np.max(x, axis=_ax(dim, x.ndim), keepdims=keepdim)


@reg("aten.amin.default")
def amin(x, dim=(), keepdim=False):
    return np.min(x, axis=_ax(dim, x.ndim), keepdims=keepdim)


@reg("aten.max.default")
def max_all(x):
    return np.max(x)


@reg("aten.min.default")
def min_all(x):
    return np.min(x)


def _index0() -> Any:
    """The index a reduction of a 0-d tensor over dim 0 / -1 returns."""
    return ops.zeros((), np.dtype(np.int64))


@reg("aten.max.dim")
def max_dim(x, dim, keepdim=False):
    if x.ndim == 0:
        return x, _index0()
    return np.max(x, axis=dim, keepdims=keepdim), np.argmax(x, axis=dim, keepdims=keepdim)


@reg("aten.min.dim")
def min_dim(x, dim, keepdim=False):
    if x.ndim == 0:
        return x, _index0()
    return np.min(x, axis=dim, keepdims=keepdim), np.argmin(x, axis=dim, keepdims=keepdim)


@reg("aten.argmax.default")
def argmax(x, dim=None, keepdim=False):
    if x.ndim == 0:
        return _index0()
    if dim is None:
        return np.argmax(np.reshape(x, (-1,)))
    return np.argmax(x, axis=dim, keepdims=keepdim)


@reg("aten.argmin.default")
def argmin(x, dim=None, keepdim=False):
    if x.ndim == 0:
        return _index0()
    if dim is None:
        return np.argmin(np.reshape(x, (-1,)))
    return np.argmin(x, axis=dim, keepdims=keepdim)


@reg("aten.any.default")
def any_all(x):
    return np.any(x)


@reg("aten.any.dim", "aten.any.dims")
def any_dim(x, dim=None, keepdim=False):
    return np.any(x, axis=_ax(dim, x.ndim), keepdims=keepdim)


@reg("aten.all.default")
def all_all(x):
    return np.all(x)


@reg("aten.all.dim", "aten.all.dims")
def all_dim(x, dim=None, keepdim=False):
    return np.all(x, axis=_ax(dim, x.ndim), keepdims=keepdim)


@reg("aten.cumsum.default")
def cumsum(x, dim, dtype=None):
    if x.ndim == 0:
        return np.reshape(np.cumsum(np.reshape(x, (1,)), axis=0, dtype=dtype), ())
    return np.cumsum(x, axis=dim, dtype=dtype)


@reg("aten.cumprod.default")
def cumprod(x, dim, dtype=None):
    dtype = _int_acc(x, dtype)
    if dtype is not None:
        x = cast(x, dtype)
    if x.ndim == 0:
        return np.reshape(np.cumprod(np.reshape(x, (1,)), axis=0, dtype=dtype), ())
    return np.cumprod(x, axis=dim, dtype=dtype)


@reg("aten._softmax.default")
def softmax(x, dim, half_to_float=False):
    if x.ndim == 0:
        return np.reshape(ops.softmax(np.reshape(x, (1,)), axis=0), ())
    return ops.softmax(x, axis=dim)


@reg("aten._log_softmax.default")
def log_softmax(x, dim, half_to_float=False):
    if x.ndim == 0:
        return np.reshape(ops.log_softmax(np.reshape(x, (1,)), axis=0), ())
    return ops.log_softmax(x, axis=dim)


@reg("aten.native_layer_norm.default")
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xf = cast(x, acc_dtype(x))
    mean = np.mean(xf, axis=axes, keepdims=True)
    d = xf - mean
    rstd = ops.rsqrt(np.mean(d * d, axis=axes, keepdims=True) + eps)
    out = d * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return cast(out, x.dtype), mean, rstd


@reg("aten.linalg_vector_norm.default")
def linalg_vector_norm(x, ord=2, dim=None, keepdim=False, dtype=None):
    """Half operands accumulate in float32 and round once (the node's cast), as
    PyTorch's CPU norm does: a half sum of powers overflows (5.0 ** 4 * 125)."""
    if dtype is not None:
        x = cast(x, dtype)
    axis = _ax(dim, x.ndim)
    if _half(x):
        x = x.astype(np.float32)
    a = np.abs(x)
    if ord == math.inf:
        return np.max(a, axis=axis, keepdims=keepdim)
    if ord == -math.inf:
        return np.min(a, axis=axis, keepdims=keepdim)
    if ord == 0:
        return cast(np.sum(x != 0, axis=axis, keepdims=keepdim), x.dtype)
    if ord == 1:
        return np.sum(a, axis=axis, keepdims=keepdim)
    if ord == 2:
        return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdim))
    return np.power(np.sum(np.power(a, ord), axis=axis, keepdims=keepdim), 1.0 / ord)


@reg("aten.topk.default")
def topk(x, k, dim=-1, largest=True, sorted=True):
    if x.ndim == 0:
        v, i = ops.topk(np.reshape(x, (1,)), k, axis=0, is_ascend=not largest)
        return np.reshape(v, ()), np.reshape(i, ())
    return ops.topk(x, k, axis=dim % x.ndim, is_ascend=not largest)


# ---- shapes, views and indexing -------------------------------------------------

@reg("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def view(x, size):
    return np.reshape(x, tuple(size))


@reg("aten.permute.default")
def permute(x, dims):
    return np.transpose(x, tuple(dims))


@reg("aten.t.default")
def t(x):
    return np.transpose(x) if x.ndim == 2 else x


@reg("aten.transpose.int")
def transpose(x, dim0, dim1):
    return np.swapaxes(x, dim0, dim1)


@reg("aten.expand.default")
def expand(x, size, implicit=False):
    lead = len(size) - x.ndim
    shape = tuple(s if s != -1 else x.shape[i - lead] for i, s in enumerate(size))
    return np.broadcast_to(x, shape)


@reg("aten.unsqueeze.default")
def unsqueeze(x, dim):
    return np.expand_dims(x, dim % (x.ndim + 1))


@reg("aten.squeeze.dims", "aten.squeeze.dim")
def squeeze(x, dims):
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    axes = tuple(d % max(x.ndim, 1) for d in dims if x.ndim and x.shape[d] == 1)
    return np.squeeze(x, axis=axes) if axes else x


@reg("aten.squeeze.default")
def squeeze_all(x):
    return np.squeeze(x)


@reg("aten.cat.default")
def cat(tensors, dim=0):
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not kept:        # only legacy 1-D empties, which cat skips: an empty result
        return np.copy(tensors[0])
    return np.concatenate(kept, axis=dim)


@reg("aten.repeat.default")
def repeat(x, repeats):
    lead = len(repeats) - x.ndim
    if lead > 0:
        x = np.reshape(x, (1,) * lead + tuple(x.shape))
    return np.tile(x, tuple(repeats))


def _index(ndim: int, dim: int, idx: Any) -> tuple:
    return (slice(None),) * (dim % ndim) + (idx,)


@reg("aten.select.int")
def select(x, dim, index):
    return x[_index(x.ndim, dim, index)]


@reg("aten.slice.Tensor")
def slice_tensor(x, dim=0, start=None, end=None, step=1):
    return x[_index(x.ndim, dim, slice(start, end, step))]


@reg("aten.slice_scatter.default")
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    y = np.copy(x)
    y[_index(x.ndim, dim, slice(start, end, step))] = src
    return y


@reg("aten.select_scatter.default")
def select_scatter(x, src, dim, index):
    y = np.copy(x)
    y[_index(x.ndim, dim, index)] = src
    return y


@reg("aten.split_with_sizes.default")
def split_with_sizes(x, split_sizes, dim=0):
    out, start = [], 0
    for s in split_sizes:
        out.append(x[_index(x.ndim, dim, slice(start, start + s))])
        start += s
    return out


@reg("aten.split.Tensor")
def split(x, split_size, dim=0):
    n = x.shape[dim]
    return split_with_sizes(x, [min(split_size, n - i) for i in range(0, n, split_size)], dim)


@reg("aten.constant_pad_nd.default")
def constant_pad_nd(x, pad, value=0):
    pairs = [(0, 0)] * x.ndim
    crop = [slice(None)] * x.ndim
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        pairs[d] = (max(lo, 0), max(hi, 0))
        crop[d] = slice(-lo if lo < 0 else None, hi if hi < 0 else None)
    if any(c != slice(None) for c in crop):
        x = x[tuple(crop)]
    if any(p != (0, 0) for p in pairs):
        x = np.pad(x, pairs, constant_values=value)
    return x


def _in_range(index, size: int, dim: int):
    """The index checked to lie in [0, size): PyTorch's gather, scatter,
    index_select and embedding refuse negative indices as well as too large
    ones (IndexError / RuntimeError on the CPU; here the execution fails)."""
    return ops.check_index(index, 0, size, dim)


@reg("aten.gather.default")
def gather(x, dim, index, sparse_grad=False):
    if 0 in _shape(index):
        return ops.zeros(_shape(index), x.dtype)
    if x.ndim == 0:
        return np.reshape(np.take_along_axis(np.reshape(x, (1,)),
                                             np.reshape(_in_range(index, 1, 0), (1,)),
                                             axis=0), _shape(index))
    dim = dim % x.ndim
    return np.take_along_axis(x, _in_range(index, _shape(x)[dim], dim), axis=dim)


@reg("aten.index_select.default")
def index_select(x, dim, index):
    if x.ndim == 0:     # a 0-d tensor: its one element (the index can only be 0)
        return np.reshape(np.take(np.reshape(x, (1,)), _in_range(index, 1, 0)), ())
    if len(np.shape(index)) == 0:       # torch keeps the dimension for a 0-d index
        index = np.reshape(index, (1,))
    dim = dim % x.ndim
    return np.take(x, _in_range(index, _shape(x)[dim], dim), axis=dim)


def _indices(indices: Sequence[Any]) -> tuple:
    return tuple(slice(None) if i is None else i for i in indices)


@reg("aten.index.Tensor")
def index(x, indices):
    return x[_indices(indices)]


def _index_put_ok(node: Any) -> bool:
    """Boolean-mask indices are handled as the one index, over the leading dims."""
    idx = node.args[1] if len(node.args) > 1 else node.kwargs.get("indices", ())
    vals = [_val(i) for i in idx]
    import torch

    masks = [k for k, v in enumerate(vals) if v is not None and v.dtype in (torch.bool, torch.uint8)]
    if not masks:
        return True
    return masks == [0] and all(i is None for i in idx[1:])


def _index_put_mask(x, mask, values, accumulate):
    """``x[mask] = values`` (``+=`` with ``accumulate``): the k-th selected row
    takes row k of ``values`` (a running count of the mask) unless ``values``
    broadcasts to one row."""
    mask = mask.astype(np.bool_)
    rest = _shape(x)[mask.ndim:]
    v = cast(values, x.dtype)
    vs = _shape(v)
    lead = vs[:len(vs) - len(rest)] if len(vs) > len(rest) else ()
    if int(np.prod(lead)) <= 1:       # one row for every selected place
        row = np.reshape(v, vs[len(lead):]) if lead else v
        m = np.reshape(mask, _shape(mask) + (1,) * len(rest))
        if accumulate:
            return x + np.where(m, np.broadcast_to(row, _shape(x)), np.zeros_like(x))
        return np.where(m, np.broadcast_to(row, _shape(x)), x)
    k = int(np.prod(lead))
    flat_m = np.reshape(mask, (-1,))
    xf = np.reshape(x, (-1,) + rest)
    rows = np.reshape(np.broadcast_to(v, lead + rest), (k,) + rest)
    pos = np.clip(np.cumsum(flat_m.astype(np.int32)) - 1, 0, k - 1)
    taken = np.take(rows, pos, axis=0)
    m = np.reshape(flat_m, (-1,) + (1,) * len(rest))
    out = xf + np.where(m, taken, np.zeros_like(taken)) if accumulate else np.where(m, taken, xf)
    return np.reshape(out, _shape(x))


@reg("aten.index_put.default", supports=_index_put_ok)
def index_put(x, indices, values, accumulate=False):
    if indices and indices[0] is not None and np.dtype(indices[0].dtype) in (
            np.dtype(np.bool_), np.dtype(np.uint8)) and all(i is None for i in indices[1:]):
        return _index_put_mask(x, indices[0], values, accumulate)
    y = np.copy(x)
    if accumulate:
        np.add.at(y, _indices(indices), values)
    else:
        y[_indices(indices)] = values
    return y


def _put_along(x, dim, index, source, accumulate):
    """index_add/index_copy: ``source``'s slices written (added) into ``x`` at
    ``index`` along ``dim``, the index checked to lie in [0, size) as the CPU
    checks it (their decompositions into index_put would count a negative one
    from the end)."""
    if x.ndim == 0:       # a 0-d tensor: its one element, index [0]
        y = _put_along(np.reshape(x, (1,)), 0, np.reshape(index, (-1,)),
                       np.reshape(source, (-1,)), accumulate)
        return np.reshape(y, ())
    dim = dim % x.ndim
    idx = _in_range(index, _shape(x)[dim], dim)
    return index_put(x, [None] * dim + [idx], cast(source, x.dtype), accumulate)


_LONG_NAMES = {np.dtype(np.int32): "Int", np.dtype(np.int16): "Short", np.dtype(np.int8): "Char",
               np.dtype(np.uint8): "Byte", np.dtype(np.bool_): "Bool"}


@reg("aten.take.default")
def take(x, index):
    """The elements of flattened ``x`` at ``index`` (a negative one counted
    from the end), int64 indices only, as the CPU takes them."""
    d = np.dtype(index.dtype)
    if d != np.dtype(np.int64):
        raise RuntimeError(f"take(): Expected a long tensor for index, but got "
                           f"{_LONG_NAMES.get(d, d.name)}")
    flat = np.reshape(x, (-1,))
    n = _shape(flat)[0]
    if 0 in _shape(index):
        return ops.zeros(_shape(index), x.dtype)
    return np.take(flat, ops.check_index(index, -n, n, 0))


@reg("aten.index_add.default")
def index_add(x, dim, index, source, alpha=1):
    if alpha != 1:
        source = source * alpha
    return _put_along(x, dim, index, source, True)


@reg("aten.index_copy.default")
def index_copy(x, dim, index, source):
    return _put_along(x, dim, index, source, False)


@reg("aten.scatter.value", "aten.scatter.src")
def scatter(x, dim, index, value):
    if hasattr(value, "shape") and _shape(value) != _shape(index) and \
            len(_shape(value)) == len(_shape(index)):
        # torch reads only the leading index.shape block of a larger src
        value = value[tuple(slice(0, n) for n in _shape(index))]
    src = np.broadcast_to(cast(value, x.dtype), _shape(index)) if not hasattr(value, "shape") \
        or _shape(value) != _shape(index) else value
    dim = dim % x.ndim
    index = _in_range(index, _shape(x)[dim], dim)
    if any(n != m for d, (n, m) in enumerate(zip(_shape(index), _shape(x))) if d != dim):
        # an index smaller than x off dim: it addresses x's leading block there
        y = np.copy(x)
        y[tuple(index if d == dim else
                np.reshape(ops.arange(0, _shape(index)[d], 1, dtype=np.int32),
                           tuple(-1 if k == d else 1 for k in range(x.ndim)))
                for d in range(x.ndim))] = src
        return y
    return ops.scatter_along_axis(x, index, src, dim)


@reg("aten.tril.default")
def tril(x, diagonal=0):
    return np.tril(x, diagonal)


@reg("aten.triu.default")
def triu(x, diagonal=0):
    return np.triu(x, diagonal)


@reg("aten.flip.default")
def flip(x, dims):
    return np.flip(x, axis=tuple(d % x.ndim for d in dims))


@reg("aten.view_copy.default")
def view_copy(x, size):
    return np.reshape(x, tuple(size))


@reg("aten.permute_copy.default")
def permute_copy(x, dims):
    return np.transpose(x, tuple(dims))


@reg("aten.slice_copy.Tensor")
def slice_copy(x, dim=0, start=None, end=None, step=1):
    return x[_index(x.ndim, dim, slice(start, end, step))]


@reg("aten.select_copy.int")
def select_copy(x, dim, index):
    return x[_index(x.ndim, dim, index)]


# ---- more elementwise and normalisation -------------------------------------------

@reg("aten.elu.default")
def elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    return np.where(x > 0, x * scale, np.expm1(x * input_scale) * (alpha * scale))


@reg("aten.round.decimals")
def round_decimals(x, decimals=0):
    return np.round(x, decimals)


@reg("aten.copysign.Tensor", "aten.copysign.Scalar")
def copysign(x, y):
    """|x| with y's sign bit, in the float type torch computes it in: an integer
    x is converted first (float64 beside a float64 y, else float32), so that
    int8 -128 and uint8 200 keep their magnitudes."""
    if not hasattr(x, "dtype") or _fkind(x) != "f":
        wide = hasattr(y, "dtype") and np.dtype(y.dtype) == np.dtype(np.float64)
        x = cast(x, np.dtype(np.float64 if wide else np.float32))
    if hasattr(y, "dtype") and _fkind(y) != "f":
        y = cast(y, np.dtype(x.dtype))
    return np.copysign(x, y)


@reg("aten.hypot.default")
def hypot(x, y):
    return np.hypot(x, y)


@reg("aten.signbit.default")
def signbit(x):
    return np.signbit(x)


@reg("aten.addmv.default")
def addmv(bias, m, v, beta=1, alpha=1):
    return addmm(bias, m, v, beta, alpha)


@reg("aten.addbmm.default")
def addbmm(bias, b1, b2, beta=1, alpha=1):
    n = _shape(b1)[0]
    if _half(b1) and n > 0:
        # PyTorch's CPU kernel: one addmm per batch into the result, each rounded
        out = bias
        for b in range(n):
            out = addmm(out, b1[b], b2[b], beta if b == 0 else 1, alpha)
        return out
    return _scaled_sum(np.sum(np.matmul(b1, b2), axis=0), bias, beta, alpha)


@reg("aten.var_mean.correction")
def var_mean(x, dim=None, correction=None, keepdim=False):
    return var(x, dim, correction, keepdim), np.mean(x, axis=_ax(dim, x.ndim), keepdims=keepdim)


@reg("aten.scatter_add.default")
def scatter_add(x, dim, index, src):
    dim = dim % x.ndim
    index = _in_range(index, _shape(x)[dim], dim)
    y = np.copy(x)
    idx = tuple(index if d == dim else
                np.reshape(ops.arange(0, _shape(index)[d], 1, dtype=np.int32),
                           tuple(-1 if k == d else 1 for k in range(x.ndim)))
                for d in range(x.ndim))
    np.add.at(y, idx, src[tuple(slice(0, n) for n in _shape(index))])
    return y


@reg("aten._transformer_encoder_layer_fwd.default")
def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                  proj_bias, use_gelu, norm_first, eps, norm_weight_1,
                                  norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
                                  ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                  mask_type=None):
    """PyTorch's fused TransformerEncoderLayer (the eval fast path)."""
    hd = embed_dim // num_heads

    def ln(x, w, b):
        return native_layer_norm(x, [embed_dim], w, b, eps)[0]

    def attn(x):
        qkv = np.matmul(x, np.transpose(qkv_weight)) + qkv_bias
        lead = _shape(x)[:-1]
        heads = []
        for part in range(3):
            t = qkv[..., part * embed_dim:(part + 1) * embed_dim]
            t = np.reshape(t, lead + (num_heads, hd))
            heads.append(np.swapaxes(t, -2, -3))
        q, k, v = heads
        scores = np.matmul(q, np.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(hd))
        if mask is not None:
            m = mask
            if mask_type == 1:                      # key padding mask (B, L)
                m = np.reshape(m, (_shape(m)[0], 1, 1, _shape(m)[1]))
            if np.dtype(m.dtype) == np.bool_:
                scores = np.where(m, -np.inf, scores)
            else:
                scores = scores + m
        out = np.matmul(ops.softmax(scores, axis=-1), v)
        out = np.reshape(np.swapaxes(out, -2, -3), lead + (embed_dim,))
        return np.matmul(out, np.transpose(proj_weight)) + proj_bias

    def ffn(x):
        h = np.matmul(x, np.transpose(ffn_weight_1)) + ffn_bias_1
        h = gelu(h) if use_gelu else np.maximum(h, 0)
        return np.matmul(h, np.transpose(ffn_weight_2)) + ffn_bias_2

    x = src
    if norm_first:
        x = x + attn(ln(x, norm_weight_1, norm_bias_1))
        return x + ffn(ln(x, norm_weight_2, norm_bias_2))
    x = ln(x + attn(x), norm_weight_1, norm_bias_1)
    return ln(x + ffn(x), norm_weight_2, norm_bias_2)


def _no_dropout(node: Any) -> bool:
    p = node.args[3] if len(node.args) > 3 else node.kwargs.get("dropout_p", 0.0)
    return not p


@reg("aten._scaled_dot_product_flash_attention_for_cpu.default", supports=_no_dropout)
def sdpa_flash_cpu(q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    """Attention returning (output, logsumexp) like the CPU flash kernel (the
    backward op needs the real logsumexp; PyTorch's decomposition returns the
    probabilities instead, so this op is kept out of the decompositions)."""
    f32 = acc_dtype(q)
    L, S, E = _shape(q)[-2], _shape(k)[-2], _shape(q)[-1]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    hq, hk = _shape(q)[-3] if q.ndim > 2 else 1, _shape(k)[-3] if k.ndim > 2 else 1
    if hq != hk:   # grouped-query attention: each key/value head serves hq // hk heads
        k, v = np.repeat(k, hq // hk, axis=-3), np.repeat(v, hq // hk, axis=-3)
    scores = np.matmul(cast(q, f32), np.swapaxes(cast(k, f32), -1, -2)) * sc
    if is_causal:
        keep = np.tril(ops.ones((L, S), np.dtype(np.bool_)))
        scores = np.where(keep, scores, -np.inf)
    if attn_mask is not None:
        if np.dtype(attn_mask.dtype) == np.bool_:
            scores = np.where(attn_mask, scores, -np.inf)
        else:
            scores = scores + cast(attn_mask, f32)
    m = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - m)
    total = np.sum(e, axis=-1, keepdims=True)
    out = np.matmul(e / total, cast(v, f32))
    lse = np.squeeze(np.log(total) + m, axis=-1)
    return cast(out, q.dtype), lse


def _no_dropout_bw(node: Any) -> bool:
    p = node.args[6] if len(node.args) > 6 else node.kwargs.get("dropout_p", 0.0)
    return not p


@reg("aten._scaled_dot_product_flash_attention_for_cpu_backward.default", supports=_no_dropout_bw)
def sdpa_flash_cpu_backward(grad_out, q, k, v, out, logsumexp, dropout_p, is_causal,
                            attn_mask=None, scale=None):
    """Gradients of sdpa_flash_cpu from its saved output and logsumexp."""
    f32 = acc_dtype(q)
    L, S, E = _shape(q)[-2], _shape(k)[-2], _shape(q)[-1]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    hq, hk = _shape(q)[-3] if q.ndim > 2 else 1, _shape(k)[-3] if k.ndim > 2 else 1
    group = hq // hk
    kf, vf = cast(k, f32), cast(v, f32)
    if group != 1:
        kf, vf = np.repeat(kf, group, axis=-3), np.repeat(vf, group, axis=-3)
    qf, do, of = cast(q, f32), cast(grad_out, f32), cast(out, f32)
    scores = np.matmul(qf, np.swapaxes(kf, -1, -2)) * sc
    if is_causal:
        scores = np.where(np.tril(ops.ones((L, S), np.dtype(np.bool_))), scores, -np.inf)
    if attn_mask is not None:
        if np.dtype(attn_mask.dtype) == np.bool_:
            scores = np.where(attn_mask, scores, -np.inf)
        else:
            scores = scores + cast(attn_mask, f32)
    prob = np.exp(scores - np.expand_dims(logsumexp, -1))
    dv = np.matmul(np.swapaxes(prob, -1, -2), do)
    dp = np.matmul(do, np.swapaxes(vf, -1, -2))
    ds = prob * (dp - np.sum(do * of, axis=-1, keepdims=True))
    dq = np.matmul(ds, kf) * sc
    dk = np.matmul(np.swapaxes(ds, -1, -2), qf) * sc
    if group != 1:   # sum the gradients of the heads that shared a key/value head
        shp = _shape(dk)
        dk = np.sum(np.reshape(dk, shp[:-3] + (hk, group) + shp[-2:]), axis=-3)
        dv = np.sum(np.reshape(dv, shp[:-3] + (hk, group) + shp[-2:]), axis=-3)
    return cast(dq, q.dtype), cast(dk, k.dtype), cast(dv, v.dtype)


# ---- markers, Python operators ------------------------------------------------------

@reg("nkipy.mark_subgraph_identity.default")
def mark_subgraph_identity(x):
    return x


reg("_operator.getitem")(operator.getitem)
reg("_operator.add")(operator.add)
reg("_operator.sub")(operator.sub)
reg("_operator.mul")(operator.mul)
reg("_operator.floordiv")(operator.floordiv)
reg("_operator.truediv")(operator.truediv)
reg("_operator.neg")(operator.neg)


@reg("aten.sym_size.int")
def sym_size(x, dim):
    return x.shape[dim]


@reg("aten.sym_numel.default")
def sym_numel(x):
    return int(np.prod(x.shape))


# ---- names the generated source calls -----------------------------------------------

_ATTR: dict = {}


def attr_of(fn: Any) -> str:
    """The name under which generated code reaches ``fn`` (``aten.<name>``).
    Entries registered by layers above (the backend's collectives) are published
    on first use."""
    if id(fn) not in _ATTR:
        _publish()
    return _ATTR[id(fn)]


def _publish() -> None:
    from .registry import _REGISTRY

    g = globals()
    for qual, fn in sorted(_REGISTRY.items()):
        if id(fn) in _ATTR:
            continue
        name = getattr(fn, "__name__", "")
        if g.get(name) is fn:
            _ATTR[id(fn)] = name
            continue
        base = qual.split(".")[1].lstrip("_") or "op"
        cand, i = base, 1
        while cand in g:
            cand, i = f"{base}_{i}", i + 1
        g[cand] = fn
        _ATTR[id(fn)] = cand


_publish()
