"""Every entry of PyTorch's op_db, eagerly on the nkipy device against the CPU.

PyTorch's device-type framework instantiates ``test_eager_<op>_nkipy_<dtype>``
(``@ops(op_db)``, ``instantiate_device_type_tests(..., only_for="privateuse1")``).
Each sample (made on the device, as PyTorch's own device tests make them) runs
on the device and is compared with the same op on a CPU copy of it at
the OpInfo's own tolerance where it states one (its widest
``toleranceOverride``), else float32 rtol 1.3e-6 / atol 1e-5, float16 1e-3 /
1e-3, bfloat16 1.6e-2 / 1e-2, integers and bool exactly. Tied indices of
sort, argsort, topk and kthvalue without ``stable=True`` are checked by meaning
(opinfo_helpers.compare_ordering). Random ops (two CPU
runs with different seeds differ) are compared by shape, dtype, NaN and range.

A test fails on a wrong result or a crash. A sample is skipped when the op
raises on the CPU too, or its inputs are sparse or quantized; a test whose
samples were all skipped is skipped. ``spike_torch.op_stats()`` says where each
sample ran (opinfo_helpers.eager_placement); with ``NKIPY_OPINFO_RECORD`` set,
each test writes its status for tools/op_coverage.py (``make op-coverage``).

make test runs float32 (or an op's first supported dtype without float32) and
the first sample; ``NKIPY_OPINFO_FULL=1`` runs float32, float16, bfloat16 and
int64 with up to 4 samples (opinfo_helpers' module doc).
"""
from __future__ import annotations

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it

import torch  # noqa: E402

import opinfo_helpers as H  # noqa: E402

SETTINGS = H.Settings()
common_device_type, common_utils, op_db = H.import_framework()
ops = common_device_type.ops

# (OpInfo name, variant, dtype) -> why the eager result is known wrong today.
# xfail(strict=True): the fix flips the test to a failure; then remove the entry.
_POLYGAMMA_0 = ("polygamma(0, x) is digamma, computed in float64 and rounded once; on "
                "OpInfo's samples next to a pole (results ~1e3) it differs from PyTorch's "
                "float32 polygamma by ~2e-5 relative, past float32's tolerance")
KNOWN_FAILURES = {
    ("polygamma", "polygamma_n_0", "float32"): _POLYGAMMA_0,
    ("special.polygamma", "special_polygamma_n_0", "float32"): _POLYGAMMA_0,
}


OPS = SETTINGS.ops(op_db)
DTYPES = SETTINGS.dtypes
# ops without any of the matrix's dtypes (bitwise ops in make test, bool-only ops):
# one dtype they have (any_one: float32 first, then float64, complex, ...)
OTHER_OPS = [o for o in OPS if not set(H.FULL_DTYPES if SETTINGS.full else DTYPES)
             & set(o.supported_dtypes("cpu"))]
H.record_manifest(SETTINGS, "eager", OPS, DTYPES)


def _unchanged(a, b) -> bool:
    """Whether two host copies of a call's arguments hold the same values."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        same = torch.eq(a, b)
        if a.dtype.is_floating_point or a.dtype.is_complex:
            same |= a.isnan() & b.isnan()
        return bool(same.all())
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and \
            all(_unchanged(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and \
            all(_unchanged(a[k], b[k]) for k in a)
    return True


def run_eager(test: common_utils.TestCase, device: str, dtype: torch.dtype, op) -> None:
    import spike_torch

    entry = {"family": "eager", "op": op.name, "variant": op.variant_test_name,
             "dtype": H.dtype_name(dtype), "samples": 0, "skipped": 0, "detail": ""}
    rtol, atol = H.tolerance(op, dtype)
    statuses, skips, problems = [], [], []
    for i, sample in enumerate(H.samples(op, dtype, SETTINGS.samples, device)):
        why = H.untestable(sample)
        if why is None:
            try:
                expected = H.call(op, *H.to_cpu((sample.input, sample.args, sample.kwargs)))
                why = H.sparse_result(expected)
            except Exception as exc:                  # the op refuses it on the CPU too
                why = "raises on the CPU: " + H.short_error(exc)
        if why is not None:
            skips.append(why)
            statuses.append("skip")
            continue
        random = H.is_random(op, sample)
        inp, args, kwargs = sample.input, sample.args, sample.kwargs
        before = spike_torch.op_stats()
        try:
            pre = H.to_cpu((inp, args, kwargs))
            got = H.call(op, inp, args, kwargs)
            after = spike_torch.op_stats()
            check = [got]
            # the same call again, now from the C++ call cache (spike_torch/csrc/
            # eager.cpp), when the first left its inputs as they were
            if not random and after["device_calls"] > before["device_calls"] and \
                    _unchanged(pre, H.to_cpu((inp, args, kwargs))):
                fast = spike_torch.op_stats()["fast_calls"]
                check.append(H.call(op, inp, args, kwargs))
                if spike_torch.op_stats()["fast_calls"] == fast:
                    check.pop()     # not served from the cache (a CPU tensor argument, ...)
            for g in check:
                if H.is_tie_order_free(op.name, kwargs):
                    H.compare_ordering(op.name, g, expected, H.to_cpu(inp), args, kwargs)
                else:
                    H.compare(g, expected, rtol, atol, random, op.name in H.UNINITIALIZED)
        except Exception as exc:
            statuses.append("fail")
            problems.append(f"sample {i}: {H.short_error(exc)}")
            continue
        statuses.append(H.eager_placement(before, after))
    entry["samples"] = len(statuses)
    entry["skipped"] = len(skips)
    entry["status"] = H.combine(statuses, H.EAGER_STATUSES)
    entry["detail"] = (problems or skips or [""])[0]
    entry["placements"] = sorted(set(statuses))
    H.record(SETTINGS, entry)
    if problems:
        test.fail(f"{op.name} {op.variant_test_name} {dtype}: " + "; ".join(problems))
    if entry["status"] == "skip":
        test.skipTest("; ".join(sorted(set(skips))) or "no samples")


class TestNkipyOpInfoDb(common_utils.TestCase):
    @ops(OPS, allowed_dtypes=DTYPES)
    def test_eager(self, device, dtype, op):
        run_eager(self, device, dtype, op)

    @ops(OTHER_OPS, dtypes=common_device_type.OpDTypes.any_one)
    def test_eager_other(self, device, dtype, op):
        run_eager(self, device, dtype, op)


_INSTANTIATED = H.instantiate_name(TestNkipyOpInfoDb, globals())
H.mark_expected_failures(globals()[_INSTANTIATED], "eager", KNOWN_FAILURES, op_db)


def test_every_op_instantiated():
    """Every op_db entry has an eager test (float32, or its own dtype)."""
    cls = globals()[_INSTANTIATED]
    names = {n for n in dir(cls) if n.startswith("test_eager")}
    missing = [o.name for o in OPS
               if not any(n.startswith(f"test_eager_{o.formatted_name}_nkipy_")
                          or n.startswith(f"test_eager_other_{o.formatted_name}_nkipy_")
                          for n in names)]
    # ops whose dtypes none of the chosen ones are (any_one found none): none today
    assert len(missing) <= 0.02 * len(OPS), missing
