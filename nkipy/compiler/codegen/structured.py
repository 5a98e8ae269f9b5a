"""Structured ops: the materialising ops lowered to straightforward serial
loops (concat, pad, cumulative ops, argmax/argmin, take, slice updates,
topk), conv2d through the runtime's convolution routine and collectives
through the runtime's communicator."""
from __future__ import annotations

from typing import Callable

import numpy as np

from nkipy.core.ir import COLLECTIVES, Node, Value, dtype_name

from .ctext import (_NKRT_DTYPE, CodegenError, c_literal, c_string, compute_type, load_expr,
                    store_expr)
from .maps import Buffer, access_of, contiguous_strides, identity_map

#: The runtime's collective each collective op calls.
COLLECTIVE_KIND_C = {"all_reduce": "NKRT_CC_ALL_REDUCE", "reduce_scatter": "NKRT_CC_REDUCE_SCATTER",
                     "all_gather": "NKRT_CC_ALL_GATHER", "all_to_all": "NKRT_CC_ALL_TO_ALL"}
#: A collective's reduce_op attribute -> the runtime's reduction.
COLLECTIVE_REDUCE_C = {"add": "NKRT_CC_ADD", "multiply": "NKRT_CC_MUL", "maximum": "NKRT_CC_MAX",
                       "minimum": "NKRT_CC_MIN"}


class Structured:
    """Generator methods that emit the structured ops (a mixin: the state
    lives in Generator.__init__)."""

    # -- structured ops (materialising, straightforward loops) --

    def reader(self, v: Value, index_exprs: list[str]) -> str:
        """C load expression of v at a multi-index (forces v readable)."""
        src = self.materialized_source(v)
        if src is None:
            tmp = Value(v.shape, v.dtype)
            self.gen_copy(tmp, v)
            self.buffers[v.id] = self.buffers[tmp.id]
            src = self.buffers[v.id], identity_map(v.ndim)
        buf, m = src
        terms = []
        off = buf.base
        for bstride, d in zip(buf.strides, m):
            off += bstride * d.start
            if d.src is not None and bstride * d.step:
                terms.append(f"{bstride * d.step} * ({index_exprs[d.src]})")
        return f"kc.{buf.name}[{' + '.join([str(off)] + terms)}]"

    def serial_nest(self, shape: tuple[int, ...], body: Callable[[list[str]], list[str]],
                    depth: str = "  ") -> list[str]:
        if not shape:   # a block of its own: the body's locals (acc, cnt) may recur
            return [f"{depth}{{"] + [depth + "  " + s for s in body([])] + [f"{depth}}}"]
        lines = []
        idx = []
        for d, extent in enumerate(shape):
            var = self.fresh("x")
            idx.append(var)
            lines.append(f"{depth}for (int64_t {var} = 0; {var} < {extent}; {var}++) {{")
            depth += "  "
        lines += [depth + s for s in body(idx)]
        for _ in shape:
            depth = depth[:-2]
            lines.append(f"{depth}}}")
        return lines

    def gen_structured(self, n: Node) -> None:
        """Emits a structured op through the STRUCTURED_OPS table (a constant
        becomes a static array instead)."""
        if n.op == "constant":
            self._gen_constant(n)
            return
        if n.op == "conv2d":     # writes a fused activation's buffer (plan_conv_epilogue)
            self._gen_conv2d(n)
            return
        out = self.new_output_buffer(n.output)
        gen = STRUCTURED_OPS.get(n.op)
        if gen is None:
            raise CodegenError(f"the C code generator has no lowering for op {n.op!r}")
        gen(self, n, out)

    @staticmethod
    def writer(out: Buffer, v: Value) -> Callable[[list[str], str], str]:
        """``w(index_exprs, value)``: the C statement storing a compute-type
        value into out, v's buffer, at a multi-index."""
        def w(index_exprs, value):
            terms = [f"{s} * ({e})" for s, e in zip(out.strides, index_exprs) if s]
            return f"kc.{out.name}[{' + '.join(['0'] + terms)}] = {store_expr(v.dtype, value)};"
        return w

    def _gen_constant(self, n: Node) -> None:
        v = n.output
        arr = np.ascontiguousarray(np.asarray(n.attrs["value"], dtype=v.dtype).reshape(v.shape))
        name = self.fresh("c")
        buf = Buffer(name, v.dtype, v.shape, "const", data=arr)
        self.consts.append(buf)
        if v.id in self.out_ids:
            self.buffers[v.id] = buf
            tmp_src = Value(v.shape, v.dtype)
            self.buffers[tmp_src.id] = buf
            del self.buffers[v.id]
            self.gen_copy(v, tmp_src)
        else:
            self.buffers[v.id] = buf

    def _gen_concat(self, n: Node, out: Buffer) -> None:
        v = n.output
        w = self.writer(out, v)
        axis = n.attrs["axis"]
        base = 0
        for operand in n.inputs:
            if operand.size:
                def body(idx, operand=operand, base=base):
                    oi = list(idx)
                    oi[axis] = f"{idx[axis]} + {base}"
                    return [w(oi, load_expr(v.dtype, self.reader(operand, idx)))]
                self.body += self.serial_nest(operand.shape, body)
            base += operand.shape[axis]

    def _gen_pad(self, n: Node, out: Buffer) -> None:
        """Constant padding as two kinds of parallel loops: the source copied
        into the interior (read through expr(), so an elementwise producer
        with no other reader is computed in the same pass), and the fill
        value written over the border only - per padded dimension a low and
        a high slab, full extent in the other dimensions (corners are written
        twice, with the same value). The serial fill of the whole output and
        serial copy this replaces cost more than the 9 taps of the max pool
        that pads for ``ceil_mode`` (MTCNN's ONet)."""
        v = n.output
        fill = c_literal(n.attrs["value"], v.dtype)
        src = n.inputs[0]
        pads = n.attrs["pad_width"]
        strides = out.strides
        for d, (lo, hi) in enumerate(pads):
            for start, extent in ((0, lo), (v.shape[d] - hi, hi)):
                if extent <= 0 or v.size == 0:
                    continue
                shape = tuple(extent if e == d else s for e, s in enumerate(v.shape))
                self.emit_loop(shape, [(out, strides, out.base + start * strides[d])],
                               lambda idx: ([], [fill]))
        if src.size:
            interior = out.base + sum(lo * st for (lo, _), st in zip(pads, strides))

            def build(idx):
                leaves: list = []
                return leaves, [self.expr(src, identity_map(src.ndim), leaves, src.ndim, idx)]
            self.emit_loop(src.shape, [(out, strides, interior)], build)

    def _gen_cumulative(self, n: Node, out: Buffer) -> None:
        """cumsum and cumprod."""
        v, op = n.output, n.op
        w = self.writer(out, v)
        ct = compute_type(v.dtype)
        axis = n.attrs["axis"]
        src = n.inputs[0]
        outer = tuple(s for d, s in enumerate(v.shape) if d != axis)
        sym = "+" if op == "cumsum" else "*"

        def body(idx):
            full = list(idx[:axis]) + ["a"] + list(idx[axis:])
            return [f"{ct} acc = {0 if op == 'cumsum' else 1};",
                    f"for (int64_t a = 0; a < {v.shape[axis]}; a++) {{",
                    f"  acc = acc {sym} {load_expr(src.dtype, self.reader(src, full))};",
                    "  " + w(full, "acc"), "}"]
        self.body += self.serial_nest(outer, body)

    def _gen_arg_extreme(self, n: Node, out: Buffer) -> None:
        """argmax and argmin."""
        v, op = n.output, n.op
        w = self.writer(out, v)
        axis = n.attrs["axis"]
        src = n.inputs[0]
        sct = compute_type(src.dtype)
        outer = tuple(s for d, s in enumerate(src.shape) if d != axis)
        better = ">" if op == "argmax" else "<"

        def body(idx):
            full = list(idx[:axis]) + ["a"] + list(idx[axis:])
            oidx = list(idx[:axis]) + (["0"] if n.attrs["keepdims"] else []) + list(idx[axis:])
            return [f"{sct} best = 0; int64_t bi = -1;",
                    f"for (int64_t a = 0; a < {src.shape[axis]}; a++) {{",
                    f"  {sct} x = {load_expr(src.dtype, self.reader(src, full))};",
                    f"  if (bi < 0 || x {better} best || (x != x && best == best)) "
                    "{ best = x; bi = a; }", "}", w(oidx, "bi")]
        self.body += self.serial_nest(outer, body)

    def _gen_take(self, n: Node, out: Buffer) -> None:
        v = n.output
        w = self.writer(out, v)
        x, ind = n.inputs
        axis = n.attrs["axis"]
        n_axis = x.shape[axis]

        def body(idx):
            iidx = idx[axis:axis + ind.ndim]
            sel = f"nk_clamp_index((int64_t){self.reader(ind, iidx)}, {n_axis})"
            xidx = idx[:axis] + [sel] + idx[axis + ind.ndim:]
            return [w(idx, load_expr(x.dtype, self.reader(x, xidx)))]
        self.body += self.serial_nest(v.shape, body)

    def _gen_check_index(self, n: Node, out: Buffer) -> None:
        """Indices copied (negatives counted from the end where low < 0) while
        an or-reduction notes any outside [low, size): a vectorised pass; only
        when one is found does a second pass find the first and note it with
        its message (nk_note_bad_index; the kernel then fails)."""
        x, v = n.inputs[0], n.output
        low, size = int(n.attrs["low"]), int(n.attrs["size"])
        pre, _, post = n.attrs["message"].partition("{index}")
        w = self.writer(out, v)
        shape = x.shape or ()
        idx = [self.fresh("x") for _ in shape]
        depth = "  "
        lines = ["  {", "    int64_t nk_bad = 0;"]
        for d, extent in enumerate(shape):
            depth += "  "
            if d == len(shape) - 1:
                lines.append(f"{depth}#pragma omp simd reduction(|:nk_bad)")
            lines.append(f"{depth}for (int64_t {idx[d]} = 0; {idx[d]} < {extent}; {idx[d]}++) {{")
        inner = depth + "  "
        lines.append(f"{inner}const int64_t nk_v = (int64_t){self.reader(x, idx)};")
        lines.append(f"{inner}nk_bad |= (int64_t)(nk_v < {low}LL) | (int64_t)(nk_v >= {size}LL);")
        wrapped = f"(nk_v < 0 ? nk_v + {size}LL : nk_v)" if low < 0 else "nk_v"
        lines.append(inner + w(idx, wrapped))
        for _ in shape:
            lines.append(f"{depth}}}")
            depth = depth[:-2]
        lines.append("    if (nk_bad) {")
        flat = self.fresh("e")
        lines.append(f"      for (int64_t {flat} = 0; {flat} < {max(x.size, 1)}; {flat}++) {{")
        lines.append(f"        int64_t nk_r = {flat};")
        for d in reversed(range(len(shape))):
            lines.append(f"        const int64_t {idx[d]} = nk_r % {shape[d]}; nk_r /= {shape[d]};")
        lines.append(f"        const int64_t nk_v = (int64_t){self.reader(x, idx)};")
        lines.append(f"        if (nk_v < {low}LL || nk_v >= {size}LL) {{ nk_note_bad_index(nk_v, "
                     f"{c_string(pre)}, {c_string(post)}); break; }}")
        lines.append("      }")
        lines.append("    }")
        lines.append("  }")
        self.body += lines

    def _gen_take_along_axis(self, n: Node, out: Buffer) -> None:
        v = n.output
        w = self.writer(out, v)
        x, ind = n.inputs
        axis = n.attrs["axis"]

        def body(idx):
            iidx = [i if ind.shape[d] != 1 else "0" for d, i in enumerate(idx)]
            sel = f"nk_clamp_index((int64_t){self.reader(ind, iidx)}, {x.shape[axis]})"
            xidx = [i if x.shape[d] != 1 else "0" for d, i in enumerate(idx)]
            xidx[axis] = sel
            return [w(idx, load_expr(x.dtype, self.reader(x, xidx)))]
        self.body += self.serial_nest(v.shape, body)

    def contiguous_ptr(self, x: Value) -> str:
        """A C pointer to x's elements in row-major order (x copied into scratch
        first when its layout is not that)."""
        src = self.materialized_source(x)
        if src is not None:
            buf, m = src
            a = access_of(buf, m, x.ndim)
            want = contiguous_strides(x.shape)
            if all(st == w or ext == 1 for st, w, ext in zip(a.strides, want, x.shape)):
                return f"kc.{buf.name} + {a.offset}"
        tmp = Value(x.shape, x.dtype)
        self.gen_copy(tmp, x)
        return f"kc.{self.buffers[tmp.id].name}"

    def _scratch(self, dtype: np.dtype, shape: tuple[int, ...]) -> Buffer:
        buf = Buffer(self.fresh("t"), dtype, shape, "scratch",
                     nbytes=int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        self.scratch.append(buf)
        return buf

    def _gen_collective(self, n: Node, out: Buffer) -> None:
        """A collective through the runtime's communicator (env->lib->collective,
        docs/runtime.md): the caller's replica group is found from env->rank in
        a table of the groups; data moves as flat blocks, rearranged around the
        call for the dimension an op works along."""
        op, v, x = n.op, n.output, n.inputs[0]
        groups = n.attrs.get("replica_groups") or ((0,),)
        size = len(groups[0])
        if size == 1:     # one rank per group: the identity on the data
            if x.shape != v.shape:
                raise CodegenError(f"{op} with one rank per group must keep the shape")

            def body(idx):
                at = " + ".join(["0"] + [f"{st} * {i}" for st, i in zip(out.strides, idx) if st])
                value = store_expr(v.dtype, load_expr(x.dtype, self.reader(x, idx)))
                return [f"kc.{out.name}[{at}] = {value};"]
            self.body += self.serial_nest(v.shape, body)
            return
        dt = dtype_name(v.dtype)
        if dt not in _NKRT_DTYPE:
            raise CodegenError(f"{op} of {dt} is not supported")
        code = _NKRT_DTYPE[dt]
        es = np.dtype(v.dtype).itemsize
        src = self.contiguous_ptr(x)
        dst = f"kc.{out.name}"
        rop = COLLECTIVE_REDUCE_C[n.attrs.get("reduce_op", "add")]
        table = ", ".join("{" + ", ".join(str(r) for r in g) + "}" for g in groups)
        lines = ["  {",
                 f"    static const int32_t groups[{len(groups)}][{size}] = {{{table}}};",
                 "    const int32_t *grp = NULL;",
                 "    int64_t me = 0;",
                 f"    for (int gi = 0; gi < {len(groups)} && !grp; gi++)",
                 f"      for (int q = 0; q < {size}; q++)",
                 "        if (groups[gi][q] == env->rank) grp = groups[gi], me = q;",
                 "    (void)me;",
                 "    if (!grp) { env->set_error(env->ctx, \"" + op + ": this rank is in none of "
                 "its replica groups\"); return 1; }",
                 "    if (!NKRT_KERNEL_LIB_HAS_COLLECTIVE(env->lib)) { env->set_error(env->ctx, "
                 "\"" + op + ": the runtime has no collectives\"); return 1; }"]

        def call(s_ptr: str, d_ptr: str, count: int) -> str:
            return (f"    if (env->lib->collective(env->ctx, {COLLECTIVE_KIND_C[op]}, {code}, "
                    f"{rop}, grp, {size}, {s_ptr}, {d_ptr}, {count})) return 1;")

        def blocks(ax: int, shape: tuple[int, ...]) -> tuple[int, int]:
            outer = int(np.prod(shape[:ax], dtype=np.int64))
            inner = int(np.prod(shape[ax + 1:], dtype=np.int64))
            return outer, inner

        if op == "all_reduce":
            lines.append(call(src, dst, x.size))
        elif op == "all_gather":
            ax = n.attrs["axis"]
            outer, inner = blocks(ax, x.shape)
            if outer == 1:                   # the members' blocks are already in place
                lines.append(call(src, dst, x.size))
            else:
                tmp = self._scratch(v.dtype, (size,) + tuple(x.shape))
                lines.append(call(src, f"kc.{tmp.name}", x.size))
                sa = x.shape[ax]
                lines += [f"    for (int64_t g = 0; g < {size}; g++)",
                          f"      for (int64_t o = 0; o < {outer}; o++)",
                          f"        memcpy({dst} + (o * {size * sa} + g * {sa}) * {inner}, "
                          f"kc.{tmp.name} + (g * {outer} + o) * {sa * inner}, {sa * inner * es});"]
        elif op == "reduce_scatter":
            # the runtime's reduce_scatter takes one block per member, each
            # contiguous: along the first axis they already are
            ax = n.attrs["axis"]
            outer, inner = blocks(ax, x.shape)
            part = v.shape[ax]
            if outer == 1:
                lines.append(call(src, dst, v.size))
            else:
                send = self._scratch(v.dtype, (size,) + tuple(v.shape))
                lines += [f"    for (int64_t g = 0; g < {size}; g++)",
                          f"      for (int64_t o = 0; o < {outer}; o++)",
                          f"        memcpy(kc.{send.name} + (g * {outer} + o) * {part * inner}, "
                          f"{src} + (o * {x.shape[ax]} + g * {part}) * {inner}, "
                          f"{part * inner * es});"]
                lines.append(call(f"kc.{send.name}", dst, v.size))
        else:  # all_to_all
            sa, ca = n.attrs["split_axis"], n.attrs["concat_axis"]
            block = list(x.shape)
            block[sa] //= size
            count = int(np.prod(block, dtype=np.int64))
            send = self._scratch(v.dtype, (size,) + tuple(block))
            recv = self._scratch(v.dtype, (size,) + tuple(block))
            so, si = blocks(sa, x.shape)
            bs = block[sa]
            lines += [f"    for (int64_t b = 0; b < {size}; b++)",
                      f"      for (int64_t o = 0; o < {so}; o++)",
                      f"        memcpy(kc.{send.name} + (b * {so} + o) * {bs * si}, {src} + (o * "
                      f"{x.shape[sa]} + b * {bs}) * {si}, {bs * si * es});"]
            lines.append(call(f"kc.{send.name}", f"kc.{recv.name}", count))
            co, ci = blocks(ca, tuple(block))
            bc = block[ca]
            lines += [f"    for (int64_t m = 0; m < {size}; m++)",
                      f"      for (int64_t o = 0; o < {co}; o++)",
                      f"        memcpy({dst} + (o * {size * bc} + m * {bc}) * {ci}, kc.{recv.name} + "
                      f"(m * {co} + o) * {bc * ci}, {bc * ci * es});"]
        lines.append("  }")
        self.body += lines

    def _gen_update(self, n: Node, out: Buffer) -> None:
        """set_slice, update_slice and put_along_axis."""
        v = n.output
        w = self.writer(out, v)
        x = n.inputs[0]
        # start from a copy of x (skipped when x already lives in the output)
        xsrc = self.materialized_source(x)
        same = xsrc is not None and xsrc[1] == identity_map(x.ndim) and \
            xsrc[0].base == 0 and xsrc[0].stride_override is None and (
            xsrc[0].name == out.name or (xsrc[0].kind == "in" and out.kind == "out"
                                         and self.g.aliases.get(out.index) == xsrc[0].index))
        if not same and x.size:
            self.body += self.serial_nest(v.shape, lambda idx: [
                w(idx, load_expr(x.dtype, self.reader(x, idx)))])
        if n.op == "set_slice":
            upd = n.inputs[1]
            starts, steps = n.attrs["starts"], n.attrs["steps"]
            stops = n.attrs["stops"]
            sshape = tuple(len(range(a, b, s)) for a, b, s in zip(starts, stops, steps))
            if not int(np.prod(sshape)):
                return

            def body(idx):
                uidx = [i if (d - (len(sshape) - upd.ndim)) >= 0 and
                        upd.shape[d - (len(sshape) - upd.ndim)] != 1 else "0"
                        for d, i in enumerate(idx)][len(sshape) - upd.ndim:]
                oidx = [f"{a} + {s} * {i}" for a, s, i in zip(starts, steps, idx)]
                return [w(oidx, load_expr(upd.dtype, self.reader(upd, uidx)))]
            self.body += self.serial_nest(sshape, body)
        elif n.op == "update_slice":
            upd = n.inputs[1]
            starts = n.inputs[2:]
            tag = self.fresh("")
            lines = []
            for d, s in enumerate(starts):
                hi = x.shape[d] - upd.shape[d]
                sv = self.reader(s, [])
                lines.append(f"  int64_t st{d}_{tag} = (int64_t){sv};")
                lines.append(f"  st{d}_{tag} = st{d}_{tag} < 0 ? 0 : "
                             f"(st{d}_{tag} > {hi} ? {hi} : st{d}_{tag});")
            self.body += lines

            def body(idx):
                oidx = [f"st{d}_{tag} + {i}" for d, i in enumerate(idx)]
                return [w(oidx, load_expr(upd.dtype, self.reader(upd, idx)))]
            if upd.size:
                self.body += self.serial_nest(upd.shape, body)
        else:  # put_along_axis
            _, ind, vals = n.inputs
            axis = n.attrs["axis"]
            mode = n.attrs["mode"]

            def body(idx):
                sel = f"nk_clamp_index((int64_t){self.reader(ind, idx)}, {x.shape[axis]})"
                vidx = [i if vals.shape[d] != 1 else "0" for d, i in enumerate(idx)]
                oidx = list(idx)
                oidx[axis] = sel
                val = load_expr(vals.dtype, self.reader(vals, vidx))
                if mode == "add":
                    cur = load_expr(v.dtype, "kc." + out.name + "[" + " + ".join(
                        ["0"] + [f"{s} * ({e})" for s, e in zip(out.strides, oidx) if s]) + "]")
                    val = f"({cur} + {val})"
                return [w(oidx, val)]
            if ind.size:
                self.body += self.serial_nest(ind.shape, body)

    def _gen_topk(self, n: Node, out: Buffer) -> None:
        x = n.inputs[0]
        vals, inds = n.outputs
        k, axis = n.attrs["k"], n.attrs["axis"]
        largest = n.attrs["largest"]
        ibuf = self.new_output_buffer(inds)
        ct = compute_type(x.dtype)
        outer = tuple(s for d, s in enumerate(x.shape) if d != axis)
        better = ">" if largest else "<"
        # NaN ranks above every number (the interpreter's order): first among the
        # largest, last among the smallest
        nan_first = "(xv != xv && pv == pv)" if largest else "(xv == xv && pv != pv)"

        def body(idx):
            def at(a, buf):
                full = list(idx[:axis]) + [a] + list(idx[axis:])
                terms = [f"{s} * ({e})" for s, e in zip(buf.strides, full) if s]
                return f"kc.{buf.name}[{' + '.join(['0'] + terms)}]"
            full = list(idx[:axis]) + ["a"] + list(idx[axis:])
            return [
                # insertion into the k best (stable: earlier index wins ties)
                f"int32_t cnt = 0;",
                f"for (int64_t a = 0; a < {x.shape[axis]}; a++) {{",
                f"  {ct} xv = {load_expr(x.dtype, self.reader(x, full))};",
                f"  int32_t pos = cnt;",
                f"  while (pos > 0) {{",
                f"    {ct} pv = {load_expr(x.dtype, at('pos - 1', out))};",
                f"    if (xv {better} pv || {nan_first}) pos--; else break;",
                "  }",
                f"  if (pos >= {k}) continue;",
                f"  for (int32_t q = (cnt < {k} ? cnt : {k} - 1); q > pos; q--) {{",
                f"    {at('q', out)} = {at('q - 1', out)};",
                f"    {at('q', ibuf)} = {at('q - 1', ibuf)};",
                "  }",
                f"  {at('pos', out)} = {store_expr(x.dtype, 'xv')};",
                f"  {at('pos', ibuf)} = (int32_t)a;",
                f"  if (cnt < {k}) cnt++;",
                "}",
            ]
        self.body += self.serial_nest(outer, body)

    # -- conv2d: the runtime's convolution routine --

    def plan_conv_epilogue(self) -> None:
        """``maximum(conv2d(...), lo)`` and/or ``minimum(..., hi)`` for scalar
        constants (ReLU, ReLU6, hardtanh) where each step has no other reader:
        the runtime's convolution applies the clamp while it writes its
        output (env->lib->conv2d's activation), and the elementwise nodes are
        not emitted. float32 convolutions only."""
        for n in self.g.nodes:
            if n.op != "conv2d" or n.output.dtype != np.float32:
                continue
            cur, lo, hi, chain = n.output, -np.inf, np.inf, []
            while len(chain) < 2 and cur.id not in self.out_ids:
                readers = self.users.get(cur.id, [])
                if len(readers) != 1:
                    break
                u = readers[0]
                if u.op not in ("maximum", "minimum") or len(u.outputs) != 1 or \
                        u.output.dtype != cur.dtype or u.output.shape != cur.shape or \
                        (u.inputs[0] is cur) == (u.inputs[1] is cur):
                    break
                c = self.scalar_constant(u.inputs[1] if u.inputs[0] is cur else u.inputs[0])
                if c is None or c != c:
                    break
                nlo, nhi = (max(lo, c), hi) if u.op == "maximum" else (lo, min(hi, c))
                if nlo > nhi:     # min(max(v, lo), hi) would differ from the nodes' order
                    break
                lo, hi = nlo, nhi
                chain.append(u)
                cur = u.output
            # the last node is materialised (the convolution writes its buffer);
            # the ones before it have no reader but the next
            while chain and chain[-1].output.id in self.inline:
                chain.pop()
            if not chain:
                continue
            self.conv_epilogue[id(n)] = (lo, hi, chain[-1])
            self.fused_into_conv.update(id(u) for u in chain)

    def _f32_pointer(self, x: Value) -> str:
        """A C float pointer to x's elements, row-major (converted to float32
        and/or copied into scratch when x is not that already)."""
        if x.dtype == np.float32:
            return self.contiguous_ptr(x)
        tmp = Value(x.shape, np.dtype("float32"))
        self.gen_copy(tmp, x)
        return f"kc.{self.buffers[tmp.id].name}"

    def _gen_conv2d(self, n: Node, out: Buffer | None = None) -> None:
        """conv2d through the runtime's convolution (env->lib->conv2d,
        runtime/src/conv.c): float32 operands (float16 / bfloat16 converted
        first, the result rounded after), bias and a following clamp fused."""
        x, wgt = n.inputs[0], n.inputs[1]
        bias = n.inputs[2] if len(n.inputs) > 2 else None
        v = n.output
        for t in n.inputs:
            name = dtype_name(t.dtype)
            if name not in ("float32", "float16", "bfloat16"):
                raise CodegenError(
                    f"conv2d in {name} is not supported by the C code generator (its "
                    f"im2col GEMM computes in float32, which would round {name} values): "
                    "convert the operands to float32 to compile it")
        lo, hi, fused = self.conv_epilogue.get(id(n), (-np.inf, np.inf, None))
        if fused is not None:            # the convolution writes the clamped result
            out = self.new_output_buffer(fused.output)
            self.buffers[v.id] = out
        elif out is None:
            out = self.new_output_buffer(v)
        N, C, H, W = x.shape
        O, _, KH, KW = wgt.shape
        _, _, OH, OW = v.shape
        sh, sw = n.attrs["stride"]
        (pt, _), (pl, _) = n.attrs["padding"]
        dh, dw = n.attrs["dilation"]
        if v.size == 0:
            return
        xp = self._f32_pointer(x) if x.size else "NULL"
        wp = self._f32_pointer(wgt) if wgt.size else "NULL"
        bp = self._f32_pointer(bias) if bias is not None else "NULL"
        if v.dtype == np.float32:
            yp = f"kc.{out.name}"
            yf = None
        else:
            yf = Value(v.shape, np.dtype("float32"))
            ybuf = self._scratch(yf.dtype, v.shape)
            self.buffers[yf.id] = ybuf
            yp = f"kc.{ybuf.name}"
        if lo == -np.inf and hi == np.inf:
            act = "NKRT_ACT_NONE"
        elif lo == 0.0 and hi == np.inf:
            act = "NKRT_ACT_RELU"
        else:
            act = "NKRT_ACT_CLAMP"
        f32 = np.dtype("float32")
        self.body += [
            "  {",
            "    if (!NKRT_KERNEL_LIB_HAS_CONV2D(env->lib)) { env->set_error(env->ctx, "
            "\"conv2d: this runtime has no convolution routine (env->lib->conv2d); run the "
            "kernel with the runtime it was compiled for\"); return 1; }",
            "    const nkrt_conv2d_params_t cp = {",
            f"      .struct_size = sizeof(nkrt_conv2d_params_t), .activation = {act},",
            f"      .n = {N}, .c = {C}, .h = {H}, .w = {W}, .o = {O}, .kh = {KH}, .kw = {KW},",
            f"      .oh = {OH}, .ow = {OW}, .groups = {n.attrs['groups']},",
            f"      .stride_h = {sh}, .stride_w = {sw}, .pad_top = {pt}, .pad_left = {pl}, "
            f".dil_h = {dh}, .dil_w = {dw},",
            f"      .act_lo = {c_literal(np.float32(lo), f32)}, "
            f".act_hi = {c_literal(np.float32(hi), f32)},",
            f"      .x = {xp}, .weight = {wp}, .bias = {bp}, .y = {yp}}};",
            "    if (env->lib->conv2d(env->ctx, &cp)) return 1;",
            "  }"]
        if yf is not None:               # round the float32 result into v's dtype
            def build(idx):
                leaves: list = []
                return leaves, [self.expr(yf, identity_map(yf.ndim), leaves, v.ndim, idx)]
            self.emit_loop(v.shape, [(out, out.strides, 0)], build)


#: The structured ops: op name -> the Structured method that emits it, called
#: as ``gen(generator, node, out)`` with out the buffer of the node's output.
STRUCTURED_OPS: dict[str, Callable[[Structured, Node, Buffer], None]] = {
    "concat": Structured._gen_concat,
    "pad": Structured._gen_pad,
    "cumsum": Structured._gen_cumulative,
    "cumprod": Structured._gen_cumulative,
    "argmax": Structured._gen_arg_extreme,
    "argmin": Structured._gen_arg_extreme,
    "take": Structured._gen_take,
    "check_index": Structured._gen_check_index,
    "take_along_axis": Structured._gen_take_along_axis,
    "set_slice": Structured._gen_update,
    "update_slice": Structured._gen_update,
    "put_along_axis": Structured._gen_update,
    "topk": Structured._gen_topk,
    "conv2d": Structured._gen_conv2d,
    **{op: Structured._gen_collective for op in COLLECTIVES},
}
