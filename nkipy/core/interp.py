"""The reference executor: evaluates an IR :class:`~nkipy.core.ir.Graph` with NumPy.

``run_graph(graph, *arrays)`` computes every node exactly per the semantics in
``nkipy.core.ir.OPS`` and returns the outputs. It is what constant folding and
the tests use, and what compiled code is checked against. Numerics match what
the compiled code does:

* float16/bfloat16 elementwise ops are computed in float32 and rounded once;
  reductions, cumulative sums, matmul and conv2d on them accumulate in float32
  and round the result.
* Integer arithmetic wraps (two's complement). Integer ``floor_div``/``mod`` by
  zero give 0 (as NumPy does); integer ``div`` (never emitted by the tracer)
  truncates, with x/0 = 0; integer ``pow`` with a negative exponent is
  ``1/b**-e`` truncated (so 0 unless the base is 1 or -1); integer ``reciprocal``
  is x for x in {1, -1} and 0 otherwise.
* ``maximum``/``minimum``/``reduce_max``/``reduce_min`` propagate NaN; ``argmax``
  /``argmin`` return the first NaN if there is one, else the first extremum.
* ``take``/``take_along_axis`` clamp indices into range; ``put_along_axis``
  skips out-of-range indices (after the tracer has wrapped negative ones);
  with mode ``set`` and repeated indices the last update in row-major order wins.
* ``update_slice`` clamps its start indices so the update fits (XLA).
* ``topk`` orders NaN above every number, breaks ties by the lower index, and
  always returns sorted results.
* Collectives use the "duplicated data" model of the original's CPU mode:
  every rank of a group of size n is assumed to hold the same data, so
  ``all_reduce`` add is ``x * n``, ``all_gather`` repeats ``x`` n times, and so
  on. With a group of one rank every collective is the identity.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from nkipy.core.ir import FLOAT8_DTYPES, PREDICATES, REDUCTIONS, Graph, Node, bfloat16
from nkipy.core.philox import philox_word

__all__ = ["run_graph", "eval_node", "np_sigmoid", "np_erf", "np_erfc", "np_lgamma", "np_rsqrt",
           "collective_world_size"]

F32 = np.dtype(np.float32)
HALF = tuple(d for d in (np.dtype(np.float16), bfloat16) if d is not None)


def _torch_float8_cast(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """A cast from or to an 8-bit float as PyTorch's CPU converts (the cast's
    ``float8="torch"`` attribute; ctext.cast_c): E4M3FN saturates at +-448,
    NaN is 0x7F / 0xFF; a NaN widened to float32 keeps its payload (E5M2's
    quieted) and is 0x7FC0 in bfloat16, whatever its sign."""
    if x.dtype in FLOAT8_DTYPES:                             # from float8
        code = x.view(np.uint8).astype(np.uint32)
        y = x.astype(np.float32)
        nan = np.isnan(y)
        mb = 3 if x.dtype.name.startswith("float8_e4m3") else 2
        payload = ((code & 0x80) << 24) | 0x7F800000 | ((code & ((1 << mb) - 1)) << (23 - mb))
        if x.dtype.name == "float8_e5m2":
            payload |= 0x00400000
        y = np.where(nan, np.float32(np.nan) if dst == bfloat16 else payload.view(np.float32), y)
        if dst in FLOAT8_DTYPES:                             # to another float8
            return _torch_float8_cast(y, dst)
        return y.astype(dst)
    y = x.astype(np.float32)
    nan = np.isnan(y)
    if dst.name == "float8_e4m3fn":
        y = np.where(nan, y, np.clip(y, -448.0, 448.0))
    out = y.astype(dst)
    bits = out.view(np.uint8)
    bits[nan] = 0x7F | (np.signbit(y[nan]).astype(np.uint8) << 7)
    return out

def _up(a: np.ndarray) -> np.ndarray:
    return a.astype(F32) if a.dtype in HALF else a


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt == bfloat16


_erf_vec = np.vectorize(math.erf, otypes=[np.float64])
_erfc_vec = np.vectorize(math.erfc, otypes=[np.float64])


def _lgamma1(x: float) -> float:
    if math.isnan(x):
        return x
    if math.isinf(x) or (x <= 0 and x == math.floor(x)):   # poles: +inf as C's lgamma
        return math.inf
    return math.lgamma(x)


_lgamma_vec = np.vectorize(_lgamma1, otypes=[np.float64])


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic sigmoid 1/(1+exp(-x)), computed in float32 for half inputs."""
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-_up(x)))).astype(x.dtype)


def np_erf(x: np.ndarray) -> np.ndarray:
    """The error function (correctly rounded from float64)."""
    x = np.asarray(x)
    if x.size == 0:
        return x.copy()
    return _erf_vec(x.astype(np.float64)).astype(x.dtype)


def np_erfc(x: np.ndarray) -> np.ndarray:
    """The complementary error function 1 - erf(x) (correctly rounded from float64)."""
    x = np.asarray(x)
    if x.size == 0:
        return x.copy()
    return _erfc_vec(x.astype(np.float64)).astype(x.dtype)


def np_lgamma(x: np.ndarray) -> np.ndarray:
    """log|gamma(x)|, +inf at the poles (0, -1, -2, ...), as C's lgamma."""
    x = np.asarray(x)
    if x.size == 0:
        return x.copy()
    return _lgamma_vec(x.astype(np.float64)).astype(x.dtype)


def np_rsqrt(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1.0 / np.sqrt(_up(x))).astype(x.dtype)


def _int_pow(b: np.ndarray, e: np.ndarray) -> np.ndarray:
    b, e = np.broadcast_arrays(b, e)
    dt = b.dtype
    neg = e < 0
    safe_e = np.where(neg, 0, e)
    r = np.ones(b.shape, dt)
    base = b.copy()
    ee = safe_e.astype(np.int64)
    with np.errstate(over="ignore"):
        while np.any(ee > 0):
            odd = (ee & 1).astype(bool)
            r = np.where(odd, r * base, r).astype(dt)
            base = (base * base).astype(dt)
            ee = ee >> 1
    if np.any(neg):
        one = np.ones((), dt)
        if dt.kind == "i":
            negval = np.where(b == 1, one, np.where(b == -1, np.where(e % 2 == 0, one, b), 0))
        else:
            negval = np.where(b == 1, one, 0)
        r = np.where(neg, negval, r).astype(dt)
    return r


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    zero = b == 0
    safe = np.where(zero, 1, b)
    q = np.abs(a.astype(np.int64)) // np.abs(safe.astype(np.int64))
    q = np.where((a < 0) != (safe < 0), -q, q)
    return np.where(zero, 0, q).astype(a.dtype)


def _int_reciprocal(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "u":
        return np.where(x == 1, x, 0).astype(x.dtype)
    return np.where(np.abs(x) == 1, x, 0).astype(x.dtype)


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "expm1": np.expm1, "log": np.log,
    "log1p": np.log1p, "log2": np.log2, "sqrt": np.sqrt, "square": np.square,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "arctan": np.arctan, "tanh": np.tanh,
    "sign": np.sign, "logical_not": np.logical_not, "bitwise_not": np.invert,
    "isnan": np.isnan, "isfinite": np.isfinite, "copy": np.copy,
    "arcsinh": np.arcsinh, "arccosh": np.arccosh, "arctanh": np.arctanh,
    "sinh": np.sinh, "cosh": np.cosh, "signbit": np.signbit,
}
_FLOAT_ONLY_IDENTITY_ON_INT = {"ceil": np.ceil, "floor": np.floor, "rint": np.rint, "trunc": np.trunc}

_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
    "minimum": np.minimum, "mod": np.remainder, "floor_div": np.floor_divide,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
    "fmod": np.fmod, "hypot": np.hypot, "copysign": np.copysign,
    **{f"philox{w}": (lambda a, b, w=w: philox_word(a, b, w)) for w in range(4)},
}


def _elementwise(op: str, args: list[np.ndarray], out_dtype: np.dtype) -> np.ndarray:
    dt = args[0].dtype if op != "where" else args[1].dtype
    if op == "where":
        a, b = _up(args[1]), _up(args[2])
        return np.where(args[0], a, b).astype(out_dtype)
    vals = [_up(a) for a in args]
    with np.errstate(all="ignore"):
        if op in _UNARY:
            if op == "sign" and dt.kind == "b":
                r = vals[0].copy()
            else:
                r = _UNARY[op](vals[0])
        elif op in _FLOAT_ONLY_IDENTITY_ON_INT:
            r = _FLOAT_ONLY_IDENTITY_ON_INT[op](vals[0]) if _is_float(dt) else vals[0].copy()
        elif op == "rsqrt":
            r = 1.0 / np.sqrt(vals[0])
        elif op == "reciprocal":
            r = 1.0 / vals[0] if _is_float(dt) else _int_reciprocal(vals[0])
        elif op == "sigmoid":
            r = 1.0 / (1.0 + np.exp(-vals[0]))
        elif op == "erf":
            r = _erf_vec(vals[0].astype(np.float64)) if vals[0].size else vals[0].copy()
        elif op == "erfc":
            r = _erfc_vec(vals[0].astype(np.float64)) if vals[0].size else vals[0].copy()
        elif op == "lgamma":
            r = _lgamma_vec(vals[0].astype(np.float64)) if vals[0].size else vals[0].copy()
        elif op in _BINARY:
            r = _BINARY[op](vals[0], vals[1])
        elif op == "div":
            r = np.true_divide(vals[0], vals[1]) if _is_float(dt) else _int_div(vals[0], vals[1])
        elif op == "pow":
            r = np.power(vals[0], vals[1]) if _is_float(dt) or dt.kind == "b" else \
                _int_pow(vals[0], vals[1])
        else:  # pragma: no cover - verify() rejects unknown ops
            raise NotImplementedError(op)
    return np.asarray(r).astype(out_dtype, copy=False)


def _slices(starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> tuple:
    return tuple(slice(a, b if b >= 0 else None, c) for a, b, c in zip(starts, stops, steps))


def _reduce(op: str, x: np.ndarray, axes: tuple, keepdims: bool, out_dtype: np.dtype) -> np.ndarray:
    xx = _up(x)
    with np.errstate(all="ignore"):
        if op == "reduce_sum":
            if x.dtype.kind == "b":
                r = np.any(xx, axis=axes, keepdims=keepdims)
            else:
                r = np.sum(xx, axis=axes, keepdims=keepdims, dtype=xx.dtype)
        elif op == "reduce_prod":
            if x.dtype.kind == "b":
                r = np.all(xx, axis=axes, keepdims=keepdims)
            else:
                r = np.prod(xx, axis=axes, keepdims=keepdims, dtype=xx.dtype)
        elif op == "reduce_max":
            r = np.max(xx, axis=axes, keepdims=keepdims)
        elif op == "reduce_min":
            r = np.min(xx, axis=axes, keepdims=keepdims)
        elif op == "reduce_any":
            r = np.any(xx, axis=axes, keepdims=keepdims)
        else:
            r = np.all(xx, axis=axes, keepdims=keepdims)
    return np.asarray(r).astype(out_dtype)


def _topk(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    xm = np.moveaxis(x, axis, -1)
    key = xm.astype(np.float64)
    nan = np.isnan(key)
    key = np.where(nan, 0.0, key)
    n = xm.shape[-1]
    pos = np.broadcast_to(np.arange(n), xm.shape)
    if largest:
        order = np.lexsort((pos, -key, ~nan), axis=-1)
    else:
        order = np.lexsort((pos, key, nan), axis=-1)
    idx = order[..., :k]
    vals = np.take_along_axis(xm, idx, axis=-1)
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis).astype(np.int32)


def _conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: Sequence[int],
            padding: Sequence[Sequence[int]], dilation: Sequence[int], groups: int,
            out_shape: Sequence[int], out_dtype: np.dtype) -> np.ndarray:
    acc = np.float32 if (x.dtype in HALF or x.dtype == F32) else (
        np.float32 if _is_float(x.dtype) else x.dtype)
    xx = x.astype(acc)
    ww = w.astype(acc)
    (pt, pb), (pl, pr) = padding
    xp = np.pad(xx, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c_in = x.shape[:2]
    c_out, c_per_g, kh, kw = w.shape
    oh, ow = out_shape[2], out_shape[3]
    sh, sw = stride
    dh, dw = dilation
    o_per_g = c_out // groups
    out = np.zeros((n, c_out, oh, ow), dtype=acc)
    if out.size == 0:
        return out.astype(out_dtype)
    with np.errstate(over="ignore"):
        for g in range(groups):
            xg = xp[:, g * c_per_g:(g + 1) * c_per_g]
            wg = ww[g * o_per_g:(g + 1) * o_per_g]
            for i in range(kh):
                for j in range(kw):
                    patch = xg[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                               j * dw: j * dw + sw * (ow - 1) + 1: sw]
                    out[:, g * o_per_g:(g + 1) * o_per_g] += np.einsum(
                        "nchw,oc->nohw", patch, wg[:, :, i, j]).astype(acc)
        if bias is not None:
            out = out + bias.astype(acc).reshape(1, c_out, 1, 1)
    return out.astype(out_dtype)


def collective_world_size(replica_groups: Any) -> int:
    """Ranks per group of a collective (1 when there are no groups)."""
    if not replica_groups:
        return 1
    return len(replica_groups[0])


def _reduce_dup(x: np.ndarray, reduce_op: str, n: int) -> np.ndarray:
    xx = _up(x)
    with np.errstate(all="ignore"):
        if reduce_op == "add":
            r = xx * n if x.dtype.kind != "b" else xx
        elif reduce_op == "multiply":
            r = xx ** n if _is_float(x.dtype) else _int_pow(xx, np.asarray(n, xx.dtype))
        elif reduce_op in ("maximum", "minimum"):
            r = xx
        else:
            raise ValueError(f"unknown reduce_op {reduce_op!r}")
    return np.asarray(r).astype(x.dtype)


def eval_node(n: Node, args: list[np.ndarray]) -> list[np.ndarray]:
    """Evaluates one node on NumPy operands; returns its outputs."""
    op, a = n.op, n.attrs
    out = n.outputs[0]
    if op in ("where",) or op in _UNARY or op in _BINARY or op in _FLOAT_ONLY_IDENTITY_ON_INT \
            or op in ("rsqrt", "reciprocal", "sigmoid", "erf", "erfc", "lgamma", "div", "pow"):
        r = _elementwise(op, args, out.dtype)
        if op in PREDICATES:
            r = r.astype(bool)
        return [np.broadcast_to(r, out.shape)]
    if op == "check_index":
        x = np.asarray(args[0])
        bad = (x < a["low"]) | (x >= a["size"])
        if np.any(bad):
            raise IndexError(a["message"].replace("{index}", str(int(x[bad].reshape(-1)[0])))
                             .removeprefix("IndexError: "))
        if a["low"] < 0:
            x = np.where(x < 0, x + a["size"], x)
        return [x.astype(out.dtype, copy=False)]
    if op == "fail_if":
        if np.any(args[0]):
            raise RuntimeError(a["message"])
        return [np.asarray(args[1]).astype(out.dtype, copy=False)]
    if op == "cast":
        with np.errstate(all="ignore"):
            if a.get("float8") == "torch":
                return [_torch_float8_cast(np.asarray(args[0]), out.dtype)]
            return [args[0].astype(out.dtype)]
    if op == "constant":
        return [np.asarray(a["value"]).astype(out.dtype, copy=False)]
    if op == "iota":
        shape, dim = a["shape"], a["dim"]
        r = np.arange(shape[dim]).reshape([-1 if d == dim else 1 for d in range(len(shape))])
        return [np.broadcast_to(r, shape).astype(out.dtype)]
    if op == "broadcast_to":
        return [np.broadcast_to(args[0], a["shape"])]
    if op == "reshape":
        return [np.reshape(args[0], a["shape"])]
    if op == "transpose":
        return [np.transpose(args[0], a["perm"])]
    if op == "slice":
        return [args[0][_slices(a["starts"], a["stops"], a["steps"])]]
    if op == "concat":
        return [np.concatenate(args, axis=a["axis"])]
    if op == "pad":
        return [np.pad(args[0], a["pad_width"], constant_values=a["value"]).astype(out.dtype)]
    if op in REDUCTIONS:
        return [_reduce(op, args[0], tuple(a["axes"]), a["keepdims"], out.dtype)]
    if op in ("argmax", "argmin"):
        fn = np.argmax if op == "argmax" else np.argmin
        x = _up(args[0])
        return [np.asarray(fn(x, axis=a["axis"], keepdims=a["keepdims"])).astype(out.dtype)]
    if op in ("cumsum", "cumprod"):
        fn = np.cumsum if op == "cumsum" else np.cumprod
        x = _up(args[0])
        with np.errstate(all="ignore"):
            return [fn(x, axis=a["axis"], dtype=x.dtype).astype(out.dtype)]
    if op == "matmul":
        x, y = args
        with np.errstate(all="ignore"):
            if x.dtype in HALF:
                r = np.matmul(x.astype(F32), y.astype(F32))
            else:
                r = np.matmul(x, y)
        return [np.asarray(r).astype(out.dtype)]
    if op == "take":
        x, idx = args
        return [np.take(x, idx.astype(np.int64), axis=a["axis"], mode="clip")]
    if op == "take_along_axis":
        x, idx = args
        ax = a["axis"]
        idx = np.clip(idx.astype(np.int64), 0, max(x.shape[ax] - 1, 0))
        return [np.take_along_axis(x, idx, axis=ax)]
    if op == "put_along_axis":
        x, idx, vals = args
        ax = a["axis"]
        r = np.array(x, copy=True)
        idx = idx.astype(np.int64)
        vals = np.broadcast_to(vals, idx.shape).astype(x.dtype)
        grids = list(np.indices(idx.shape, sparse=True))
        ok = (idx >= 0) & (idx < x.shape[ax])
        grids[ax] = idx
        full = [np.broadcast_to(g, idx.shape)[ok] for g in grids]
        if a["mode"] == "add":
            if x.dtype in HALF:
                acc = r.astype(F32)
                np.add.at(acc, tuple(full), vals[ok].astype(F32))
                r = acc.astype(x.dtype)
            else:
                np.add.at(r, tuple(full), vals[ok])
        else:
            r[tuple(full)] = vals[ok]
        return [r]
    if op == "set_slice":
        x, upd = args
        r = np.array(x, copy=True)
        sl = _slices(a["starts"], a["stops"], a["steps"])
        r[sl] = np.broadcast_to(upd, r[sl].shape)
        return [r]
    if op == "update_slice":
        x, upd = args[0], args[1]
        r = np.array(x, copy=True)
        sl = []
        for d, s in enumerate(args[2:]):
            start = int(np.clip(int(s), 0, x.shape[d] - upd.shape[d]))
            sl.append(slice(start, start + upd.shape[d]))
        r[tuple(sl)] = upd
        return [r]
    if op == "topk":
        v, i = _topk(args[0], a["k"], a["axis"], a["largest"])
        return [v, i]
    if op == "conv2d":
        bias = args[2] if len(args) > 2 else None
        return [_conv2d(args[0], args[1], bias, a["stride"], a["padding"], a["dilation"],
                        a["groups"], out.shape, out.dtype)]
    if op == "all_reduce":
        return [_reduce_dup(args[0], a["reduce_op"], collective_world_size(a["replica_groups"]))]
    if op == "all_gather":
        nr = collective_world_size(a["replica_groups"])
        return [np.concatenate([args[0]] * nr, axis=a["axis"])]
    if op == "reduce_scatter":
        nr = collective_world_size(a["replica_groups"])
        r = _reduce_dup(args[0], a["reduce_op"], nr)
        chunk = args[0].shape[a["axis"]] // nr
        return [np.take(r, np.arange(chunk), axis=a["axis"])]
    if op == "all_to_all":
        nr = collective_world_size(a["replica_groups"])
        parts = np.split(args[0], nr, axis=a["split_axis"])
        return [np.concatenate(parts, axis=a["concat_axis"])]
    raise NotImplementedError(f"run_graph: no evaluator for op {op!r}")


def run_graph(graph: Graph, *arrays: Any, update_aliases: bool = False) -> list[np.ndarray]:
    """Evaluates ``graph`` on ``arrays`` (one per graph input, in order).

    Inputs are converted to the graph's input dtypes when they differ only by
    width (a float64 array for a float32 input); a shape mismatch is an error.
    Returns fresh, writable arrays, one per output. With ``update_aliases`` the
    outputs that alias inputs are also copied into those input arrays, as the
    kernel run as plain NumPy would have mutated them.
    """
    if len(arrays) != len(graph.inputs):
        raise TypeError(f"kernel {graph.name} takes {len(graph.inputs)} inputs "
                        f"({', '.join(str(v.name) for v in graph.inputs)}), got {len(arrays)}")
    env: dict[int, np.ndarray] = {}
    for v, arr in zip(graph.inputs, arrays):
        x = np.asarray(arr)
        if x.shape != v.shape:
            raise ValueError(f"input {v.name!r}: expected shape {v.shape}, got {x.shape}")
        if x.dtype != v.dtype:
            if x.dtype.kind != v.dtype.kind and not (x.dtype.kind == "f" and v.dtype == bfloat16):
                raise TypeError(f"input {v.name!r}: expected dtype {v.dtype}, got {x.dtype}")
            x = x.astype(v.dtype)
        env[v.id] = x
    for n in graph.nodes:
        results = eval_node(n, [env[v.id] for v in n.inputs])
        for v, r in zip(n.outputs, results):
            r = np.asarray(r)
            if r.shape != v.shape or r.dtype != v.dtype:
                raise AssertionError(f"internal: {n.op} produced {r.dtype}{list(r.shape)}, "
                                     f"expected {v.dtype}{list(v.shape)}")
            env[v.id] = r
    outs = [np.array(env[v.id], copy=True) for v in graph.outputs]
    if update_aliases:
        for oi, ii in graph.aliases.items():
            target = arrays[ii]
            if isinstance(target, np.ndarray):
                np.copyto(target, outs[oi], casting="unsafe")
    return outs
