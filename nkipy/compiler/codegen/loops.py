"""Loop emission: the buffer a group writes, C expressions of values read
through affine maps (inlined elementwise producers included), and the
parallel loop nests of elementwise groups, copies and reductions."""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from nkipy.core.ir import Node, Value

from .ctext import (CodegenError, _fix_ptrs, _subst, c_literal, compute_type, elementwise_c,
                    load_expr, reduce_parts, store_expr)
from .maps import (VIEW_OPS, Access, Buffer, Dim, access_of, broadcast_map, compose,
                   contiguous_strides, identity_map, reshape_strides, view_map)


#: Elements below which a loop runs on one thread.
PARALLEL_GRAIN = 1 << 14
#: Side of the square tiles a transposing loop walks (emit_tiled_loop): 32
#: floats are two cache lines per row of the tile, 8 KiB of lines in all.
TRANSPOSE_TILE = 32
#: The value of a reduction over no elements, where it has one.
REDUCE_IDENTITY = {"reduce_sum": 0, "reduce_prod": 1, "reduce_any": 0, "reduce_all": 1}


class Loops:
    """Generator methods that emit expressions and loop nests (a mixin: the
    state lives in Generator.__init__)."""

    # -- helpers --

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def new_output_buffer(self, v: Value) -> Buffer:
        """Decides where a group writes v: an output tensor or scratch."""
        target = self.redirect.get(v.id)
        if target is not None:   # writes another value's buffer (plan_gemm_accumulate)
            buf = self.buffers.get(target.id) or self.new_output_buffer(target)
            if buf.shape != v.shape:   # a reshape of the target: the same memory
                buf = Buffer(buf.name, buf.dtype, v.shape, buf.kind, buf.index, buf.offset,
                             buf.nbytes, buf.data)
            self.buffers[v.id] = buf
            return buf
        outs = self.out_ids.get(v.id)
        reshaped = None if outs else self.reshaped_output(v)
        if outs:
            j = outs[0]
            buf = Buffer(f"o{j}", v.dtype, v.shape, "out", j)
        elif reshaped is not None:
            r, j = reshaped
            self.buffers[r.id] = Buffer(f"o{j}", r.dtype, r.shape, "out", j)
            buf = Buffer(f"o{j}", v.dtype, v.shape, "out", j)
        else:
            buf = Buffer(self.fresh("t"), v.dtype, v.shape, "scratch", nbytes=v.nbytes)
            self.scratch.append(buf)
        self.buffers[v.id] = buf
        return buf

    def reshaped_output(self, v: Value) -> tuple[Value, int] | None:
        """(r, j) when a value about to get a scratch buffer is returned as
        output j only through reshapes, ``r`` being the returned reshape (a
        product ``x @ w`` returned as ``reshape(x @ w, (1, T, V))``, say): v
        is written straight into output j (a fresh buffer is contiguous, so
        every reshape of it is the same memory), saving the copy into the
        output. Not for outputs written into an input (aliases), where an
        early write could clobber an operand still to be read."""
        for u in self.users.get(v.id, []):
            if u.op != "reshape" or u.output.dtype != v.dtype or u.output.id in self.buffers:
                continue
            outs = self.out_ids.get(u.output.id)
            if outs:
                if outs[0] not in self.g.aliases:
                    return u.output, outs[0]
                continue
            found = self.reshaped_output(u.output)
            if found is not None:
                return found
        return None

    def materialized_source(self, v: Value) -> tuple[Buffer, tuple[Dim, ...]] | None:
        """(buffer, map from v's index space onto it) if v is readable directly."""
        if v.id in self.buffers:
            return self.buffers[v.id], identity_map(v.ndim)
        n = v.node
        if n is not None and n.op in VIEW_OPS:
            dmap = view_map(n)
            inner = self.materialized_source(n.inputs[0])
            if inner is None:
                return None
            buf, m = inner
            if dmap is None:  # general reshape of a contiguous window
                if m == identity_map(n.inputs[0].ndim) and buf.shape == n.inputs[0].shape:
                    alias = Buffer(buf.name, buf.dtype, v.shape, buf.kind, buf.index, buf.offset,
                                   buf.nbytes, buf.data)
                    return alias, identity_map(v.ndim)
                strided = self.strided_reshape(buf, m, n)
                if strided is not None:
                    return strided, identity_map(v.ndim)
                self.materialize_reshape(n)
                return self.buffers[v.id], identity_map(v.ndim)
            return buf, compose(m, dmap)
        return None

    # -- expressions --

    def expr(self, v: Value, dmap: tuple[Dim, ...], leaves: list[Access], iter_ndim: int,
             idx: list[str]) -> str:
        """C expression of v at the iteration index, given the map from the
        iteration space onto v. Leaf reads are appended to `leaves` and
        referenced as L<k>(...)."""
        src = self.materialized_source(v)
        if src is not None:
            buf, m = src
            acc = access_of(buf, compose(m, dmap), iter_ndim)
            leaves.append(acc)
            k = len(leaves) - 1
            if buf.kind in ("row", "rowscalar"):  # held in the compute type already
                return f"(({compute_type(v.dtype)})LEAF{k})"
            return load_expr(v.dtype, f"LEAF{k}")
        n = v.node
        assert n is not None, f"{v!r} has neither a buffer nor a producer"
        if n.op in VIEW_OPS:
            inner = view_map(n)
            if inner is None:  # a reshape that is no index map: copy its operand first
                self.materialize_reshape(n)
                return self.expr(v, dmap, leaves, iter_ndim, idx)
            return self.expr(n.inputs[0], compose(inner, dmap), leaves, iter_ndim, idx)
        if n.op == "constant":
            return c_literal(np.asarray(n.attrs["value"]).reshape(()), v.dtype)
        if n.op == "iota":
            d = dmap[n.attrs["dim"]]
            term = str(d.start) if d.src is None else f"({d.start} + {d.step} * {idx[d.src]})"
            return f"(({compute_type(v.dtype)}){term})"
        # an inlined elementwise node
        args = []
        for operand in n.inputs:
            bmap = compose(broadcast_map(operand.shape, v.ndim), dmap)
            args.append(self.expr(operand, bmap, leaves, iter_ndim, idx))
        return elementwise_c(n, args)

    @staticmethod
    def strided_reshape(buf: Buffer, m: tuple[Dim, ...], n: Node) -> Buffer | None:
        """A reshape of a strided view (a slice of the last axis split into
        heads, say) that NumPy could make without a copy: an alias of buf with
        the view's own strides, or None."""
        if buf.kind not in ("in", "out", "scratch", "const"):
            return None
        src = n.inputs[0]
        a = access_of(buf, m, src.ndim)
        strides = reshape_strides(src.shape, a.strides, n.output.shape)
        if strides is None:
            return None
        return Buffer(buf.name, buf.dtype, n.output.shape, buf.kind, buf.index, buf.offset,
                      buf.nbytes, buf.data, stride_override=tuple(strides), base=a.offset)

    def materialize_reshape(self, n: Node) -> None:
        """Makes a general reshape readable: its operand is copied into a
        contiguous scratch buffer, which the reshape then views directly."""
        src = n.inputs[0]
        tmp = Value(src.shape, src.dtype)
        self.gen_copy(tmp, src)
        buf = self.buffers[tmp.id]
        self.buffers[n.output.id] = Buffer(buf.name, buf.dtype, n.output.shape, buf.kind,
                                           buf.index, buf.offset, buf.nbytes, buf.data)

    # -- loop emission --

    def emit_loop(self, shape: tuple[int, ...], writes: list[tuple[Buffer, tuple[int, ...], int]],
                  build: Callable[[list[str]], tuple[list[Access], list[str]]]) -> None:
        """Emits a parallel loop nest over `shape` (elementwise: one index per
        element). `build(idx)` returns the leaf accesses and one C value
        expression per written buffer (in LEAF<k> form); `writes` gives each
        written buffer with its strides over the iteration space and offset."""
        ndim = len(shape)
        idx = [f"ix{d}" for d in range(ndim)]
        leaves, values = build(idx)
        uses_idx = any(re.search(r"\bix\d+\b", e) for e in values)
        all_strides = [a.strides for a in leaves] + [w[1] for w in writes]
        # collapse dims d, d+1 when every access is contiguous across them
        # (not when the values use the indices themselves, as iota does)
        dims = list(range(ndim))
        groups: list[list[int]] = []
        for d in dims:
            if groups and not uses_idx and all(
                    s[groups[-1][-1]] == s[d] * shape[d] for s in all_strides):
                groups[-1].append(d)
            else:
                groups.append([d])
        cshape = [int(np.prod([shape[d] for d in gr])) for gr in groups]
        cstrides = [[s[gr[-1]] for gr in groups] for s in all_strides]
        if not cshape:
            cshape, cstrides = [1], [[0] for _ in all_strides]
        total = int(np.prod(cshape))
        if total == 0:
            return
        fn = self.fresh("loop")
        inner = cshape[-1]
        outer_dims = cshape[:-1]
        n_outer = int(np.prod(outer_dims)) if outer_dims else 1
        lines = [f"static void {fn}(void *arg, int64_t begin, int64_t end, uint32_t worker) {{",
                 "  const kctx_t *k = (const kctx_t *)arg;", "  (void)worker; (void)k;"]
        nleaf = len(leaves)

        if n_outer == 1:
            # one (collapsed) dimension: parallelise over chunks of it
            lines.append("  #pragma omp simd")
            lines.append("  for (int64_t j = begin; j < end; j++) {")
            if uses_idx:
                for d in range(ndim - 1):
                    lines.append(f"    const int64_t ix{d} = 0;")
                lines.append(f"    const int64_t ix{max(ndim - 1, 0)} = j;")
            subst = {}
            for k, a in enumerate(leaves):
                st = cstrides[k][-1]
                subst[f"LEAF{k}"] = f"{a.buffer.name}[{a.offset} + {st} * j]" if st else \
                    f"{a.buffer.name}[{a.offset}]"
            for w, (buf, _, off) in enumerate(writes):
                st = cstrides[nleaf + w][-1]
                lines.append(f"    k->{buf.name}[{off} + {st} * j] = "
                             f"{store_expr(buf.dtype, _subst(values[w], subst))};")
            lines.append("  }")
            lines.append("}")
            self.funcs.append("\n".join(_fix_ptrs(lines, not self.g.aliases)))
            grain = max(1, PARALLEL_GRAIN)
            self.body.append(f"  env->parallel_for(env->ctx, {inner}, {grain}, {fn}, &kc);")
            return
        tile_dim = self.transpose_tile_dim(cshape, cstrides)
        if tile_dim is not None:
            self.emit_tiled_loop(fn, lines, cshape, cstrides, tile_dim, leaves, writes, values,
                                 uses_idx, ndim)
            return
        # outer rows x inner vector loop
        lines.append("  for (int64_t r = begin; r < end; r++) {")
        lines.append("    int64_t rem = r;")
        for d in reversed(range(len(outer_dims))):
            lines.append(f"    int64_t ix{d} = rem % {outer_dims[d]}; rem /= {outer_dims[d]};")
        self.emit_row(lines, "    ", "0", str(inner), cstrides, leaves, writes, values,
                      uses_idx, ndim)
        lines.append("  }")
        lines.append("}")
        self.funcs.append("\n".join(_fix_ptrs(lines, not self.g.aliases)))
        grain = max(1, PARALLEL_GRAIN // max(inner, 1))
        self.body.append(f"  env->parallel_for(env->ctx, {n_outer}, {grain}, {fn}, &kc);")

    @staticmethod
    def emit_row(lines: list[str], pad: str, j0: str, j1: str, cstrides: list[list[int]],
                 leaves: list[Access], writes: list[tuple[Buffer, tuple[int, ...], int]],
                 values: list[str], uses_idx: bool, ndim: int) -> None:
        """One row of a loop nest whose outer indices ``ix0 ..`` are set: each
        access's base offset, then the vectorised inner loop over ``j`` in
        [j0, j1), indented by ``pad`` (emit_loop's row order and
        emit_tiled_loop's tiles share it)."""
        nleaf = len(leaves)

        def base(off: int, strides: list[int]) -> str:
            return " + ".join([str(off)] + [f"{st} * ix{d}" for d, st in
                                            enumerate(strides[:-1]) if st])

        for k, a in enumerate(leaves):
            lines.append(f"{pad}const int64_t b{k} = {base(a.offset, cstrides[k])};")
        for w, (buf, _, off) in enumerate(writes):
            lines.append(f"{pad}const int64_t w{w} = {base(off, cstrides[nleaf + w])};")
        lines.append(f"{pad}#pragma omp simd")
        lines.append(f"{pad}for (int64_t j = {j0}; j < {j1}; j++) {{")
        if uses_idx:
            lines.append(f"{pad}  const int64_t ix{ndim - 1} = j;")
        subst = {}
        for k, a in enumerate(leaves):
            st = cstrides[k][-1]
            subst[f"LEAF{k}"] = f"{a.buffer.name}[b{k} + {st} * j]" if st else \
                f"{a.buffer.name}[b{k}]"
        for w, (buf, _, off) in enumerate(writes):
            st = cstrides[nleaf + w][-1]
            lines.append(f"{pad}  k->{buf.name}[w{w} + {st} * j] = "
                         f"{store_expr(buf.dtype, _subst(values[w], subst))};")
        lines.append(f"{pad}}}")

    @staticmethod
    def transpose_tile_dim(cshape: list[int], cstrides: list[list[int]]) -> int | None:
        """The outer dimension to tile with the inner one when some access
        walks the inner dimension with a large stride but an outer one with
        stride 1 (a transpose materialised: ``x.T.copy()``, or an operand read
        transposed); None for loops whose accesses suit the row order."""
        if len(cshape) < 2 or cshape[-1] < TRANSPOSE_TILE:
            return None
        best = None
        for st in cstrides:
            if abs(st[-1]) <= 1:
                continue
            for d in range(len(cshape) - 1):
                if st[d] == 1 and cshape[d] >= TRANSPOSE_TILE // 2 and \
                        (best is None or cshape[d] > cshape[best]):
                    best = d
        return best

    def emit_tiled_loop(self, fn: str, lines: list[str], cshape: list[int],
                        cstrides: list[list[int]], td: int, leaves: list[Access],
                        writes: list[tuple[Buffer, tuple[int, ...], int]], values: list[str],
                        uses_idx: bool, ndim: int) -> None:
        """emit_loop's nest for a transposing loop: outer dimension ``td`` and
        the inner one walked in TRANSPOSE_TILE x TRANSPOSE_TILE tiles, so the
        lines a strided access touches are reused from L1 across the tile (a
        row-order transposed copy of a 4096 x 256 matrix read one float per
        cache line from L2 and ran 5-8x slower than torch's)."""
        T = TRANSPOSE_TILE
        outer = list(cshape[:-1])
        tiles = list(outer)
        tiles[td] = -(-outer[td] // T)
        n_par = int(np.prod(tiles))
        inner = cshape[-1]
        lines.append("  for (int64_t r = begin; r < end; r++) {")
        lines.append("    int64_t rem = r;")
        for d in reversed(range(len(outer))):
            name = f"tt{d}" if d == td else f"ix{d}"
            lines.append(f"    int64_t {name} = rem % {tiles[d]}; rem /= {tiles[d]};")
        lines.append(f"    const int64_t td_end = tt{td} * {T} + {T} < {outer[td]} ? "
                     f"tt{td} * {T} + {T} : {outer[td]};")
        lines.append(f"    for (int64_t jb = 0; jb < {inner}; jb += {T}) {{")
        lines.append(f"      const int64_t je = jb + {T} < {inner} ? jb + {T} : {inner};")
        lines.append(f"      for (int64_t ix{td} = tt{td} * {T}; ix{td} < td_end; ix{td}++) {{")
        self.emit_row(lines, "        ", "jb", "je", cstrides, leaves, writes, values,
                      uses_idx, ndim)
        lines += ["      }", "    }", "  }", "}"]
        self.funcs.append("\n".join(_fix_ptrs(lines, not self.g.aliases)))
        grain = max(1, PARALLEL_GRAIN // max(T * inner, 1))
        self.body.append(f"  env->parallel_for(env->ctx, {n_par}, {grain}, {fn}, &kc);")

    # -- groups --

    def gen_elementwise(self, v: Value) -> None:
        out = self.new_output_buffer(v)
        shape = v.shape

        def build(idx):
            leaves: list[Access] = []
            n = v.node
            if n.op == "constant":
                e = c_literal(np.asarray(n.attrs["value"]).reshape(-1)[0], v.dtype)
            elif n.op == "iota":
                e = f"(({compute_type(v.dtype)}){idx[n.attrs['dim']]})"
            else:
                args = [self.expr(o, broadcast_map(o.shape, v.ndim), leaves, v.ndim, idx)
                        for o in n.inputs]
                e = elementwise_c(n, args)
            return leaves, [e]

        self.emit_loop(shape, [(out, out.strides, 0)], build)

    def gen_copy(self, v: Value, src: Value) -> None:
        """Materialises src (a view, input, or other buffer) into v's buffer."""
        out = self.new_output_buffer(v)

        def build(idx):
            leaves: list[Access] = []
            return leaves, [self.expr(src, identity_map(src.ndim), leaves, v.ndim, idx)]

        self.emit_loop(v.shape, [(out, out.strides, 0)], build)

    def gen_reduction(self, n: Node) -> None:
        v = n.output
        src = n.inputs[0]
        axes = tuple(sorted(n.attrs["axes"]))
        if not axes or src.size == 0:
            self._reduce_trivial(n)
            return
        out = self.new_output_buffer(v)
        kept = [d for d in range(src.ndim) if d not in axes]
        # strides of the output over the input's index space
        ostr = [0] * src.ndim
        ocontig = contiguous_strides(v.shape)
        if n.attrs["keepdims"]:
            for d in kept:
                ostr[d] = ocontig[d]
        else:
            for j, d in enumerate(kept):
                ostr[d] = ocontig[j]
        leaves: list[Access] = []
        idx = [f"ix{d}" for d in range(src.ndim)]
        e = self.expr(src, identity_map(src.ndim), leaves, src.ndim, idx)
        ct = compute_type(v.dtype)
        op = n.op
        acct, decl, update, clause, finish = reduce_parts(op, src.dtype, v.dtype)
        init = decl.split("=")[1].split(";")[0].strip()
        combine = (update, clause)
        src_ct = compute_type(src.dtype)
        fn = self.fresh("reduce")
        kept_shape = [src.shape[d] for d in kept]
        red_shape = [src.shape[d] for d in axes]
        n_kept = int(np.prod(kept_shape)) if kept else 1
        n_red = int(np.prod(red_shape)) if axes else 1
        if v.size == 0:
            return
        inner_reduced = (src.ndim - 1) in axes if src.ndim else True
        lines = [f"static void {fn}(void *arg, int64_t begin, int64_t end, uint32_t worker) {{",
                 "  const kctx_t *k = (const kctx_t *)arg;", "  (void)worker;"]
        if inner_reduced or not kept:
            # each kept index reduces a (strided) block: acc in a register
            lines.append("  for (int64_t r = begin; r < end; r++) {")
            lines.append("    int64_t rem = r;")
            for d in reversed(kept):
                lines.append(f"    int64_t ix{d} = rem % {src.shape[d]}; rem /= {src.shape[d]};")
            lines.append(f"    {decl}")
            # collapse reduced dims when contiguous for every leaf
            loops = self._reduced_loops(axes, src.shape, leaves,
                                        collapse=not re.search(r"\bix\d+\b", e))
            depth = "    "
            for k2, (var, extent, _) in enumerate(loops):
                if k2 == len(loops) - 1:
                    lines.append(f"{depth}#pragma omp simd {combine[1]}")
                lines.append(f"{depth}for (int64_t {var} = 0; {var} < {extent}; {var}++) {{")
                depth += "  "
            subst = self._leaf_subst(leaves, idx, loops, axes)
            for var, _, dims in loops:
                if len(dims) == 1:
                    lines.append(f"{depth}int64_t ix{dims[0]} = {var}; (void)ix{dims[0]};")
            lines.append(f"{depth}{src_ct} x = {_subst(e, subst)};")
            lines.append(f"{depth}{combine[0]}")
            for _ in loops:
                depth = depth[:-2]
                lines.append(f"{depth}}}")
            off = " + ".join([f"{ostr[d]} * ix{d}" for d in kept if ostr[d]] or ["0"])
            if finish:
                lines.append(f"    {finish}")
            lines.append(f"    k->{out.name}[{off}] = {store_expr(v.dtype, 'acc')};")
            lines.append("  }")
            lines.append("}")
            self.funcs.append("\n".join(_fix_ptrs(lines, not self.g.aliases)))
            grain = max(1, PARALLEL_GRAIN // max(n_red, 1))
            self.body.append(f"  env->parallel_for(env->ctx, {n_kept}, {grain}, {fn}, &kc);")
            return
        # the innermost dim is kept: accumulate vectors of it across reduced dims
        last = src.ndim - 1
        outer = [d for d in kept if d != last]
        width = src.shape[last]
        lines.append("  for (int64_t r = begin; r < end; r++) {")
        lines.append("    int64_t rem = r;")
        for d in reversed(outer):
            lines.append(f"    int64_t ix{d} = rem % {src.shape[d]}; rem /= {src.shape[d]};")
        off = " + ".join([f"{ostr[d]} * ix{d}" for d in outer if ostr[d]] or ["0"])
        if op in ("reduce_max", "reduce_min"):
            cmp = ">" if op == "reduce_max" else "<"
            combine = (f"acc = (x {cmp} acc || x != x) ? x : acc;", "")
        lines.append(f"    for (int64_t c0 = 0; c0 < {width}; c0 += 256) {{")
        lines.append(f"      int64_t cn = {width} - c0 < 256 ? {width} - c0 : 256;")
        lines.append(f"      {acct} accv[256];")
        lines.append(f"      for (int64_t c = 0; c < cn; c++) accv[c] = {init};")
        depth = "      "
        for d in axes:
            lines.append(f"{depth}for (int64_t ix{d} = 0; ix{d} < {src.shape[d]}; ix{d}++) {{")
            depth += "  "
        lines.append(f"{depth}for (int64_t c = 0; c < cn; c++) {{")
        lines.append(f"{depth}  int64_t ix{last} = c0 + c;")
        subst = {f"LEAF{k2}": f"{a.buffer.name}[{a.offset} + " + " + ".join(
            [f"{st} * ix{d}" for d, st in enumerate(a.strides) if st] or ["0"]) + "]"
            for k2, a in enumerate(leaves)}
        lines.append(f"{depth}  {src_ct} x = {_subst(e, subst)};")
        lines.append(f"{depth}  {acct} acc = accv[c];")
        lines.append(f"{depth}  {combine[0]}")
        lines.append(f"{depth}  accv[c] = acc;")
        lines.append(f"{depth}}}")
        for _ in axes:
            depth = depth[:-2]
            lines.append(f"{depth}}}")
        lines.append(f"      for (int64_t c = 0; c < cn; c++) k->{out.name}[{off} + "
                     f"{ostr[last]} * (c0 + c)] = {store_expr(v.dtype, 'accv[c]')};")
        lines.append("    }")
        lines.append("  }")
        lines.append("}")
        self.funcs.append("\n".join(_fix_ptrs(lines, not self.g.aliases)))
        n_outer = int(np.prod([src.shape[d] for d in outer])) if outer else 1
        self.body.append(f"  env->parallel_for(env->ctx, {n_outer}, 1, {fn}, &kc);")

    def _reduce_trivial(self, n: Node) -> None:
        """A reduction over no axes (a cast) or over an empty input (the identity)."""
        v, src = n.output, n.inputs[0]
        if src.size == 0:
            init = REDUCE_IDENTITY.get(n.op)
            if init is None:
                raise CodegenError(f"{n.op} of an empty array has no identity")
            out = self.new_output_buffer(v)
            self.emit_loop(v.shape, [(out, out.strides, 0)],
                           lambda idx: ([], [c_literal(init, v.dtype)]))
            return
        out = self.new_output_buffer(v)

        def build(idx):
            leaves: list[Access] = []
            e = self.expr(src, identity_map(src.ndim), leaves, v.ndim, idx)
            if n.op in ("reduce_any", "reduce_all"):
                e = f"(({e}) != 0)"
            return leaves, [e]
        self.emit_loop(v.shape, [(out, out.strides, 0)], build)

    def _reduced_loops(self, axes, shape, leaves, collapse=True):
        """Loops over the reduced dims: collapses trailing reduced dims that
        are contiguous for every leaf into one. Returns (var, extent, dims)."""
        axes = list(axes)
        groups: list[list[int]] = []
        for d in axes:
            if collapse and groups and groups[-1][-1] == d - 1 and all(
                    a.strides[d - 1] == a.strides[d] * shape[d] for a in leaves):
                groups[-1].append(d)
            else:
                groups.append([d])
        return [(f"q{gi}", int(np.prod([shape[d] for d in gr])), gr) for gi, gr in enumerate(groups)]

    def _leaf_subst(self, leaves, idx, loops, axes):
        subst = {}
        for k, a in enumerate(leaves):
            terms = [str(a.offset)]
            for d, st in enumerate(a.strides):
                if st and d not in axes:
                    terms.append(f"{st} * ix{d}")
            for var, _, dims in loops:
                st = a.strides[dims[-1]]
                if st:
                    terms.append(f"{st} * {var}")
            subst[f"LEAF{k}"] = f"{a.buffer.name}[{' + '.join(terms)}]"
        return subst
