"""C code generation: an optimised IR graph becomes one C translation unit
that implements the NEFF ABI (runtime/include/nkrt/neff_abi.h).

The plan, in order:

1. **Views.** ``reshape``, ``transpose``, ``slice`` and ``broadcast_to`` never
   copy: a view is an affine index map onto the value it views, folded into
   the address arithmetic of whoever reads it.
2. **Fusion.** An elementwise node (``cast``, ``where``, unary and binary ops,
   ``iota``, scalar constants) whose only readers are one fusible group is
   inlined into that reader's loop as an expression. Fusible groups are
   elementwise loops and reductions, so chains of elementwise ops and the
   elementwise producers of a reduction become a single loop nest.
3. **Groups.** Everything that remains is a group writing one materialised
   buffer: an elementwise loop nest, a reduction, a matrix product (through
   the runtime's GEMM), or one of the structured ops (concat, pad, take,
   cumsum, topk, conv2d, ...).
4. **Buffers.** Inputs and outputs live in the tensors the runtime binds;
   intermediates get offsets in one scratch block planned by live ranges,
   so buffers whose lifetimes do not overlap share memory.
5. **Emission.** Loop nests collapse contiguous dimensions, run their outer
   dimension through ``env->parallel_for`` and keep a unit-stride inner loop
   the C compiler vectorises. float16/bfloat16 are stored as such and
   computed in float32.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nkipy.core.ir import (BINARY, COLLECTIVES, ELEMENTWISE, PREDICATES, REDUCTIONS, UNARY,
                           Graph, Node, Value, bfloat16, dtype_name)
from .maps import (VIEW_OPS, Access, Buffer, Dim, access_of, broadcast_map, compose,
                   contiguous_strides, identity_map, reshape_strides, view_map)
from .ctext import (_NKRT_DTYPE, _STORAGE, CodegenError, _fix_ptrs, _int_max, _int_min,
                    _subst, c_literal, compute_type, elementwise_c, is_float, load_expr,
                    reduce_parts, storage_type, store_expr)
from .planning import SHARED_INLINE_MAX_COPIES, SHARED_INLINE_OPS, Planning
from .loops import PARALLEL_GRAIN, Loops
from .matmul import Matmul
from .structured import Structured


# ---- the generator ----------------------------------------------------------

class Generator(Planning, Loops, Matmul, Structured):
    """Turns one optimised Graph into C source; see the module docstring."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.users: dict[int, list[Node]] = graph.users()
        self.out_ids: dict[int, list[int]] = {}
        for j, v in enumerate(graph.outputs):
            self.out_ids.setdefault(v.id, []).append(j)
        self.buffers: dict[int, Buffer] = {}      # value id -> materialised buffer
        self.scratch: list[Buffer] = []
        self.consts: list[Buffer] = []
        self.funcs: list[str] = []                # helper functions (loop bodies)
        self.body: list[str] = []                 # statements of the kernel function
        self.inline: set[int] = set()             # value ids computed inside readers
        self.rowbufs: list[tuple[str, int]] = []  # (kctx field, floats per worker)
        self.gemm_alpha: dict[int, tuple[float, Node]] = {}  # id(matmul) -> (alpha, scaling node)
        self.scaled_by_gemm: set[int] = set()     # id() of nodes a GEMM's alpha computes
        self.counter = 0

    # -- driver --

    def plan(self) -> None:
        g = self.g
        for i, v in enumerate(g.inputs):
            self.buffers[v.id] = Buffer(f"i{i}", v.dtype, v.shape, "in", i)
        self.plan_inline()
        self.plan_gemm_scaling()
        self.snapshot_aliased_inputs()
        emit = [n for n in g.nodes if n.op not in VIEW_OPS and n.output.id not in self.inline
                and id(n) not in self.scaled_by_gemm]
        i = 0
        while i < len(emit):
            n = emit[i]
            lead = []
            if n.op in ELEMENTWISE and i + 1 < len(emit) and \
                    self.is_row_reduction(emit[i + 1]) and \
                    emit[i + 1].inputs[0].shape == n.output.shape and \
                    self.member_kind(n, n.output.shape) == "full" and \
                    n.output.id not in self.out_ids:
                lead = [n]  # may join the row group that starts next (below)
                i += 1
                n = emit[i]
            if self.is_row_reduction(n):
                S = n.inputs[0].shape
                members = [n]
                j = i + 1
                while j < len(emit) and self.member_kind(emit[j], S) and \
                        self.reads_any(emit[j], members + lead):
                    members.append(emit[j])
                    j += 1
                # an elementwise producer read only inside the group (the residual
                # sum before a layer norm) is computed in it, into a row buffer
                ids = set(map(id, members))
                if lead and all(id(u) in ids for u in self.group_readers(lead[0].output)):
                    members = lead + members
                    lead = []
                if lead:
                    self.gen_node(lead[0])
                    self.body.append("")
                if len(members) > 1:
                    self.gen_row_group(members, S)
                    self.body.append("")
                    i = j
                    continue
            self.gen_node(n)
            self.body.append("")
            i += 1
        # outputs not written by a group: inputs, views, repeated values, constants
        for j, v in enumerate(g.outputs):
            buf = self.buffers.get(v.id)
            if buf is not None and buf.kind == "out" and buf.index == j:
                continue
            tmp = Value(v.shape, v.dtype)
            self.out_ids[tmp.id] = [j]
            self.gen_copy(tmp, v)

    def gen_node(self, n: Node) -> None:
        if n.op in REDUCTIONS:
            self.gen_reduction(n)
        elif n.op == "matmul":
            self.gen_matmul(n)
        elif n.op in ELEMENTWISE or n.op == "iota":
            self.gen_elementwise(n.output)
        elif n.op == "constant" and n.output.size == 1 and n.output.id in self.out_ids:
            self.gen_elementwise(n.output)
        else:
            self.gen_structured(n)

    # -- row groups: last-axis reductions fused with the elementwise work
    #    around them (softmax, norms), one pass per member over each row --

    @staticmethod
    def is_row_reduction(n: Node) -> bool:
        if n.op not in REDUCTIONS or not n.inputs[0].ndim:
            return False
        src = n.inputs[0]
        return tuple(n.attrs["axes"]) == (src.ndim - 1,) and src.size > 0

    @staticmethod
    def row_kind(v: Value, S: tuple[int, ...]) -> str | None:
        if v.shape == S:
            return "full"
        if v.shape == S[:-1] + (1,) or v.shape == S[:-1]:
            return "row"
        return None

    def member_kind(self, n: Node, S: tuple[int, ...]) -> str | None:
        if self.is_row_reduction(n) and n.inputs[0].shape == S:
            return "reduce"
        if n.op in ELEMENTWISE and len(n.outputs) == 1:
            return self.row_kind(n.output, S)
        return None

    def leaf_values(self, n: Node) -> list[Value]:
        """Materialised values n's (inlined) expression reads."""
        found: list[Value] = []

        def walk(v: Value) -> None:
            p = v.node
            if p is not None and (p.op in VIEW_OPS or v.id in self.inline):
                for o in p.inputs:
                    walk(o)
            else:
                found.append(v)
        for o in n.inputs:
            walk(o)
        return found

    def reads_any(self, n: Node, members: list[Node]) -> bool:
        outs = {o.id for m in members for o in m.outputs}
        return any(v.id in outs for v in self.leaf_values(n))

    def hoist_row_scalars(self, n: Node, S: tuple[int, ...]) -> list[Node]:
        """Inlined per-row subexpressions of member n (like rsqrt(mean + eps)
        in a norm) become members of their own, computed once per row."""
        hoisted: list[Node] = []

        def walk(v: Value) -> None:
            p = v.node
            if p is None or v.id not in self.inline and (p.op not in VIEW_OPS):
                return
            if p.op in VIEW_OPS:
                walk(p.inputs[0])
                return
            if p.op in ("constant", "iota"):
                return
            for o in p.inputs:
                walk(o)
            if self.row_kind(v, S) == "row":
                self.inline.discard(v.id)
                hoisted.append(p)
        for o in n.inputs:
            walk(o)
        return hoisted

    def group_readers(self, v: Value) -> list[Node]:
        """The groups that read v: its readers, with elementwise readers
        inlined (directly, not through a view) replaced by their own readers,
        so ``x - mean`` read by the inlined square of a variance counts as
        read by the variance's reduction."""
        result: list[Node] = []
        for u in self.effective_users(v):
            if u.op not in VIEW_OPS and len(u.outputs) == 1 and u.output.id in self.inline \
                    and any(o is v for o in u.inputs):
                result.extend(self.group_readers(u.output))
            else:
                result.append(u)
        return result

    def gen_row_group(self, members: list[Node], S: tuple[int, ...]) -> None:
        ordered: list[Node] = []
        for m in members:
            ordered += self.hoist_row_scalars(m, S)
            ordered.append(m)
        member_set = set(map(id, ordered))
        ndim = len(S)
        R = S[-1]
        outer = S[:-1]
        n_rows = int(np.prod(outer)) if outer else 1
        idx = [f"ix{d}" for d in range(ndim - 1)] + ["j"]
        fn = self.fresh("rows")
        rb_field = self.fresh("rowbuf")
        slots = 0
        plans = []  # (node, kind, local buffer or None, global buffer or None)
        for m in ordered:
            v = m.output
            kind = "row" if m.op in REDUCTIONS else self.row_kind(v, S)
            local = v.id not in self.out_ids and all(
                id(u) in member_set for u in self.group_readers(v))
            if local and kind == "full":
                buf = Buffer(f"rb{slots}", v.dtype, v.shape, "row",
                             stride_override=(0,) * (v.ndim - 1) + (1,))
                slots += 1
            elif kind == "row":  # per-row scalars stay in registers inside the group
                buf = Buffer(self.fresh("sv"), v.dtype, v.shape, "rowscalar",
                             stride_override=(0,) * v.ndim)
            else:
                buf = None
            if buf is not None:
                self.buffers[v.id] = buf
            plans.append((m, kind, buf, local))
        lines = [f"static void {fn}(void *arg, int64_t begin, int64_t end, uint32_t worker) {{",
                 "  const kctx_t *k = (const kctx_t *)arg;", "  (void)worker;"]
        slot_types = {p[2].name: compute_type(p[2].dtype) for p in plans
                      if p[2] is not None and p[2].kind == "row"}
        for slot in range(slots):  # 4-byte slots: float, int32_t or uint32_t
            ct = slot_types[f"rb{slot}"]
            lines.append(f"  {ct} *restrict rb{slot} = ({ct} *)(k->{rb_field} + (int64_t)worker * "
                         f"{slots * R} + {slot * R});")
        lines.append("  for (int64_t r = begin; r < end; r++) {")
        lines.append("    int64_t rem = r; (void)rem;")
        for d in reversed(range(ndim - 1)):
            lines.append(f"    int64_t ix{d} = rem % {outer[d]}; rem /= {outer[d]};")

        def member_map(v: Value) -> tuple[Dim, ...]:
            if v.shape == S:
                return identity_map(ndim)
            if v.shape == S[:-1] + (1,):
                return identity_map(ndim - 1) + (Dim(None),)
            return identity_map(ndim - 1)

        def subst_for(leaves: list[Access], tag: str) -> tuple[list[str], dict[str, str]]:
            decls, subst = [], {}
            for k2, a in enumerate(leaves):
                if a.buffer.kind == "rowscalar":
                    subst[f"LEAF{k2}"] = a.buffer.name
                    continue
                base = " + ".join([str(a.offset)] + [f"{a.strides[d]} * ix{d}"
                                                    for d in range(ndim - 1) if a.strides[d]])
                decls.append(f"const int64_t {tag}_{k2} = {base};")
                st = a.strides[-1]
                subst[f"LEAF{k2}"] = (f"{a.buffer.name}[{tag}_{k2} + {st} * j]" if st
                                      else f"{a.buffer.name}[{tag}_{k2}]")
            return decls, subst

        globals_after: list[tuple[Value, Buffer]] = []
        for mi, (m, kind, local, is_local) in enumerate(plans):
            v = m.output
            tag = f"m{mi}"
            leaves: list[Access] = []
            if m.op in REDUCTIONS:
                src = m.inputs[0]
                e = self.expr(src, identity_map(ndim), leaves, ndim, idx)
                xt = compute_type(src.dtype)
            else:
                dmap = member_map(v)
                args = [self.expr(o, compose(broadcast_map(o.shape, v.ndim), dmap), leaves, ndim,
                                  idx) for o in m.inputs]
                e = elementwise_c(m, args)
            decls, subst = subst_for(leaves, tag)
            body = _subst(e, subst)
            lines.append("    {")
            lines += ["      " + d for d in decls]
            gbuf = None
            if not is_local:
                gbuf = self.new_output_buffer(v)
                globals_after.append((v, gbuf))
                if local is not None:  # keep the in-group scalar as the reader's source
                    self.buffers[v.id] = local
                acc = access_of(gbuf, member_map(v), ndim)
                goff = " + ".join([str(acc.offset)] + [f"{acc.strides[d]} * ix{d}"
                                                      for d in range(ndim - 1) if acc.strides[d]])
            if kind == "row":
                if m.op in REDUCTIONS:
                    acct, decl, update, clause, finish = reduce_parts(m.op, m.inputs[0].dtype,
                                                                      v.dtype)
                    lines.append(f"      {decl}")
                    lines.append(f"      #pragma omp simd {clause}")
                    lines.append(f"      for (int64_t j = 0; j < {R}; j++) {{")
                    lines.append(f"        {xt} x = {body};")
                    lines.append(f"        {update}")
                    lines.append("      }")
                    if finish:
                        lines.append(f"      {finish}")
                    value = "acc"
                else:
                    lines.append("      const int64_t j = 0; (void)j;")
                    value = body
                reg = "x" if is_float(v.dtype) else "r"
                lines.append(f"      {local.name} = {value};")
                # hide the value's origin from the optimiser: forwarding it into
                # the next loops otherwise defeats their vectorisation (GCC 12)
                lines.append(f"      __asm__(\"\" : \"+{reg}\"({local.name}));")
                if gbuf is not None:
                    lines.append(f"      k->{gbuf.name}[{goff}] = "
                                 f"{store_expr(v.dtype, local.name)};")
            else:  # a full row
                lines.append("      #pragma omp simd")
                lines.append(f"      for (int64_t j = 0; j < {R}; j++) {{")
                if gbuf is not None:
                    lines.append(f"        k->{gbuf.name}[{goff} + {acc.strides[-1]} * j] = "
                                 f"{store_expr(v.dtype, body)};")
                else:
                    lines.append(f"        {local.name}[j] = {body};")
                lines.append("      }")
            lines.append("    }")
        lines.append("  }")
        lines.append("}")
        # scalars live across member blocks: declare them at the row's top
        scalar_decls = [f"    {compute_type(p[2].dtype)} {p[2].name} = 0;" for p in plans
                        if p[2] is not None and p[2].kind == "rowscalar"]
        row_open = lines.index("    int64_t rem = r; (void)rem;")
        lines[row_open + 1:row_open + 1] = scalar_decls
        self.funcs.append("\n".join(_fix_ptrs(lines, not self.g.aliases)))
        for v, gbuf in globals_after:  # readers after the group use memory
            self.buffers[v.id] = gbuf
        if slots:
            self.rowbufs.append((rb_field, slots * R))
        grain = max(1, PARALLEL_GRAIN // max(R, 1))
        self.body.append(f"  env->parallel_for(env->ctx, {n_rows}, {grain}, {fn}, &kc);")

    def source(self) -> str:
        self.plan()
        scratch_total = self.plan_scratch()
        g = self.g
        lines = ["/* generated by nkipy: kernel " + g.name + " */", PRELUDE_INCLUDE, ""]
        # the context struct with typed pointers to every buffer
        fields = []
        for i, v in enumerate(g.inputs):
            fields.append(f"  {storage_type(v.dtype)} *i{i};")
        for j, v in enumerate(g.outputs):
            fields.append(f"  {storage_type(v.dtype)} *o{j};")
        for b in self.scratch:
            fields.append(f"  {storage_type(b.dtype)} *{b.name};")
        for b in self.consts:
            fields.append(f"  const {storage_type(b.dtype)} *{b.name};")
        for name, _ in self.rowbufs:
            fields.append(f"  float *{name};")
        lines.append("typedef struct kctx {")
        lines += fields or ["  int unused;"]
        lines.append("} kctx_t;")
        lines.append("")
        for b in self.consts:
            lines.append(const_array(b))
        lines.append("")
        lines += self.funcs
        lines.append("")
        lines.append("static int kernel(const nkrt_kernel_env_t *env, void *const *in, "
                     "void *const *out) {")
        lines.append("  (void)in; (void)out;")
        lines.append("  kctx_t kc;")
        lines.append("  memset(&kc, 0, sizeof(kc));")
        for i, v in enumerate(g.inputs):
            lines.append(f"  kc.i{i} = ({storage_type(v.dtype)} *)in[{i}];")
        for j, v in enumerate(g.outputs):
            lines.append(f"  kc.o{j} = ({storage_type(v.dtype)} *)out[{j}];")
        if scratch_total:
            lines.append(f"  uint8_t *scratch = (uint8_t *)env->scratch(env->ctx, {scratch_total}u);")
            lines.append("  if (!scratch) { env->set_error(env->ctx, \"out of scratch memory\"); "
                         "return 1; }")
            for b in self.scratch:
                lines.append(f"  kc.{b.name} = ({storage_type(b.dtype)} *)(scratch + {b.offset});")
        for b in self.consts:
            lines.append(f"  kc.{b.name} = {b.name}_data;")
        for name, per_worker in self.rowbufs:
            lines.append(f"  kc.{name} = (float *)env->scratch(env->ctx, (uint64_t)env->num_workers"
                         f" * {per_worker * 4}u);")
            lines.append(f"  if (!kc.{name}) {{ env->set_error(env->ctx, \"out of scratch memory\"); "
                         "return 1; }")
        lines += self.body
        lines.append("  return 0;")
        lines.append("}")
        lines.append("")
        lines += descriptor(g, scratch_total)
        return "\n".join(lines) + "\n"


PRELUDE_INCLUDE = "#include \"nkipy_prelude.h\""


def const_array(b: Buffer) -> str:
    arr = b.data
    assert arr is not None
    name = dtype_name(b.dtype)
    if name in ("float16", "bfloat16"):
        flat = arr.reshape(-1).view(np.uint16)
        items = ", ".join(str(int(x)) for x in flat)
        ctype = "uint16_t"
        return (f"static const {ctype} {b.name}_raw[{max(flat.size, 1)}] = {{{items or '0'}}};\n"
                f"#define {b.name}_data ((const {storage_type(b.dtype)} *){b.name}_raw)")
    flat = arr.reshape(-1)
    if name == "float32":
        items = ", ".join(c_literal(x, b.dtype) for x in flat)
    elif name == "bool":
        items = ", ".join("1" if x else "0" for x in flat)
    else:
        items = ", ".join(str(int(x)) for x in flat)
    return (f"static const {storage_type(b.dtype)} {b.name}_data[{max(flat.size, 1)}] = "
            f"{{{items or '0'}}};")


def descriptor(g: Graph, scratch_total: int) -> list[str]:
    lines = []

    def table(kind: str, values: list[Value], names: list[str], aliases: dict[int, int]) -> None:
        for k, v in enumerate(values):
            dims = ", ".join(str(s) for s in v.shape) or "0"
            lines.append(f"static const int64_t {kind}_shape{k}[{max(v.ndim, 1)}] = {{{dims}}};")
        entries = []
        for k, (v, name) in enumerate(zip(values, names)):
            alias = aliases.get(k, -1)
            entries.append(f"  {{\"{name}\", {_NKRT_DTYPE[dtype_name(v.dtype)]}, {v.ndim}, "
                           f"{kind}_shape{k}, {v.nbytes}u, {alias}}},")
        lines.append(f"static const nkrt_neff_tensor_t {kind}s[{max(len(values), 1)}] = {{")
        lines.extend(entries or ["  {\"unused\", 0, 0, 0, 0, -1},"])
        lines.append("};")

    table("input", g.inputs, [v.name for v in g.inputs], {})
    table("output", g.outputs, g.output_names, g.aliases)
    lines += [
        "static const nkrt_neff_desc_t desc = {",
        f"  sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, \"{g.name}\", {len(g.inputs)}, "
        f"{len(g.outputs)}, inputs, outputs, {scratch_total}u, kernel}};",
        "",
        "__attribute__((visibility(\"default\")))",
        "const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {",
        "  (void)runtime_abi_version;",
        "  return &desc;",
        "}",
    ]
    return lines


def generate_c(graph: Graph) -> str:
    """C source of a NEFF implementing `graph` (already optimised)."""
    return Generator(graph).source()
