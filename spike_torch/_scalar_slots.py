"""Python float arguments of eager ops as kernel inputs ("scalar slots").

An eager kernel is built for one call signature. A Python float argument that
changes from call to call -- an optimizer's step size and bias corrections,
a scheduled learning rate -- would make a new kernel per value if it were
baked in as a constant. For the ops of :data:`LIFT_OPS`, whose kernels use
such a value only arithmetically, each float in a scalar position is a
*slot* instead: the call's key has the slot, not its value, and the kernel
reads the value from an input the call fills.

How a kernel comes to read a slot: the op is traced twice, with two sets of
sentinel values in the slots (negative and of magnitude above 2 in one,
positive and below 0.5 in the other). Where a lowering computed anything
from a value (``1 - alpha``, a branch on its sign or size) the two IR graphs
differ, and the kernel bakes the call's values in as before (:func:`lift`
returns None). Otherwise each scalar ``constant`` node holding a sentinel,
converted to the constant's dtype in one of the ways of :data:`CHAINS`
(directly, or first rounded to a half type: add and sub take a scalar beside
half tensors so), becomes a 0-dim kernel input of that dtype, and the call
passes its value converted the same way. Each sentinel has bits below the
precision of every narrower float dtype and converts to a distinct value
each way, so a constant the lowering rounded another way matches no
sentinel, and nothing is lifted.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ml_dtypes import bfloat16

from nkipy.core.ir import Graph, Value

#: ATen ops (in-place and out= forms included) whose float scalars are slots:
#: the lowerings use them in products and sums only
LIFT_OPS = frozenset({
    "add", "sub", "mul", "div", "addcmul", "addcdiv",
    "_foreach_add", "_foreach_sub", "_foreach_mul", "_foreach_div",
    "_foreach_addcmul", "_foreach_addcdiv",
})

#: schema argument types a slot may be given in (a Tensor argument gets a
#: Python float as a number C++ wrapped: ``x * 0.5``)
_SLOT_TYPES = frozenset({"number", "float", "List[number]", "List[float]", "Tensor"})

#: the most slots one call may have (the sentinels of each set stay distinct
#: in every float dtype: 12 octaves of 128)
MAX_SLOTS = 12 * 128

_BF16 = np.dtype(bfloat16)

_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

#: how a slot's value may reach a kernel input: (the input's dtype, the half
#: dtype it is rounded to first, or None)
CHAINS = ((_F64, None), (_F32, None), (_F16, None), (_BF16, None), (_F32, _F16), (_F32, _BF16))

#: bytes each slot's value takes in the call's buffer of slot values
SLOT_BYTES = 8


def slot_positions(schema: Any) -> Tuple[Tuple[int, str], ...]:
    """(position, name) of the arguments of ``schema`` whose floats are slots:
    every float-typed argument of an op of :data:`LIFT_OPS` (not the forms
    with a rounding mode)."""
    base = schema.name.split("::")[-1].rstrip("_")
    if base not in LIFT_OPS or "mode" in schema.overload_name:
        return ()
    return tuple((i, a.name) for i, a in enumerate(schema.arguments)
                 if str(a.type) in _SLOT_TYPES)


def _walk(v: Any, found: List[float]) -> None:
    if isinstance(v, float):
        found.append(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _walk(x, found)


def take(positions: Sequence[Tuple[int, str]], args: Sequence[Any],
         kwargs: Dict[str, Any]) -> List[float]:
    """The call's slot values, in schema order (the order C++ finds them on the
    stack): every float at a slot position, floats in lists one by one."""
    found: List[float] = []
    for pos, name in positions:
        v = kwargs[name] if name in kwargs else args[pos] if pos < len(args) else None
        _walk(v, found)
    return found


#: the C++ names PyTorch's overflow error gives each dtype
_C_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
            torch.bfloat16: "c10::BFloat16", torch.int32: "int", torch.int64: "int64_t",
            torch.int8: "int8_t", torch.int16: "int16_t", torch.uint8: "uint8_t"}

_DEFAULT = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT

#: the scalar arguments PyTorch's CPU kernels convert with an overflow check,
#: and whether to the computation dtype's opmath type (else to that dtype)
_CHECKED = {"alpha": False, "value": True}


def _overflows(v: Any, dtype: torch.dtype) -> bool:
    """Whether ``v`` overflows ``dtype`` as c10's ``overflows`` says (an infinite
    or NaN float fits a float dtype; a negative value fits an unsigned one
    whose range holds its magnitude)."""
    if isinstance(v, bool) or dtype == torch.bool:
        return False
    if dtype.is_floating_point:
        if dtype == torch.float64:
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        return abs(v) > torch.finfo(dtype).max
    info = torch.iinfo(dtype)
    if info.min == 0:
        return abs(v) > info.max
    return not info.min <= v <= info.max


def check_fits(v: Any, dtype: torch.dtype) -> None:
    """Raises PyTorch's CPU error for a Python number ``v`` that its kernels
    convert to ``dtype`` with an overflow check and that overflows it."""
    if dtype in _C_NAMES and isinstance(v, (int, float)) and _overflows(v, dtype):
        raise RuntimeError(f"value cannot be converted to type {_C_NAMES[dtype]} "
                           "without overflow")


#: the ops whose alpha or value :func:`check` checks (their in-place and out=
#: forms too); sub and rsub subtract, so their alpha is checked negated
CHECKED_OPS = frozenset({"add", "sub", "rsub", "addcmul", "addcdiv", "_foreach_add",
                         "_foreach_sub", "_foreach_addcmul", "_foreach_addcdiv"})


def _scalar_type_name(dtype: torch.dtype) -> str:
    """PyTorch's C++ name of a dtype in its messages ("Float", "Long", "Half")."""
    return str(torch.empty(0, dtype=dtype).type()).rsplit(".", 1)[-1].replace("Tensor", "")


def _computation_dtype(named: Dict[str, Any]) -> Optional[torch.dtype]:
    """The dtype an add/sub/addcmul/addcdiv (or the first tensors of a
    _foreach_ one) computes in, by PyTorch's promotion rules (a 0-dim tensor
    does not promote a dimensioned one); None without a tensor operand."""
    def first(v: Any) -> Any:
        return v[0] if isinstance(v, (list, tuple)) and v else v

    operands = [first(named.get(n)) for n in ("self", "other", "tensor1", "tensor2")]
    operands = [v for v in operands if isinstance(v, (torch.Tensor, bool, int, float))]
    if not any(isinstance(v, torch.Tensor) for v in operands):
        return None
    return elementwise_dtypes(*operands, type_promotion_kind=_DEFAULT)[1]


def check(schema: Any, positions: Sequence[Tuple[int, str]], args: Sequence[Any],
          kwargs: Dict[str, Any]) -> List[Optional[torch.dtype]]:
    """Raises PyTorch's CPU error for an ``alpha`` or ``value`` argument its
    kernels refuse, after the error its kernels raise first (a result that
    cannot be written to self's dtype): a bool alpha beside non-bool tensors,
    a float alpha beside integral ones, a value past the range of the dtype
    it is converted to (alpha, negated for sub and rsub: the computation
    dtype; value: its opmath type, float32 for the half types). Returns, per
    slot in :func:`take`'s order (``positions``: :func:`slot_positions` of
    ``schema``), the dtype a slot's value must fit (None: any value), which
    the C++ cache checks on each call."""
    base = schema.name.split("::")[-1].rstrip("_")
    named: Dict[str, Any] = {}
    for i, a in enumerate(schema.arguments):
        if a.name in kwargs:
            named[a.name] = kwargs[a.name]
        elif i < len(args):
            named[a.name] = args[i]
    limits: Dict[str, torch.dtype] = {}
    if base in CHECKED_OPS:
        dt = _computation_dtype(named)
        self = named.get("self")
        inplace = schema.name.endswith("_") and isinstance(self, torch.Tensor)
        if dt is not None and inplace and not torch.can_cast(dt, self.dtype):
            raise RuntimeError(f"result type {_scalar_type_name(dt)} can't be cast to the "
                               f"desired output type {_scalar_type_name(self.dtype)}")
        for name, opmath in _CHECKED.items():
            v = named.get(name)
            if dt is None or v is None or isinstance(v, torch.Tensor):
                continue
            if name == "alpha":
                if isinstance(v, bool) and dt != torch.bool:
                    raise RuntimeError("Boolean alpha only supported for Boolean results.")
                if isinstance(v, float) and not (dt.is_floating_point or dt.is_complex):
                    raise RuntimeError("For integral input tensors, argument alpha must not "
                                       "be a floating point number.")
            limit = torch.float32 if opmath and dt in (torch.float16, torch.bfloat16) else dt
            negated = name == "alpha" and base in ("sub", "rsub", "_foreach_sub") and \
                not isinstance(v, bool)
            check_fits(-v if negated else v, limit)
            limits[name] = limit
    out: List[Optional[torch.dtype]] = []
    for _, name in positions:
        found: List[float] = []
        _walk(named.get(name), found)
        out += [limits.get(name)] * len(found)
    return out


def substitute(positions: Sequence[Tuple[int, str]], args: Sequence[Any],
               kwargs: Dict[str, Any], values: Sequence[float]) -> Tuple[list, dict]:
    """``args``/``kwargs`` with the slots' floats replaced by ``values``, in
    :func:`take`'s order."""
    it = iter(values)

    def sub(v: Any) -> Any:
        if isinstance(v, float):
            return next(it)
        if isinstance(v, (list, tuple)):
            return type(v)(sub(x) for x in v)
        return v

    args, kwargs = list(args), dict(kwargs)
    for pos, name in positions:
        if name in kwargs:
            kwargs[name] = sub(kwargs[name])
        elif pos < len(args):
            args[pos] = sub(args[pos])
    return args, kwargs


def convert(value: float, dtype: np.dtype, via: Optional[np.dtype] = None) -> Any:
    """``value`` as a slot input of ``dtype`` holds it: rounded to nearest,
    to a half type through float32 (as PyTorch converts a Python scalar);
    with ``via``, rounded to that half type first."""
    dtype = np.dtype(dtype)
    if via is not None:
        return convert(value, via).astype(dtype)
    with np.errstate(over="ignore"):     # x * 1e300 is inf in float32, as on the CPU
        if dtype in (_F16, _BF16):
            return np.float32(value).astype(dtype)
        return np.asarray(value, np.float64).astype(dtype)


def sentinels(n: int, which: int) -> List[float]:
    """``n`` values that stay distinct however :data:`CHAINS` converts them, with
    bits below bfloat16's, float16's and float32's precision (so that each
    way of converting gives another value): set 0 negative with magnitudes
    from 2 up, set 1 positive below 0.5."""
    if n > MAX_SLOTS:
        raise ValueError(f"{n} scalar slots, at most {MAX_SLOTS}")
    out = []
    for i in range(n):
        octave, m = divmod(i, 128)
        if which == 0:      # [2, 4): bfloat16 steps 2**-6, float16 2**-9, float32 2**-22
            v = 2.0 + m * 2.0 ** -6 + 2.0 ** -8 + 2.0 ** -15 + 3 * 2.0 ** -40
            out.append(-v * 2.0 ** octave)
        else:               # [0.25, 0.5): 2**-9, 2**-12, 2**-25
            v = 0.25 + (127 - m) * 2.0 ** -9 + 2.0 ** -11 + 2.0 ** -18 + 3 * 2.0 ** -44
            out.append(v * 2.0 ** -octave)
    return out


def _signature(graph: Graph, values: Sequence[float]) -> Tuple[list, list]:
    """The graph's structure with values renumbered and each scalar constant
    holding one of ``values`` replaced by its slot; and those constants, as
    (node, slot) pairs."""
    slot_of = {(dt, float(convert(v, dt, via))): (i, via) for dt, via in CHAINS
               for i, v in enumerate(values)}
    ids: Dict[int, int] = {}
    sig: list = []
    for v in graph.inputs:
        ids[v.id] = len(ids)
        sig.append(("input", v.name, v.shape, str(v.dtype)))
    found: list = []
    for n in graph.nodes:
        attrs: Any
        key = (n.output.dtype, float(n.attrs["value"])) if n.op == "constant" and \
            n.output.shape == () and np.ndim(n.attrs.get("value")) == 0 else None
        if key is not None and key in slot_of:
            slot = slot_of[key]         # (slot, via)
            found.append((n, slot))
            attrs = ("slot", slot)
        else:
            attrs = tuple(sorted((k, repr(np.asarray(a).tolist()) if isinstance(a, np.ndarray)
                                  else repr(a)) for k, a in n.attrs.items()))
        for o in n.outputs:
            ids[o.id] = len(ids)
        sig.append((n.op, tuple(ids.get(v.id, -1) for v in n.inputs), attrs,
                    tuple((o.shape, str(o.dtype)) for o in n.outputs)))
    sig.append(("outputs", tuple(ids.get(v.id, -1) for v in graph.outputs),
                tuple(graph.output_names), tuple(sorted(graph.aliases.items()))))
    return sig, found


def lift(graph: Graph, other: Graph, values: Sequence[float],
         other_values: Sequence[float]) -> Optional[List[Tuple[int, np.dtype, Optional[np.dtype]]]]:
    """Makes ``graph`` (traced with ``values`` in the slots) read its slots
    from new 0-dim inputs, given ``other``, the same op traced with
    ``other_values``. Returns, per new input (appended to ``graph.inputs``,
    named ``slot0``, ``slot1``, ...), its (slot, dtype, via) (see
    :func:`convert`); or None, leaving
    ``graph`` as it was, where the two graphs differ in more than the slots'
    constants or a slot is not read as itself."""
    sig, found = _signature(graph, values)
    other_sig, _ = _signature(other, other_values)
    if sig != other_sig or {s for _, (s, _) in found} != set(range(len(values))):
        return None
    outputs = {v.id for v in graph.outputs}
    if any(n.output.id in outputs for n, _ in found):
        return None
    taken = {v.name for v in graph.inputs}
    lifted: List[Tuple[int, np.dtype, Optional[np.dtype]]] = []
    replace: Dict[int, Value] = {}
    inputs: Dict[Tuple[int, np.dtype, Optional[np.dtype]], Value] = {}
    for n, (slot, via) in found:
        key = (slot, n.output.dtype, via)
        if key not in inputs:
            name = f"slot{len(lifted)}"
            while name in taken:
                name = "_" + name
            inputs[key] = graph.add_input(name, (), n.output.dtype)
            lifted.append(key)
        replace[n.output.id] = inputs[key]
    dropped = {id(n) for n, _ in found}
    graph.nodes = [n for n in graph.nodes if id(n) not in dropped]
    for n in graph.nodes:
        n.inputs = [replace.get(v.id, v) for v in n.inputs]
    return lifted


def pack(values: Sequence[float],
         lifted: Sequence[Tuple[int, np.dtype, Optional[np.dtype]]]) -> bytes:
    """The buffer of a call's slot inputs: input ``j`` at byte ``SLOT_BYTES * j``,
    the slot's value converted as the input takes it."""
    buf = bytearray(SLOT_BYTES * len(lifted))
    for j, (slot, dtype, via) in enumerate(lifted):
        raw = convert(values[slot], dtype, via).tobytes()
        buf[SLOT_BYTES * j:SLOT_BYTES * j + len(raw)] = raw
    return bytes(buf)
