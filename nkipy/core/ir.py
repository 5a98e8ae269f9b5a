"""The nkipy IR: a small SSA graph of array operations.

A traced kernel becomes a :class:`Graph`: named inputs (the kernel's
parameters), nodes in topological order, and outputs. Every :class:`Value`
has a static shape and a NumPy dtype. The op vocabulary is the
``OPS`` table below; the tracer lowers the NumPy-level API onto it and the
compiler turns it into C.

Conventions every producer of IR keeps (``Graph.verify`` checks them):

* Elementwise ops take operands that broadcast together (NumPy rules) and
  share one dtype (the tracer inserts ``cast`` nodes after type promotion).
  Their result has the broadcast shape and the operand dtype, except the
  predicates (``PREDICATES``), whose result is ``bool``. ``where`` takes a
  ``bool`` condition and two operands of one dtype.
* Axes in attributes are non-negative and sorted where they are sets.
* Dtypes are those of ``IR_DTYPES``: ``SUPPORTED_DTYPES``, the 64-bit
  ``WIDE_DTYPES`` (int64, float64) that wide tracing keeps, and the 8-bit
  floats ``FLOAT8_DTYPES``, which only the ``FLOAT8_OPS`` read or produce.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

try:  # bfloat16 for NumPy
    import ml_dtypes

    bfloat16 = np.dtype(ml_dtypes.bfloat16)
    #: NKI's float8_e4m3 (1 sign, 4 exponent, 3 mantissa bits, bias 7, with
    #: infinities and NaN: ml_dtypes.float8_e4m3, not float8_e4m3fn).
    float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
    #: The 8-bit floats kernels store and convert but do not compute on
    #: (FLOAT8_OPS): OCP's E4M3FN and E5M2 (torch.float8_e4m3fn / float8_e5m2)
    #: and NKI's E4M3.
    FLOAT8_DTYPES: tuple[np.dtype, ...] = (
        np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2), float8_e4m3)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    bfloat16 = None
    float8_e4m3 = None
    FLOAT8_DTYPES = ()

SUPPORTED_DTYPES = tuple(
    np.dtype(d)
    for d in ("float32", "float16", "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool")
) + ((bfloat16,) if bfloat16 is not None else ())

#: 64-bit dtypes the IR and the C code generator also compute exactly; the
#: kernel language narrows them to 32 bits unless traced under
#: :func:`nkipy.core.dtypes.wide_dtypes` (torch.compile graphs are).
WIDE_DTYPES = (np.dtype("int64"), np.dtype("float64"))
IR_DTYPES = SUPPORTED_DTYPES + WIDE_DTYPES + FLOAT8_DTYPES

#: The ops that may read or produce an 8-bit float (FLOAT8_DTYPES): casts,
#: constants and moving data (views, copies, concatenation, padding, where,
#: gathers and slice updates); they keep every bit, NaN payloads included.
#: Arithmetic on them is refused: PyTorch's CPU has none either (it converts
#: to float32 first), and NumPy's (ml_dtypes') rounds after every op.
FLOAT8_OPS = frozenset({
    "cast", "constant", "copy", "reshape", "transpose", "slice", "broadcast_to", "concat",
    "pad", "where", "take", "take_along_axis", "set_slice", "update_slice", "fail_if"})

UNARY = frozenset({
    "neg", "abs", "exp", "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "reciprocal",
    "square", "sin", "cos", "tan", "arctan", "tanh", "sigmoid", "erf", "ceil", "floor", "rint",
    "trunc", "sign", "logical_not", "bitwise_not", "isnan", "isfinite", "copy",
    "arcsinh", "arccosh", "arctanh", "erfc", "lgamma", "sinh", "cosh", "signbit",
})
BINARY = frozenset({
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "mod", "floor_div",
    # C's fmod (the dividend's sign), hypot and copysign: libm's, on floats
    "fmod", "hypot", "copysign",
    "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "logical_xor",
    "eq", "ne", "lt", "le", "gt", "ge",
    # Philox4x32-10 word w of (seed, index), int64 operands (nkipy.core.philox)
    "philox0", "philox1", "philox2", "philox3",
})
PREDICATES = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
    "logical_not", "isnan", "isfinite", "signbit",
})
REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_any",
                        "reduce_all"})
ELEMENTWISE = UNARY | BINARY | {"where", "cast", "fail_if"}

# op name -> (arity or None for variadic, required attribute names, description)
OPS: dict[str, tuple[int | None, tuple[str, ...], str]] = {
    **{op: (1, (), "elementwise unary") for op in UNARY},
    **{op: (2, (), "elementwise binary") for op in BINARY},
    "where": (3, (), "where(cond: bool, a, b)"),
    "fail_if": (2, ("message",), "fail_if(bad: bool, x): x unchanged; the execution fails "
                                 "with attrs['message'] where any element of bad is true"),
    "check_index": (1, ("low", "size", "message"),
                    "integer indices x, with a negative value counted from the end (x + size) "
                    "when low < 0; the execution fails where a value lies outside [low, size), "
                    "with attrs['message'] ('{index}': the value)"),
    "cast": (1, ("dtype",), "convert to attrs['dtype'] (NumPy astype semantics)"),
    "constant": (0, ("value",), "a NumPy array (often 0-d) baked into the kernel"),
    "iota": (0, ("shape", "dim", "dtype"), "index along attrs['dim'] over attrs['shape']"),
    "broadcast_to": (1, ("shape",), "NumPy broadcast_to"),
    "reshape": (1, ("shape",), "row-major reshape"),
    "transpose": (1, ("perm",), "axis permutation"),
    "slice": (1, ("starts", "stops", "steps"),
              "basic slicing per dim; steps may be negative (NumPy slice semantics, "
              "normalised: result extent = len(range(start, stop, step)))"),
    "concat": (None, ("axis",), "concatenate along attrs['axis']"),
    "pad": (1, ("pad_width", "value"), "constant padding, pad_width = ((lo, hi), ...)"),
    **{op: (1, ("axes", "keepdims"), "reduction over attrs['axes']") for op in REDUCTIONS},
    "argmax": (1, ("axis", "keepdims"), "int32 (int64 from 2**31 elements on) index of the "
                                       "first maximum"),
    "argmin": (1, ("axis", "keepdims"), "int32 (int64 from 2**31 elements on) index of the "
                                       "first minimum"),
    "cumsum": (1, ("axis",), "inclusive prefix sum"),
    "cumprod": (1, ("axis",), "inclusive prefix product"),
    "matmul": (2, (), "NumPy matmul on operands of rank >= 2 (batch dims broadcast)"),
    "take": (2, ("axis",), "np.take(x, indices:int32, axis); indices are clamped (checked "
                           "before by check_index where out-of-range is an error)"),
    "take_along_axis": (2, ("axis",), "np.take_along_axis(x, indices:int32, axis)"),
    "put_along_axis": (3, ("axis", "mode"),
                       "copy of x with values put at indices along axis; mode 'set' or 'add'"),
    "set_slice": (2, ("starts", "stops", "steps"),
                  "copy of x with `update` (broadcast to the slice) written into the slice"),
    "update_slice": (None, (),
                     "dynamic_update_slice(x, update, *starts): starts are int32 0-d values, "
                     "clamped so the update fits (XLA semantics)"),
    "topk": (1, ("k", "axis", "largest", "sorted"), "two outputs: values, int32 indices"),
    "conv2d": (None, ("stride", "padding", "dilation", "groups"),
               "NCHW input, OIHW weight, optional bias; padding = ((top, bottom), (left, right))"),
    "all_reduce": (1, ("reduce_op", "replica_groups"), "collective: reduce over ranks"),
    "all_gather": (1, ("axis", "replica_groups"), "collective: concatenate over ranks"),
    "reduce_scatter": (1, ("axis", "reduce_op", "replica_groups"),
                       "collective: reduce, then each rank keeps its slice"),
    "all_to_all": (1, ("split_axis", "concat_axis", "replica_groups"),
                   "collective: exchange slices between ranks"),
}

COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"})


def dtype_name(dtype: np.dtype) -> str:
    """NEFF/nkrt name of a dtype ("float32", "bfloat16", ...)."""
    return np.dtype(dtype).name


@dataclass(eq=False)
class Value:
    """One SSA value: a static shape and dtype, produced by ``node`` (None for inputs)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    node: "Node | None" = None
    index: int = 0
    name: str | None = None
    id: int = field(default_factory=itertools.count().__next__)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __repr__(self) -> str:
        return f"%{self.id}:{dtype_name(self.dtype)}{list(self.shape)}"


@dataclass(eq=False)
class Node:
    """An operation: ``op`` applied to ``inputs`` with ``attrs``, giving ``outputs``."""

    op: str
    inputs: list[Value]
    attrs: dict[str, Any]
    outputs: list[Value] = field(default_factory=list)
    location: str | None = None  # "file.py:line" of the user code that made it

    @property
    def output(self) -> Value:
        return self.outputs[0]


def _fmt_attr(v: Any) -> str:
    if isinstance(v, np.ndarray):
        if v.size <= 4:
            return f"{v.tolist()}"
        return f"array<{dtype_name(v.dtype)}{list(v.shape)}>"
    if isinstance(v, np.dtype):
        return dtype_name(v)
    return repr(v)


class Graph:
    """A traced kernel: inputs, nodes in topological order, outputs.

    ``aliases`` maps an output index to the index of the input it aliases
    (inputs mutated in place by the kernel); ``output_names`` are the NEFF
    names of the outputs (``output0``, ... or the aliased input's name).
    The first ``user_outputs`` outputs are what the kernel returned (a tuple
    when ``returns_tuple``); the others are inputs it assigned into.
    """

    def __init__(self, name: str = "kernel") -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self.output_names: list[str] = []
        self.aliases: dict[int, int] = {}
        self.user_outputs = 0
        self.returns_tuple = False

    def add_input(self, name: str, shape: Sequence[int], dtype: Any) -> Value:
        v = Value(tuple(int(s) for s in shape), np.dtype(dtype), None, 0, name)
        self.inputs.append(v)
        return v

    def add(self, op: str, inputs: Iterable[Value], attrs: dict[str, Any] | None,
            out: Sequence[tuple[Sequence[int], Any]], location: str | None = None) -> Node:
        """Appends a node with outputs of the given (shape, dtype) pairs."""
        node = Node(op, list(inputs), dict(attrs or {}), [], location)
        for i, (shape, dtype) in enumerate(out):
            node.outputs.append(Value(tuple(int(s) for s in shape), np.dtype(dtype), node, i))
        self.nodes.append(node)
        return node

    def users(self) -> dict[int, list[Node]]:
        """Value id -> nodes that read it."""
        result: dict[int, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                result.setdefault(v.id, []).append(n)
        return result

    def verify(self) -> None:
        """Checks structural invariants; raises ValueError naming the culprit."""
        defined = {v.id for v in self.inputs}
        for n in self.nodes:
            if n.op not in OPS:
                raise ValueError(f"unknown op {n.op!r}")
            arity, required, _ = OPS[n.op]
            if arity is not None and len(n.inputs) != arity:
                raise ValueError(f"{n.op} takes {arity} operands, got {len(n.inputs)}")
            missing = [a for a in required if a not in n.attrs]
            if missing:
                raise ValueError(f"{n.op} is missing attributes {missing}")
            for v in n.inputs:
                if v.id not in defined:
                    raise ValueError(f"{n.op} reads {v!r} before it is defined")
            for v in n.outputs:
                if v.dtype not in IR_DTYPES:
                    raise ValueError(f"{n.op} produces unsupported dtype {v.dtype}")
                defined.add(v.id)
            if n.op in ELEMENTWISE and n.op != "cast":
                operands = n.inputs[1:] if n.op in ("where", "fail_if") else n.inputs
                if len({o.dtype for o in operands}) > 1:
                    raise ValueError(f"{n.op} operands have different dtypes: {operands}")
                shape = np.broadcast_shapes(*(o.shape for o in n.inputs))
                if tuple(shape) != n.output.shape:
                    raise ValueError(f"{n.op} result shape {n.output.shape} is not the "
                                     f"broadcast shape {tuple(shape)}")
        for v in self.outputs:
            if v.id not in defined:
                raise ValueError(f"output {v!r} is not defined")
        if len(self.output_names) != len(self.outputs):
            raise ValueError("output_names and outputs differ in length")

    def __str__(self) -> str:
        lines = [f"kernel {self.name}("
                 + ", ".join(f"{v.name}: {v!r}" for v in self.inputs) + ") {"]
        for n in self.nodes:
            outs = ", ".join(repr(v) for v in n.outputs)
            args = ", ".join(f"%{v.id}" for v in n.inputs)
            attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in n.attrs.items())
            loc = f"  # {n.location}" if n.location else ""
            lines.append(f"  {outs} = {n.op}({args}{', ' if args and attrs else ''}{attrs}){loc}")
        rets = ", ".join(
            f"{name}=%{v.id}" + (f" (aliases {self.inputs[self.aliases[i]].name})"
                                 if i in self.aliases else "")
            for i, (name, v) in enumerate(zip(self.output_names, self.outputs)))
        lines.append(f"  return {rets}")
        lines.append("}")
        return "\n".join(lines)
