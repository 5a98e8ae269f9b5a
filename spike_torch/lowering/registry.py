"""The ATen op registry: qualified op name -> NumPy-style implementation.

Each entry is a function written over NumPy arrays (also valid nkipy kernel
code, so the same source runs on the host with NumPy and traces into the
nkipy IR). The code generator emits a call ``aten.<function name>(...)`` with
the FX node's positional and keyword arguments, so every implementation takes
the ATen schema's arguments in schema order.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Iterable, Optional

from nkipy.core.ops import op_context

#: Ops lowered by their registry entries although core ATen decomposes them,
#: on both paths onto the device (eager ops and the torch.compile backend)
KEEP_UNDECOMPOSED = (
    # the eager backward ops expect the attention op itself
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    # half operands round each product as the CPU kernel does (the
    # decomposition computes them in float32)
    "aten.linalg_cross.default",
    # negative indices are refused, not counted from the end
    "aten.index_add.default", "aten.index_copy.default",
    # int64 indices only
    "aten.take.default",
    # a fill value past the dtype is refused, not wrapped
    "aten.masked_fill.Scalar")


def core_decompositions() -> Dict[Any, Callable]:
    """PyTorch's core ATen decompositions, minus :data:`KEEP_UNDECOMPOSED`: the
    table both paths onto the device trace with (a new dict per call)."""
    from torch._decomp import core_aten_decompositions

    return {op: fn for op, fn in core_aten_decompositions().items()
            if str(op) not in KEEP_UNDECOMPOSED}


_REGISTRY: Dict[str, Callable] = {}
_SUPPORTS: Dict[str, Callable] = {}


class AtenOpRegistry:
    """The one registry of lowerings (class-level, process-wide)."""

    @staticmethod
    def register(*op_names: str, supports: Optional[Callable] = None) -> Callable[[Callable], Callable]:
        """Decorator: registers ``fn`` for each qualified name
        (``"aten.add.Tensor"``, ``"prims.convert_element_type.default"``,
        ``"_operator.getitem"``). Registering a name twice raises.

        ``supports(node) -> bool``, when given, decides per FX node whether the
        entry handles it (e.g. only 1-D/2-D convolutions); unsupported nodes are
        partitioned out and run on the CPU like ops without an entry."""
        if not op_names:
            raise ValueError("AtenOpRegistry.register needs at least one op name")

        def deco(fn: Callable) -> Callable:
            # the run-time checks an entry emits (index bounds) name its op
            op = canonical_name(op_names[0]).removesuffix(".default")

            @functools.wraps(fn)
            def entry(*args: Any, **kwargs: Any) -> Any:
                with op_context(op):
                    return fn(*args, **kwargs)

            for name in op_names:
                name = canonical_name(name)
                if name in _REGISTRY:
                    raise ValueError(f"ATen op {name!r} is already registered")
                _REGISTRY[name] = entry
                if supports is not None:
                    _SUPPORTS[name] = supports
            return entry

        return deco

    @staticmethod
    def get(op_name: str) -> Optional[Callable]:
        return _REGISTRY.get(canonical_name(op_name))

    @staticmethod
    def is_supported(op_name: str, node: Any = None) -> bool:
        """Whether ``op_name`` has an entry (and, given an FX node, handles it)."""
        name = canonical_name(op_name)
        if name not in _REGISTRY:
            return False
        pred = _SUPPORTS.get(name)
        return pred is None or node is None or bool(pred(node))

    @staticmethod
    def names() -> Iterable[str]:
        return sorted(_REGISTRY)


def canonical_name(name: str) -> str:
    """``torch.ops.aten.add.Tensor`` / ``aten::add.Tensor`` -> ``aten.add.Tensor``."""
    if name.startswith("torch.ops."):
        name = name[len("torch.ops."):]
    name = name.replace("::", ".")
    if name.count(".") == 1 and not name.startswith("_operator."):
        name += ".default"
    return name


def target_name(target: object) -> str:
    """The qualified name of an FX ``call_function`` target."""
    import torch

    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if isinstance(target, torch._ops.OpOverloadPacket):
        return str(target) + ".default"
    mod = getattr(target, "__module__", None) or ""
    return f"{mod}.{getattr(target, '__name__', repr(target))}"
