"""nkipy.compiler: IR passes, fusion, C code generation, native build and cache."""
