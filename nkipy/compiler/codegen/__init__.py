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

The package, one concept per module, lowest first:

- ``maps``: affine index maps and buffers (views fold into maps).
- ``ctext``: C text of dtypes, literals, elementwise ops and reductions.
- ``planning``: inlining, GEMM scaling, the groups to emit (a plan, as
  data), aliasing snapshots, live ranges and the scratch layout.
- ``loops``: expressions, loop nests, elementwise groups and reductions.
- ``matmul``, ``structured``, ``rowgroups``: the other kinds of group.
- ``generator``: the Generator (the mixins above put together) and its
  pipeline: plan, emit from the plan, lay out scratch, write the
  translation unit around the body.

Every name the single-module ``codegen.py`` defined is importable from here.
"""
from __future__ import annotations

from nkipy.core.ir import Graph

from .ctext import (_NKRT_DTYPE, _STORAGE, CodegenError, _fix_ptrs, _int_max, _int_min, _subst,
                    c_literal, compute_type, elementwise_c, is_float, load_expr, reduce_parts,
                    storage_type, store_expr)
from .generator import PRELUDE_INCLUDE, Generator, const_array, descriptor
from .loops import PARALLEL_GRAIN, Loops
from .maps import (VIEW_OPS, Access, Buffer, Dim, access_of, broadcast_map, compose,
                   contiguous_strides, identity_map, reshape_strides, view_map)
from .matmul import Matmul
from .planning import SHARED_INLINE_MAX_COPIES, SHARED_INLINE_OPS, Group, Planning
from .rowgroups import RowGroups
from .structured import Structured

__all__ = [
    "VIEW_OPS", "PARALLEL_GRAIN", "SHARED_INLINE_OPS", "SHARED_INLINE_MAX_COPIES",
    "CodegenError", "storage_type", "is_float", "compute_type", "load_expr", "store_expr",
    "c_literal", "elementwise_c", "reduce_parts", "Dim", "identity_map", "broadcast_map",
    "compose", "contiguous_strides", "reshape_strides", "view_map", "Buffer", "Access",
    "access_of", "Group", "Planning", "Loops", "Matmul", "Structured", "RowGroups", "Generator",
    "PRELUDE_INCLUDE", "const_array", "descriptor", "generate_c",
]


def generate_c(graph: Graph) -> str:
    """C source of a NEFF implementing `graph` (already optimised)."""
    return Generator(graph).source()
