"""Planning decided before any C is emitted, and the scratch layout decided
after: which elementwise nodes are inlined into their readers, which scalar
factors a GEMM's alpha computes, the groups to emit in order (row groups
among them), which aliased inputs need a snapshot, and the live ranges that
let scratch buffers share memory."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from nkipy.core.ir import ELEMENTWISE, REDUCTIONS, Node, Value, dtype_name

from .ctext import is_double, is_float
from .maps import VIEW_OPS, view_map


#: Cheap elementwise ops that are recomputed in their readers' loop rather
#: than stored, when several readers share that loop (Generator.plan_inline).
SHARED_INLINE_OPS = frozenset({"add", "sub", "mul", "neg", "abs", "cast", "maximum", "minimum",
                               "square", "copy"})
SHARED_INLINE_MAX_COPIES = 4


@dataclass
class Group:
    """One step of the emission plan: a node emitted on its own (``rows``
    None), or the members of a row group over rows of shape ``rows``."""

    nodes: list[Node]
    rows: tuple[int, ...] | None = None


class Planning:
    """The planning steps of the Generator (a mixin: the state they read and
    decide lives in Generator.__init__)."""

    # -- analysis --

    def effective_users(self, v: Value) -> list[Node]:
        """Non-view readers of v, looking through chains of views."""
        result = []
        for u in self.users.get(v.id, []):
            if u.op in VIEW_OPS:
                if u.output.id in self.out_ids:
                    result.append(u)  # returned view: materialised by a copy
                result.extend(self.effective_users(u.output))
            else:
                result.append(u)
        return result

    def view_chain_affine(self, v: Value) -> bool:
        """True when every view between v and its readers is affine."""
        for u in self.users.get(v.id, []):
            if u.op in VIEW_OPS:
                if view_map(u) is None or not self.view_chain_affine(u.output):
                    return False
        return True

    def can_inline(self, n: Node) -> bool:
        if n.op not in ELEMENTWISE and n.op != "iota" and not (
                n.op == "constant" and n.output.size == 1):
            return False
        v = n.output
        if v.id in self.out_ids:
            return False
        if n.op in ("iota", "constant"):
            return self.view_chain_affine(v)
        users = self.effective_users(v)
        if len(users) != 1:
            return False
        u = users[0]
        # np.pad reads its source elementwise too (Structured._gen_pad's copy
        # loop): a PReLU before a ceil-mode max pool's padding is computed there
        return (u.op in ELEMENTWISE or u.op in REDUCTIONS or u.op == "pad") and \
            self.view_chain_affine(v)

    def plan_inline(self) -> None:
        """Chooses the elementwise nodes computed inside their readers' loops.
        Besides a node with a single reader (can_inline), a cheap node whose
        readers all end up in the same loop (``x`` in ``0.5 * x * (1 +
        erf(x / sqrt 2))``, say: a bias add before GELU) is inlined too and
        recomputed per use, which costs an add where a materialised buffer
        costs a pass over memory. Decided from the last node back, so readers
        are settled first; ``copies`` bounds how often an expression repeats."""
        roots: dict[int, int] = {}    # inlined value id -> id() of the group node
        copies: dict[int, int] = {}   # inlined value id -> instances in that group
        for n in reversed(self.g.nodes):
            if len(n.outputs) != 1:
                continue
            v = n.output
            if self.can_inline(n):
                users = self.effective_users(v)
                if n.op in ("iota", "constant") or not users:
                    self.inline.add(v.id)
                    continue
                u = users[0]
                uid = u.output.id if len(u.outputs) == 1 else None
                c = copies.get(uid, 1) if uid in self.inline else 1
                if c > 1 and n.op not in SHARED_INLINE_OPS:
                    continue
                self.inline.add(v.id)
                roots[v.id] = roots.get(uid, id(u)) if uid in self.inline else id(u)
                copies[v.id] = c
                continue
            if n.op not in SHARED_INLINE_OPS or v.id in self.out_ids or \
                    not self.view_chain_affine(v):
                continue
            users = self.effective_users(v)
            if len(users) < 2 or not all(u.op in ELEMENTWISE and len(u.outputs) == 1
                                         for u in users):
                continue
            rs, total = set(), 0
            for u in users:
                uid = u.output.id
                if uid in self.inline:
                    rs.add(roots[uid])
                    total += copies[uid]
                else:
                    rs.add(id(u))
                    total += 1
            if len(rs) == 1 and total <= SHARED_INLINE_MAX_COPIES:
                self.inline.add(v.id)
                roots[v.id] = rs.pop()
                copies[v.id] = total

    def plan_gemm_scaling(self) -> None:
        """``matmul(a, b) * c`` (or ``/ c`` with c a power of two) for a scalar
        constant c, where the product has no other reader: the GEMM computes
        it with alpha = c, writing the scaled result directly (attention
        scores times 1/sqrt(d), say), instead of a pass over the product."""
        for n in self.g.nodes:
            if n.op not in ("mul", "div") or len(n.outputs) != 1 or \
                    n.output.id in self.inline:
                continue
            for pos in ((0, 1) if n.op == "mul" else (0,)):
                x, c = n.inputs[pos], n.inputs[1 - pos]
                p = x.node
                if p is None or p.op != "matmul" or x.id in self.out_ids or \
                        not is_float(x.dtype) or is_double(x.dtype) or \
                        x.dtype != n.output.dtype or \
                        x.shape != n.output.shape or id(p) in self.gemm_alpha:
                    continue
                readers = self.users.get(x.id, [])
                if len(readers) != 1 or readers[0] is not n:
                    continue
                value = self.scalar_constant(c)
                if value is None or not math.isfinite(value):
                    continue
                if n.op == "div":
                    if value == 0.0 or math.frexp(abs(value))[0] != 0.5:
                        continue  # 1/c inexact: x / c and x * (1/c) could differ
                    value = 1.0 / value
                if float(np.float32(value)) != value:
                    continue
                self.gemm_alpha[id(p)] = (value, n)
                self.scaled_by_gemm.add(id(n))
                break

    def plan_gemm_accumulate(self) -> None:
        """``matmul(a, b) + y`` with y a float32 buffer of the product's shape
        that only this add reads: y's producer writes the add's buffer and the
        GEMM, moved to the add's place, accumulates into it (beta = 1), saving
        the pass over the product the add costs (GPT-2's tied embedding:
        its gradient is the logits' product plus the embedding's scatter, a
        4096 x 256 add). The product must have no other reader, y must be
        computed in a group of its own (not inlined, not a view, an input or
        an output; reshapes of such a value, each read only by the next, are
        looked through), and the add must have a buffer that is not an
        input's."""
        g = self.g
        for n in g.nodes:
            if n.op != "add" or len(n.outputs) != 1 or n.output.id in self.inline or \
                    id(n) in self.scaled_by_gemm or dtype_name(n.output.dtype) != "float32" or \
                    any(j in g.aliases for j in self.out_ids.get(n.output.id, [])):
                continue
            for pos in (0, 1):
                x, y = n.inputs[pos], n.inputs[1 - pos]
                p, q = x.node, y.node
                if p is None or p.op != "matmul" or id(p) in self.gemm_alpha or \
                        id(p) in self.gemm_accumulate or x.id in self.out_ids or \
                        x.shape != n.output.shape or y.shape != n.output.shape or \
                        x.dtype != n.output.dtype or y.dtype != n.output.dtype or x is y:
                    continue
                if self.users.get(x.id, []) != [n] or self.users.get(y.id, []) != [n]:
                    continue
                # through reshapes read only by the next (the flat scatter of an
                # embedding's gradient, reshaped to the table's shape)
                while q is not None and q.op == "reshape" and y.id not in self.out_ids and \
                        self.users.get(q.inputs[0].id, []) == [q]:
                    y = q.inputs[0]
                    q = y.node
                if q is None or q is p or q.op in VIEW_OPS or q.op == "constant" or \
                        len(q.outputs) != 1 or y.id in self.inline or y.id in self.out_ids or \
                        y.id in self.redirect or id(q) in self.conv_epilogue or \
                        id(q) in self.fused_into_conv:   # a conv2d writes y through its own epilogue
                    continue
                self.gemm_accumulate[id(p)] = n
                self.redirect[y.id] = n.output
                break

    @staticmethod
    def scalar_constant(v: Value) -> float | None:
        """The value of a one-element constant (through views), else None."""
        while v.node is not None and v.node.op in VIEW_OPS and v.size == 1:
            v = v.node.inputs[0]
        if v.node is None or v.node.op != "constant" or v.size != 1:
            return None
        val = np.asarray(v.node.attrs["value"]).reshape(-1)[0]
        if not np.issubdtype(np.asarray(val).dtype, np.floating) and \
                not np.issubdtype(np.asarray(val).dtype, np.integer):
            return None
        return float(np.float32(val)) if v.dtype == np.float32 else float(val)

    def plan_groups(self) -> list[Group]:
        """The groups to emit, in order: every node that is not a view, not
        inlined and not computed by a GEMM's alpha. A last-axis reduction
        (is_row_reduction) starts a row group that the nodes right after it
        reading the group join; the elementwise node right before it joins
        too when only the group reads it, else it is a group of its own.
        Decided before anything is emitted: emitting a row group takes its
        per-row scalars out of ``inline`` (hoist_row_scalars), but those
        precede the group, so no later decision depends on it."""
        g = self.g
        moved = {id(add): p for p in g.nodes if id(p) in self.gemm_accumulate
                 for add in (self.gemm_accumulate[id(p)],)}
        emit = [moved.get(id(n), n) for n in g.nodes
                if n.op not in VIEW_OPS and n.output.id not in self.inline
                and id(n) not in self.scaled_by_gemm and id(n) not in self.gemm_accumulate
                and id(n) not in self.fused_into_conv]
        groups: list[Group] = []
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
                # members read earlier members' results only at their own row
                # (RowGroups.reads_own_row); the rest are emitted after the group
                keep = self.row_reads_ok(members, S)
                members, j = members[:keep], i + keep
                # an elementwise producer read only inside the group (the residual
                # sum before a layer norm) is computed in it, into a row buffer
                ids = set(map(id, members))
                if lead and all(id(u) in ids for u in self.group_readers(lead[0].output)) \
                        and self.row_reads_ok(lead + members, S) == len(members) + 1:
                    members = lead + members
                    lead = []
                if lead:
                    groups.append(Group([lead[0]]))
                if len(members) > 1:
                    groups.append(Group(members, S))
                    i = j
                    continue
            groups.append(Group([n]))
            i += 1
        return groups

    def snapshot_aliased_inputs(self) -> None:
        """An output aliasing input i is written into input i's memory. Unless
        the write is provably safe (the only reader is the op producing the
        output, reading each element before writing it), readers get a copy
        of the input taken before anything is written."""
        g = self.g
        for j, i in sorted(g.aliases.items()):
            x = g.inputs[i]
            users = self.effective_users(x)
            if not users:
                continue
            producer = g.outputs[j].node
            safe = len(users) == 1 and producer is not None and users[0] is producer and (
                producer.op in ("set_slice", "update_slice", "put_along_axis")
                and producer.inputs[0] is x and x not in producer.inputs[1:])
            if safe or self.read_in_step(x, producer):
                continue
            tmp = Value(x.shape, x.dtype)
            self.gen_copy(tmp, x)
            self.buffers[x.id] = self.buffers[tmp.id]
            self.body.append("")

    def read_in_step(self, x: Value, producer: Node | None) -> bool:
        """Whether every read of input x happens in the elementwise loop of
        ``producer`` (the node whose output is written over x), at the index
        being written: x is read directly (through no view) by the producer
        or by elementwise nodes of x's shape inlined into it (lerp's ``x +
        w * (y - x)``), so each element is read before it is overwritten."""
        if producer is None or producer.op not in ELEMENTWISE or \
                producer.output.shape != x.shape:
            return False

        def into_producer(u: Node) -> bool:
            if u is producer:
                return True
            if u.op not in ELEMENTWISE or len(u.outputs) != 1 or u.output.shape != x.shape or \
                    u.output.id not in self.inline or u.output.id in self.out_ids:
                return False
            readers = self.users.get(u.output.id, [])
            return bool(readers) and all(into_producer(r) for r in readers)

        return all(into_producer(u) for u in self.users.get(x.id, []))

    def live_ranges(self) -> dict[str, tuple[int, int]]:
        """First and last top-level kernel statement using each scratch buffer
        (directly, or inside the loop function a statement runs)."""
        stmts: list[str] = []
        cur: list[str] = []
        depth = 0
        for ln in self.body:
            cur.append(ln)
            depth += ln.count("{") - ln.count("}")
            if depth == 0:
                stmts.append("\n".join(cur))
                cur = []
        if cur:
            stmts.append("\n".join(cur))
        scratch = {b.name for b in self.scratch}
        word = re.compile(r"\b(\w+)\b")
        in_func: dict[str, set[str]] = {}
        for text in self.funcs:
            head = re.match(r"static void (\w+)\(", text)
            if head:
                in_func[head.group(1)] = set(word.findall(text)) & scratch
        ranges: dict[str, tuple[int, int]] = {}
        for i, text in enumerate(stmts):
            names = set(word.findall(text))
            used = names & scratch
            for fn in names & in_func.keys():
                used |= in_func[fn]
            for name in used:
                first, _ = ranges.get(name, (i, i))
                ranges[name] = (first, i)
        return ranges

    def plan_scratch(self) -> int:
        """Gives every scratch buffer a byte offset in the one scratch block;
        buffers whose live ranges do not overlap share memory (largest
        first, each at the lowest offset free during its whole life).
        Returns the block's size."""
        ranges = self.live_ranges()
        placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
        total = 0
        for b in sorted(self.scratch, key=lambda b: -b.nbytes):
            size = (max(b.nbytes, 1) + 63) // 64 * 64
            first, last = ranges.get(b.name, (0, 1 << 30))
            busy = sorted((o, e) for o, e, f, l in placed if not (l < first or last < f))
            offset = 0
            for o, e in busy:
                if offset + size <= o:
                    break
                offset = max(offset, e)
            b.offset = offset
            placed.append((offset, offset + size, first, last))
            total = max(total, offset + size)
        return total
