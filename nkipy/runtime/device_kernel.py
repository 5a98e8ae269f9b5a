"""DeviceKernel: a traced NumPy kernel compiled to a NEFF and loaded on a core."""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable, Dict, Optional, Tuple

from spike import SpikeModel
from spike.spike_singleton import get_spike_singleton

from nkipy.compiler.build import CompiledKernel, compile_graph
from nkipy.core.ir import Graph

log = logging.getLogger(__name__)

_LOADED: Dict[Tuple[Any, ...], "DeviceKernel"] = {}
_LOCK = threading.Lock()


class DeviceKernel(SpikeModel):
    """A compiled kernel: call it with ``inputs=``/``outputs=`` dicts of
    device tensors, named after the kernel's parameters and ``output0``,
    ``output1``, ... for the values it returns.

    ``graph`` is the optimised IR, ``ir_text`` its printed form, ``c_source``
    the generated C, ``neff_path`` the NEFF in the compile cache.
    """

    compiled: CompiledKernel

    @classmethod
    def compile_and_load(
        cls,
        kernel: Callable[..., Any],
        *args: Any,
        name: Optional[str] = None,
        build_dir: Optional[str | os.PathLike] = None,
        additional_compiler_args: str = "",
        use_cached_if_exists: bool = True,
        core_id: int = 0,
        cc_enabled: bool = False,
        rank_id: int = 0,
        world_size: int = 1,
        **kwargs: Any,
    ) -> "DeviceKernel":
        """Traces ``kernel`` on example ``args`` (NumPy arrays give the input
        shapes and dtypes; other values are static), compiles it (or reuses
        the compile cache under ``build_dir``, default ``$NKIPY_CACHE_DIR`` or
        ``~/.cache/nkipy``) and loads it on ``core_id``."""
        from nkipy.core.trace import trace

        graph = trace(kernel, *args, name=name or getattr(kernel, "__name__", "kernel"), **kwargs)
        return cls.from_graph(graph, build_dir=build_dir,
                              additional_compiler_args=additional_compiler_args,
                              use_cached_if_exists=use_cached_if_exists, core_id=core_id,
                              cc_enabled=cc_enabled, rank_id=rank_id, world_size=world_size)

    @classmethod
    def from_graph(
        cls,
        graph: Graph,
        build_dir: Optional[str | os.PathLike] = None,
        additional_compiler_args: str = "",
        use_cached_if_exists: bool = True,
        core_id: int = 0,
        cc_enabled: bool = False,
        rank_id: int = 0,
        world_size: int = 1,
    ) -> "DeviceKernel":
        """Compiles an IR graph and loads the NEFF (see compile_and_load)."""
        compiled = compile_graph(graph, cache_dir=build_dir, extra_flags=additional_compiler_args)
        runtime = get_spike_singleton()
        key = (id(runtime), compiled.neff_path, core_id, bool(cc_enabled), rank_id, world_size)
        with _LOCK:
            cached = _LOADED.get(key) if use_cached_if_exists else None
            if cached is not None and cached.model_ref.loaded:
                return cached
            ref = runtime.load_model(compiled.neff_path, core_id=core_id, cc_enabled=cc_enabled,
                                     rank_id=rank_id, world_size=world_size, name=graph.name)
            kernel = cls(ref, name=graph.name, neff_path=compiled.neff_path)
            kernel.compiled = compiled
            _LOADED[key] = kernel
        log.info("loaded kernel %s (%s, %s) on core %d", graph.name,
                 "cached" if compiled.cache_hit else f"compiled in {compiled.compile_seconds:.3f} s",
                 compiled.neff_path, core_id)
        return kernel

    @property
    def graph(self) -> Graph:
        return self.compiled.graph

    @property
    def ir_text(self) -> str:
        """The optimised IR the NEFF was generated from."""
        return self.compiled.ir_text

    @property
    def c_source(self) -> str:
        """The generated C source of the NEFF."""
        return self.compiled.c_source
