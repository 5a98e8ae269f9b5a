"""The one ATen op registry, and the lowering of FX graphs of ATen ops to NumPy
source in the nkipy kernel language.

It sits with the device because both paths onto the device use it: eager ops
without a hand-written kernel (:mod:`spike_torch._generic`) and the
``torch.compile`` backend (:mod:`torch_to_nkipy`), which adds its own entries
(collectives) and custom kernels on top.
"""
from .registry import AtenOpRegistry, canonical_name, target_name
from .codegen import (Extern, GeneratedSource, UnsupportedOpError, generate_source,
                      is_supported_node, side_by_side, torch_to_numpy)

__all__ = ["AtenOpRegistry", "canonical_name", "target_name", "Extern", "GeneratedSource",
           "UnsupportedOpError", "generate_source", "is_supported_node", "side_by_side",
           "torch_to_numpy"]
