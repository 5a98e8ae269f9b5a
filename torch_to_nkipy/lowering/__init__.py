"""The backend's view of the lowering: :mod:`spike_torch.lowering` (the one ATen
op registry and code generator) with the backend's own additions, the
collectives of compiled graphs (:mod:`.collectives`) and the custom kernels of
:mod:`torch_to_nkipy.custom_ops`, passed to the generator as an ``Extern``."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch.fx

from spike_torch.lowering import (AtenOpRegistry, Extern, GeneratedSource, UnsupportedOpError,
                                  canonical_name, side_by_side, target_name)
from spike_torch.lowering import codegen as _codegen

from . import collectives  # noqa: F401  (registers the collectives' entries)


def _custom_ident(qual: str) -> Optional[str]:
    from ..custom_ops import custom_kernel_for

    ck = custom_kernel_for(qual)
    return None if ck is None else ck.source_hash


CUSTOM = Extern(lookup=_custom_ident, import_line="from torch_to_nkipy import custom_ops as custom",
                call="custom.call_custom")


def is_supported_node(node: torch.fx.Node) -> bool:
    """Whether the backend lowers ``node``: a registry entry or a custom kernel."""
    return _codegen.is_supported_node(node, CUSTOM)


def generate_source(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                    func_name: str = "nkipy_func") -> GeneratedSource:
    """The NumPy source of ``gm`` (registry entries and custom kernels)."""
    return _codegen.generate_source(gm, example_inputs, func_name, CUSTOM)


__all__ = ["AtenOpRegistry", "canonical_name", "target_name", "GeneratedSource",
           "UnsupportedOpError", "generate_source", "is_supported_node", "side_by_side"]
