"""nkipy.core: the kernel language (tracing, ops, IR)."""
