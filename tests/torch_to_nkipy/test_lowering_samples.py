"""Every OpInfo sample's arguments through the ATen lowerings, and OpInfo's
non-contiguous variants through compiled kernels.

The op tests (test_ops.py) check one argument set per op; a lowering that only
handles the common case (softmax over the last dimension, var with
correction=1) passes them. Here, for every entry of the one ATen op registry
(spike_torch/lowering) that has an OpInfo in PyTorch's op_db, each sample of
the OpInfo (float32, or the op's first integer/bool dtype; up to SAMPLES_PER_OP
samples) is traced with make_fx and the backend's core ATen decompositions on
the CPU, lowered to NumPy source by spike_torch.lowering.generate_source, and
run ON THE HOST with NumPy (no C compile): its outputs must equal eager CPU's
(float32: rtol 1e-4, atol 1e-5; NaN where eager has NaN; shape and dtype
exact). Graphs with a node the registry does not lower are counted, not
failed (those run in a CPU partition). Random ops are skipped (eager disagrees
with itself).

Then, like PyTorch's test_noncontiguous_samples, a capped subset of ops runs
its first samples made non-contiguous (SampleInput.noncontiguous()) and as
transposed copies through torch.compile(backend="nkipy"), against eager on the
same inputs."""
from __future__ import annotations

import os
import sys
import types
import warnings
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree

pytest.importorskip("expecttest")  # torch.testing._internal needs it

SAMPLES_PER_OP = 12
RTOL, ATOL = 1e-4, 1e-5


def _import_op_db():
    """PyTorch's op_db, with the process-wide state its import changes put back
    (common_utils freezes the backends' global flags and wraps ScriptFunction/
    ScriptMethod calls), so nothing leaks into other tests."""
    first = "torch.testing._internal.common_utils" not in sys.modules
    saved = (torch._C.ScriptFunction.__call__, torch._C.ScriptMethod.__call__)
    from torch.testing._internal.common_methods_invocations import op_db

    if first:
        torch._C.ScriptFunction.__call__, torch._C.ScriptMethod.__call__ = saved
        vars(torch.backends)["__allow_nonbracketed_mutation_flag"] = True
    return op_db


op_db = _import_op_db()

from spike_torch.lowering import AtenOpRegistry, generate_source, is_supported_node  # noqa: E402
from spike_torch.lowering.codegen import torch_to_numpy  # noqa: E402
from spike_torch.lowering.registry import target_name  # noqa: E402


def _registry_bases() -> set:
    return {n.split(".")[1] for n in AtenOpRegistry.names() if n.startswith("aten.")}


def _op_keys(op) -> set:
    last = op.name.split(".")[-1]
    aten = op.aten_name or last
    return {last, aten, "_" + aten, "native_" + aten, aten + "_default"}


_BASES = _registry_bases()
_RANDOM = ("rand", "dropout", "bernoulli", "multinomial", "normal", "uniform", "cauchy",
           "exponential", "geometric", "log_normal", "poisson")
_UNINITIALISED = ("empty", "new_empty")   # outputs without defined values
OPS = [op for op in op_db if _op_keys(op) & _BASES
       and not any(r in op.name for r in _RANDOM)
       and not op.name.startswith(_UNINITIALISED)]


def _dtype_for(op) -> Any:
    dtypes = op.supported_dtypes("cpu")
    for dt in (torch.float32, torch.int64, torch.int32, torch.bool):
        if dt in dtypes:
            return dt
    return None


def _op_id(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


# ---- tracing and running on the host ---------------------------------------------

def _flatten_sample(sample) -> Tuple[List[torch.Tensor], Any]:
    """The sample's tensor leaves and a function rebuilding (input, args, kwargs)."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    idx = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    tensors = [leaves[i].detach() for i in idx]

    def rebuild(ts):
        vals = list(leaves)
        for i, t in zip(idx, ts):
            vals[i] = t
        return pytree.tree_unflatten(vals, spec)
    return tensors, rebuild


def _tensor_outputs(out: Any) -> List[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _host_run(gm: torch.fx.GraphModule, tensors: List[torch.Tensor], tmp: str) -> List[np.ndarray]:
    gen = generate_source(gm, tensors)
    mod = types.ModuleType("lowering_sample")
    mod.__file__ = os.path.join(tmp, "lowering_sample.py")
    for fname, data in gen.constants.items():
        np.save(os.path.join(tmp, fname), data)
    exec(compile(gen.source, mod.__file__, "exec"), mod.__dict__)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        outs = mod.nkipy_func(*[torch_to_numpy(t) for t in tensors])
    return [np.asarray(o) for o in outs]


def _compare(got: np.ndarray, expected: torch.Tensor, what: str) -> None:
    exp = torch_to_numpy(expected)
    assert tuple(got.shape) == tuple(exp.shape), f"{what}: shape {got.shape} != eager {exp.shape}"
    assert got.dtype == exp.dtype, f"{what}: dtype {got.dtype} != eager {exp.dtype}"
    if exp.dtype == np.bool_ or exp.dtype.kind in "iu":
        np.testing.assert_array_equal(got, exp, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), exp.astype(np.float64), rtol=RTOL,
                                   atol=ATOL, equal_nan=True, err_msg=what)


def run_samples_on_host(op, tmp: str) -> Dict[str, Any]:
    """Traces and host-runs each sample; returns counts and the first failures."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch_to_nkipy.backend import decompositions

    dtype = _dtype_for(op)
    stats: Dict[str, Any] = {"checked": 0, "unlowered": 0, "untraceable": 0, "failures": []}
    if dtype is None:
        return stats
    table = decompositions()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:SAMPLES_PER_OP]
    for k, sample in enumerate(samples):
        tensors, rebuild = _flatten_sample(sample)
        if op.name.startswith("as_strided") and any(t.storage_offset() for t in tensors):
            # make_fx's placeholders drop the storage offset, which as_strided's
            # storage_offset argument counts from: the trace is not this sample's
            stats["untraceable"] += 1
            continue

        def fn(*ts):
            inp, args, kwargs = rebuild(ts)
            return op(inp, *args, **kwargs)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = _tensor_outputs(fn(*tensors))
                if not expected or any(t.is_complex() or t.is_sparse for t in expected):
                    continue
                gm = make_fx(fn, decomposition_table=table)(*tensors)
        except Exception:  # noqa: BLE001 - ops make_fx cannot trace are not this test's subject
            stats["untraceable"] += 1
            continue
        if any(n.op == "call_function" and not is_supported_node(n) for n in gm.graph.nodes):
            stats["unlowered"] += 1
            continue
        what = f"{_op_id(op)} sample {k} ({sample.summary() if hasattr(sample, 'summary') else ''})"
        try:
            got = _host_run(gm, tensors, tmp)
            assert len(got) == len(expected), f"{what}: {len(got)} outputs, eager {len(expected)}"
            for i, (g, e) in enumerate(zip(got, expected)):
                _compare(g, e, f"{what} output {i}")
        except Exception as e:  # noqa: BLE001 - collected and reported below
            stats["failures"].append(f"{what}: {type(e).__name__}: {str(e)[:400]}")
        stats["checked"] += 1
    return stats


# Lowerings that handle only part of their OpInfo's argument sets (found by
# this test; each reason names what is wrong). strict: a fix must remove it.
KNOWN_FAILING: Dict[str, str] = {}   # scatter_add of a 0-d input and cat of zero-size
                                    # vectors were here: fixed (the differential fuzzer)


def _params() -> list:
    out = []
    for op in OPS:
        marks = []
        reason = KNOWN_FAILING.get(_op_id(op))
        if reason:
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        out.append(pytest.param(op, id=_op_id(op), marks=marks))
    return out


@pytest.mark.parametrize("op", _params())
def test_every_sample_on_host(op, tmp_path) -> None:
    stats = run_samples_on_host(op, str(tmp_path))
    assert not stats["failures"], "\n".join(stats["failures"][:5])


def test_samples_cover_the_registry() -> None:
    """The op_db mapping finds OpInfos for a good share of the registry (a
    renamed registry or op_db would silently shrink this test)."""
    assert len(OPS) >= 60, len(OPS)


# ---- non-contiguous samples through compiled kernels ---------------------------------

NONCONTIG_OPS = ["add", "mul", "sum", "mean", "amax", "softmax", "log_softmax", "var", "std",
                 "matmul", "mm", "bmm", "transpose", "permute", "cat", "where", "clamp",
                 "nn.functional.layer_norm", "exp", "index_select"]
NONCONTIG_SAMPLES = 2


def _transposed_copy(t: torch.Tensor) -> torch.Tensor:
    """Same values, memory order reversed: a non-contiguous (transposed) layout."""
    if t.dim() < 2:
        return t
    return t.detach().permute(*reversed(range(t.dim()))).contiguous().permute(
        *reversed(range(t.dim())))


@pytest.mark.parametrize("name", NONCONTIG_OPS)
def test_noncontiguous_samples_compiled(name, backend) -> None:
    import torch._dynamo

    ops = [o for o in op_db if o.name == name and not o.variant_test_name]
    assert ops, f"no OpInfo named {name}"
    op = ops[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = list(op.sample_inputs("cpu", torch.float32))[:NONCONTIG_SAMPLES]
    for k, sample in enumerate(samples):
        for variant, make in (("noncontiguous", lambda s: s.noncontiguous()),
                              ("transposed", lambda s: s.transform(
                                  lambda t: _transposed_copy(t) if isinstance(t, torch.Tensor)
                                  else t))):
            s = make(sample)
            tensors, rebuild = _flatten_sample(s)
            if not any(not t.is_contiguous() for t in tensors):
                continue

            def fn(*ts):
                inp, args, kwargs = rebuild(ts)
                return op(inp, *args, **kwargs)
            expected = _tensor_outputs(fn(*tensors))
            torch._dynamo.reset()
            got = _tensor_outputs(torch.compile(fn, backend="nkipy")(*tensors))
            assert len(got) == len(expected)
            for i, (g, e) in enumerate(zip(got, expected)):
                what = f"{name} sample {k} {variant} output {i}"
                assert g.shape == e.shape and g.dtype == e.dtype, what
                torch.testing.assert_close(g, e, rtol=RTOL, atol=ATOL, equal_nan=True, msg=what)
