"""Lowering of FX graphs of ATen ops to NumPy source (the nkipy kernel language)."""
from .registry import AtenOpRegistry, canonical_name, target_name
from .codegen import GeneratedSource, UnsupportedOpError, generate_source, is_supported_node

__all__ = ["AtenOpRegistry", "canonical_name", "target_name", "GeneratedSource",
           "UnsupportedOpError", "generate_source", "is_supported_node"]
