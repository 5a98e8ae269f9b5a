"""Tracing NumPy-style kernels into an :class:`nkipy.core.ir.Graph`.

``trace(fn, *args, **kwargs)`` binds ``fn``'s signature to the arguments, turns
every NumPy array argument into a graph input (named after its parameter) wrapped
in a tracer tensor (:class:`nkipy.core.tensor.NKIPyTensorRef`), runs ``fn`` once
and records what it does. Everything else (Python scalars, strings, lists,
dtypes, ...) stays static: it is baked into the graph where it is used.

Outputs: the returned tensors (one, or a tuple/list, nested ones flattened in
order) become ``output0..N``; a
returned input gets an explicit ``copy``; returned constants (Python or NumPy
values) become constant outputs; inputs the kernel wrote to (``x[...] = v``,
``x += 1``, ``np.copyto(x, ...)``) become outputs aliasing those inputs, named
after them (``Graph.aliases`` maps output index -> input index). A mutated input
that the kernel also returns is aliased at that position (as in the original);
otherwise it is appended after the returned values.
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
import sys
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ir import Graph, Node, Value

__all__ = ["trace", "input_arrays", "TraceContext", "current_context", "is_tracing", "get_backend",
           "tracing", "NKIPyKernel", "NKIPyTracingError"]


class NKIPyTracingError(TypeError):
    """A kernel did something that cannot be traced (data-dependent control flow, ...)."""


_CURRENT: contextvars.ContextVar["TraceContext | None"] = contextvars.ContextVar(
    "nkipy_trace_context", default=None)

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../nkipy
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))
_SKIP_PREFIXES = (_PKG_DIR + os.sep, _NUMPY_DIR + os.sep)
_SKIP_EXACT = {os.path.abspath(contextlib.__file__)}


def _user_location() -> str | None:
    """``file:line`` of the innermost frame outside nkipy and NumPy."""
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_SKIP_PREFIXES) and fn not in _SKIP_EXACT and not fn.startswith("<frozen"):
            return f"{os.path.basename(fn)}:{f.f_lineno}"
        f = f.f_back
    return None


class TraceContext:
    """The graph being built while a kernel is traced."""

    def __init__(self, name: str = "kernel") -> None:
        self.graph = Graph(name)
        # (parameter name, input index, tracer) for every array input
        self.params: list[tuple[str, int, Any]] = []
        self._scalar_consts: dict[tuple, Value] = {}

    # -- node creation --------------------------------------------------
    def emit(self, op: str, inputs: Sequence[Value], attrs: dict | None,
             out: Sequence[tuple[Sequence[int], Any]]) -> Node:
        for v in inputs:
            if not isinstance(v, Value):  # pragma: no cover - internal misuse
                raise TypeError(f"{op}: operand {v!r} is not an IR value")
        _dt.check_float8_op(op, [v.dtype for v in inputs] + [d for _, d in out])
        return self.graph.add(op, inputs, attrs, out, location=_user_location())

    def constant(self, value: Any, dtype: Any = None) -> Value:
        """A constant node holding ``np.asarray(value, dtype)`` (narrowed to 32 bits)."""
        arr = np.asarray(value) if dtype is None else np.asarray(value).astype(_dt.to_dtype(dtype))
        dt = _dt.check_supported(arr.dtype, "a constant")
        if arr.dtype != dt:
            arr = arr.astype(dt)
        key = None
        if arr.ndim == 0:
            key = (dt.str, dt.name, arr.tobytes())
            hit = self._scalar_consts.get(key)
            if hit is not None:
                return hit
        arr = np.array(arr, copy=True)
        arr.setflags(write=False)
        v = self.emit("constant", [], {"value": arr}, [(arr.shape, dt)]).output
        if key is not None:
            self._scalar_consts[key] = v
        return v


def current_context() -> TraceContext | None:
    """The active trace context, or None when kernels run as plain NumPy."""
    return _CURRENT.get()


def is_tracing() -> bool:
    return _CURRENT.get() is not None


def get_backend() -> str:
    """``"trace"`` while a kernel is being traced, ``"cpu"`` otherwise."""
    return "trace" if _CURRENT.get() is not None else "cpu"


@contextlib.contextmanager
def tracing(ctx: TraceContext) -> Iterator[TraceContext]:
    """Makes ``ctx`` the active trace context for the duration of the block."""
    token = _CURRENT.set(ctx)
    try:
        yield ctx
    finally:
        _CURRENT.reset(token)


def _input_array(name: str, arg: Any) -> np.ndarray:
    arr = arg
    if arr.dtype in _dt.NARROWING:
        arr = _dt.sanitize_array(arr, name, stacklevel=6)
    _dt.check_supported(arr.dtype, f"input '{name}'")
    return arr


def _bind(fn: Callable, kname: str, args: tuple, kwargs: dict,
          convert: Callable[[str, np.ndarray], Any]) -> tuple[list[Any], dict[str, Any]]:
    """Binds the kernel's signature; ``convert(name, array)`` replaces each array argument."""
    sig = inspect.signature(fn)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"cannot bind the arguments to {kname}{sig}: {exc}") from None
    provided = set(bound.arguments)
    bound.apply_defaults()
    used_names: set[str] = set()

    def conv(pname: str, arg: Any) -> Any:
        if not isinstance(arg, np.ndarray):
            return arg
        if pname in used_names:
            raise ValueError(f"two kernel inputs would both be named {pname!r}")
        used_names.add(pname)
        return convert(pname, _input_array(pname, arg))

    call_args: list[Any] = []
    call_kwargs: dict[str, Any] = {}
    for pname, arg in bound.arguments.items():
        kind = sig.parameters[pname].kind
        if kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            call_args.append(conv(pname, arg))
        elif kind == inspect.Parameter.KEYWORD_ONLY:
            # defaults are passed only when they are arrays (kernel inputs):
            # some callables (NumPy ufuncs) reject their own defaults spelled out
            if pname in provided or isinstance(arg, np.ndarray):
                call_kwargs[pname] = conv(pname, arg)
        elif kind == inspect.Parameter.VAR_POSITIONAL:
            for i, item in enumerate(arg):
                call_args.append(conv(f"{pname}_{i}", item))
        else:  # VAR_KEYWORD
            for k, v in arg.items():
                call_kwargs[k] = conv(k, v)
    return call_args, call_kwargs


def input_arrays(fn: Callable, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
    """The arrays ``trace(fn, *args, **kwargs)`` makes graph inputs, by input name, in order.

    64-bit arrays are narrowed (with the same warning as ``trace``); this is how a
    caller maps its arguments onto a traced kernel's named inputs.
    """
    found: dict[str, np.ndarray] = {}

    def convert(pname: str, arr: np.ndarray) -> Any:
        found[pname] = arr
        return arr

    _bind(fn, getattr(fn, "__name__", "kernel"), args, kwargs, convert)
    return found


def trace(fn: Callable, *args: Any, name: str | None = None, **kwargs: Any) -> Graph:
    """Traces ``fn(*args, **kwargs)`` into a :class:`Graph`.

    NumPy array arguments become graph inputs named after their parameters
    (``*args`` items are named ``<param>_<i>``, ``**kwargs`` items by their
    key); float64/int64/uint64 arrays are narrowed to 32 bits with a warning.
    All other arguments are static. The graph is verified before it is returned.
    """
    from nkipy.core.tensor import NKIPyTensorRef

    if not callable(fn):
        raise TypeError(f"trace() needs a callable kernel, got {type(fn).__name__}")
    kname = name or getattr(fn, "__name__", "kernel")
    if not kname.isidentifier():
        kname = "kernel"
    ctx = TraceContext(kname)

    def convert(pname: str, arr: np.ndarray) -> Any:
        v = ctx.graph.add_input(pname, arr.shape, arr.dtype)
        t = NKIPyTensorRef._from_input(v, ctx, len(ctx.graph.inputs) - 1)
        ctx.params.append((pname, len(ctx.graph.inputs) - 1, t))
        return t

    call_args, call_kwargs = _bind(fn, kname, args, kwargs, convert)
    with tracing(ctx):
        ret = fn(*call_args, **call_kwargs)
        _mark_outputs(ctx, ret)
    ctx.graph.verify()
    return ctx.graph


def _mark_outputs(ctx: TraceContext, ret: Any) -> None:
    from nkipy.core.tensor import NKIPyTensorRef

    g = ctx.graph
    def flatten(r: Any) -> list[Any]:
        if isinstance(r, (tuple, list)):
            return [x for item in r for x in flatten(item)]
        return [r]

    rets: list[Any] = [] if ret is None else flatten(ret)
    user_len = len(rets)
    g.user_outputs, g.returns_tuple = user_len, isinstance(ret, (tuple, list))

    # mutated inputs: aliased where returned, appended otherwise
    alias_of: dict[int, int] = {}
    for _pname, in_idx, t in ctx.params:
        if not t._mutated:
            continue
        pos = next((i for i, r in enumerate(rets) if r is t and i not in alias_of), None)
        if pos is None:
            rets.append(t)
            pos = len(rets) - 1
        alias_of[pos] = in_idx

    input_ids = {v.id for v in g.inputs}
    seen: set[int] = set()
    for i, r in enumerate(rets):
        if isinstance(r, NKIPyTensorRef):
            r._check_context(ctx)
            v = r.value
        elif isinstance(r, (np.ndarray, np.generic, bool, int, float)):
            v = ctx.constant(r)
        else:
            where = "returned value" if i < user_len else "output"
            raise TypeError(f"kernel {g.name}: {where} {i} is a {type(r).__name__}; kernels "
                            "return tensors, NumPy values or Python numbers "
                            "(one, or a tuple/list of them)")
        # an output must be its own buffer: copy inputs and repeated values
        if v.id in input_ids or v.id in seen:
            v = ctx.emit("copy", [v], None, [(v.shape, v.dtype)]).output
        seen.add(v.id)
        g.outputs.append(v)
        if i in alias_of:
            g.aliases[i] = alias_of[i]
            g.output_names.append(g.inputs[alias_of[i]].name)
        else:
            g.output_names.append(f"output{i}")


class NKIPyKernel:
    """``NKIPyKernel.trace(fn)`` then ``.specialize(*arrays)``, as in the original."""

    def __init__(self, func: Callable, backend: str = "hlo") -> None:
        self.func = func
        self.backend = backend
        self.graph: Graph | None = None
        # inspect.signature (so trace and compile_and_load) sees func's parameters,
        # and the inputs are named after them, not args_0, ...
        self.__wrapped__ = func

    @property
    def __name__(self) -> str:  # type: ignore[override]
        return self.func.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def specialize(self, *args: Any, **kwargs: Any) -> Graph:
        self.graph = trace(self.func, *args, **kwargs)
        return self.graph

    @classmethod
    def trace(cls, func: Callable | None = None, backend: str = "hlo") -> Any:
        if func is None:
            return lambda f: cls(f, backend)
        return cls(func, backend)

    def __repr__(self) -> str:
        return f"<NKIPyKernel {self.func.__name__!r}>"
