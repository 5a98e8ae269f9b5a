"""FX graph -> the NumPy source of ``nkipy_func``.

One code generator serves the eager device (single ops, :mod:`spike_torch._generic`)
and the ``torch.compile`` backend (whole graphs, :mod:`torch_to_nkipy.kernel`). A
layer above may pass an :class:`Extern`: ops it lowers itself (the backend's
custom kernels) without this module knowing of them.

The generated module imports NumPy and the registry's implementations
(``aten``) and defines ``nkipy_func(<tensor placeholders>)``, which returns
the graph's outputs as a flat tuple. Non-tensor placeholders (sizes of a
dynamic graph) are baked in as constants: a source is specific to one
concrete signature. ``get_attr`` constants are saved beside it as ``.npy``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .._numbers import OPMATH_SECOND, wrap_int
from ..dtypes import FLOAT8, TORCH_DTYPES, dtype_name, torch_to_numpy
from .registry import AtenOpRegistry, target_name
from . import aten_numpy  # noqa: F401  (registers the entries)
from . import aten_math  # noqa: F401  (registers the entries)
from . import aten_nn  # noqa: F401  (the neural-network entries)
from . import aten_special  # noqa: F401  (more torch.special functions)
from . import aten_linalg  # noqa: F401  (LU factorizations, solves, inverses)
from . import aten_select  # noqa: F401  (adaptive max pooling, mode, nonzero_static)
from . import aten_random  # noqa: F401  (seeded random ops: Philox4x32-10)

_RESERVED = {"np", "aten", "os", "nkipy_func", "_DIR"}


class UnsupportedOpError(NotImplementedError):
    """An FX node's op has no registry entry."""


@dataclass
class GeneratedSource:
    source: str
    tensor_inputs: List[str]          # placeholder names that are function parameters
    constants: Dict[str, np.ndarray] = field(default_factory=dict)   # file name -> data
    pairs: List[tuple] = field(default_factory=list)   # (FX node text, generated line)


def _meta_val(node: torch.fx.Node) -> Any:
    return node.meta.get("val", node.meta.get("example_value"))


#: binary ops whose two operands PyTorch converts to the promoted dtype and
#: computes in it (TensorIterator's common dtype; comparisons compare in it)
_COMMON_DTYPE_BINARY = frozenset(f"aten::{n}" for n in (
    "add", "sub", "mul", "div", "remainder", "fmod", "floor_divide", "pow", "maximum",
    "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and",
    "bitwise_or", "bitwise_xor", "atan2", "hypot", "copysign", "nextafter"))
_HALVES = (torch.float16, torch.bfloat16)


def _promoted_operands(node: torch.fx.Node) -> Dict[int, torch.dtype]:
    """{position: dtype} of the tensor operands of a pointwise op that PyTorch
    converts to the op's promoted dtype before computing, where NumPy (which
    the lowerings compute with) would not:

    - a 0-dim float operand: a 0-dim tensor does not promote a dimensioned
      one, ``x_f16 - tensor(0.1)`` takes 0.1 rounded to float16 (NumPy would
      compute in float32 and round once at the end);
    - an integer operand of a binary op beside float16/bfloat16:
      ``int32 70000 * tensor(0.5, f16)`` is inf, the integer rounded first;
    - a 0-dim integer operand of a binary op on integers computing in their
      promoted type: ``uint8 < tensor(-3)`` compares with 253, as the CPU
      converts -3 to uint8 (NumPy compares the values).

    mul and div (:data:`OPMATH_SECOND`) read a 0-dim second operand beside
    half tensors in float32."""
    target = node.target
    if torch.Tag.pointwise not in getattr(target, "tags", ()):
        return {}
    metas = [(i, _meta_val(a)) for i, a in enumerate(node.args) if isinstance(a, torch.fx.Node)]
    tensors = [(i, v) for i, v in metas if isinstance(v, torch.Tensor)]
    if len(tensors) < 2 or any(v.dtype.is_complex for _, v in tensors):
        return {}
    promoted = elementwise_dtypes(*[v for _, v in tensors],
                                  type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
    name = target._schema.name
    binary = name in _COMMON_DTYPE_BINARY and len(tensors) == 2
    opmath_second = name in OPMATH_SECOND and promoted in _HALVES
    out = _meta_val(node)
    computes_promoted = isinstance(out, torch.Tensor) and out.dtype in (promoted, torch.bool)
    casts: Dict[int, torch.dtype] = {}
    for i, v in tensors:
        scalar_second = opmath_second and i == 1 and v.dim() == 0
        want = torch.float32 if scalar_second else promoted
        if v.dtype in (want, torch.bool):    # (a bool converts exactly)
            continue
        if promoted.is_floating_point:
            if v.dim() == 0 and v.dtype.is_floating_point:
                casts[i] = want
            elif binary and promoted in _HALVES and not v.dtype.is_floating_point:
                casts[i] = want
        elif binary and v.dim() == 0 and computes_promoted:
            casts[i] = promoted
    return casts


def _wrapped_ints(node: torch.fx.Node) -> Dict[int, int]:
    """{position: value} of the Python int operands of a binary op on an integer
    tensor that computes in the tensor's dtype, converted to it as the CPU
    converts them (wrapping: ``int8 + 300`` adds 44, ``uint8 < -3`` compares
    with 253), where NumPy would compare the values or refuse the int."""
    schema = getattr(node.target, "_schema", None)
    # (pow's int exponent is not converted: the CPU refuses one past the dtype)
    if schema is None or schema.name not in _COMMON_DTYPE_BINARY or \
            schema.name == "aten::pow" or len(node.args) != 2:
        return {}
    tensor = next((_meta_val(a) for a in node.args if isinstance(a, torch.fx.Node)), None)
    out = _meta_val(node)
    if not isinstance(tensor, torch.Tensor) or not isinstance(out, torch.Tensor) or \
            tensor.dtype.is_floating_point or tensor.dtype.is_complex or \
            tensor.dtype == torch.bool or out.dtype not in (tensor.dtype, torch.bool):
        return {}
    return {i: wrap_int(a, tensor.dtype) for i, a in enumerate(node.args)
            if isinstance(a, int) and not isinstance(a, bool)}


@dataclass(frozen=True)
class Extern:
    """Ops lowered outside the registry, by a layer above this one.

    ``lookup(qual)`` returns a short identity of the op's implementation (kept in
    the source, so a changed implementation changes the source's hash) or None;
    the generated module runs ``import_line`` and calls ``<call>(qual, *args)``."""
    lookup: Any
    import_line: str
    call: str


#: The ops a node reading or producing an 8-bit float may be (FLOAT8): casts,
#: copies and views, whose lowerings only convert (nkipy's casts, as PyTorch's
#: CPU converts under torch_semantics) or move the bytes. Everything else on
#: float8 runs on the CPU, which computes what it computes (mm) or refuses
#: (add, sum: "not implemented for 'Float8_e4m3fn'") as eager does.
FLOAT8_ATEN = frozenset({
    "prims.convert_element_type.default", "aten._to_copy.default", "aten.clone.default",
    "aten.lift_fresh_copy.default", "aten.alias.default", "aten.detach.default",
    "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
    "aten.permute.default", "aten.t.default", "aten.transpose.int", "aten.expand.default",
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
    "aten.cat.default", "aten.select.int", "aten.slice.Tensor", "aten.where.self"})


def _has_unlowerable_dtype(node: torch.fx.Node) -> bool:
    """Whether a tensor ``node`` reads or produces has a dtype the generated
    source cannot express (complex, unsigned beyond uint8, ...), or is an
    8-bit float read or produced by an op other than FLOAT8_ATEN's."""
    vals = [_meta_val(node)] + [_meta_val(a) for a in node.all_input_nodes]
    float8_ok = target_name(node.target) in FLOAT8_ATEN
    for v in vals:
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor) and (
                    t.dtype not in TORCH_DTYPES or (t.dtype in FLOAT8 and not float8_ok)):
                return True
    return False


#: Entries that do axis arithmetic (``dim % ndim``) on their first argument and
#: have no 0-dim case of their own.
_NEEDS_A_DIMENSION = frozenset({
    "aten.flip.default", "aten.scatter.value", "aten.scatter.src", "aten.scatter_add.default",
    "aten.scatter.reduce", "aten.scatter.value_reduce", "aten.scatter_reduce.two",
    "aten.logcumsumexp.default", "aten.kthvalue.default", "aten.median.dim",
    "aten.nanmedian.dim", "aten.unfold.default", "aten.index_reduce.default",
    "aten.unbind_copy.int", "aten.narrow_copy.default",
    "aten.slice_copy.Tensor", "aten.select_copy.int"})


def _dim_of_a_scalar(node: torch.fx.Node) -> bool:
    """Whether ``node`` takes a dimension of a 0-dim tensor in an entry with no
    0-dim case: PyTorch treats such a tensor as having one dimension there
    (``flip(x, [0])``, ``scatter(x, -1, ...)``), which those entries' axis
    arithmetic does not (a ZeroDivisionError while compiling)."""
    if target_name(node.target) not in _NEEDS_A_DIMENSION or not node.args:
        return False
    first = _meta_val(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
    return isinstance(first, torch.Tensor) and first.dim() == 0


def is_supported_node(node: torch.fx.Node, extern: Optional[Extern] = None) -> bool:
    """Whether ``node`` can be lowered (non-call nodes always can). A node whose
    inputs or outputs have a dtype without a NumPy lowering (complex) is not,
    nor one taking a dimension of a 0-dim tensor: it runs in a CPU partition."""
    if node.op != "call_function":
        return True
    if _has_unlowerable_dtype(node) or _dim_of_a_scalar(node):
        return False
    qual = target_name(node.target)
    return AtenOpRegistry.is_supported(qual, node) or \
        (extern is not None and extern.lookup(qual) is not None)


class _Gen:
    def __init__(self) -> None:
        self.names: Dict[torch.fx.Node, str] = {}
        self.dtypes: Dict[str, str] = {}

    def name(self, node: torch.fx.Node) -> str:
        # Canonical names (p<i> for inputs, v<i> for values): structurally identical
        # graphs (repeated layers) generate identical source and share one kernel.
        if node not in self.names:
            if node.op == "placeholder":
                n = f"p{sum(1 for k in self.names if k.op == 'placeholder')}"
            else:
                n = f"v{sum(1 for k in self.names if k.op != 'placeholder')}"
            self.names[node] = n
        return self.names[node]

    def dtype_const(self, dtype: torch.dtype) -> str:
        name = dtype_name(dtype)
        const = name.upper() if name != "bool" else "BOOL"
        self.dtypes[const] = name
        return const

    def arg(self, a: Any) -> str:
        if isinstance(a, torch.fx.Node):
            return self.name(a)
        if isinstance(a, (list, tuple)):
            inner = ", ".join(self.arg(x) for x in a)
            return f"[{inner}]"
        if isinstance(a, torch.dtype):
            return self.dtype_const(a)
        if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
            return "None"
        if isinstance(a, float):
            if math.isnan(a):
                return "float('nan')"
            if math.isinf(a):
                return "float('inf')" if a > 0 else "-float('inf')"
            return repr(a)
        if isinstance(a, (bool, int, str)) or a is None:
            return repr(a)
        if isinstance(a, torch.SymInt):
            return repr(int(a))
        raise TypeError(f"cannot lower argument {a!r} of type {type(a).__name__}")


def _fx_text(node: torch.fx.Node) -> str:
    def a(x: Any) -> str:
        if isinstance(x, torch.fx.Node):
            return f"%{x.name}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(a(y) for y in x) + "]"
        return repr(x)
    args = [a(x) for x in node.args] + [f"{k}={a(v)}" for k, v in node.kwargs.items()]
    return f"%{node.name} = {target_name(node.target)}({', '.join(args)})"


def generate_source(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                    func_name: str = "nkipy_func",
                    extern: Optional[Extern] = None) -> GeneratedSource:
    """The NumPy source of ``gm`` for the concrete ``example_inputs``."""
    g = _Gen()
    params: List[str] = []
    baked: List[str] = []
    body: List[str] = []
    constants: Dict[str, np.ndarray] = {}
    pairs: List[tuple] = []
    customs: Dict[str, str] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ValueError(f"graph has {len(placeholders)} inputs, got {len(example_inputs)}")
    for node, value in zip(placeholders, example_inputs):
        pairs.append((f"%{node.name} = placeholder", f"{g.name(node)} (input)"))
        if isinstance(value, torch.Tensor):
            params.append(g.name(node))
        elif value is None or isinstance(value, (bool, int, float, torch.SymInt, torch.SymFloat)):
            v = value if not isinstance(value, (torch.SymInt, torch.SymFloat)) else \
                (int(value) if isinstance(value, torch.SymInt) else float(value))
            baked.append(f"    {g.name(node)} = {v!r}")
        else:
            raise TypeError(f"unsupported graph input {node.name} of type {type(value).__name__}")
    outputs: List[str] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "get_attr":
            data = getattr(gm, node.target)
            if isinstance(data, torch.Tensor):
                fname = f"{g.name(node)}.npy"
                arr = torch_to_numpy(data.detach())
                kind = "bfloat16" if arr.dtype.name == "bfloat16" else None
                constants[fname] = arr.view(np.uint16) if kind else arr   # .npy has no bfloat16
                body.append(f"    {g.name(node)} = aten.load_constant(_DIR, {fname!r}, {kind!r})")
            else:
                body.append(f"    {g.name(node)} = {g.arg(data)}")
            continue
        if node.op == "output":
            outs = node.args[0]
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            outputs = [g.arg(o) for o in outs]
            continue
        if node.op != "call_function":
            raise UnsupportedOpError(f"FX node {node.format_node()} ({node.op}) cannot be lowered")
        qual = target_name(node.target)
        fn = AtenOpRegistry.get(qual)
        args = [g.arg(a) for a in node.args]
        for i, value in _wrapped_ints(node).items():
            args[i] = g.arg(value)
        for i, dtype in _promoted_operands(node).items():
            args[i] = f"aten.cast({args[i]}, {g.dtype_const(dtype)})"
        args += [f"{k}={g.arg(v)}" for k, v in node.kwargs.items()]
        if fn is not None:
            expr = f"aten.{aten_numpy.attr_of(fn)}({', '.join(args)})"
        else:
            ident = extern.lookup(qual) if extern is not None else None
            if ident is None:
                raise UnsupportedOpError(f"Operation '{qual}' is not supported")
            customs[qual] = ident
            expr = f"{extern.call}({', '.join([repr(qual)] + args)})"
        val = _meta_val(node)
        if isinstance(val, torch.Tensor) and qual != "aten.copy_.default":
            expr = f"aten.cast({expr}, {g.dtype_const(val.dtype)})"
        body.append(f"    {g.name(node)} = {expr}  # {qual}")
        pairs.append((_fx_text(node), body[-1].strip()))
    lines = ["# Generated from an FX graph: NumPy source, runnable on the",
             "# host and traced by nkipy into a kernel.",
             "import os", "", "import numpy as np", "",
             "from spike_torch.lowering import aten_numpy as aten", "",
             "_DIR = os.path.dirname(os.path.abspath(__file__))"]
    if customs:
        lines.insert(lines.index("_DIR = os.path.dirname(os.path.abspath(__file__))") - 1,
                     extern.import_line)
        lines += [f"# custom kernel {q}: source sha256 {h}" for q, h in sorted(customs.items())]
    lines += [f"{c} = aten.dt({n!r})" for c, n in sorted(g.dtypes.items())]
    lines += ["", "", f"def {func_name}({', '.join(params)}):"]
    lines += baked + body
    lines.append(f"    return ({''.join(o + ', ' for o in outputs)})")
    return GeneratedSource("\n".join(lines) + "\n", params, constants, pairs)


def side_by_side(gen: GeneratedSource, width: int = 100) -> str:
    """Each FX node beside the line of NumPy source generated for it."""
    out = [f"{'FX graph node':<{width}} | generated nkipy source", "-" * (2 * width)]
    for fx, src in gen.pairs:
        fx = fx if len(fx) <= width else fx[:width - 3] + "..."
        out.append(f"{fx:<{width}} | {src}")
    return "\n".join(out) + "\n"

