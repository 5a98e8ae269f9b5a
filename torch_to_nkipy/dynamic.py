"""Dynamic shapes: how a symbolic FX graph runs in fixed-size buckets.

With ``dynamic=True`` (or ``torch._dynamo.maybe_mark_dynamic``) AOTAutograd hands
the backend graphs whose sizes are symbols (``s0``). One symbol, the *primary*
one (the first found in the inputs, in order), is bucketed: a call with
``s0 = n`` runs the kernel compiled for the smallest bucket ``B >= n``, with
every input dimension of size ``k*s0`` padded on the device to ``k*B`` and every
output dimension of size ``k*s0`` cut back to ``k*n``. Other symbols are
specialised: each value is its own kernel.

Padding is only correct when padded entries never reach real ones. Before
using buckets, :func:`padding_hazard` walks the graph and looks for what could
mix them: reductions, softmax, norms, cumulative ops, sorting and contractions
over the padded dimension, concatenation, slicing, indexing along it, views
that interleave it with other dimensions. A graph with such a hazard is not
padded (its kernels are compiled for each exact size, logged once), so results
are always eager's.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import sympy
import torch
import torch.fx

from .lowering import target_name

# ---------------------------------------------------------------------------
# symbolic sizes


def _expr(d: Any) -> sympy.Expr:
    if isinstance(d, torch.SymInt):
        return sympy.sympify(d.node.expr)
    return sympy.Integer(int(d))


def _meta(node: Any) -> Any:
    if isinstance(node, torch.fx.Node):
        return node.meta.get("val", node.meta.get("example_value"))
    return node


def shape_exprs(val: Any) -> Optional[List[sympy.Expr]]:
    """The sizes of a FakeTensor as sympy expressions (None for a non-tensor)."""
    if isinstance(val, torch.Tensor):
        return [_expr(d) for d in val.shape]
    return None


def _multiple(e: sympy.Expr, s: sympy.Symbol) -> Optional[int]:
    """k when ``e == k*s`` (k a positive integer), else None."""
    if e == s:
        return 1
    k = sympy.simplify(e / s)
    if k.is_Integer and int(k) > 0:
        return int(k)
    return None


@dataclass(frozen=True)
class PadDim:
    """A dimension of size ``mult * s0``: padded to ``mult * B``."""

    dim: int
    mult: int


def pad_dim_of(val: Any, s: sympy.Symbol) -> Tuple[Optional[PadDim], Optional[str]]:
    """Where the primary symbol sits in a tensor's shape: (PadDim or None, problem)."""
    exprs = shape_exprs(val)
    if exprs is None:
        return None, None
    found = [(i, e) for i, e in enumerate(exprs) if s in e.free_symbols]
    if not found:
        return None, None
    if len(found) > 1:
        return None, f"shape {tuple(exprs)} uses the dynamic size in several dimensions"
    i, e = found[0]
    k = _multiple(e, s)
    if k is None:
        return None, f"dimension {e} is not a multiple of the dynamic size {s}"
    return PadDim(i, k), None


# ---------------------------------------------------------------------------
# padding hazards


_SHAPE_ONLY = {
    "aten.permute.default", "aten.transpose.int", "aten.t.default", "aten.unsqueeze.default",
    "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.expand.default",
    "aten.clone.default", "aten._to_copy.default", "aten.alias.default", "aten.detach.default",
    "aten.lift_fresh_copy.default", "prims.convert_element_type.default", "aten.copy.default",
    "aten.copy_.default", "_operator.getitem", "nkipy.mark_subgraph_identity.default",
    "_c10d_functional.wait_tensor.default", "_c10d_functional.all_reduce.default",
    "aten.embedding.default", "aten.full.default", "aten.full_like.default",
    "aten.zeros.default", "aten.ones.default", "aten.empty.memory_format",
    "aten.empty_permuted.default", "aten.arange.start_step", "aten.arange.default",
    "aten.arange.start", "aten.scalar_tensor.default", "aten.where.self",
    "aten.masked_fill.Scalar", "aten.masked_fill.Tensor", "aten.clamp.default",
    "aten.clamp.Tensor", "aten.sym_size.int",
}

_VIEWS = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default"}

# op -> (index of the tensor argument, index of the dim argument, keepdim-style default
# of "all dims" when the dim argument is absent/None/empty)
_REDUCE_DIM_ARG = {
    "aten.sum.dim_IntList": 1, "aten.mean.dim": 1, "aten.amax.default": 1,
    "aten.amin.default": 1, "aten.prod.dim_int": 1, "aten.var.correction": 1,
    "aten.var.dim": 1, "aten.std.correction": 1, "aten.any.dim": 1, "aten.any.dims": 1,
    "aten.all.dim": 1, "aten.argmax.default": 1, "aten.argmin.default": 1,
    "aten.max.dim": 1, "aten.min.dim": 1, "aten.logsumexp.default": 1,
    "aten.cumsum.default": 1, "aten.cumprod.default": 1, "aten._softmax.default": 1,
    "aten._log_softmax.default": 1, "aten.sort.default": 1, "aten.topk.default": 2,
    "aten.linalg_vector_norm.default": 2, "aten.var_mean.correction": 1,
    "aten.flip.default": 1, "aten.roll.default": 2,
}
_REDUCE_ALL = {"aten.sum.default", "aten.mean.default", "aten.amax.default",
               "aten.any.default", "aten.all.default", "aten.max.default", "aten.min.default",
               "aten.prod.default"}
# op -> (tensor arg, dim arg): indexing, joining and splitting along `dim`
_ALONG_DIM = {
    "aten.cat.default": (0, 1), "aten.split_with_sizes.default": (0, 2),
    "aten.split.Tensor": (0, 2), "aten.slice.Tensor": (0, 1), "aten.select.int": (0, 1),
    "aten.index_select.default": (0, 1), "aten.gather.default": (0, 1),
    "aten.scatter.value": (0, 1), "aten.scatter.src": (0, 1), "aten.scatter_add.default": (0, 1),
    "aten.narrow.default": (0, 1), "aten.slice_scatter.default": (0, 2),
    "aten.select_scatter.default": (0, 2), "aten.unbind.int": (0, 1),
}


def _arg(node: torch.fx.Node, i: int, name: str, default: Any = None) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _norm_dims(dims: Any, ndim: int) -> List[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if not isinstance(dims, (list, tuple)):
        dims = [dims]
    return [int(d) % max(ndim, 1) for d in dims]


def _has(val: Any, s: sympy.Symbol) -> bool:
    exprs = shape_exprs(val)
    return bool(exprs) and any(s in e.free_symbols for e in exprs)


def _dim_has(val: Any, d: int, s: sympy.Symbol) -> bool:
    exprs = shape_exprs(val)
    return exprs is not None and len(exprs) > d and s in exprs[d].free_symbols


# op -> argument positions (and keyword names) whose SymInts are sizes, not values
_SIZE_ARGS = {
    "aten.view.default": {1, "size"}, "aten.reshape.default": {1, "shape"},
    "aten._unsafe_view.default": {1, "size"}, "aten.expand.default": {1, "size"},
    "aten.full.default": {0, "size"}, "aten.zeros.default": {0, "size"},
    "aten.ones.default": {0, "size"}, "aten.empty.memory_format": {0, "size"},
    "aten.empty_permuted.default": {0, "size"}, "aten.empty_strided.default": {0, 1},
    "aten.new_zeros.default": {1, "size"}, "aten.new_ones.default": {1, "size"},
    "aten.new_empty.default": {1, "size"}, "aten.new_full.default": {1, "size"},
    "aten.arange.default": {0, "end"}, "aten.arange.start": {0, 1, "start", "end"},
    "aten.arange.start_step": {0, 1, "start", "end"}, "aten.slice.Tensor": {2, 3, "start", "end"},
    "aten.narrow.default": {2, 3, "start", "length"},
    "aten.as_strided.default": {1, 2, 3, "size", "stride", "storage_offset"},
    "aten.sym_size.int": set(),
}


def _symint_value_use(node: torch.fx.Node, qual: str, s: sympy.Symbol) -> Optional[str]:
    """A size that depends on ``s`` used as a value (``x * x.shape[0]``): padding
    would give it the bucket's size instead of the real one."""
    allowed = _SIZE_ARGS.get(qual, set())

    def uses(a: Any) -> bool:
        if isinstance(a, (list, tuple)):
            return any(uses(b) for b in a)
        if isinstance(a, torch.fx.Node):
            v = _meta(a)
            return isinstance(v, torch.SymInt) and s in _expr(v).free_symbols
        return False

    for key, a in list(enumerate(node.args)) + list(node.kwargs.items()):
        if key not in allowed and uses(a):
            return f"{qual} uses the dynamic size as a value"
    return None


def _node_hazard(node: torch.fx.Node, s: sympy.Symbol) -> Optional[str]:
    qual = target_name(node.target)
    why = _symint_value_use(node, qual, s)
    if why:
        return why
    ins = [a for a in node.all_input_nodes]
    in_vals = [_meta(a) for a in ins]
    out_val = _meta(node)
    outs = list(out_val) if isinstance(out_val, (list, tuple)) else [out_val]
    touched = any(_has(v, s) for v in in_vals + outs)
    if not touched:
        return None
    for v in in_vals + outs:
        _, problem = pad_dim_of(v, s)
        if problem:
            return f"{qual}: {problem}"
    what = f"{qual} over the dynamic dimension"
    tensor_outs = [v for v in outs if isinstance(v, torch.Tensor)]
    if tensor_outs and not any(_has(v, s) for v in tensor_outs):
        # padded entries flow into a result without the dynamic dimension
        return f"{qual} folds the dynamic dimension into a fixed-size result"
    if qual in _SHAPE_ONLY:
        return None
    tags = getattr(node.target, "tags", ())
    if torch.Tag.pointwise in tags:
        return None
    x = _meta(node.args[0]) if node.args and isinstance(node.args[0], torch.fx.Node) else None
    if qual in _VIEWS:
        pi, _ = pad_dim_of(x, s)
        po, _ = pad_dim_of(out_val, s)
        if pi is None or po is None:
            return f"{qual} moves the dynamic dimension"
        xe, oe = shape_exprs(x), shape_exprs(out_val)
        assert xe is not None and oe is not None
        if sympy.simplify(sympy.Mul(*xe[:pi.dim]) - sympy.Mul(*oe[:po.dim])) != 0:
            return f"{qual} interleaves the dynamic dimension with others"
        return None
    if qual in ("aten.mm.default", "aten.bmm.default", "aten.addmm.default",
                "aten.baddbmm.default"):
        a = _meta(node.args[1] if qual in ("aten.addmm.default", "aten.baddbmm.default")
                  else node.args[0])
        return what if _dim_has(a, a.dim() - 1, s) else None
    if qual in _REDUCE_ALL:
        return what
    if qual in _REDUCE_DIM_ARG:
        dims = _norm_dims(_arg(node, _REDUCE_DIM_ARG[qual], "dim"), x.dim() if x is not None else 0)
        return what if any(_dim_has(x, d, s) for d in dims) else None
    if qual == "aten.native_layer_norm.default":
        nshape = _arg(node, 1, "normalized_shape")
        nd = len(nshape)
        return what if any(_dim_has(x, d, s) for d in range(x.dim() - nd, x.dim())) else None
    if qual in ("aten.native_group_norm.default", "aten.native_batch_norm.default",
                "aten._native_batch_norm_legit_no_training.default"):
        return what
    if qual in _ALONG_DIM:
        ti, di = _ALONG_DIM[qual]
        t = node.args[ti]
        vals = [_meta(v) for v in t] if isinstance(t, (list, tuple)) else [_meta(t)]
        ndim = vals[0].dim() if vals and isinstance(vals[0], torch.Tensor) else 0
        d = int(_arg(node, di, "dim", 0)) % max(ndim, 1)
        every = [v for v in in_vals + tensor_outs if isinstance(v, torch.Tensor)
                 and v.dim() == ndim]       # index, source and result along the same dim
        if any(_dim_has(v, d, s) for v in every):
            if qual == "aten.slice.Tensor" and shape_exprs(out_val) == shape_exprs(vals[0]):
                return None   # a slice of the whole dimension
            return f"{qual} along the dynamic dimension"
        return None
    if qual == "aten.index.Tensor":
        return what if _has(x, s) else None
    if qual == "aten.constant_pad_nd.default":
        pads = list(_arg(node, 1, "pad"))
        for j in range(0, len(pads), 2):
            d = x.dim() - 1 - j // 2
            if (pads[j] or pads[j + 1]) and _dim_has(x, d, s):
                return what
        return None
    if qual == "aten._transformer_encoder_layer_fwd.default":
        # batch-first (B, L, E): batches are independent, positions attend to each other
        mask = _arg(node, 18, "mask")
        return what if mask is not None or any(_dim_has(x, d, s) for d in (1, 2)) else None
    if qual in ("aten._scaled_dot_product_flash_attention_for_cpu.default",
                "aten._scaled_dot_product_flash_attention.default"):
        k = _meta(node.args[1])
        q = _meta(node.args[0])
        causal = bool(_arg(node, 4, "is_causal", False))
        if _dim_has(k, k.dim() - 2, s) or (causal and _dim_has(q, q.dim() - 2, s)):
            return what
        return None
    return f"{qual} is not known to be safe to pad"


def padding_hazard(gm: torch.fx.GraphModule, s: sympy.Symbol) -> Optional[str]:
    """Why padding the dimension ``s`` could change results (None: it cannot)."""
    for node in gm.graph.nodes:
        if node.op == "call_function":
            if node.target in (operator.mul, operator.add, operator.sub, operator.floordiv,
                               operator.mod, operator.neg, operator.truediv):
                continue     # size arithmetic (SymInt)
            why = _node_hazard(node, s)
            if why:
                return why
        elif node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            for o in outs:
                _, problem = pad_dim_of(_meta(o), s)
                if problem:
                    return f"output: {problem}"
    return None


#: ops whose values are made from positions: an arange or iota enumerates
#: them, tril/triu compare row with column, and the random ops draw the value
#: at each element's position in the tensor (Philox counters).
_POSITIONAL = ("aten.arange.", "prims.iota.", "aten.tril.", "aten.triu.", "aten.rand",
               "aten.normal.", "aten.bernoulli", "aten.uniform", "aten.exponential",
               "aten.native_dropout.", "aten.multinomial.", "prims.philox",
               "nkipy_rng.", "aten.randperm.")


def slice_hazard(gm: torch.fx.GraphModule, s: sympy.Symbol) -> Optional[str]:
    """Why running a call as consecutive slices along ``s`` could change results
    although padding it cannot (None: it cannot). Padding keeps every real
    element at its position, slicing restarts positions at 0 in each slice:
    ``x + torch.arange(x.shape[0])[:, None]`` over 17 rows gave 0..15, 0 in two
    slices. Any op that makes values from positions over a tensor with the
    dynamic size (or from the dynamic size itself) forbids slicing."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        qual = target_name(node.target)
        if not qual.startswith(_POSITIONAL):
            continue
        vals = [_meta(a) for a in node.all_input_nodes] + [_meta(node)]
        vals = [v for o in vals for v in (o if isinstance(o, (list, tuple)) else [o])]
        if any(_has(v, s) for v in vals) or any(
                isinstance(v, torch.SymInt) and s in _expr(v).free_symbols for v in vals):
            return f"{qual} makes values from positions along the dynamic dimension"
    return None


# ---------------------------------------------------------------------------
# the graph's dynamic signature


@dataclass
class DynamicSignature:
    """What varies between calls of a symbolic graph and how to read it from args."""

    primary: sympy.Symbol
    symbols: List[sympy.Symbol]                     # every symbol, primary first
    placeholders: List[Any]                         # meta values, per input
    in_pad: Dict[int, PadDim] = field(default_factory=dict)      # tensor input -> padded dim
    out_pad: Dict[int, PadDim] = field(default_factory=dict)     # tensor output -> padded dim
    out_symint: Dict[int, sympy.Expr] = field(default_factory=dict)  # SymInt outputs
    hazard: Optional[str] = None
    #: the dynamic dimension is every padded tensor's first and every tensor
    #: output has it (and no SymInt output): a call can run as consecutive
    #: slices of its inputs, each through one bucket's kernel (see sliceable)
    leading: bool = False
    #: why slices would differ from one whole call although padding is safe:
    #: values made from positions along the dynamic dimension (see slice_hazard)
    slice_hazard: Optional[str] = None

    @property
    def sliceable(self) -> bool:
        """Whether a call may run as slices along the dynamic dimension: padding
        is safe, no value is made from a position along the dimension (each
        slice would restart it at 0), and the dimension leads every tensor that
        has it (a slice is contiguous)."""
        return (self.hazard is None and self.slice_hazard is None and self.leading
                and bool(self.in_pad))

    def _probes(self) -> List[Tuple[int, Optional[int], sympy.Expr]]:
        """(input index, dimension or None for a SymInt input, size expression) of
        every symbolic size in the inputs, plain symbols first."""
        probes = self.__dict__.get("_probe_list")
        if probes is None:
            probes = []
            for i, val in enumerate(self.placeholders):
                if isinstance(val, torch.SymInt):
                    probes.append((i, None, _expr(val)))
                elif isinstance(val, torch.Tensor):
                    for d, e in enumerate(shape_exprs(val) or []):
                        if e.free_symbols:
                            probes.append((i, d, e))
            probes.sort(key=lambda p: not isinstance(p[2], sympy.Symbol))
            self._probe_list = probes
        return probes

    def bind(self, args: Sequence[Any]) -> Dict[sympy.Symbol, int]:
        """The value of every symbol in a call's concrete arguments."""
        env: Dict[sympy.Symbol, int] = {}
        for i, d, e in self._probes():
            a = args[i]
            n = int(a) if d is None else int(a.shape[d])
            if isinstance(e, sympy.Symbol):
                env.setdefault(e, n)
            else:
                free = [x for x in e.free_symbols if x not in env]
                if len(free) == 1:
                    sol = sympy.solve(sympy.Eq(e.subs(env), n), free[0])
                    if sol:
                        env[free[0]] = int(sol[0])
            if len(env) == len(self.symbols):
                break
        missing = [x for x in self.symbols if x not in env]
        if missing:
            raise RuntimeError(f"cannot infer the dynamic sizes {missing} from the inputs")
        return env

    def symint_outputs(self, env: Dict[sympy.Symbol, int]) -> Dict[int, int]:
        """Values of the SymInt outputs at ``env`` (cached per sizes)."""
        cache = self.__dict__.setdefault("_symint_cache", {})
        key = tuple(env[x] for x in self.symbols)
        vals = cache.get(key)
        if vals is None:
            vals = cache[key] = {pos: int(e.subs(env)) for pos, e in self.out_symint.items()}
        return vals

    def concrete(self, env: Dict[sympy.Symbol, int]) -> List[Any]:
        """Stand-in arguments (meta tensors, ints) for compiling at ``env``'s sizes."""
        out: List[Any] = []
        for val in self.placeholders:
            if isinstance(val, torch.SymInt):
                out.append(int(_expr(val).subs(env)))
            elif isinstance(val, torch.Tensor):
                shape = [int(e.subs(env)) for e in shape_exprs(val) or []]
                out.append(torch.empty(shape, dtype=val.dtype, device="meta"))
            else:
                out.append(val)
        return out


def dynamic_signature(gm: torch.fx.GraphModule) -> Optional[DynamicSignature]:
    """The dynamic signature of a symbolic graph, or None for a static one."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    vals = [_meta(n) for n in placeholders]
    symbols: List[sympy.Symbol] = []

    def note(e: sympy.Expr) -> None:
        for x in sorted(e.free_symbols, key=str):
            if x not in symbols:
                symbols.append(x)

    for v in vals:
        if isinstance(v, torch.Tensor):
            for e in shape_exprs(v) or []:
                note(e)
    for v in vals:
        if isinstance(v, torch.SymInt):
            note(_expr(v))
    if not symbols:
        return None
    s = symbols[0]
    sig = DynamicSignature(primary=s, symbols=symbols, placeholders=vals)
    for i, v in enumerate(vals):
        pd, problem = pad_dim_of(v, s)
        if problem and not sig.hazard:
            sig.hazard = f"input {placeholders[i].name}: {problem}"
        if pd is not None:
            sig.in_pad[i] = pd
    out = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    tensor_outs = 0
    for i, o in enumerate(outs):
        v = _meta(o)
        if isinstance(v, torch.SymInt):
            sig.out_symint[i] = _expr(v)
        tensor_outs += isinstance(v, torch.Tensor)
        pd, _ = pad_dim_of(v, s)
        if pd is not None:
            sig.out_pad[i] = pd
    sig.leading = (not sig.out_symint and len(sig.out_pad) == tensor_outs
                   and all(pd.dim == 0 for pd in list(sig.in_pad.values())
                           + list(sig.out_pad.values())))
    if sig.hazard is None:
        sig.hazard = padding_hazard(gm, s)
    sig.slice_hazard = slice_hazard(gm, s)
    return sig
