"""Every entry of PyTorch's op_db through ``torch.compile(backend="nkipy")``
against eager CPU.

PyTorch's device-type framework instantiates ``test_compiled_<op>_nkipy_<dtype>``
(``@ops(op_db)``, ``instantiate_device_type_tests(..., only_for="privateuse1")``).
Each sample's tensors become the inputs of a function calling the op, compiled
with ``torch.compile(fn, backend="nkipy", dynamic=False)`` (Dynamo reset between
samples) and called with the CPU tensors; the result is compared with the op
run eagerly on the CPU at the tolerances of tests/spike_torch/test_opinfo_db.py
(opinfo_helpers.tolerance; random ops by properties).

A test fails on a wrong result, a crash or a compile error. A sample is
skipped when the op raises eagerly too, or its inputs are sparse or quantized.
``spiky.get_stats()`` (graphs_compiled, graphs_partitioned, cpu_partition_ops)
and Dynamo's graph-break counter say whether each sample's graphs were fully
lowered to the device (opinfo_helpers.compiled_placement); with
``NKIPY_OPINFO_RECORD`` set, each test writes its status for
tools/op_coverage.py (``make op-coverage``).
"""
from __future__ import annotations

import contextlib

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it

import torch  # noqa: E402

import opinfo_helpers as H  # noqa: E402

SETTINGS = H.Settings()
common_device_type, common_utils, op_db = H.import_framework()
ops = common_device_type.ops

# (OpInfo name, variant, dtype) -> why the compiled result is known wrong today,
# for the ops make test runs (every second entry of op_db, float32).
# xfail(strict=True): the fix flips the test to a failure; then remove the entry.
_POLYGAMMA_0 = ("polygamma(0, x) is digamma, computed in float64 and rounded once; on "
                "OpInfo's samples next to a pole (results ~1e3) it differs from PyTorch's "
                "float32 polygamma by ~2e-5 relative, past float32's tolerance")
KNOWN_FAILURES = {
    ("polygamma", "polygamma_n_0", "float32"): _POLYGAMMA_0,
    ("special.polygamma", "special_polygamma_n_0", "float32"): _POLYGAMMA_0,
}

# make test: every COMPILED_EVERY-th entry of op_db (a compile costs Dynamo,
# AOTAutograd and a C compile, ~2 s an op on a loaded 2-core machine);
# NKIPY_OPINFO_FULL=1 runs every entry.
COMPILED_EVERY = 2
OPS = SETTINGS.ops(op_db) if SETTINGS.full else SETTINGS.ops(op_db)[::COMPILED_EVERY]
DTYPES = SETTINGS.dtypes
# ops without any of the matrix's dtypes (bitwise ops in make test, bool-only ops):
# one dtype they have (any_one: float32 first, then float64, complex, ...)
OTHER_OPS = [o for o in OPS if not set(H.FULL_DTYPES if SETTINGS.full else DTYPES)
             & set(o.supported_dtypes("cpu"))]
H.record_manifest(SETTINGS, "compiled", OPS, DTYPES)


def _compiled_call(op, sample):
    """The op on ``sample`` through torch.compile: tensors are the compiled
    function's inputs, everything else is baked into the function."""
    tree = (sample.input, sample.args, sample.kwargs)
    flat = H.leaves(tree)
    tensors = [a for a in flat if isinstance(a, torch.Tensor)]

    def rebuild(ts):
        it = iter(ts)
        return H.tree_map(lambda a: next(it) if isinstance(a, torch.Tensor) else a, tree)

    def fn(*ts):
        inp, args, kwargs = rebuild(ts)
        return op(inp, *args, **kwargs)

    return torch.compile(fn, backend="nkipy", dynamic=False), [t.detach() for t in tensors]


def _call_unseeded(op, *args, **kwargs):
    return op(*args, **kwargs)


@contextlib.contextmanager
def _without_seeding_wrapper():
    """A random OpInfo's ``op`` runs its op under ``wrapper_set_seed``
    (freeze_rng_state, manual_seed(42)): Dynamo cannot trace freeze_rng_state's
    no_dispatch() and would make no graph at all, and the fixed seed hides that
    the op is random. Compiled (and told random or not), the op is called
    directly instead, seeded by the caller's torch.manual_seed; a random op's
    result is compared by properties (opinfo_helpers.compare)."""
    import torch.testing._internal.common_methods_invocations as cmi

    saved = cmi.wrapper_set_seed
    cmi.wrapper_set_seed = _call_unseeded
    try:
        yield
    finally:
        cmi.wrapper_set_seed = saved


def run_compiled(test, dtype, op) -> None:
    import spiky
    import torch._dynamo
    from torch._dynamo.utils import counters

    entry = {"family": "compiled", "op": op.name, "variant": op.variant_test_name,
             "dtype": H.dtype_name(dtype), "samples": 0, "skipped": 0, "detail": ""}
    rtol, atol = H.tolerance(op, dtype)
    statuses, skips, problems, cpu_ops = [], [], [], set()
    for i, sample in enumerate(H.samples(op, dtype, SETTINGS.samples)):
        why = H.untestable(sample)
        if why is None:
            try:
                expected = H.call(op, *H.to_cpu((sample.input, sample.args, sample.kwargs)))
                why = H.sparse_result(expected)
            except Exception as exc:                  # the op refuses it eagerly too
                why = "raises eagerly: " + H.short_error(exc)
        if why is not None:
            skips.append(why)
            statuses.append("skip")
            continue
        with _without_seeding_wrapper():
            random = H.is_random(op, sample)
            unit_range = H.in_unit_range(op, sample) if random else None
        torch._dynamo.reset()
        counters.clear()
        fn, tensors = _compiled_call(op, sample)
        before = spiky.get_stats()
        try:
            torch.manual_seed(0)
            with _without_seeding_wrapper():
                got = fn(*tensors)
            after = spiky.get_stats()
        except Exception as exc:
            kind = "compile_error" if H.is_compile_error(exc) else "fail"
            statuses.append(kind)
            problems.append(f"sample {i}: {kind}: {H.short_error(exc)}")
            continue
        try:
            H.compare(got, expected, rtol, atol, random, op.name in H.UNINITIALIZED,
                      unit_range)
        except Exception as exc:
            statuses.append("fail")
            problems.append(f"sample {i}: {H.short_error(exc)}")
            continue
        breaks = sum(counters["graph_break"].values())
        statuses.append(H.compiled_placement(before, after, breaks))
        cpu_ops.update(H.cpu_partition_ops(before, after))
        if after.graphs_compiled == before.graphs_compiled:
            cpu_ops.add("(no graph)")
        elif breaks:
            cpu_ops.add("(graph break)")
    torch._dynamo.reset()
    entry["samples"] = len(statuses)
    entry["skipped"] = len(skips)
    entry["status"] = H.combine(statuses, H.COMPILED_STATUSES)
    entry["detail"] = (problems or skips or [""])[0]
    entry["cpu_ops"] = sorted(cpu_ops)
    H.record(SETTINGS, entry)
    if problems:
        test.fail(f"{op.name} {op.variant_test_name} {dtype}: " + "; ".join(problems))
    if entry["status"] == "skip":
        test.skipTest("; ".join(sorted(set(skips))) or "no samples")


class TestNkipyOpInfoCompiled(common_utils.TestCase):
    @pytest.fixture(autouse=True)
    def _backend(self, backend):
        yield

    @ops(OPS, allowed_dtypes=DTYPES)
    def test_compiled(self, device, dtype, op):
        run_compiled(self, dtype, op)

    @ops(OTHER_OPS, dtypes=common_device_type.OpDTypes.any_one)
    def test_compiled_other(self, device, dtype, op):
        run_compiled(self, dtype, op)


_INSTANTIATED = H.instantiate_name(TestNkipyOpInfoCompiled, globals())
H.mark_expected_failures(globals()[_INSTANTIATED], "compiled", KNOWN_FAILURES, op_db)
