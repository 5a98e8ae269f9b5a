"""Matrix products: operands fed to the runtime's GEMM in place where their
layout allows (transposed, strided, batched), a product written straight
into a transposed layout, and integer products as plain loops."""
from __future__ import annotations

import numpy as np

from nkipy.core.ir import Node, Value, dtype_name

from .ctext import _NKRT_DTYPE, c_literal, compute_type, is_double, is_float, store_expr
from .maps import Buffer, access_of, contiguous_strides


class Matmul:
    """Generator methods that emit matrix products (a mixin: the state lives
    in Generator.__init__)."""

    # -- matmul --

    def matrix_operand(self, v: Value) -> tuple[Buffer, int, list[int], int, int]:
        """(buffer, offset, batch strides, row stride, col stride) of v, copying
        it into scratch first when its layout cannot feed GEMM."""
        src = self.materialized_source(v)
        if src is not None:
            buf, m = src
            a = access_of(buf, m, v.ndim)
            rs, cs = a.strides[-2], a.strides[-1]
            if (cs == 1 and rs >= v.shape[-1]) or (rs == 1 and cs >= v.shape[-2]):
                return buf, a.offset, list(a.strides[:-2]), rs, cs
        tmp = Value(v.shape, v.dtype)
        self.gen_copy(tmp, v)
        buf = self.buffers[tmp.id]
        st = buf.strides
        return buf, 0, list(st[:-2]), st[-2], st[-1]

    def gen_matmul(self, n: Node) -> None:
        a_v, b_v = n.inputs
        v = n.output
        if v.size == 0:
            self.new_output_buffer(v)
            return
        ab, aoff, abat, ars, acs = self.matrix_operand(a_v)
        bb, boff, bbat, brs, bcs = self.matrix_operand(b_v)
        alpha, scaled = self.gemm_alpha.get(id(n), (1.0, None))
        acc = self.gemm_accumulate.get(id(n))
        beta = "0.0f"
        if acc is not None:  # the GEMM adds the product into the add's buffer
            out = self.buffers[acc.output.id]
            self.buffers[v.id] = out
            beta = "1.0f"
        elif scaled is not None:  # the GEMM writes the scaled product itself
            out = self.new_output_buffer(scaled.output)
            self.buffers[v.id] = out
        else:
            out = self.transposed_gemm_output(n) or self.new_output_buffer(v)
        alpha_c = c_literal(np.float32(alpha), np.dtype(np.float32))
        m, kdim = a_v.shape[-2], a_v.shape[-1]
        ncol = b_v.shape[-1]
        batch = v.shape[:-2]
        # operand batch strides over the output batch dims (broadcasting)
        def bstrides(shape, strides):
            lead = len(batch) - len(shape) + 2
            res = [0] * len(batch)
            for d in range(len(shape) - 2):
                if shape[d] != 1:
                    res[lead + d] = strides[d]
            return res
        asb = bstrides(a_v.shape, abat)
        bsb = bstrides(b_v.shape, bbat)
        csb = list(out.strides[:-2])
        ldc = out.strides[-2] if v.ndim >= 2 else ncol
        ta, lda = (0, ars) if acs == 1 else (1, acs)
        tb, ldb = (0, brs) if bcs == 1 else (1, bcs)
        dt = dtype_name(v.dtype)
        if not is_float(v.dtype) or is_double(v.dtype):   # no GEMM for these: loops
            self._int_matmul(ab, aoff, asb, ars, acs, bb, boff, bsb, brs, bcs, out, csb, batch,
                             m, kdim, ncol)
            return
        inner_b = batch[-1] if batch else 1
        sa = asb[-1] if batch else 0
        sb = bsb[-1] if batch else 0
        sc = csb[-1] if batch else 0
        outer = batch[:-1]
        lines = []
        depth = "  "
        for d, extent in enumerate(outer):
            lines.append(f"{depth}for (int64_t u{d} = 0; u{d} < {extent}; u{d}++) {{")
            depth += "  "
        aoffe = " + ".join([str(aoff)] + [f"{asb[d]} * u{d}" for d in range(len(outer)) if asb[d]])
        boffe = " + ".join([str(boff)] + [f"{bsb[d]} * u{d}" for d in range(len(outer)) if bsb[d]])
        coffe = " + ".join([str(out.base)] +
                           [f"{csb[d]} * u{d}" for d in range(len(outer)) if csb[d]])
        if dt == "float32":
            lines.append(f"{depth}env->lib->sgemm_batched(env->ctx, {inner_b}, {ta}, {tb}, {m}, "
                         f"{ncol}, {kdim}, {alpha_c}, kc.{ab.name} + {aoffe}, {lda}, {sa}, "
                         f"kc.{bb.name} + {boffe}, {ldb}, {sb}, {beta}, kc.{out.name} + {coffe}, "
                         f"{ldc}, {sc});")
        else:
            lines.append(f"{depth}env->lib->gemm_batched_lowp(env->ctx, {_NKRT_DTYPE[dt]}, "
                         f"{inner_b}, {ta}, {tb}, {m}, {ncol}, {kdim}, {alpha_c}, "
                         f"kc.{ab.name} + {aoffe}, {lda}, {sa}, kc.{bb.name} + {boffe}, {ldb}, "
                         f"{sb}, {beta}, kc.{out.name} + {coffe}, {ldc}, {sc});")
        for _ in outer:
            depth = depth[:-2]
            lines.append(f"{depth}}}")
        self.body.extend(lines)

    def transposed_gemm_output(self, n: Node) -> Buffer | None:
        """A product read only through one transpose that keeps its last axis
        (attention's ``swapaxes(softmax(s) @ v, -2, -3)`` before the heads are
        merged) is written by the GEMM straight into the transposed layout
        (ldc and batch strides of the transposed buffer), saving the copy the
        reshape after it would need. Returns the product's strided buffer."""
        v = n.output
        if v.ndim < 3 or v.id in self.out_ids or not is_float(v.dtype) or is_double(v.dtype):
            return None
        readers = self.users.get(v.id, [])
        if len(readers) != 1 or readers[0].op != "transpose":
            return None
        t = readers[0]
        perm = list(t.attrs["perm"])
        if perm[-1] != v.ndim - 1 or perm == list(range(v.ndim)) or \
                t.output.id in self.buffers:
            return None
        tstrides = contiguous_strides(t.output.shape)
        strides = [0] * v.ndim
        for d, p in enumerate(perm):
            strides[p] = tstrides[d]
        if strides[-2] < v.shape[-1]:
            return None
        after = self.users.get(t.output.id, [])
        r = after[0] if len(after) == 1 else None
        if t.output.id not in self.out_ids and r is not None and r.op == "reshape" and \
                r.output.id in self.out_ids and r.output.id not in self.buffers:
            j = self.out_ids[r.output.id][0]  # merged heads returned: write the output
            tbuf = Buffer(f"o{j}", t.output.dtype, t.output.shape, "out", j)
            self.buffers[t.output.id] = tbuf
            self.buffers[r.output.id] = Buffer(f"o{j}", r.output.dtype, r.output.shape, "out", j)
        else:
            tbuf = self.new_output_buffer(t.output)
        alias = Buffer(tbuf.name, tbuf.dtype, v.shape, tbuf.kind, tbuf.index, tbuf.offset,
                       tbuf.nbytes, tbuf.data, stride_override=tuple(strides))
        self.buffers[v.id] = alias
        return alias

    def _int_matmul(self, ab, aoff, asb, ars, acs, bb, boff, bsb, brs, bcs, out, csb, batch, m,
                    kdim, ncol) -> None:
        nb = int(np.prod(batch)) if batch else 1
        ct = compute_type(out.dtype)
        lines = [f"  for (int64_t bt = 0; bt < {nb}; bt++) {{", "    int64_t rem = bt;"]
        ao, bo, co = [str(aoff)], [str(boff)], [str(out.base)]
        for d in reversed(range(len(batch))):
            lines.append(f"    int64_t u{d} = rem % {batch[d]}; rem /= {batch[d]};")
            ao.append(f"{asb[d]} * u{d}")
            bo.append(f"{bsb[d]} * u{d}")
            co.append(f"{csb[d]} * u{d}")
        lines += [f"    for (int64_t i = 0; i < {m}; i++)",
                  f"      for (int64_t j = 0; j < {ncol}; j++) {{",
                  f"        {ct} acc = 0;",
                  f"        for (int64_t p = 0; p < {kdim}; p++)",
                  f"          acc += ({ct})kc.{ab.name}[{' + '.join(ao)} + {ars} * i + {acs} * p] * "
                  f"({ct})kc.{bb.name}[{' + '.join(bo)} + {brs} * p + {bcs} * j];",
                  f"        kc.{out.name}[{' + '.join(co)} + {ncol} * i + j] = "
                  f"{store_expr(out.dtype, 'acc')};",
                  "      }", "  }"]
        self.body.extend(lines)
