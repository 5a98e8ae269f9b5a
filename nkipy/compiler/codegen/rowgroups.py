"""Row groups: a last-axis reduction fused with the elementwise work around
it (softmax, layer and RMS norms) into one parallel loop over rows, one pass
per member over each row; per-row scalars stay in registers and full-row
intermediates in a per-worker row buffer."""
from __future__ import annotations

import numpy as np

from nkipy.core.ir import ELEMENTWISE, REDUCTIONS, Node, Value

from .ctext import (_fix_ptrs, _subst, compute_type, elementwise_c, is_float, reduce_parts,
                    store_expr)
from .loops import PARALLEL_GRAIN
from .maps import (VIEW_OPS, Access, Buffer, Dim, access_of, broadcast_map, compose, identity_map,
                   view_map)


class RowGroups:
    """Generator methods that find and emit row groups (a mixin: the state
    lives in Generator.__init__)."""

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

    def leaf_reads(self, n: Node, S: tuple[int, ...]) -> list[tuple[Value, tuple[Dim, ...] | None]]:
        """The materialised values member n reads, each with the map from the
        row group's index space onto it, through views and inlined nodes (as
        ``expr`` composes them). None for a read through a reshape that is no
        index map (its operand would be copied first)."""
        found: list[tuple[Value, tuple[Dim, ...] | None]] = []

        def walk(v: Value, dmap: tuple[Dim, ...] | None) -> None:
            p = v.node
            if p is not None and p.op in VIEW_OPS:
                inner = view_map(p)
                walk(p.inputs[0], None if inner is None or dmap is None else compose(inner, dmap))
            elif p is not None and v.id in self.inline and p.op not in ("constant", "iota"):
                for o in p.inputs:
                    walk(o, None if dmap is None else
                         compose(broadcast_map(o.shape, v.ndim), dmap))
            elif p is None or p.op not in ("constant", "iota"):
                found.append((v, dmap))
        if n.op in REDUCTIONS:
            walk(n.inputs[0], identity_map(len(S)))
        else:
            out = self.row_map(n.output, S)
            for o in n.inputs:
                walk(o, compose(broadcast_map(o.shape, n.output.ndim), out))
        return found

    def reads_own_row(self, v: Value, dmap: tuple[Dim, ...] | None, S: tuple[int, ...]) -> bool:
        """True when a member's result v, read through dmap, is read only at
        the row the group is computing: every outer index of v is the row's
        own, and a per-row value (shape S[:-1] or S[:-1] + (1,)) does not vary
        along the row. Any other read needs a row another worker computes, or
        one not computed yet (a flip or shift across rows), or a per-row value
        broadcast along the row (``a.sum(-1) + b`` with b of shape (N, 1))."""
        if dmap is None:
            return False
        ndim = len(S)

        def same(a: Dim, b: Dim) -> bool:
            """a and b index the same element at every point of the space."""
            def term(d: Dim) -> tuple[int | None, int]:
                if d.src is None or d.step == 0 or S[d.src] == 1:
                    return (None, 0)
                return (d.src, d.step)
            return a.start == b.start and term(a) == term(b)
        want = self.row_map(v, S)
        if v.shape == S:   # a full row: any element of the row is ready
            return all(same(a, b) for a, b in zip(dmap[:ndim - 1], want[:ndim - 1]))
        return len(dmap) == len(want) and all(same(a, b) for a, b in zip(dmap, want))

    def row_reads_ok(self, members: list[Node], S: tuple[int, ...]) -> int:
        """How many of members, taken in order, form a valid row group: the
        index of the first member that reads an earlier member's result at
        another row (reads_own_row), else len(members)."""
        made: set[int] = set()
        for i, m in enumerate(members):
            if any(v.id in made and not self.reads_own_row(v, dmap, S)
                   for v, dmap in self.leaf_reads(m, S)):
                return i
            made.update(o.id for o in m.outputs)
        return len(members)

    @staticmethod
    def row_map(v: Value, S: tuple[int, ...]) -> tuple[Dim, ...]:
        """The map from a row group's index space onto v as the group computes
        v: the full row, a kept size-1 last axis, or (shape S[:-1]) one value
        per row."""
        ndim = len(S)
        if v.shape == S:
            return identity_map(ndim)
        if v.shape == S[:-1] + (1,):
            return identity_map(ndim - 1) + (Dim(None),)
        return identity_map(ndim - 1)

    def hoist_row_scalars(self, n: Node, S: tuple[int, ...]) -> list[Node]:
        """Inlined per-row subexpressions of member n (like rsqrt(mean + eps)
        in a norm) become members of their own, computed once per row.

        Only where the expression really reads them once per row: a value of
        shape S[:-1] read by a full-row operation broadcasts along the row
        (NumPy aligns it to the trailing axes: b in ``a * b`` of a
        matrix-vector product), so it stays inlined."""
        hoisted: list[Node] = []
        ndim = len(S)

        def walk(v: Value, dmap: tuple[Dim, ...]) -> None:
            p = v.node
            if p is None or v.id not in self.inline and (p.op not in VIEW_OPS):
                return
            if p.op in VIEW_OPS:
                inner = view_map(p)
                if inner is not None:   # (a copying reshape is materialised first)
                    walk(p.inputs[0], compose(inner, dmap))
                return
            if p.op in ("constant", "iota"):
                return
            for o in p.inputs:
                walk(o, compose(broadcast_map(o.shape, v.ndim), dmap))
            if self.row_kind(v, S) == "row" and dmap == self.row_map(v, S):
                self.inline.discard(v.id)
                hoisted.append(p)
        if n.op in REDUCTIONS:
            walk(n.inputs[0], identity_map(ndim))
        else:
            out = self.row_map(n.output, S)
            for o in n.inputs:
                walk(o, compose(broadcast_map(o.shape, n.output.ndim), out))
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
        assert self.row_reads_ok(members, S) == len(members), \
            "row group member reads another row of a member's result"
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
        # slots of R values: 4-byte (float, int32_t, uint32_t) or, when some
        # slot holds 8-byte values (int64_t, double), all 8-byte wide
        wide = any(p[2].dtype.itemsize == 8 for p in plans
                   if p[2] is not None and p[2].kind == "row")
        W = R * (2 if wide else 1)   # a slot's width in floats
        for slot in range(slots):
            ct = slot_types[f"rb{slot}"]
            lines.append(f"  {ct} *restrict rb{slot} = ({ct} *)(k->{rb_field} + (int64_t)worker * "
                         f"{slots * W} + {slot * W});")
        lines.append("  for (int64_t r = begin; r < end; r++) {")
        lines.append("    int64_t rem = r; (void)rem;")
        for d in reversed(range(ndim - 1)):
            lines.append(f"    int64_t ix{d} = rem % {outer[d]}; rem /= {outer[d]};")

        def member_map(v: Value) -> tuple[Dim, ...]:
            return self.row_map(v, S)

        def subst_for(leaves: list[Access], tag: str) -> tuple[list[str], dict[str, str]]:
            decls, subst = [], {}
            for k2, a in enumerate(leaves):
                if a.buffer.kind == "rowscalar":
                    # one value per row: a read that varies along the row would
                    # need the value's row of elements, not this row's scalar
                    assert not a.strides[-1], f"per-row scalar {a.buffer.name} read along a row"
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
            self.rowbufs.append((rb_field, slots * W))
        grain = max(1, PARALLEL_GRAIN // max(R, 1))
        self.body.append(f"  env->parallel_for(env->ctx, {n_rows}, {grain}, {fn}, &kc);")
