"""The tracer tensor: :class:`NKIPyTensorRef`.

While a kernel is traced, every array it computes with is an ``NKIPyTensorRef``
wrapping an IR :class:`~nkipy.core.ir.Value`. It behaves like a NumPy array:
operators (including reflected and in-place ones), comparisons, indexing and
slicing, ``astype``/``reshape``/``transpose``/``@``, array methods, and NumPy
functions and ufuncs (``__array_function__``/``__array_ufunc__``) all record IR
nodes. What cannot be known while tracing (``bool(x)``, ``float(x)``,
``np.asarray(x)``, ``if x > 0:``) raises :class:`NKIPyTracingError`.

Mutation follows NumPy: ``x[i] = v``, ``x += 1``, ``np.copyto(x, v)`` change
``x``; basic slices, transposes, reshapes of contiguous tensors, ``squeeze`` and
``expand_dims`` are *views* whose writes go through to their base (so
``x[0][1:] = 0`` and ``for row in x: row += 1`` mutate a kernel input ``x``,
which then becomes an aliased output).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from nkipy.core.ir import Value
from nkipy.core.trace import NKIPyTracingError, TraceContext, current_context

__all__ = ["NKIPyTensorRef", "NKIPyTracingError"]


class _ViewLink:
    """How a view derives from its base: forward(base) -> view, backward(base, view) -> base."""

    __slots__ = ("base", "forward", "backward", "contiguous", "key")

    def __init__(self, base: "NKIPyTensorRef", forward: Callable[[Value], Value],
                 backward: Callable[[Value, Value], Value], contiguous: bool,
                 key: Any = None) -> None:
        self.base = base
        self.forward = forward
        self.backward = backward
        self.contiguous = contiguous
        self.key = key  # the basic index that made this view (None for other views)


class NKIPyTensorRef:
    """A traced array. Create them by tracing (``nkipy.core.trace.trace``), not directly."""

    __array_priority__ = 1000
    __slots__ = ("_value", "_ctx", "_link", "_stamp", "_version", "_mutated", "_input_index",
                 "_readonly", "_scalar", "__weakref__")

    def __init__(self, value: Value, ctx: TraceContext | None = None) -> None:
        self._value = value
        self._ctx = ctx if ctx is not None else current_context()
        self._link: _ViewLink | None = None
        self._stamp = 0          # root version this view was computed at
        self._version = 0        # bumped on every write (roots only)
        self._mutated = False
        self._input_index: int | None = None
        self._readonly = False
        self._scalar = False     # a NumPy scalar (x[i, j] with integers): item assignment fails

    @classmethod
    def _from_input(cls, value: Value, ctx: TraceContext, index: int) -> "NKIPyTensorRef":
        t = cls(value, ctx)
        t._input_index = index
        return t

    @classmethod
    def _view(cls, base: "NKIPyTensorRef", value: Value, forward: Callable[[Value], Value],
              backward: Callable[[Value, Value], Value], contiguous: bool = False,
              key: Any = None) -> "NKIPyTensorRef":
        t = cls(value, base._ctx)
        t._link = _ViewLink(base, forward, backward, contiguous, key)
        t._stamp = base._root()._version
        t._readonly = base._readonly
        return t

    # -- identity and state ------------------------------------------------
    def _root(self) -> "NKIPyTensorRef":
        t = self
        while t._link is not None:
            t = t._link.base
        return t

    def _check_context(self, ctx: TraceContext | None = None) -> None:
        cur = current_context()
        if cur is None or self._ctx is not cur or (ctx is not None and ctx is not cur):
            raise NKIPyTracingError(
                "this traced tensor belongs to a trace that has finished (or to another "
                "kernel's trace); tracer tensors cannot be kept and reused after tracing")

    @property
    def value(self) -> Value:
        """The IR value holding this tensor's current contents."""
        link = self._link
        if link is not None:
            root_version = self._root()._version
            if self._stamp != root_version:
                self._value = link.forward(link.base.value)
                self._stamp = root_version
        return self._value

    def _write(self, new: Value) -> None:
        """Replaces this tensor's contents (same shape); views write through to their base."""
        self._check_context()
        if self._readonly:
            raise ValueError("assignment destination is read-only")
        if new.shape != self._value.shape:  # pragma: no cover - internal misuse
            raise ValueError(f"internal: write of shape {new.shape} into {self._value.shape}")
        link = self._link
        if link is not None:
            link.base._write(link.backward(link.base.value, new))
            self._value = new
            self._stamp = self._root()._version
        else:
            self._value = new
            self._version += 1
            self._mutated = True

    @property
    def is_contiguous(self) -> bool:
        return self._link is None or self._link.contiguous

    # -- array attributes ------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape

    @property
    def dtype(self) -> np.dtype:
        return self._value.dtype

    @property
    def ndim(self) -> int:
        return len(self._value.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self._value.shape, dtype=np.int64))

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        """Bytes between consecutive elements along each dimension, as NumPy's
        ``ndarray.strides`` of a C-contiguous array of this shape and dtype
        (what the original reports). A view that is not contiguous in its
        base (``x.T``, ``x[:, ::2]``) has other strides in NumPy, which a
        traced kernel cannot know: refused rather than reported wrong."""
        if not self.is_contiguous:
            from nkipy.core.ops._core import unsupported

            raise unsupported("strides of a non-contiguous view",
                              "copy it first (x.copy())")
        out, step = [], self.itemsize
        for n in reversed(self.shape):
            out.append(step)
            step *= max(int(n), 1)
        return tuple(reversed(out))

    @property
    def T(self) -> "NKIPyTensorRef":
        return self.transpose()

    @property
    def mT(self) -> "NKIPyTensorRef":
        if self.ndim < 2:
            raise ValueError("matrix transpose with ndim < 2 is undefined")
        return self.swapaxes(-1, -2)

    @property
    def name(self) -> str | None:
        return self._value.name

    def __repr__(self) -> str:
        return f"NKIPyTensorRef(shape={self.shape}, dtype={self.dtype}, value={self._value!r})"

    __hash__ = object.__hash__

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self) -> Iterator["NKIPyTensorRef"]:
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        for i in range(self.shape[0]):
            yield self[i]

    # -- things that need the data -------------------------------------------
    def _no_data(self, what: str) -> NKIPyTracingError:
        return NKIPyTracingError(
            f"{what} needs the value of a traced tensor {self.dtype}{list(self.shape)}, which is "
            "not known while the kernel is traced: Python control flow that depends on data "
            "(`if x > 0:`, `while`, `float(x)`, using a tensor as a Python index) cannot be "
            "traced; use np.where(...) / masks, or pass the value as a static (non-array) "
            "argument")

    def __bool__(self) -> bool:
        raise self._no_data("bool() (an `if`, `and`/`or`, or `assert` on a tensor)")

    def __float__(self) -> float:
        raise self._no_data("float()")

    def __int__(self) -> int:
        raise self._no_data("int()")

    def __complex__(self) -> complex:
        raise self._no_data("complex()")

    def __index__(self) -> int:
        raise self._no_data("using a tensor as a Python integer (__index__)")

    def item(self, *args: Any) -> Any:
        raise self._no_data(".item()")

    def tolist(self) -> Any:
        raise self._no_data(".tolist()")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise NKIPyTracingError(
            "a traced tensor cannot be converted to a NumPy array (np.asarray / np.array / "
            "an unsupported NumPy function / writing it into a NumPy array): its data is only "
            "known when the compiled kernel runs. Create kernel arrays with nkipy ops "
            "(np.zeros_like(x), nkipy.core.ops.zeros(shape, dtype), ...) so they are traced too; "
            "see docs/nkipy-ops.md for the supported NumPy functions")

    def __reduce__(self) -> Any:
        raise NKIPyTracingError("traced tensors cannot be pickled or copied with copy/deepcopy")

    def __copy__(self) -> "NKIPyTensorRef":
        return self.copy()

    def __deepcopy__(self, memo: Any) -> "NKIPyTensorRef":
        return self.copy()

    # -- NumPy protocols -------------------------------------------------------
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from nkipy.core.ops import _dispatch

        return _dispatch.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from nkipy.core.ops import _dispatch

        return _dispatch.array_function(func, args, kwargs)

    # -- indexing ---------------------------------------------------------------
    def __getitem__(self, index: Any) -> "NKIPyTensorRef":
        from nkipy.core.ops import indexing

        return indexing.getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        from nkipy.core.ops import indexing

        indexing.setitem(self, index, value)

    # -- conversions and shape methods ------------------------------------------
    def astype(self, dtype: Any, order: str = "K", casting: str = "unsafe", subok: bool = True,
               copy: bool = True) -> "NKIPyTensorRef":
        from nkipy.core.ops import transform

        return transform.astype(self, dtype)

    def reshape(self, *shape: Any, order: str = "C", copy: Any = None) -> "NKIPyTensorRef":
        from nkipy.core.ops import transform

        if not shape:
            raise TypeError("reshape() takes at least 1 argument (0 given)")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return transform.reshape(self, shape, order)

    def transpose(self, *axes: Any) -> "NKIPyTensorRef":
        from nkipy.core.ops import transform

        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return transform.transpose(self, axes if axes else None)

    def swapaxes(self, axis1: int, axis2: int) -> "NKIPyTensorRef":
        from nkipy.core.ops import transform

        return transform.swapaxes(self, axis1, axis2)

    def squeeze(self, axis: Any = None) -> "NKIPyTensorRef":
        from nkipy.core.ops import transform

        return transform.squeeze(self, axis)

    def ravel(self, order: str = "C") -> "NKIPyTensorRef":
        return self.reshape(-1)

    def flatten(self, order: str = "C") -> "NKIPyTensorRef":
        return self.reshape(-1).copy()

    def copy(self, order: str = "C") -> "NKIPyTensorRef":
        from nkipy.core.ops import transform

        return transform.copy(self)

    def view(self, *args: Any, **kwargs: Any) -> Any:
        from nkipy.core.ops._core import unsupported

        raise unsupported("ndarray.view() (reinterpreting bytes)", "use astype() to convert values")

    def fill(self, value: Any) -> None:
        self[...] = value

    def repeat(self, repeats: Any, axis: Any = None) -> "NKIPyTensorRef":
        from nkipy.core.ops import transform

        return transform.repeat(self, repeats, axis)

    def take(self, indices: Any, axis: Any = None) -> "NKIPyTensorRef":
        from nkipy.core.ops import indexing

        return indexing.take(self, indices, axis)

    def clip(self, min: Any = None, max: Any = None, **kw: Any) -> "NKIPyTensorRef":
        from nkipy.core.ops import unary

        return unary.clip(self, min, max, **kw)

    def round(self, decimals: int = 0) -> "NKIPyTensorRef":
        from nkipy.core.ops import unary

        return unary.round_(self, decimals)

    def dot(self, other: Any) -> "NKIPyTensorRef":
        from nkipy.core.ops import linalg

        return linalg.dot(self, other)

    def trace(self, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None) -> Any:
        from nkipy.core.ops import linalg

        return linalg.trace(self, offset, axis1, axis2, dtype)

    def diagonal(self, *a: Any, **k: Any) -> Any:
        from nkipy.core.ops._core import unsupported

        raise unsupported("ndarray.diagonal()", "use np.diag on a 2-D tensor")

    def nonzero(self) -> Any:
        raise NKIPyTracingError("nonzero() has a data-dependent result shape and cannot be "
                                "traced; use masks with np.where")

    def sort(self, *a: Any, **k: Any) -> Any:
        from nkipy.core.ops._core import unsupported

        raise unsupported("ndarray.sort/argsort",
                          "use nkipy.core.ops.topk(x, k=x.shape[axis], axis=axis)")

    argsort = sort

    # reductions
    def _reduce(self, name: str, *args: Any, **kwargs: Any) -> Any:
        from nkipy.core.ops import reduce

        return getattr(reduce, name)(self, *args, **kwargs)

    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
            **kw: Any) -> Any:
        return self._reduce("sum", axis, dtype=dtype, out=out, keepdims=keepdims, **kw)

    def prod(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
             **kw: Any) -> Any:
        return self._reduce("prod", axis, dtype=dtype, out=out, keepdims=keepdims, **kw)

    def max(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return self._reduce("max", axis, out=out, keepdims=keepdims, **kw)

    def min(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return self._reduce("min", axis, out=out, keepdims=keepdims, **kw)

    def mean(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
             **kw: Any) -> Any:
        return self._reduce("mean", axis, dtype=dtype, out=out, keepdims=keepdims, **kw)

    def var(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
            keepdims: bool = False, **kw: Any) -> Any:
        return self._reduce("var", axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kw)

    def std(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
            keepdims: bool = False, **kw: Any) -> Any:
        return self._reduce("std", axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kw)

    def any(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return self._reduce("any", axis, out=out, keepdims=keepdims, **kw)

    def all(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return self._reduce("all", axis, out=out, keepdims=keepdims, **kw)

    def argmax(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        return self._reduce("argmax", axis, out=out, keepdims=keepdims)

    def argmin(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        return self._reduce("argmin", axis, out=out, keepdims=keepdims)

    def cumsum(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        return self._reduce("cumsum", axis, dtype=dtype, out=out)

    def cumprod(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        return self._reduce("cumprod", axis, dtype=dtype, out=out)

    # -- operators ---------------------------------------------------------------
    def _bin(self, name: str, other: Any, reflected: bool = False) -> Any:
        from nkipy.core.ops import _dispatch

        return _dispatch.operator(name, self, other, reflected)

    def _ibin(self, name: str, other: Any) -> "NKIPyTensorRef":
        from nkipy.core.ops import _dispatch

        return _dispatch.inplace_operator(name, self, other)

    def __add__(self, o: Any) -> Any: return self._bin("add", o)
    def __radd__(self, o: Any) -> Any: return self._bin("add", o, True)
    def __iadd__(self, o: Any) -> Any: return self._ibin("add", o)
    def __sub__(self, o: Any) -> Any: return self._bin("subtract", o)
    def __rsub__(self, o: Any) -> Any: return self._bin("subtract", o, True)
    def __isub__(self, o: Any) -> Any: return self._ibin("subtract", o)
    def __mul__(self, o: Any) -> Any: return self._bin("multiply", o)
    def __rmul__(self, o: Any) -> Any: return self._bin("multiply", o, True)
    def __imul__(self, o: Any) -> Any: return self._ibin("multiply", o)
    def __truediv__(self, o: Any) -> Any: return self._bin("divide", o)
    def __rtruediv__(self, o: Any) -> Any: return self._bin("divide", o, True)
    def __itruediv__(self, o: Any) -> Any: return self._ibin("divide", o)
    def __floordiv__(self, o: Any) -> Any: return self._bin("floor_divide", o)
    def __rfloordiv__(self, o: Any) -> Any: return self._bin("floor_divide", o, True)
    def __ifloordiv__(self, o: Any) -> Any: return self._ibin("floor_divide", o)
    def __mod__(self, o: Any) -> Any: return self._bin("remainder", o)
    def __rmod__(self, o: Any) -> Any: return self._bin("remainder", o, True)
    def __imod__(self, o: Any) -> Any: return self._ibin("remainder", o)
    def __pow__(self, o: Any, mod: Any = None) -> Any:
        if mod is not None:
            raise NotImplementedError("pow() with a modulus is not supported")
        return self._bin("power", o)
    def __rpow__(self, o: Any) -> Any: return self._bin("power", o, True)
    def __ipow__(self, o: Any) -> Any: return self._ibin("power", o)
    def __matmul__(self, o: Any) -> Any: return self._bin("matmul", o)
    def __rmatmul__(self, o: Any) -> Any: return self._bin("matmul", o, True)
    def __imatmul__(self, o: Any) -> Any: return self._ibin("matmul", o)
    def __and__(self, o: Any) -> Any: return self._bin("bitwise_and", o)
    def __rand__(self, o: Any) -> Any: return self._bin("bitwise_and", o, True)
    def __iand__(self, o: Any) -> Any: return self._ibin("bitwise_and", o)
    def __or__(self, o: Any) -> Any: return self._bin("bitwise_or", o)
    def __ror__(self, o: Any) -> Any: return self._bin("bitwise_or", o, True)
    def __ior__(self, o: Any) -> Any: return self._ibin("bitwise_or", o)
    def __xor__(self, o: Any) -> Any: return self._bin("bitwise_xor", o)
    def __rxor__(self, o: Any) -> Any: return self._bin("bitwise_xor", o, True)
    def __ixor__(self, o: Any) -> Any: return self._ibin("bitwise_xor", o)
    def __lshift__(self, o: Any) -> Any: return self._bin("left_shift", o)
    def __rlshift__(self, o: Any) -> Any: return self._bin("left_shift", o, True)
    def __ilshift__(self, o: Any) -> Any: return self._ibin("left_shift", o)
    def __rshift__(self, o: Any) -> Any: return self._bin("right_shift", o)
    def __rrshift__(self, o: Any) -> Any: return self._bin("right_shift", o, True)
    def __irshift__(self, o: Any) -> Any: return self._ibin("right_shift", o)
    def __divmod__(self, o: Any) -> Any: return (self._bin("floor_divide", o), self._bin("remainder", o))
    def __rdivmod__(self, o: Any) -> Any:
        return (self._bin("floor_divide", o, True), self._bin("remainder", o, True))
    def __lt__(self, o: Any) -> Any: return self._bin("less", o)
    def __le__(self, o: Any) -> Any: return self._bin("less_equal", o)
    def __gt__(self, o: Any) -> Any: return self._bin("greater", o)
    def __ge__(self, o: Any) -> Any: return self._bin("greater_equal", o)
    def __eq__(self, o: Any) -> Any: return self._bin("equal", o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Any: return self._bin("not_equal", o)  # type: ignore[override]

    def __neg__(self) -> Any:
        from nkipy.core.ops import unary
        return unary.negative(self)

    def __pos__(self) -> Any:
        from nkipy.core.ops import unary
        return unary.positive(self)

    def __abs__(self) -> Any:
        from nkipy.core.ops import unary
        return unary.abs(self)

    def __invert__(self) -> Any:
        from nkipy.core.ops import unary
        return unary.invert(self)
