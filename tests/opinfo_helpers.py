"""Shared by the OpInfo tests (tests/spike_torch/test_opinfo*.py,
tests/torch_to_nkipy/test_opinfo_compiled.py): PyTorch's test framework
imported without leaking global state, the sample plumbing, tolerances, and
the one implementation of "where did this op run" that both the tests and
tools/op_coverage.py (through the records the tests write) use.

Environment (read once, at import; a bad value is refused with a message):

- ``NKIPY_OPINFO_FULL=1``: the full matrix (every op in float32, float16,
  bfloat16 and int64, up to ``NKIPY_OPINFO_SAMPLES`` samples each) instead of
  make test's cap (float32, or an op's first supported dtype when it has no
  float32, and the first ``NKIPY_OPINFO_SAMPLES`` samples).
- ``NKIPY_OPINFO_DTYPES=float32,float16,...``: the full matrix's dtypes, a
  subset of float32, float16, bfloat16, int64 (default: all four).
- ``NKIPY_OPINFO_SAMPLES=N``: samples per (op, dtype); default 1 (make test)
  or 4 (full matrix).
- ``NKIPY_OPINFO_SHARD=k/n``: only every n-th op of op_db from the k-th
  (0 <= k < n), so that n processes share the matrix (tools/op_coverage.py
  ``--jobs``).
- ``NKIPY_OPINFO_RECORD=path``: each whole-op_db test appends one JSON line
  (its family, op, dtype, status, sample counts, first problem) to ``path``;
  tools/op_coverage.py renders these into docs/op-coverage.md.

Comparison: at the OpInfo's tolerance (:func:`tolerance`, else
:data:`DEFAULT_TOL`); random ops by properties (:func:`compare`). Ties: sort,
argsort, topk and kthvalue without ``stable=True`` may return any of several
tied indices (PyTorch leaves their order to the implementation, and half
precision rounds OpInfo's distinct values to equal ones), so their values are
compared exactly and their indices by meaning (:func:`compare_ordering`: the
input at the returned indices equals the CPU's values, and sort's and
argsort's indices are a permutation along the dim); a ``stable=True`` sort is
compared exactly, indices included.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import traceback
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

#: dtypes of the full matrix (make op-coverage)
FULL_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64)

#: assert_close tolerances (rtol, atol) used where the OpInfo states none:
#: torch.testing's defaults for float32, wider atol for the half types (the
#: device may round intermediate results differently from PyTorch's CPU kernels).
DEFAULT_TOL = {
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
}


def _env_flag(name: str) -> bool:
    v = os.environ.get(name, "")
    if v not in ("", "0", "1"):
        raise ValueError(f"{name}={v!r}: expected 0 or 1")
    return v == "1"


def _env_count(name: str, default: int) -> int:
    v = os.environ.get(name, "")
    if v == "":
        return default
    if not v.isdigit() or not 1 <= int(v) <= 1000:
        raise ValueError(f"{name}={v!r}: expected a whole number of samples from 1 to 1000")
    return int(v)


def _env_record(name: str) -> Optional[str]:
    v = os.environ.get(name, "")
    if v == "":
        return None
    parent = os.path.dirname(os.path.abspath(v))
    if not os.path.isdir(parent):
        raise ValueError(f"{name}={v!r}: directory {parent!r} does not exist")
    return v


def _env_shard(name: str) -> Tuple[int, int]:
    v = os.environ.get(name, "")
    if v == "":
        return 0, 1
    k, _, n = v.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n) <= 64):
        raise ValueError(f"{name}={v!r}: expected k/n with 0 <= k < n <= 64")
    return int(k), int(n)


def _env_dtypes(name: str) -> Tuple[torch.dtype, ...]:
    v = os.environ.get(name, "")
    if v == "":
        return FULL_DTYPES
    known = {dtype_name(d): d for d in FULL_DTYPES}
    names = v.split(",")
    bad = [n for n in names if n not in known]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"{name}={v!r}: expected distinct names among {', '.join(known)}")
    return tuple(known[n] for n in names)


class Settings:
    """The matrix the whole-op_db tests run (from the environment, see module doc)."""

    def __init__(self) -> None:
        self.full = _env_flag("NKIPY_OPINFO_FULL")
        self.samples = _env_count("NKIPY_OPINFO_SAMPLES", 4 if self.full else 1)
        self.record_path = _env_record("NKIPY_OPINFO_RECORD")
        self.shard = _env_shard("NKIPY_OPINFO_SHARD")
        self.dtypes = _env_dtypes("NKIPY_OPINFO_DTYPES") if self.full else (torch.float32,)

    def ops(self, op_db: List[Any]) -> List[Any]:
        """The ops of this shard of ``op_db``."""
        k, n = self.shard
        return op_db[k::n]


def import_framework() -> Tuple[Any, Any, List[Any]]:
    """Imports spike_torch (registers the device, so that common_device_type sees
    PrivateUse1 available) and PyTorch's test framework; returns
    (common_device_type, common_utils, op_db). Instantiating the tests
    must happen at collection, so the process-wide state these imports change is
    put back: the runtime that importing spike_torch brings up is closed again
    (the session fixtures configure their own), and common_utils' global-flag
    freeze and ScriptFunction/ScriptMethod profiling hooks are undone, so that
    nothing leaks into the other test directories."""
    import spike
    from spike import spike_singleton

    runtime_before = spike_singleton.is_active()
    first_import = "torch.testing._internal.common_utils" not in sys.modules
    saved_calls = (torch._C.ScriptFunction.__call__, torch._C.ScriptMethod.__call__)
    import spike_torch  # noqa: F401

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # deprecations inside the OpInfo definitions
        from torch.testing._internal import common_device_type, common_utils
        from torch.testing._internal.common_methods_invocations import op_db

    if first_import:
        torch._C.ScriptFunction.__call__, torch._C.ScriptMethod.__call__ = saved_calls
        vars(torch.backends)["__allow_nonbracketed_mutation_flag"] = True
    if common_device_type.PrivateUse1TestBase not in common_device_type.device_type_test_bases:
        # common_device_type was imported before the device was registered
        common_device_type.device_type_test_bases.append(common_device_type.PrivateUse1TestBase)
    if not runtime_before:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            spike_torch.reset()
    del spike
    return common_device_type, common_utils, op_db


# ---- samples ------------------------------------------------------------------------

def tree_map(fn: Callable[[Any], Any], x: Any) -> Any:
    """``fn`` applied to every leaf of nested lists, tuples and dicts."""
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(tree_map(fn, a) for a in x)
    if isinstance(x, dict):
        return {k: tree_map(fn, v) for k, v in x.items()}
    return fn(x)


def to_device(x: Any, device: Any) -> Any:
    """Tensors moved to ``device`` (detached); CPU device arguments (a factory
    op's ``device=``) rewritten to ``device``; everything else unchanged."""
    def move(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return a.detach().to(device)
        if isinstance(a, torch.device) and a.type == "cpu":
            return torch.device(device)
        if isinstance(a, str) and a == "cpu":
            return str(device)
        return a
    return tree_map(move, x)


def _storage_copy(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy of ``t`` that keeps its place in its storage (size, stride,
    storage offset over a copy of the whole storage), so that ops reading
    memory outside the view (``as_strided``) see the same elements. Tensors
    with a lazy conjugate or negative bit (which a storage copy would drop)
    are copied as values."""
    if t.layout != torch.strided or t.is_quantized or t.is_conj() or t.is_neg() or (
            t.is_contiguous() and t.storage_offset() == 0
            and t.untyped_storage().nbytes() == t.numel() * t.element_size()):
        t = t.resolve_conj().resolve_neg()
        return t.clone() if t.device.type == "cpu" else t.cpu()
    n = t.untyped_storage().nbytes() // t.element_size()
    whole = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,))
    whole = whole.clone() if t.device.type == "cpu" else whole.cpu()
    return whole.as_strided(t.size(), t.stride(), t.storage_offset())


def to_cpu(x: Any) -> Any:
    """Tensors as CPU copies (detached; CPU ones cloned, so that the caller may
    mutate them), device arguments naming another device rewritten to the CPU;
    everything else unchanged."""
    def move(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return _storage_copy(a.detach())
        if isinstance(a, torch.device) and a.type != "cpu":
            return torch.device("cpu")
        if isinstance(a, str) and a.split(":")[0] in ("nkipy", "privateuse1"):
            return "cpu"
        return a
    return tree_map(move, x)


def leaves(x: Any) -> List[Any]:
    """The leaves of nested lists, tuples and dicts, in order."""
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return [leaf for a in x for leaf in leaves(a)]
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in leaves(v)]
    return [x]


def _dense(x: Any) -> Any:
    """A sparse (or other non-strided) tensor as a dense one, for comparing."""
    if isinstance(x, torch.Tensor) and x.layout != torch.strided:
        return x.to_dense()
    return x


def sparse_result(result: Any) -> Optional[str]:
    """Why a CPU result cannot be made on the device (a sparse or other
    non-strided layout, which the device does not have); None: it can."""
    for t in leaves(result):
        if isinstance(t, torch.Tensor) and t.layout != torch.strided:
            return f"{t.layout} result (the device has strided tensors only)"
    return None


def untestable(sample: Any) -> Optional[str]:
    """Why a sample cannot be run on the device at all (None: it can)."""
    for t in leaves((sample.input, sample.args, sample.kwargs)):
        if isinstance(t, torch.Tensor):
            if t.layout != torch.strided:
                return f"{t.layout} input"
            if t.is_quantized:
                return "quantized input"
    return None


def samples(op: Any, dtype: torch.dtype, cap: int, device: str = "cpu") -> Iterator[Any]:
    """The first ``cap`` samples of ``op`` in ``dtype`` made on ``device`` (as
    PyTorch's own device tests make them; a fixed seed each time)."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield from itertools.islice(op.sample_inputs(device, dtype, requires_grad=False), cap)


def call(op: Any, sample_input: Any, args: Any, kwargs: Any, seed: int = 0) -> Any:
    """``op`` on one sample, the RNG seeded first (random ops draw the same way)."""
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return op(sample_input, *args, **kwargs)


# ---- comparison ---------------------------------------------------------------------

def tolerance(op: Any, dtype: torch.dtype) -> Tuple[float, float]:
    """(rtol, atol): the widest ``toleranceOverride`` the OpInfo states for
    ``dtype`` in any of its tests, else :data:`DEFAULT_TOL` (exact for integers
    and bool)."""
    from torch.testing._internal.common_device_type import toleranceOverride

    rtol, atol = DEFAULT_TOL.get(dtype, (0.0, 0.0))
    for info in getattr(op, "decorators", ()) or ():
        for dec in getattr(info, "decorators", ()):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                rtol = max(rtol, dec.d[dtype].rtol)
                atol = max(atol, dec.d[dtype].atol)
    return rtol, atol


#: ops whose results are uninitialized memory: compared by structure, shape, dtype
UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                 "empty_permuted"}


def is_random(op: Any, sample: Any) -> bool:
    """Whether ``op`` draws random numbers: two CPU runs with different seeds
    (on copies of the sample) differ."""
    a = call(op, *to_cpu((sample.input, sample.args, sample.kwargs)), seed=0)
    b = call(op, *to_cpu((sample.input, sample.args, sample.kwargs)), seed=1)
    try:
        torch.testing.assert_close(tree_map(_dense, a), tree_map(_dense, b), rtol=0, atol=0,
                                   equal_nan=True)
    except AssertionError:
        return True
    return False


def in_unit_range(op: Any, sample: Any, draws: int = 8) -> bool:
    """Whether every floating result of ``draws`` CPU runs of a random ``op``
    with different seeds lies within [0, 1] (one draw of a one-element normal
    sample does a third of the time)."""
    for seed in range(draws):
        out = call(op, *to_cpu((sample.input, sample.args, sample.kwargs)), seed=seed)
        for y in leaves(tree_map(_dense, out)):
            if isinstance(y, torch.Tensor) and y.numel() and not y.is_complex() \
                    and y.dtype != torch.bool:
                yf = y.to(torch.float64)
                if not (yf.min() >= 0 and yf.max() <= 1):
                    return False
    return True


def compare(got: Any, expected: Any, rtol: float, atol: float, random: bool = False,
            uninitialized: bool = False, unit_range: Any = None) -> None:
    """Raises AssertionError when ``got`` (on any device) differs from ``expected``
    (CPU). A random op's results are compared by properties: structure, shape,
    dtype, no NaN the CPU result lacks, and within [0, 1] where the CPU result is
    (or, given ``unit_range``, where it says: :func:`in_unit_range`);
    an ``uninitialized`` one's by structure, shape and dtype."""
    got, expected = tree_map(_dense, to_cpu(got)), tree_map(_dense, expected)
    if not (random or uninitialized):
        if rtol or atol:
            torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       check_device=False)
            return
        # exact for an integer or bool sample; a floating result of one (cos of an
        # int64 tensor is float32) is compared at its own dtype's tolerance
        g, e = leaves(got), leaves(expected)
        assert len(g) == len(e), f"{len(g)} results, expected {len(e)}"
        for x, y in zip(g, e):
            r, a = DEFAULT_TOL.get(y.dtype, (0.0, 0.0)) if isinstance(y, torch.Tensor) \
                else (0.0, 0.0)
            torch.testing.assert_close(x, y, rtol=r, atol=a, equal_nan=True, check_device=False)
        return
    g, e = leaves(got), leaves(expected)
    assert len(g) == len(e), f"{len(g)} results, expected {len(e)}"
    for x, y in zip(g, e):
        if not isinstance(y, torch.Tensor):
            continue
        assert isinstance(x, torch.Tensor), f"got {type(x).__name__}, expected a tensor"
        assert x.shape == y.shape and x.dtype == y.dtype, \
            f"got {x.dtype}{tuple(x.shape)}, expected {y.dtype}{tuple(y.shape)}"
        if uninitialized or x.numel() == 0 or x.is_complex() or x.dtype == torch.bool:
            continue
        xf, yf = x.to(torch.float64), y.to(torch.float64)
        if not yf.isnan().any():
            assert not xf.isnan().any(), "NaN in a random op's result (none on the CPU)"
        if (yf.min() >= 0 and yf.max() <= 1) if unit_range is None else unit_range:
            assert xf.min() >= 0 and xf.max() <= 1, "random values outside [0, 1]"


#: ops whose index results may break ties either way (argsort, sort, topk and
#: kthvalue without ``stable=True``): PyTorch leaves the order of equal values
#: to the implementation, so their indices are compared by meaning (compare_ordering)
ORDERING_OPS = {"sort": 0, "argsort": 0, "topk": 1, "kthvalue": 1}


def _ordering_dim(name: str, args: Any, kwargs: Any) -> int:
    """The ``dim`` of an ORDERING_OPS call (positional or keyword, default -1)."""
    pos = ORDERING_OPS[name]
    if len(args) > pos:
        return int(args[pos])
    return int(kwargs.get("dim", -1))


def is_tie_order_free(name: str, kwargs: Any) -> bool:
    """Whether ``name`` called with ``kwargs`` may order tied values freely (an
    ORDERING_OPS op without ``stable=True``)."""
    return name in ORDERING_OPS and not kwargs.get("stable", False)


def compare_ordering(name: str, got: Any, expected: Any, cpu_input: torch.Tensor,
                     args: Any, kwargs: Any) -> None:
    """Raises AssertionError unless ``got`` is a valid answer of the ordering op
    ``name`` (see ORDERING_OPS) on ``cpu_input``: values equal to the CPU's
    exactly (NaN where the CPU has NaN); indices that gather those values from
    the input; for sort and argsort, indices that are a permutation along the
    dim. Which of several tied indices is returned is not compared."""
    got = to_cpu(got)
    if name == "argsort":
        got_idx, exp_idx = got, expected
        exp_val = None
    else:
        (got_val, got_idx), (exp_val, exp_idx) = got[:2], expected[:2]
        torch.testing.assert_close(got_val, exp_val, rtol=0, atol=0, equal_nan=True)
    assert got_idx.dtype == exp_idx.dtype and got_idx.shape == exp_idx.shape, \
        f"indices {got_idx.dtype}{tuple(got_idx.shape)}, expected " \
        f"{exp_idx.dtype}{tuple(exp_idx.shape)}"
    x = cpu_input.reshape(1) if cpu_input.dim() == 0 else cpu_input
    dim = _ordering_dim(name, args, kwargs) % x.dim()
    gi, ei = got_idx.reshape(1) if got_idx.dim() == 0 else got_idx, \
        exp_idx.reshape(1) if exp_idx.dim() == 0 else exp_idx
    if gi.dim() < x.dim():                       # kthvalue without keepdim
        gi, ei = gi.unsqueeze(dim), ei.unsqueeze(dim)
    assert bool(((gi >= 0) & (gi < max(x.shape[dim], 1))).all()), "index out of range"
    torch.testing.assert_close(x.gather(dim, gi), x.gather(dim, ei), rtol=0, atol=0,
                               equal_nan=True, msg=lambda m: "input at the indices: " + m)
    if name in ("sort", "argsort") and gi.numel():
        ref = torch.arange(gi.shape[dim]).reshape(
            [-1 if d == dim else 1 for d in range(gi.dim())]).expand_as(gi)
        assert torch.equal(gi.sort(dim).values, ref), "indices are not a permutation"


# ---- where it ran -------------------------------------------------------------------

#: eager statuses, best first (a test's status is the worst of its samples')
EAGER_STATUSES = ("device", "native", "mixed", "cpu_fallback", "fail", "skip")
#: compiled statuses
COMPILED_STATUSES = ("lowered", "cpu_partition", "fail", "compile_error", "skip")


def eager_placement(before: Dict[str, int], after: Dict[str, int]) -> str:
    """Where one eager call ran, from two ``spike_torch.op_stats()`` snapshots:
    ``device`` (device kernels only), ``mixed`` (device kernels and the CPU
    fallback), ``cpu_fallback`` (the CPU fallback only) or ``native`` (neither:
    views, copies, factories the device implements without a kernel)."""
    dev = after["device_calls"] - before["device_calls"]
    cpu = after["cpu_fallback_calls"] - before["cpu_fallback_calls"]
    if dev and cpu:
        return "mixed"
    if dev:
        return "device"
    if cpu:
        return "cpu_fallback"
    return "native"


def combine(statuses: List[str], order: Tuple[str, ...]) -> str:
    """The status of an (op, dtype) from its samples': ``skip`` only when every
    sample was skipped; else ``fail``/``compile_error`` if any sample had one;
    else, eagerly, ``mixed`` when device kernels and the CPU fallback both ran
    (in one sample or across samples), ``device`` when kernels ran and the
    fallback did not (``native`` samples beside them), and otherwise the worst
    of the rest; compiled, the worst."""
    ran = [s for s in statuses if s != "skip"]
    if not ran:
        return "skip"
    worst = max(ran, key=order.index)
    if order is not EAGER_STATUSES or worst == "fail":
        return worst
    kernel = "device" in ran or "mixed" in ran
    if kernel and ("mixed" in ran or "cpu_fallback" in ran):
        return "mixed"
    return "device" if kernel else worst


def compiled_placement(before: Any, after: Any, graph_breaks: int) -> str:
    """Where one compiled call ran, from two ``spiky.get_stats()`` snapshots and
    the number of Dynamo graph breaks: ``lowered`` (every graph fully lowered to
    the device, no graph break) or ``cpu_partition`` (a graph had ops running
    on the CPU, Dynamo broke the graph, or it made no graph at all)."""
    graphs = after.graphs_compiled - before.graphs_compiled
    parted = after.graphs_partitioned - before.graphs_partitioned
    if graphs == 0 or parted or graph_breaks:
        return "cpu_partition"
    return "lowered"


def cpu_partition_ops(before: Any, after: Any) -> List[str]:
    """The ops that ran in CPU partitions between two ``spiky.get_stats()`` snapshots."""
    return sorted(k for k, v in after.cpu_partition_ops.items()
                  if v > before.cpu_partition_ops.get(k, 0))


def short_error(exc: BaseException) -> str:
    """``Type: first line of the message`` and assert_close's mismatch and
    greatest-difference lines (at most 300 characters)."""
    msg = [m.strip() for m in str(exc).strip().splitlines()]
    extra = [m for m in msg[1:] if m.startswith(("Mismatched elements", "Greatest absolute",
                                                   "Greatest relative", "The failure occurred"))]
    text = f"{type(exc).__name__}: " + " ".join(msg[:1] + extra)
    return text[:300]


def is_compile_error(exc: BaseException) -> bool:
    """Whether an exception of a compiled call came from compiling (Dynamo's
    backend failure, or raised inside torch_to_nkipy / nkipy while building a
    kernel) rather than from running it."""
    if type(exc).__name__ == "BackendCompilerFailed":
        return True
    files = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    return any(os.sep + "nkipy" + os.sep + "compiler" + os.sep in f
               or f.endswith(os.path.join("torch_to_nkipy", "kernel.py"))
               or os.sep + "lowering" + os.sep in f for f in files)


def record(settings: Settings, entry: Dict[str, Any]) -> None:
    """Appends one JSON line to ``settings.record_path`` (no-op without one)."""
    if settings.record_path is None:
        return
    with open(settings.record_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")


def record_manifest(settings: Settings, family: str, ops: List[Any],
                    dtypes: Tuple[torch.dtype, ...]) -> None:
    """Records which (op, dtype) tests a family instantiates (one JSON line per
    op), so that the coverage table can show the tests that PyTorch's framework
    skipped before they ran (an OpInfo's own skip decorators)."""
    if settings.record_path is None:
        return
    with open(settings.record_path, "a", encoding="utf-8") as f:
        for op in ops:
            supported = op.supported_dtypes("cpu")
            have = [dtype_name(d) for d in dtypes if d in supported]
            matrix = [dtype_name(d) for d in FULL_DTYPES if d in supported]
            f.write(json.dumps({"kind": "manifest", "family": family, "op": op.name,
                                "variant": op.variant_test_name, "dtypes": have,
                                "supported": matrix}, sort_keys=True) + "\n")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def instantiate_name(generic: type, scope: Dict[str, Any]) -> str:
    """``instantiate_device_type_tests(generic, scope, only_for="privateuse1")``
    and the name of the one class it made (a name, not the class: pytest would
    collect a TestCase bound to a second module name twice). Its name ends in the device type, which
    PrivateUse1TestBase renames from PRIVATEUSE1 to NKIPY once a first class of
    the session has been set up, so it depends on what ran before; found by prefix.
    Raises when none was made (the tests would silently not exist)."""
    from torch.testing._internal import common_device_type

    before = set(scope)
    common_device_type.instantiate_device_type_tests(generic, scope, only_for="privateuse1")
    made = [scope[n] for n in set(scope) - before if n.startswith(generic.__name__)]
    if len(made) != 1:
        raise RuntimeError(f"instantiate_device_type_tests made {len(made)} classes from "
                           f"{generic.__name__} for privateuse1, expected 1")
    return made[0].__name__


def mark_expected_failures(cls: type, family: str, known: Dict[Tuple[str, str, str], str],
                           op_db: List[Any]) -> None:
    """Marks the instantiated tests of ``known`` ((op name, variant, dtype name) ->
    reason) ``xfail(strict=True)``: a fix makes them fail, so the list shrinks.
    An entry naming no op of ``op_db`` raises (stale or misspelt); one whose
    test this matrix does not instantiate (another dtype, another shard) is
    left alone."""
    import pytest

    names = {(o.name, o.variant_test_name): o for o in op_db}
    for (name, variant, dt), reason in known.items():
        op = names.get((name, variant))
        if op is None:
            raise KeyError(f"expected-failure entry {(name, variant, dt)}: no such OpInfo")
        for kind in ("", "_other"):
            test = f"test_{family}{kind}_{op.formatted_name}_nkipy_{dt}"
            fn = getattr(cls, test, None)
            if fn is not None:
                setattr(cls, test, pytest.mark.xfail(strict=True, reason=reason)(fn))
