"""NKIPyKernel: one FX graph, for one concrete input signature, as a device kernel.

Cache layout (per rank, per kernel)::

    <nkipy_cache>/rank_<r>/kernel_<hash16>/
        nkipy_func.py        generated NumPy source (``nkipy_func``), runnable on the host
        fx_vs_nkipy.txt      each FX node beside the source generated for it
        fx_graph.py          the FX graph's code
        io_specs.json        inputs and outputs: names, shapes, dtypes, aliases
        *.npy                graph constants
        neff/                the nkipy compile cache (IR, C, NEFF, meta.json)

``hash16`` covers the generated source, its constants, the input signature and
the compiler arguments; a second process with the same cache finds the NEFF in
``neff/`` and compiles nothing.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import threading
import time
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.fx

from spike import spike_singleton
from spike.safe_files import check_trusted, private_dir, write_private

from . import device
from .config import on_reset
from .executor import Executor, PadCall
from .options import ExecOptions
from .lowering import GeneratedSource, generate_source, side_by_side

log = logging.getLogger("torch_to_nkipy")

_GENERATION = [0]

DEFAULT_OPTIONS = ExecOptions()
_EXECUTOR_LOCK = threading.Lock()

#: Process-wide counters: kernels built by the C compiler vs served by the cache.
STATS = {"kernels": 0, "compiled": 0, "cache_hits": 0, "shared": 0}


def clear_loaded_kernels() -> None:
    """Makes every compiled graph rebuild its kernels on next use (after waiting
    for their pipelined executions; an error one of them hit is logged)."""
    try:
        flush_all()
    except Exception as exc:  # the runtime may be closed already
        log.warning("pending executions ended with an error: %s", exc)
    _GENERATION[0] += 1
    _BY_HASH.clear()


on_reset(clear_loaded_kernels)   # reset_nkipy_backend() forgets the loaded kernels
# so does closing the runtime they were loaded into (spike.reset(), spike_torch.reset()):
# compiled functions then rebuild their kernels in the new runtime on next use
spike_singleton.on_reset(clear_loaded_kernels)


def signature_of(args: Sequence[Any]) -> Tuple:
    """A hashable description of concrete inputs (what a kernel is specialised on)."""
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            sig.append(("T", tuple(a.shape), str(a.dtype)))
        else:
            sig.append(("V", type(a).__name__, repr(a)))
    return tuple(sig)


def _exec_source(source: str, path: str, name: str) -> Any:
    """Runs generated Python from its text (``path`` names it in tracebacks and
    is its ``__file__``) and returns ``name`` from it. Nothing is imported
    through the import system, so no bytecode is read from or written to a
    cache's ``__pycache__``."""
    mod = types.ModuleType(f"nkipy_generated_{hashlib.sha1(path.encode()).hexdigest()[:12]}")
    mod.__file__ = path
    exec(compile(source, path, "exec", dont_inherit=True), mod.__dict__)
    return getattr(mod, name)


def save_string_to_file(content: str, path: str) -> str:
    """Writes ``content`` to ``path`` (the original's helper for generated
    sources): atomically, readable by the current user only, never through a
    symbolic link; returns the path. :func:`load_func_from_file` reads such a
    file back."""
    if not isinstance(content, str):
        raise TypeError(f"save_string_to_file writes a str, not {type(content).__name__}")
    return write_private(os.fspath(path), content)


def load_func_from_file(path: str, name: str = "nkipy_func") -> Any:
    """Runs a generated source file and returns ``name`` (``nkipy_func``) from it.

    The file and its directory must belong to the current user and be writable
    by no one else (``spike.safe_files.UntrustedPathError`` otherwise); the
    source is executed from its text, never from bytecode."""
    path = os.fspath(path)
    check_trusted(os.path.dirname(os.path.abspath(path)), "kernel cache entry")
    with open(path, "rb") as f:
        check_trusted(path, "generated source", os.fstat(f.fileno()))
        source = f.read().decode()
    return _exec_source(source, path, name)


def kernel_hash(gen: GeneratedSource, args: Sequence[Any], compiler_args: str,
                world_size: int) -> str:
    """The 16-hex-digit key of a kernel (names its cache directory)."""
    h = hashlib.sha256(gen.source.encode())
    for name, data in sorted(gen.constants.items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(data).tobytes())
    h.update(repr(signature_of(args)).encode())
    h.update(repr((compiler_args, world_size)).encode())
    return h.hexdigest()[:16]


_BY_HASH: Dict[Tuple[str, str, int], "NKIPyKernel"] = {}


def build_kernel(gm: torch.fx.GraphModule, args: Sequence[Any], cache_root: str,
                 compiler_args: str = "", core_id: int = 0, rank: int = 0,
                 world_size: int = 1) -> "NKIPyKernel":
    """The kernel of ``gm`` for ``args``; graphs that generate the same source
    (repeated layers) share one kernel within the process."""
    gen = generate_source(gm, args)
    key = (cache_root, kernel_hash(gen, args, compiler_args, world_size), core_id)
    k = _BY_HASH.get(key)
    if k is None or k.generation != _GENERATION[0]:
        k = NKIPyKernel(gm, args, cache_root, compiler_args=compiler_args, core_id=core_id,
                        rank=rank, world_size=world_size, gen=gen)
        _BY_HASH[key] = k
    else:
        STATS["shared"] += 1
    return k


class NKIPyKernel:
    """The generated source, its compiled kernel and how to call it with torch tensors."""

    def __init__(self, gm: torch.fx.GraphModule, args: Sequence[Any], cache_root: str,
                 compiler_args: str = "", core_id: int = 0, rank: int = 0,
                 world_size: int = 1, gen: Optional[GeneratedSource] = None) -> None:
        start = time.perf_counter()
        self.generation = _GENERATION[0]
        self.gen: GeneratedSource = gen if gen is not None else generate_source(gm, args)
        self.tensor_arg_idx = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        #: dtype of each tensor argument (part of the signature the kernel is built for)
        self.arg_dtypes = {i: args[i].dtype for i in self.tensor_arg_idx}
        in_arrays = [device.torch_to_numpy(torch.zeros(args[i].shape, dtype=args[i].dtype))
                     for i in self.tensor_arg_idx]
        self.hash = kernel_hash(self.gen, args, compiler_args, world_size)
        self.dir = os.path.join(cache_root, f"kernel_{self.hash}")
        private_dir(cache_root, "torch_to_nkipy cache directory")
        private_dir(self.dir, "kernel cache entry")
        src_path = os.path.join(self.dir, "nkipy_func.py")
        for fname, data in self.gen.constants.items():
            p = os.path.join(self.dir, fname)
            try:
                check_trusted(p, "cached constant")
            except FileNotFoundError:
                buf = io.BytesIO()
                np.save(buf, data)
                write_private(p, buf.getvalue())
        write_private(src_path, self.gen.source.encode())
        write_private(os.path.join(self.dir, "fx_vs_nkipy.txt"), side_by_side(self.gen).encode())
        write_private(os.path.join(self.dir, "fx_graph.py"), gm.code.encode())
        self.source_path = src_path
        # run from the source just generated, not from what the file now holds
        self.func = _exec_source(self.gen.source, src_path, "nkipy_func")

        # Trace: non-tensor results are static (Python values at trace time).
        self.static_outputs: Dict[int, Any] = {}
        self.tensor_out_pos: List[int] = []
        n_out: List[int] = [0]
        func = self.func

        def kernel_fn(*arrays: Any) -> Any:
            from nkipy.core.tensor import NKIPyTensorRef

            res = func(*arrays)
            n_out[0] = len(res)
            tensors = []
            for i, r in enumerate(res):
                if isinstance(r, NKIPyTensorRef):
                    self.tensor_out_pos.append(i)
                    tensors.append(r)
                else:
                    self.static_outputs[i] = r
            return tuple(tensors)

        from nkipy.core.dtypes import torch_semantics
        from nkipy.core.trace import trace
        from nkipy.runtime import DeviceKernel

        params = self.gen.tensor_inputs
        ns: Dict[str, Any] = {"_k": kernel_fn}
        exec(f"def nkipy_kernel({', '.join(params)}):\n    return _k({', '.join(params)})\n", ns)
        # PyTorch's semantics: int64/float64 computed in 64 bits (int64_t, double in
        # the C code), integer division by zero an error of the execution
        with torch_semantics():
            graph = trace(ns["nkipy_kernel"], *in_arrays, name=f"kernel_{self.hash}")
        self.n_outputs = n_out[0]
        self.device_kernel = DeviceKernel.from_graph(
            graph, build_dir=os.path.join(self.dir, "neff"),
            additional_compiler_args=compiler_args, core_id=core_id,
            # a single process's rank only names its cache: in a world of one
            # the kernel's collective rank is 0
            cc_enabled=world_size > 1, rank_id=rank if world_size > 1 else 0,
            world_size=world_size)
        self.compiled_now = not self.device_kernel.compiled.cache_hit
        STATS["kernels"] += 1
        STATS["compiled" if self.compiled_now else "cache_hits"] += 1
        out_info = list(self.device_kernel.output_tensors_info.items())
        self.out_names = [n for n, m in out_info][:len(self.tensor_out_pos)]
        self.aliases = {n: m.alias_of for n, m in out_info if m.alias_of is not None}
        self.param_index = {p: self.tensor_arg_idx[k] for k, p in enumerate(params)}
        # Torch dtypes of the outputs (FX metadata).
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        outs = out_node.args[0] if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
        self.out_dtypes: List[Optional[torch.dtype]] = []
        for o in outs:
            val = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
            self.out_dtypes.append(val.dtype if isinstance(val, torch.Tensor) else None)
        specs = {
            "kernel": f"kernel_{self.hash}",
            "inputs": [{"name": p, "shape": list(a.shape), "dtype": str(a.dtype)}
                       for p, a in zip(params, in_arrays)],
            "outputs": [{"name": n, "shape": list(m.shape), "dtype": m.dtype, "alias_of": m.alias_of}
                        for n, m in out_info],
            "static_outputs": {str(k): repr(v) for k, v in self.static_outputs.items()},
            "neff": self.device_kernel.neff_path,
        }
        write_private(os.path.join(self.dir, "io_specs.json"), json.dumps(specs, indent=1).encode())
        log.log(logging.INFO if self.compiled_now else logging.DEBUG,
                "kernel_%s (%d FX nodes) %s in %.3f s: %s", self.hash, len(self.gen.pairs),
                "compiled" if self.compiled_now else "loaded from cache",
                time.perf_counter() - start, self.dir)

    def run_host(self, args: Sequence[Any]) -> List[Any]:
        """Runs the generated source with NumPy on the host (the reference)."""
        arrays = [device.torch_to_numpy(args[i]).copy() for i in self.tensor_arg_idx]
        return list(self.func(*arrays))

    def __call__(self, args: Sequence[Any], pad: Optional["PadCall"] = None,
                 opts: ExecOptions = DEFAULT_OPTIONS,
                 profile: Optional[Any] = None) -> List[Any]:
        """Runs the kernel on torch tensors (see :class:`Executor`)."""
        return self.executor.run(args, pad, opts, profile)

    @property
    def executor(self) -> "Executor":
        """How this kernel is called (one per kernel, made on first use)."""
        ex = self.__dict__.get("_executor")
        if ex is None:
            with _EXECUTOR_LOCK:
                ex = self.__dict__.get("_executor")
                if ex is None:
                    ex = self._executor = Executor(self)
        return ex


def flush_all() -> None:
    """Waits for every pipelined execution of every loaded kernel."""
    for k in list(_BY_HASH.values()):
        ex = k.__dict__.get("_executor")
        if ex is not None:
            ex.flush()
