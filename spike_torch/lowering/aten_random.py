"""Random ops lowered onto the device: a counter-based generator, Philox4x32-10.

Every value depends only on (seed, element index): the generator is the
nkipy op ``philox(seed, index)`` (IR ops ``philox0`` .. ``philox3``, one
32-bit word each, computed in registers by the kernel's C; NumPy reference in
nkipy.core.philox, bit-identical), so the generated NumPy source of a graph is
bit-for-bit the CPU reference of its kernel's random words.

The seed is an int64 tensor of shape () drawn per call, outside the kernel,
from the PyTorch generator the eager op would use (:func:`draw_seed`); the
backend (``torch_to_nkipy.random``) rewrites each random ATen node into a
``nkipy_rng.<op>`` node taking that seed first, followed by the ATen op's own
arguments. Entries here are those ``nkipy_rng.<op>`` ops.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Sequence

import numpy as np

from nkipy.core import ops

from nkipy.core.philox import philox4x32  # noqa: F401  (the reference, for callers)

from .registry import AtenOpRegistry

#: ATen op -> its ``nkipy_rng`` op (the FX rewrite's table).
SEEDED: Dict[str, str] = {}


def random_words(seed: Any, shape: Sequence[int]) -> tuple:
    """Four int64 tensors of 32-bit Philox words of ``shape``: element i's
    words are Philox of counter (i mod 2^32, i >> 32, 0, 0) under the key
    (seed's low and high 32 bits)."""
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape)) if shape else 1
    idx = ops.arange(0, n, 1, dtype=np.dtype(np.int64)).reshape(shape)
    seed = seed.astype(np.int64) if hasattr(seed, "astype") else np.int64(seed)
    return ops.philox(seed, idx)


def _unit(w0: Any, w1: Any, dtype: np.dtype) -> Any:
    """Uniform in [0, 1) of ``dtype`` from words: as many random bits as the
    dtype's significand holds (24 float32, 11 float16, 8 bfloat16, 53 float64),
    so no value rounds up to 1."""
    name = np.dtype(dtype).name
    if name == "float64":
        return ((w0 // 32) * 67108864 + w1 // 64).astype(np.float64) * (2.0 ** -53)
    bits = {"float16": 11, "bfloat16": 8}.get(name, 24)
    u = (w0 // 2 ** (32 - bits)).astype(np.float32) * np.float32(2.0 ** -bits)
    return u.astype(dtype)


def uniform_unit(seed: Any, shape: Sequence[int], dtype: Any = None) -> Any:
    """Uniform [0, 1) values of ``shape`` (float32 unless ``dtype``)."""
    w = random_words(seed, shape)
    return _unit(w[0], w[1], np.dtype(dtype or np.float32))


def _normal64(seed: Any, shape: Sequence[int]) -> Any:
    """Standard normal float64 values (Box-Muller on two 53-bit uniforms)."""
    w0, w1, w2, w3 = random_words(seed, shape)
    u1 = 1.0 - _unit(w0, w1, np.dtype(np.float64))        # (0, 1]
    u2 = _unit(w2, w3, np.dtype(np.float64))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos((2.0 * math.pi) * u2)


def _u64(seed: Any, shape: Sequence[int]) -> Any:
    w = random_words(seed, shape)
    return _unit(w[0], w[1], np.dtype(np.float64))


def _float_dtype(dtype: Any, like: Any = None) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    return np.dtype(like.dtype) if like is not None else np.dtype(np.float32)


def _reg(*aten: str) -> Callable[[Callable], Callable]:
    """Registers ``fn`` as ``nkipy_rng.<fn name>`` for the ATen ops ``aten``."""
    def deco(fn: Callable) -> Callable:
        AtenOpRegistry.register(f"nkipy_rng.{fn.__name__}")(fn)
        for a in aten:
            SEEDED[a] = fn.__name__
        return fn
    return deco


# ---- the entries: (seed, *ATen arguments) ------------------------------------------

@_reg("aten.rand.default")
def rand(seed, size, dtype=None, layout=None, device=None, pin_memory=None):
    return uniform_unit(seed, size, _float_dtype(dtype))


@_reg("aten.rand_like.default")
def rand_like(seed, x, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
    return uniform_unit(seed, np.shape(x), _float_dtype(dtype, x))


@_reg("aten.randn.default")
def randn(seed, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _normal64(seed, size).astype(_float_dtype(dtype))


@_reg("aten.randn_like.default")
def randn_like(seed, x, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return _normal64(seed, np.shape(x)).astype(_float_dtype(dtype, x))


@_reg("aten.uniform.default")
def uniform(seed, x, low=0.0, high=1.0, generator=None):
    u = _u64(seed, np.shape(x))
    r = (low + (high - low) * u).astype(x.dtype)
    # rounding to a narrower dtype may reach ``high``: eager never returns it
    return np.where(r >= np.asarray(high).astype(x.dtype), np.asarray(low).astype(x.dtype), r)


@_reg("aten.normal_functional.default")
def normal_functional(seed, x, mean=0.0, std=1.0, generator=None):
    return (mean + std * _normal64(seed, np.shape(x))).astype(x.dtype)


@_reg("aten.normal.Tensor_float")
def normal_tensor_float(seed, mean, std=1.0, generator=None):
    return (mean.astype(np.float64) + std * _normal64(seed, np.shape(mean))).astype(mean.dtype)


@_reg("aten.normal.float_Tensor")
def normal_float_tensor(seed, mean, std, generator=None):
    return (mean + std.astype(np.float64) * _normal64(seed, np.shape(std))).astype(std.dtype)


@_reg("aten.normal.Tensor_Tensor")
def normal_tensor_tensor(seed, mean, std, generator=None):
    shape = np.broadcast_shapes(np.shape(mean), np.shape(std))
    z = _normal64(seed, shape)
    out = np.result_type(mean.dtype, std.dtype)
    return (mean.astype(np.float64) + std.astype(np.float64) * z).astype(out)


@_reg("aten.normal.float_float")
def normal_float_float(seed, mean, std, size, generator=None, dtype=None, layout=None,
                       device=None, pin_memory=None):
    return (mean + std * _normal64(seed, size)).astype(_float_dtype(dtype))


@_reg("aten.exponential.default")
def exponential(seed, x, lambd=1.0, generator=None):
    # -log(1 - u) / lambda, u in [0, 1): finite and >= 0
    return (-np.log1p(-_u64(seed, np.shape(x))) / lambd).astype(x.dtype)


@_reg("aten.cauchy.default")
def cauchy(seed, x, median=0.0, sigma=1.0, generator=None):
    u = _u64(seed, np.shape(x))
    return (median + sigma * np.tan(math.pi * (u - 0.5))).astype(x.dtype)


@_reg("aten.log_normal.default")
def log_normal(seed, x, mean=1.0, std=2.0, generator=None):
    return np.exp(mean + std * _normal64(seed, np.shape(x))).astype(x.dtype)


@_reg("aten.geometric.default")
def geometric(seed, x, p, generator=None):
    # trials to the first success: ceil(log(1 - u) / log(1 - p)), at least 1
    u = _u64(seed, np.shape(x))
    k = np.ceil(np.log1p(-u) / math.log1p(-p))
    return np.maximum(k, 1.0).astype(x.dtype)


@_reg("aten.bernoulli.p")
def bernoulli_p(seed, x, p=0.5, generator=None):
    return (_u64(seed, np.shape(x)) < p).astype(x.dtype)


@_reg("aten.native_dropout.default")
def native_dropout(seed, x, p, train):
    if train is False or p == 0.0:
        return x, ops.full(np.shape(x), True, np.dtype(np.bool_))
    keep = _u64(seed, np.shape(x)) >= p        # kept with probability 1 - p
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    out = np.where(keep, x.astype(np.float32) * np.float32(scale), np.float32(0.0))
    return out.astype(x.dtype), keep


def _randint_values(seed, low, high, shape, dtype):
    # low + floor(u * (high - low)) with a 53-bit u: exact for ranges below 2^53
    span = int(high) - int(low)
    k = np.floor(_u64(seed, shape) * float(span)).astype(np.int64)
    return (np.minimum(k, span - 1) + int(low)).astype(np.dtype(dtype or np.int64))


@_reg("aten.randint.default")
def randint(seed, high, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _randint_values(seed, 0, high, size, dtype)


@_reg("aten.randint.low")
def randint_low(seed, low, high, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _randint_values(seed, low, high, size, dtype)


@_reg("aten.randint_like.default")
def randint_like(seed, x, high, dtype=None, layout=None, device=None, pin_memory=None,
                 memory_format=None):
    return _randint_values(seed, 0, high, np.shape(x), dtype or x.dtype)


@_reg("aten.randint_like.low_dtype")
def randint_like_low(seed, x, low, high, dtype=None, layout=None, device=None,
                     pin_memory=None, memory_format=None):
    return _randint_values(seed, low, high, np.shape(x), dtype or x.dtype)


@_reg("aten.rrelu_with_noise_functional.default")
def rrelu_with_noise_functional(seed, x, noise, lower=0.125, upper=1.0 / 3.0, training=False,
                                generator=None):
    """Randomized leaky ReLU: a slope drawn from U(lower, upper) for each element
    at or below zero (1 above), returned as the noise, when training; the mean
    slope otherwise (noise unchanged)."""
    if not training:
        slope = (lower + upper) / 2.0
        return np.where(x > 0, x, x * slope).astype(x.dtype), noise * 1
    r = (lower + (upper - lower) * _u64(seed, np.shape(x))).astype(x.dtype)
    neg = x <= 0
    ones = ops.full(np.shape(x), 1.0, x.dtype)
    return np.where(neg, x * r, x).astype(x.dtype), np.where(neg, r, ones).astype(noise.dtype)
