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
from .generator import PRELUDE_INCLUDE, Generator, const_array, descriptor


def generate_c(graph: Graph) -> str:
    """C source of a NEFF implementing `graph` (already optimised)."""
    return Generator(graph).source()
