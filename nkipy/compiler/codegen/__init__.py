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
from .rowgroups import RowGroups


# ---- the generator ----------------------------------------------------------

class Generator(Planning, Loops, Matmul, Structured, RowGroups):
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
