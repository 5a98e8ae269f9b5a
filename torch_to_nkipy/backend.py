"""The dynamo backend ``"nkipy"``: AOTAutograd, partitioning, kernels per signature."""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, List, Sequence, Set, Tuple

import torch
import torch.fx
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.registry import register_backend
from torch._functorch.aot_autograd import aot_module_simplified
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from . import kernel as kernel_mod
from .config import get_nkipy_backend_config, is_nkipy_backend_initialized
from .lowering.codegen import is_supported_node
from .lowering.registry import target_name

log = logging.getLogger("torch_to_nkipy")

_LOGGED_UNSUPPORTED: Set[str] = set()


def _log_unsupported_once(name: str) -> None:
    if name not in _LOGGED_UNSUPPORTED:
        _LOGGED_UNSUPPORTED.add(name)
        log.warning("op %s is not supported by the nkipy backend: it runs on the CPU", name)


class _Support(OperatorSupport):
    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and is_supported_node(node)


class CompiledGraph:
    """A graph compiled lazily, one kernel per concrete input signature."""

    def __init__(self, gm: torch.fx.GraphModule, role: str = "forward") -> None:
        self.gm = gm
        self.role = role
        self._kernels: Dict[Tuple, Tuple[int, kernel_mod.NKIPyKernel]] = {}
        self._lock = threading.Lock()

    def kernel_for(self, args: Sequence[Any]) -> kernel_mod.NKIPyKernel:
        sig = kernel_mod.signature_of(args)
        gen = kernel_mod._GENERATION[0]
        entry = self._kernels.get(sig)
        if entry is not None and entry[0] == gen:
            return entry[1]
        with self._lock:
            cfg = get_nkipy_backend_config()
            if self._kernels and sig not in self._kernels:
                log.info("recompiling %s graph for new input shapes %s", self.role,
                         [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)])
            k = kernel_mod.build_kernel(self.gm, args, cfg.nkipy_cache,
                                       compiler_args=self._compiler_args(cfg),
                                       core_id=cfg.visible_core, rank=cfg.rank,
                                       world_size=cfg.world_size)
            self._kernels[sig] = (gen, k)
            return k

    def _compiler_args(self, cfg: Any) -> str:
        from .custom_ops import custom_kernel_for

        extra = []
        for n in self.gm.graph.nodes:
            if n.op == "call_function":
                ck = custom_kernel_for(target_name(n.target))
                if ck is not None and ck.compiler_args and ck.compiler_args not in extra:
                    extra.append(ck.compiler_args)
        return " ".join([cfg.additional_compiler_args] + extra).strip()

    def __call__(self, *args: Any) -> List[Any]:
        return self.kernel_for(args)(args)


def _partition(gm: torch.fx.GraphModule, role: str) -> torch.fx.GraphModule:
    """Supported regions become compiled submodules; the rest stays eager."""
    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    parts = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(parts)
    for name, sub in list(fused.named_children()):
        if name.startswith("fused_") and isinstance(sub, torch.fx.GraphModule):
            compute = [n for n in sub.graph.nodes if n.op == "call_function"
                       and target_name(n.target) != "_operator.getitem"]
            if not compute:
                continue
            wrapper = _CompiledSubmodule(sub, f"{role}.{name}")
            setattr(fused, name, wrapper)
    fused.recompile()
    return fused


class _CompiledSubmodule(torch.nn.Module):
    def __init__(self, sub: torch.fx.GraphModule, role: str, allow_partition: bool = False) -> None:
        super().__init__()
        self.sub = sub
        out = next(n for n in sub.graph.nodes if n.op == "output")
        self.single = not isinstance(out.args[0], (list, tuple))
        if allow_partition:
            self.compiled = compile_fx_graph(sub, role, split_markers=False)
        else:
            self.compiled = CompiledGraph(sub, role)
            self.compiled._boxed_call = False  # type: ignore[attr-defined]

    def forward(self, *args: Any) -> Any:
        if getattr(self.compiled, "_boxed_call", False):
            res = self.compiled(list(args))
        else:
            res = self.compiled(*args)
        if self.single:
            return res[0] if isinstance(res, (list, tuple)) else res
        return tuple(res)


_MARKER = "nkipy.mark_subgraph_identity.default"


def _split_on_markers(gm: torch.fx.GraphModule, role: str) -> torch.fx.GraphModule:
    """One partition per region ending at a ``mark_subgraph_identity``; each
    compiled separately (identical regions generate identical source and share
    one kernel)."""
    from torch.fx.passes.split_module import split_module

    part = [0]
    assignment: Dict[torch.fx.Node, int] = {}
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output", "get_attr"):
            continue
        assignment[n] = part[0]
        if n.op == "call_function" and target_name(n.target) == _MARKER:
            part[0] += 1
    split = split_module(gm, None, lambda n: assignment[n], keep_original_order=True)
    for name, sub in list(split.named_children()):
        if name.startswith("submod_") and isinstance(sub, torch.fx.GraphModule):
            setattr(split, name, _CompiledSubmodule(sub, f"{role}.{name}", allow_partition=True))
    split.recompile()
    return split


def compile_fx_graph(gm: torch.fx.GraphModule, role: str = "forward",
                     split_markers: bool = True) -> Callable[..., Any]:
    """A callable running ``gm`` (boxed: takes the list of inputs)."""
    if split_markers and sum(1 for n in gm.graph.nodes if n.op == "call_function"
                             and target_name(n.target) == _MARKER) > 0:
        split = _split_on_markers(gm, role)

        def run_split(args: List[Any]) -> Any:
            return split(*args)
        run_split._boxed_call = True  # type: ignore[attr-defined]
        return run_split
    unsupported = [n for n in gm.graph.nodes if n.op == "call_function" and not is_supported_node(n)]
    if not unsupported:
        compiled: Any = CompiledGraph(gm, role)

        def run(args: List[Any]) -> Any:
            return compiled(*args)
    else:
        for n in unsupported:
            _log_unsupported_once(target_name(n.target))
        part = _partition(gm, role)

        def run(args: List[Any]) -> Any:
            return part(*args)
    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _fw_compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    return compile_fx_graph(gm, "forward")


def _bw_compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    return compile_fx_graph(gm, "backward")


#: ``torch.compile(backend="nkipy", options={...})`` keys (spiky's) and their types.
OPTION_TYPES: Dict[str, Any] = {
    "buckets": (list, tuple), "jit": bool, "pipelined": bool, "pad_on_device": bool,
    "keep_outputs_on_device": bool, "input_layout": str, "output_layout": str,
    "unpad_outputs": bool, "save_ntff": bool, "save_ntff_dir": str,
    "save_ntff_exe_idx": (list, tuple),
}


def validate_options(options: Any) -> Dict[str, Any]:
    """Checks per-function options; unknown keys and wrong types raise ValueError."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ValueError(f"options must be a dict, not {type(options).__name__}")
    for key, value in options.items():
        if key not in OPTION_TYPES:
            raise ValueError(f"unknown nkipy backend option {key!r} "
                             f"(known: {', '.join(sorted(OPTION_TYPES))})")
        if not isinstance(value, OPTION_TYPES[key]):
            raise ValueError(f"nkipy backend option {key!r} has the wrong type "
                             f"{type(value).__name__}")
    if options.get("input_layout", "auto") not in ("auto", "padded"):
        raise ValueError("option input_layout must be 'auto' or 'padded'")
    if options.get("output_layout", "unpad") not in ("unpad", "padded"):
        raise ValueError("option output_layout must be 'unpad' or 'padded'")
    buckets = options.get("buckets")
    if buckets is not None and (not buckets or any(not isinstance(b, int) or b <= 0
                                                   for b in buckets)):
        raise ValueError("option buckets must be a non-empty list of positive ints")
    return dict(options)


#: Ops lowered directly although core ATen decomposes them (their decompositions
#: do not match what the eager backward ops expect).
KEEP_UNDECOMPOSED = ("aten._scaled_dot_product_flash_attention_for_cpu.default",)


def decompositions() -> Dict[Any, Any]:
    """Core ATen decompositions, minus the ops in KEEP_UNDECOMPOSED."""
    table = dict(core_aten_decompositions())
    for op in list(table):
        if str(op) in KEEP_UNDECOMPOSED:
            del table[op]
    return table


def nkipy_backend_fn(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                     options: Any = None, **kwargs: Any) -> Callable[..., Any]:
    """The dynamo backend: AOTAutograd with core ATen decompositions.

    ``options`` (spiky's per-function options) are validated and recorded; the
    current executor runs every graph synchronously, unpadded."""
    if not is_nkipy_backend_initialized():
        raise RuntimeError("torch.compile(backend='nkipy') needs init_nkipy_backend() first")
    validate_options(options)
    return aot_module_simplified(gm, example_inputs, fw_compiler=_fw_compiler,
                                 bw_compiler=_bw_compiler,
                                 decompositions=decompositions(),
                                 keep_inference_input_mutations=True)


def _register() -> None:
    from torch._dynamo.backends.registry import _BACKENDS

    if "nkipy" not in _BACKENDS:
        register_backend(name="nkipy")(nkipy_backend_fn)


_register()
