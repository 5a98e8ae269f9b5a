"""Compile a traced kernel to a NEFF file, and look at what the compiler makes."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nkipy.core.ir import Graph
from spike.safe_files import safe_child, write_atomic

from .build import compile_graph
from .codegen import generate_c
from .passes import optimize


def _graph_of(kernel: Any) -> Graph:
    if isinstance(kernel, Graph):
        return kernel
    graph = getattr(kernel, "graph", None)
    if isinstance(graph, Graph):
        return graph
    raise TypeError(f"expected a traced kernel (nkipy Graph), got {type(kernel).__name__}")


def compile_to_neff(trace_kernel: Any, output_dir: str | os.PathLike, neff_name: str = "file.neff",
                    additional_compiler_args: str = "", save_artifacts: bool = False,
                    cache_dir: str | os.PathLike | None = None) -> str:
    """Compiles a traced kernel and writes ``output_dir/neff_name``; with
    ``save_artifacts`` the IR and C source are written next to it. Returns
    the NEFF path."""
    graph = _graph_of(trace_kernel)
    compiled = compile_graph(graph, cache_dir=cache_dir, extra_flags=additional_compiler_args)
    out = Path(output_dir)
    target = Path(safe_child(out, neff_name, "NEFF"))
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(target, Path(compiled.neff_path).read_bytes())
    if save_artifacts:
        write_atomic(out / "kernel.c", Path(compiled.c_path).read_bytes())
        write_atomic(out / "kernel.ir", Path(compiled.ir_path).read_bytes())
    return str(target)


def lower_to_c(trace_kernel: Any) -> str:
    """The C source the compiler generates for a traced kernel."""
    graph = optimize(_graph_of(trace_kernel))
    return generate_c(graph)


def show_ir(trace_kernel: Any, optimized: bool = True) -> str:
    """The kernel's IR, printed (after the optimisation passes by default)."""
    graph = _graph_of(trace_kernel)
    return str(optimize(graph) if optimized else graph)
