"""The dynamo backend ``"nkipy"``: AOTAutograd, partitioning, kernels per signature."""
from __future__ import annotations

import logging
import itertools
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
import torch.fx
from torch._dynamo.backends.registry import register_backend
from torch._functorch.aot_autograd import aot_module_simplified
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from spike_torch.lowering.registry import core_decompositions
from spiky.buckets import infer_buckets, next_pow2, plan_chunks, select_bucket
from spiky.padding import get_metadata
from spiky.profiling import ExecutionProfile, ntff_path
from spiky.stats import record_compile, record_graph

from . import kernel as kernel_mod
from . import progress
from .conv_bn_fold import fold_conv_batch_norm
from .config import is_nkipy_backend_initialized, require_nkipy_backend_config
from .dynamic import dynamic_signature
from .executor import PadCall, run_sliced
from .kernel import DEFAULT_OPTIONS
from .options import ExecOptions, resolve_options, validate_options
from .random import seed_random_ops, with_seeds
from .lowering import is_supported_node
from .lowering import target_name

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
    """A graph compiled lazily on first call.

    Static graphs get one kernel per concrete input signature. Graphs with
    dynamic sizes (``dynamic=True``, ``maybe_mark_dynamic``) get one kernel per
    bucket of their primary dynamic size, inputs padded and outputs unpadded on
    the device (torch_to_nkipy.dynamic); when padding could change results the
    graph is compiled for each exact size instead (logged once).
    """

    def __init__(self, gm: torch.fx.GraphModule, role: str = "forward",
                 opts: ExecOptions = DEFAULT_OPTIONS) -> None:
        self.gm = gm
        self.role = role
        self.opts = opts
        self._kernels: Dict[Tuple, Tuple[int, kernel_mod.NKIPyKernel]] = {}
        self._lock = threading.Lock()
        self._calls = itertools.count()
        self._compile_span: Optional[Tuple[int, int]] = None
        self._static: Optional[kernel_mod.NKIPyKernel] = None
        self.sig = dynamic_signature(gm)
        self.buckets: Optional[List[int]] = None
        # sizes -> (kernel generation, slices or None): how a call runs sliced
        self._slices: Dict[Tuple[int, ...], Tuple[int, Optional[List[Any]]]] = {}
        progress.graph_created(self)
        # outputs that are views of inputs, made by PyTorch's own view ops on the
        # real inputs (dynamic graphs: their kernels' outputs are unpadded copies)
        self._view_outputs = _view_outputs(gm) if self.sig is not None else {}
        if self.sig is not None:
            if self.sig.hazard:
                log.warning("%s graph: not padding the dynamic size %s (%s); compiling each "
                            "size exactly", role, self.sig.primary, self.sig.hazard)
            else:
                cfg = require_nkipy_backend_config()
                self.buckets = list(opts.buckets) if opts.buckets else \
                    infer_buckets(cfg.max_bucket_size, cfg.bucket_strategy)

    def _build(self, key: Tuple, make_args: Callable[[], Sequence[Any]],
               what: str) -> kernel_mod.NKIPyKernel:
        """The kernel cached under ``key``, built (once, thread-safely) from the
        example arguments ``make_args()`` gives."""
        gen = kernel_mod._GENERATION[0]
        entry = self._kernels.get(key)
        if entry is not None and entry[0] == gen:
            return entry[1]
        with self._lock:
            entry = self._kernels.get(key)
            if entry is not None and entry[0] == gen:
                return entry[1]
            cfg = require_nkipy_backend_config()
            if self._kernels:
                log.info("compiling %s graph for %s", self.role, what)
            start = time.monotonic_ns()
            made = kernel_mod.STATS["kernels"]
            with progress.building(self, f"compiling {self.role}") as shown:
                k = kernel_mod.build_kernel(self.gm, make_args(), cfg.nkipy_cache,
                                           compiler_args=self._compiler_args(cfg),
                                           core_id=cfg.device_core, rank=cfg.rank,
                                           world_size=cfg.world_size)
                shown.built(k, new=kernel_mod.STATS["kernels"] != made)
            self._compile_span = (start, time.monotonic_ns())
            if kernel_mod.STATS["kernels"] != made:   # not a kernel shared with another graph
                record_compile()
            self._kernels[key] = (gen, k)
            return k

    def kernel_for(self, args: Sequence[Any]) -> kernel_mod.NKIPyKernel:
        """The kernel of one concrete input signature."""
        sig = kernel_mod.signature_of(args)
        return self._build(sig, lambda: args, "new input shapes " + str(
            [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]))

    def bucket_for(self, args: Sequence[Any]) -> Tuple[kernel_mod.NKIPyKernel,
                                                         Optional[PadCall]]:
        """The bucket kernel for a call and how the call maps onto it."""
        assert self.sig is not None and self.buckets is not None
        env = self.sig.bind(args)
        s = self.sig.primary
        if self.opts.input_layout == "padded":   # padded inputs: the real size is recorded
            for i in self.sig.in_pad:
                meta = get_metadata(args[i])
                if meta is not None:
                    env[s] = meta.original_size
                    break
        n = env[s]
        b = select_bucket(self.buckets, n)
        if b is None:
            if not self.opts.jit:
                raise ValueError(f"dynamic size {n} exceeds the largest bucket "
                                 f"{self.buckets[-1]} of this compiled function and its "
                                 f"option jit is off")
            with self._lock:
                b = select_bucket(self.buckets, n)
                if b is None:
                    b = next_pow2(n)
                    self.buckets = sorted(set(self.buckets) | {b})
                    log.info("%s graph: new bucket %d for dynamic size %d", self.role, b, n)
        k = self._bucket_kernel(b, env)
        if k is None:
            return self.kernel_for(args), None
        pad = PadCall(b, n, self.sig.in_pad, self.sig.out_pad, self.sig.symint_outputs(env))
        return k, pad

    def _bucket_kernel(self, b: int, env: Dict[Any, int]) -> Optional[kernel_mod.NKIPyKernel]:
        """The kernel of bucket ``b`` (the other symbols at ``env``'s values), or
        None when it failed to build (buckets are then given up)."""
        assert self.sig is not None
        benv = dict(env)
        benv[self.sig.primary] = b
        key = ("bucket", b) + tuple(env[x] for x in self.sig.symbols[1:])
        try:
            return self._build(key, lambda: self.sig.concrete(benv), f"bucket {b}")
        except Exception as exc:   # e.g. sizes the padding made inconsistent with each other
            log.warning("%s graph: the kernel of bucket %d failed to build (%s: %s); "
                        "compiling each size exactly", self.role, b, type(exc).__name__, exc)
            self.buckets = None
            return None

    def _sliced_call(self, args: Sequence[Any]) -> Optional[List[Any]]:
        """A bucketed call run as consecutive slices of its inputs along the
        dynamic (leading) dimension, each through one bucket's kernel
        (``spiky.buckets.plan_chunks``: 200 rows as 128 + 64 + 8, nothing padded,
        instead of padding to 256); None when this call cannot be (padded
        inputs, a size beyond the buckets, one slice only, an input that is not
        contiguous): the caller pads as usual."""
        sig = self.sig
        assert sig is not None and self.buckets is not None
        for i in sig.in_pad:
            a = args[i]
            if not isinstance(a, torch.Tensor) or not a.is_contiguous() or (
                    self.opts.input_layout == "padded" and get_metadata(a) is not None):
                return None
        env = sig.bind(args)
        n = env[sig.primary]
        key = tuple(env[x] for x in sig.symbols)
        gen = kernel_mod._GENERATION[0]
        cached = self._slices.get(key)
        if cached is None or cached[0] != gen:
            cached = self._slices[key] = (gen, self._slice_parts(env, n))
        parts = cached[1]
        if parts is None:
            return None
        return run_sliced(parts, args, sig.in_pad, sig.out_pad, n, self.opts)

    def _slice_parts(self, env: Dict[Any, int], n: int) -> Optional[List[Any]]:
        """(kernel, start, size, bucket) of each slice of a call at ``env``'s sizes
        (kernels built as needed), or None when it runs as one padded call."""
        assert self.buckets is not None
        plan = plan_chunks(self.buckets, n)
        if plan is None or len(plan) < 2:
            return None
        parts = []
        for start, size, b in plan:
            k = self._bucket_kernel(b, env)
            if k is None or k.aliases:        # in-place updates: one call only
                return None
            parts.append((k, start, size, b))
        return parts

    def _compiler_args(self, cfg: Any) -> str:
        from .custom_ops import custom_kernel_for

        extra = []
        for n in self.gm.graph.nodes:
            if n.op == "call_function":
                ck = custom_kernel_for(target_name(n.target))
                if ck is not None and ck.compiler_args and ck.compiler_args not in extra:
                    extra.append(ck.compiler_args)
        return " ".join([cfg.additional_compiler_args] + extra).strip()

    def _profile(self, exe_idx: int) -> Optional[ExecutionProfile]:
        """A profile for execution ``exe_idx`` of a function with ``save_ntff`` on."""
        selected = self.opts.save_ntff_exe_idx
        if selected is not None and exe_idx not in selected:
            return None
        cfg = require_nkipy_backend_config()
        return ExecutionProfile(cfg.device_core) if cfg.rank == 0 else None

    def __call__(self, *args: Any) -> List[Any]:
        exe_idx = next(self._calls)
        profile = self._profile(exe_idx) if self.opts.save_ntff else None
        self._compile_span = None
        if self.sig is None and profile is None:
            # static graph: Dynamo's guards fix every input, so there is one kernel
            k = self._static
            if k is None or k.generation != kernel_mod._GENERATION[0]:
                k = self._static = self.kernel_for(args)
            return k.executor.run(args, None, self.opts, None)
        if (self.buckets is not None and profile is None and self.opts.slice_buckets
                and self.sig.sliceable and self.opts.output_layout == "unpad"):
            res = self._sliced_call(args)
            if res is not None:
                return self._with_view_outputs(res, args)
        if self.buckets is None:     # (also when a slice's kernel failed to build just now)
            k, pad = self.kernel_for(args), None
        else:
            k, pad = self.bucket_for(args)
        if profile is not None and self._compile_span is not None:
            profile.span(f"compile kernel_{k.hash}", *self._compile_span)
        res = k(args, pad, self.opts, profile)
        if profile is not None:
            path = profile.save(ntff_path(self.opts.save_ntff_dir, k.hash, exe_idx),
                                k.device_kernel.neff_path)
            log.info("profile of execution %d written to %s", exe_idx, path)
        return self._with_view_outputs(res, args)

    def _with_view_outputs(self, res: List[Any], args: Sequence[Any]) -> List[Any]:
        """``res`` with each output that is a view of an input replaced by that
        view, made by PyTorch from the real input: AOTAutograd rebuilds such an
        output from the input with the strides of the one returned, and an
        unpadded copy's strides are not the view's (an expanded bool input came
        back with wrong values)."""
        if not self._view_outputs:
            return res
        res = list(res)
        with torch.no_grad():
            for pos, sub in self._view_outputs.items():
                res[pos] = sub(*args)
        return res


#: ATen ops that only make a view of their first argument (no new values).
_VIEW_TARGETS = frozenset({
    "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
    "aten.expand.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
    "aten.squeeze.default", "aten.permute.default", "aten.transpose.int", "aten.t.default",
    "aten.slice.Tensor", "aten.select.int", "aten.alias.default", "aten.as_strided.default",
    "aten.diagonal.default", "aten.unfold.default", "aten.narrow.default",
    "aten._reshape_alias.default", "aten.detach.default"})


def _view_outputs(gm: torch.fx.GraphModule) -> Dict[int, torch.fx.GraphModule]:
    """Output position -> a small graph computing that output from the graph's
    inputs, for every output made from one input by view ops alone (and the
    size arithmetic they take)."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    found: Dict[int, torch.fx.GraphModule] = {}
    for pos, o in enumerate(outs):
        if not isinstance(o, torch.fx.Node) or o.op != "call_function" or \
                target_name(o.target) not in _VIEW_TARGETS:
            continue
        stack, seen, ok = [o], set(), True
        while stack and ok:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op == "placeholder":
                continue
            name = target_name(n.target) if n.op == "call_function" else ""
            tensor_out = isinstance(n.meta.get("val"), torch.Tensor)
            if n.op != "call_function" or (tensor_out and name not in _VIEW_TARGETS):
                ok = False
                break
            stack.extend(n.all_input_nodes)
        if not ok:
            continue
        g = torch.fx.Graph()
        env: Dict[torch.fx.Node, torch.fx.Node] = {}
        for ph in placeholders:
            env[ph] = g.placeholder(ph.name)
        for n in gm.graph.nodes:
            if n in seen and n.op == "call_function":
                env[n] = g.node_copy(n, lambda a: env[a])
        g.output(env[o])
        found[pos] = torch.fx.GraphModule(gm, g)
    return found


def _partition(gm: torch.fx.GraphModule, role: str, opts: ExecOptions) -> torch.fx.GraphModule:
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
            wrapper = _CompiledSubmodule(sub, f"{role}.{name}", opts)
            setattr(fused, name, wrapper)
    fused.recompile()
    return fused


class _CompiledSubmodule(torch.nn.Module):
    def __init__(self, sub: torch.fx.GraphModule, role: str, opts: ExecOptions,
                 allow_partition: bool = False) -> None:
        super().__init__()
        self.sub = sub
        out = next(n for n in sub.graph.nodes if n.op == "output")
        self.single = not isinstance(out.args[0], (list, tuple))
        if allow_partition:
            self.compiled = compile_fx_graph(sub, role, opts, split_markers=False)
        else:
            self.compiled = CompiledGraph(sub, role, opts)
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


def _split_on_markers(gm: torch.fx.GraphModule, role: str,
                      opts: ExecOptions) -> torch.fx.GraphModule:
    """One partition per region ending at a ``mark_subgraph_identity``; each
    compiled separately (identical regions generate identical source and share
    one kernel)."""
    return _split_and_wrap(gm, lambda sub, name: _CompiledSubmodule(
        sub, f"{role}.{name}", opts, allow_partition=True))


def gm_split_and_wrap(gm: torch.fx.GraphModule,
                      wrapper: Optional[Callable[[torch.fx.GraphModule, Any], Any]] = None,
                      options: Optional[Dict[str, Any]] = None) -> torch.fx.GraphModule:
    """``gm`` cut after each ``mark_subgraph_identity`` into partitions, each
    wrapped (the original's name; the backend does this itself for graphs with
    markers).

    Args:
        gm: an ATen-level FX graph (what the backend's compilers receive).
        wrapper: called as ``wrapper(partition, options)`` for each partition,
            returning the callable (a module) that runs it; None compiles each
            with the nkipy backend (identical partitions share one kernel).
        options: the ``torch.compile(backend="nkipy", options=...)`` dict.

    Returns:
        A GraphModule calling the wrapped partitions in order.
    """
    opts_dict = validate_options(options)
    if wrapper is None:
        opts = resolve_options(opts_dict, require_nkipy_backend_config())
        return _split_and_wrap(gm, lambda sub, name: _CompiledSubmodule(
            sub, f"forward.{name}", opts, allow_partition=True))
    if not callable(wrapper):
        raise TypeError(f"wrapper must be callable (partition, options) -> module, not "
                        f"{type(wrapper).__name__}")
    return _split_and_wrap(gm, lambda sub, name: wrapper(sub, opts_dict))


def _split_and_wrap(gm: torch.fx.GraphModule,
                    wrap: Callable[[torch.fx.GraphModule, str], Any]) -> torch.fx.GraphModule:
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
            setattr(split, name, wrap(sub, name))
    split.recompile()
    return split


_PLAIN_INPUTS = (torch.Tensor, bool, int, float, torch.SymInt, torch.SymFloat, type(None))


class _ObjectInputs:
    """How a graph is called without the inputs it only passes through.

    Object inputs (not tensors or numbers) that no node computes with: the
    ``DeviceMesh`` of each DTensor, which AOTAutograd keeps as an input after
    desugaring DTensor into its local tensor and ``_c10d_functional``
    collectives naming the process group, and which a training graph returns to
    save it for the backward. They are removed from the graph.

    Tensor inputs the graph returns unchanged: a training forward returns the
    weights it saves for the backward (GPT-2's forward returned 14 of them),
    which a kernel would copy into fresh outputs on every call. They leave the
    graph's results (and the graph, when nothing else reads them); the call
    returns the input tensor itself, as eager's saved tensors and inductor do.
    Not for an input the graph mutates (its result would be the new value).

    A call drops the removed inputs from its arguments and puts the returned
    ones back among the results."""

    def __init__(self, kept: List[int], passthrough: List[Tuple[int, int]]) -> None:
        self.kept = kept                  # indices of the inputs the graph still takes
        self.passthrough = passthrough    # (output position, input index), ascending

    @staticmethod
    def _mutated(n: torch.fx.Node) -> bool:
        """Whether an op of the graph writes into ``n`` (``copy_`` of an input
        mutation kept in the graph, an in-place op): its schema says so."""
        return any(u.op == "call_function" and isinstance(u.target, torch._ops.OpOverload)
                   and u.target._schema.is_mutable for u in n.users)

    @classmethod
    def strip(cls, gm: torch.fx.GraphModule,
              example_inputs: Sequence[Any]) -> Optional["_ObjectInputs"]:
        """Removes the object inputs of ``gm`` and its returned unchanged tensor
        inputs (in place); None when it has neither."""
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            return None
        output = next(n for n in gm.graph.nodes if n.op == "output")
        outs = output.args[0]
        returned = isinstance(outs, (list, tuple))   # results a list the inputs can join
        drop = {}      # placeholder -> input index: leaves the graph
        through = {}   # placeholder -> input index: returned by the call, not the graph
        for i, (n, v) in enumerate(zip(placeholders, example_inputs)):
            only_returned = returned and all(u is output for u in n.users)
            if not isinstance(v, _PLAIN_INPUTS):
                if not n.users or only_returned:
                    drop[n] = i
                    through[n] = i
            elif returned and isinstance(v, torch.Tensor) and n in outs and \
                    not cls._mutated(n):
                through[n] = i
                if only_returned:
                    drop[n] = i
        if returned and through and all(o in through for o in outs) and \
                any(isinstance(example_inputs[i], torch.Tensor) for i in through.values()):
            # a graph returning nothing but its inputs: keep the tensors in it
            through = {n: i for n, i in through.items()
                       if not isinstance(example_inputs[i], torch.Tensor)}
            drop = {n: i for n, i in drop.items() if n in through or not n.users}
        if not drop and not through:
            return None
        passthrough = []
        if returned:
            passthrough = [(pos, through[o]) for pos, o in enumerate(outs) if o in through]
            output.args = ([o for o in outs if o not in through],)
        for n in drop:
            gm.graph.erase_node(n)
        gm.graph.lint()
        gm.recompile()
        dropped = set(drop.values())
        return cls([i for i in range(len(placeholders)) if i not in dropped], passthrough)

    def wrap(self, inner: Callable[[List[Any]], Any]) -> Callable[[List[Any]], Any]:
        """A boxed callable taking the original inputs around the boxed ``inner``."""
        kept, passthrough = self.kept, self.passthrough

        def run_without_objects(args: List[Any]) -> Any:
            res = inner([args[i] for i in kept])
            if passthrough:
                res = list(res)
                for pos, i in passthrough:
                    res.insert(pos, args[i])
            return res
        run_without_objects._boxed_call = True  # type: ignore[attr-defined]
        return run_without_objects


def compile_fx_graph(gm: torch.fx.GraphModule, role: str = "forward",
                     opts: ExecOptions = DEFAULT_OPTIONS,
                     split_markers: bool = True,
                     example_inputs: Optional[Sequence[Any]] = None) -> Callable[..., Any]:
    """A callable running ``gm`` (boxed: takes the list of inputs).

    With ``example_inputs``, inputs that are objects no node computes with
    (DTensor's device meshes) are taken out of the graph (:class:`_ObjectInputs`)."""
    if example_inputs is not None:
        objects = _ObjectInputs.strip(gm, example_inputs)
        if objects is not None:
            return objects.wrap(compile_fx_graph(gm, role, opts, split_markers))
    seeds = seed_random_ops(gm)   # random ops on the device, seeded per call (.random)
    if seeds:
        return with_seeds(compile_fx_graph(gm, role, opts, split_markers), seeds)
    if split_markers and sum(1 for n in gm.graph.nodes if n.op == "call_function"
                             and target_name(n.target) == _MARKER) > 0:
        split = _split_on_markers(gm, role, opts)

        def run_split(args: List[Any]) -> Any:
            return split(*args)
        run_split._boxed_call = True  # type: ignore[attr-defined]
        return run_split
    unsupported = [n for n in gm.graph.nodes if n.op == "call_function" and not is_supported_node(n)]
    # the ops named to the user are ATen's: the getitems that unpack a CPU op's
    # tuple result (and Python arithmetic on sizes) follow it to the CPU
    # without being fallbacks of their own
    cpu_ops = [target_name(n.target) for n in unsupported
               if isinstance(n.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))]
    record_graph(cpu_ops)
    if not unsupported:
        compiled: Any = CompiledGraph(gm, role, opts)

        def run(args: List[Any]) -> Any:
            return compiled(*args)
    else:
        for name in cpu_ops:
            _log_unsupported_once(name)
        part = _partition(gm, role, opts)

        def run(args: List[Any]) -> Any:
            return part(*args)
    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def decompositions() -> Dict[Any, Any]:
    """Core ATen decompositions, minus the ops the registry lowers itself
    (``spike_torch.lowering.registry.KEEP_UNDECOMPOSED``)."""
    return core_decompositions()


def nkipy_backend_fn(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                     options: Any = None, **kwargs: Any) -> Callable[..., Any]:
    """The dynamo backend: AOTAutograd with core ATen decompositions; forward and
    backward graphs compiled by :func:`compile_fx_graph` with the per-function
    ``options`` (torch_to_nkipy.options) over the backend defaults. Inference
    graphs (nothing to differentiate) first get the inference-only rewrites
    (:func:`torch_to_nkipy.conv_bn_fold.fold_conv_batch_norm`)."""
    if not is_nkipy_backend_initialized():
        raise RuntimeError("torch.compile(backend='nkipy') needs init_nkipy_backend() first")
    opts = resolve_options(options, require_nkipy_backend_config())

    def fw(g: torch.fx.GraphModule, ex: Sequence[Any]) -> Callable[..., Any]:
        return compile_fx_graph(g, "forward", opts, example_inputs=ex)

    def inference(g: torch.fx.GraphModule, ex: Sequence[Any]) -> Callable[..., Any]:
        # a graph autograd does not differentiate: inference-only rewrites apply
        fold_conv_batch_norm(g)
        return compile_fx_graph(g, "forward", opts, example_inputs=ex)

    @torch._dynamo.disable(reason="do not trace the nkipy backward compiler")
    def bw(g: torch.fx.GraphModule, ex: Sequence[Any]) -> Callable[..., Any]:
        # The backward is compiled and run when autograd first calls it, from the
        # user's frame, where Dynamo is active: like torch's own aot_autograd
        # backends, keep Dynamo out of both (it would otherwise trace the kernel
        # build, nkipy's tracer included, and hit its recompile limit).
        return torch._dynamo.disable(compile_fx_graph(g, "backward", opts, example_inputs=ex),
                                     reason="do not trace the nkipy backward pass")

    with progress.tracing():
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw, bw_compiler=bw,
                                     inference_compiler=inference,
                                     decompositions=decompositions(),
                                     keep_inference_input_mutations=True)


def _register() -> None:
    from torch._dynamo.backends.registry import _BACKENDS

    if "nkipy" not in _BACKENDS:
        register_backend(name="nkipy")(nkipy_backend_fn)


_register()
