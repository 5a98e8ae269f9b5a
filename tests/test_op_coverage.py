"""The OpInfo coverage plumbing: the environment of the whole-op_db tests
(tests/opinfo_helpers.py), the placement rules, and tools/op_coverage.py's
rendering of their records."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import opinfo_helpers as H

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "op_coverage.py")


def test_settings_defaults(monkeypatch):
    for k in ("NKIPY_OPINFO_FULL", "NKIPY_OPINFO_SAMPLES", "NKIPY_OPINFO_RECORD",
              "NKIPY_OPINFO_SHARD", "NKIPY_OPINFO_DTYPES"):
        monkeypatch.delenv(k, raising=False)
    s = H.Settings()
    assert (s.full, s.samples, s.record_path, s.shard) == (False, 1, None, (0, 1))
    assert s.dtypes == (torch.float32,)
    monkeypatch.setenv("NKIPY_OPINFO_FULL", "1")
    monkeypatch.setenv("NKIPY_OPINFO_SHARD", "2/3")
    s = H.Settings()
    monkeypatch.setenv("NKIPY_OPINFO_DTYPES", "bfloat16,int64")
    s = H.Settings()
    assert (s.full, s.samples, s.shard) == (True, 4, (2, 3))
    assert s.dtypes == (torch.bfloat16, torch.int64)
    assert s.ops(list(range(10))) == [2, 5, 8]


@pytest.mark.parametrize("name,value,message", [
    ("NKIPY_OPINFO_FULL", "yes", "NKIPY_OPINFO_FULL='yes': expected 0 or 1"),
    ("NKIPY_OPINFO_SAMPLES", "0", "NKIPY_OPINFO_SAMPLES='0': expected a whole number of "
                                  "samples from 1 to 1000"),
    ("NKIPY_OPINFO_SAMPLES", "x", "NKIPY_OPINFO_SAMPLES='x': expected a whole number"),
    ("NKIPY_OPINFO_SHARD", "3/3", "NKIPY_OPINFO_SHARD='3/3': expected k/n with 0 <= k < n <= 64"),
    ("NKIPY_OPINFO_SHARD", "1", "NKIPY_OPINFO_SHARD='1': expected k/n"),
    ("NKIPY_OPINFO_DTYPES", "float32,float64", "NKIPY_OPINFO_DTYPES='float32,float64': "
                                               "expected distinct names among float32, float16"),
    ("NKIPY_OPINFO_RECORD", "/nonexistent-dir/r.jsonl",
     "NKIPY_OPINFO_RECORD='/nonexistent-dir/r.jsonl': directory '/nonexistent-dir' does not exist"),
])
def test_settings_refuse_bad_values(monkeypatch, name, value, message):
    monkeypatch.setenv("NKIPY_OPINFO_FULL", "1")   # the dtypes are read in the full matrix
    if name != "NKIPY_OPINFO_FULL":
        monkeypatch.delenv("NKIPY_OPINFO_SAMPLES", raising=False)
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as info:
        H.Settings()
    assert message in str(info.value)


def test_eager_placement_and_combine():
    z = {"device_calls": 0, "cpu_fallback_calls": 0}
    assert H.eager_placement(z, {"device_calls": 2, "cpu_fallback_calls": 0}) == "device"
    assert H.eager_placement(z, {"device_calls": 1, "cpu_fallback_calls": 1}) == "mixed"
    assert H.eager_placement(z, {"device_calls": 0, "cpu_fallback_calls": 3}) == "cpu_fallback"
    assert H.eager_placement(z, z) == "native"
    e = H.EAGER_STATUSES
    assert H.combine(["device", "native"], e) == "device"
    assert H.combine(["device", "cpu_fallback"], e) == "mixed"
    assert H.combine(["native", "cpu_fallback"], e) == "cpu_fallback"
    assert H.combine(["native", "native"], e) == "native"
    assert H.combine(["skip", "device"], e) == "device"
    assert H.combine(["skip", "skip"], e) == "skip"
    assert H.combine(["device", "fail"], e) == "fail"
    c = H.COMPILED_STATUSES
    assert H.combine(["lowered", "cpu_partition"], c) == "cpu_partition"
    assert H.combine(["lowered", "compile_error", "fail"], c) == "compile_error"


def test_compiled_placement():
    import spiky.stats as st

    a = st.RuntimeStats(graphs_compiled=1)
    assert H.compiled_placement(a, st.RuntimeStats(graphs_compiled=2), 0) == "lowered"
    assert H.compiled_placement(a, st.RuntimeStats(graphs_compiled=2), 1) == "cpu_partition"
    assert H.compiled_placement(a, st.RuntimeStats(graphs_compiled=1), 0) == "cpu_partition"
    b = st.RuntimeStats(graphs_compiled=2, graphs_partitioned=1,
                        cpu_partition_ops={"aten.x.default": 1})
    assert H.compiled_placement(a, b, 0) == "cpu_partition"
    assert H.cpu_partition_ops(a, b) == ["aten.x.default"]


def test_record_graph_counts():
    import spiky
    from spiky.stats import record_graph

    before = spiky.get_stats()
    record_graph([])
    record_graph(["aten.a.default", "aten.a.default", "aten.b.default"])
    after = spiky.get_stats()
    assert after.graphs_compiled - before.graphs_compiled == 2
    assert after.graphs_partitioned - before.graphs_partitioned == 1
    assert after.cpu_partition_ops["aten.a.default"] - \
        before.cpu_partition_ops.get("aten.a.default", 0) == 1


def test_compare_random_and_uninitialized():
    import torch

    x = torch.rand(4, 5)
    H.compare(torch.rand(4, 5), x, 0, 0, random=True)
    with pytest.raises(AssertionError, match=r"random values outside \[0, 1\]"):
        H.compare(torch.rand(4, 5) + 2, x, 0, 0, random=True)
    with pytest.raises(AssertionError, match="expected torch.float32"):
        H.compare(torch.rand(4, 4), x, 0, 0, random=True)
    H.compare(torch.full((4, 5), 7.0), x, 0, 0, uninitialized=True)
    with pytest.raises(AssertionError):
        H.compare(x + 1e-3, x, 1.3e-6, 1e-5)


def test_compare_ordering_accepts_any_tie_order_only():
    import torch

    x = torch.tensor([[2.0, 1.0, 2.0, 1.0], [3.0, 3.0, 0.0, 3.0]])
    exp = torch.sort(x, dim=1, descending=True)
    # the other tie order: a valid answer
    other = (exp.values.clone(), torch.tensor([[2, 0, 3, 1], [3, 1, 0, 2]]))
    H.compare_ordering("sort", other, exp, x, (1, True), {})
    H.compare_ordering("argsort", other[1], exp.indices, x, (), {"dim": 1})
    with pytest.raises(AssertionError, match="not a permutation"):
        H.compare_ordering("argsort", torch.tensor([[0, 0, 3, 1], [3, 1, 0, 2]]),
                           exp.indices, x, (1,), {})
    with pytest.raises(AssertionError, match="input at the indices"):
        H.compare_ordering("argsort", torch.tensor([[1, 0, 3, 2], [3, 1, 0, 2]]),
                           exp.indices, x, (1,), {})
    with pytest.raises(AssertionError, match="not equal"):
        H.compare_ordering("sort", (exp.values + 1, exp.indices), exp, x, (1,), {})
    k = torch.kthvalue(x, 2, 1)                 # no keepdim: indices one dim fewer
    H.compare_ordering("kthvalue", (k.values, torch.tensor([3, 1])), k, x, (2, 1), {})
    with pytest.raises(AssertionError, match="input at the indices"):
        H.compare_ordering("kthvalue", (k.values, torch.tensor([0, 2])), k, x, (2, 1), {})
    t = torch.topk(x, 2, 1)
    H.compare_ordering("topk", (t.values, torch.tensor([[2, 0], [3, 0]])), t, x, (2, 1), {})
    assert H.is_tie_order_free("sort", {}) and not H.is_tie_order_free("sort", {"stable": True})
    assert not H.is_tie_order_free("add", {})


def _records(path, recs):
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def test_render(tmp_path):
    rec = tmp_path / "r.jsonl"
    base = {"variant": "", "samples": 1, "skipped": 0, "detail": ""}
    _records(rec, [
        {"kind": "manifest", "family": "eager", "op": "cuda_only", "variant": "",
         "dtypes": ["float32"]},
        {**base, "family": "eager", "op": "add", "dtype": "float32", "status": "device"},
        {**base, "family": "eager", "op": "add", "dtype": "float16", "status": "cpu_fallback"},
        {**base, "family": "eager", "op": "bitwise_not", "dtype": "bool", "status": "native"},
        {**base, "family": "compiled", "op": "add", "dtype": "float32", "status": "lowered"},
        {**base, "family": "compiled", "op": "sin", "dtype": "float32", "status": "compile_error",
         "detail": "sample 0: compile_error: AxisError: axis 0 | bad"},
    ])
    out = tmp_path / "cov"
    r = subprocess.run([sys.executable, TOOL, "render", str(rec), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "cov.md").read_text()
    doc = json.loads((tmp_path / "cov.json").read_text())
    s = doc["summary"]
    assert s["eager"]["float32"]["device"] == 1 and s["eager"]["float32"]["skip"] == 1
    assert s["eager"]["float16"]["cpu_fallback"] == 1
    assert s["eager"]["other"]["native"] == 1
    assert s["compiled"]["float32"]["lowered"] == 1
    assert s["compiled"]["float32"]["compile_error"] == 1
    assert doc["ops"]["add"]["eager"]["float32"]["status"] == "device"
    assert "| `add` | dev | cpu | — | — | — | dev | — | — | — | — |" in md
    assert "- compiled `sin` float32: sample 0: compile_error: AxisError: axis 0 \\| bad" in md


@pytest.mark.parametrize("line,message", [
    ("not json", "r.jsonl:1: not a coverage record"),
    ('{"family": "eager", "op": "a", "variant": "", "dtype": "float32"}',
     "r.jsonl:1: not a coverage record ('status')"),
    ('{"family": "eager", "op": "a", "variant": "", "dtype": "float32", "status": "great"}',
     "r.jsonl:1: unknown family or status"),
])
def test_render_refuses_bad_records(tmp_path, line, message):
    rec = tmp_path / "r.jsonl"
    rec.write_text(line + "\n")
    r = subprocess.run([sys.executable, TOOL, "render", str(rec), "--out", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and message in r.stderr, r.stderr


@pytest.mark.parametrize("args,message", [
    (["render", "/nonexistent.jsonl"], "/nonexistent.jsonl: no such file"),
    (["run", "--samples", "0"], "--samples 0: expected 1 to 1000"),
    (["run", "--jobs", "65"], "--jobs 65: expected 1 to 64"),
])
def test_tool_refuses_bad_arguments(args, message):
    r = subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_tolerance_takes_the_opinfos_widest_override():
    common_device_type, _, _ = H.import_framework()   # PyTorch's test framework, no leaks
    from torch.testing._internal.opinfo.core import DecorateInfo

    tol, toleranceOverride = common_device_type.tol, common_device_type.toleranceOverride

    class Op:
        decorators = [DecorateInfo(toleranceOverride({torch.float32: tol(atol=1e-3, rtol=2e-4)}),
                                   "TestCommon", "test_compare_cpu"),
                      DecorateInfo(toleranceOverride({torch.float16: tol(atol=5e-2, rtol=0)}))]

    assert H.tolerance(Op, torch.float32) == (2e-4, 1e-3)
    assert H.tolerance(Op, torch.float16) == (1e-3, 5e-2)
    assert H.tolerance(Op, torch.bfloat16) == H.DEFAULT_TOL[torch.bfloat16]
    assert H.tolerance(Op, torch.int64) == (0.0, 0.0)


def test_is_compile_error():
    class BackendCompilerFailed(Exception):
        pass

    assert H.is_compile_error(BackendCompilerFailed("x"))
    try:
        raise RuntimeError("at run time")
    except RuntimeError as exc:
        assert not H.is_compile_error(exc)
    assert H.short_error(ValueError("first line\nsecond")) == "ValueError: first line"


def test_cpu_copies_keep_views_and_math_bits():
    import torch

    base = torch.arange(12.0)
    view = base[2:8].view(2, 3)
    c = H.to_cpu(view)
    assert c.storage_offset() == 2 and torch.equal(c, view)
    assert torch.equal(c.as_strided((2,), (1,), 0), base[:2])   # the storage around it too
    z = torch.complex(torch.randn(6), torch.randn(6))[1:].conj()
    assert torch.equal(H.to_cpu(z), z.resolve_conj())
    with torch.no_grad():
        c[0, 0] = -1
    assert view[0, 0] == 2        # a copy, not the tensor itself


def test_mark_expected_failures():
    class Op:
        name, variant_test_name, formatted_name = "add", "", "add"

    class Cls:
        def test_eager_add_nkipy_float32(self):
            pass

    H.mark_expected_failures(Cls, "eager", {("add", "", "float32"): "why",
                                            ("add", "", "float16"): "not instantiated"}, [Op])
    marks = Cls.test_eager_add_nkipy_float32.pytestmark
    assert marks[0].name == "xfail" and marks[0].kwargs == {"strict": True, "reason": "why"}
    with pytest.raises(KeyError, match=r"expected-failure entry \('sub', '', 'float32'\): "
                                       "no such OpInfo"):
        H.mark_expected_failures(Cls, "eager", {("sub", "", "float32"): "why"}, [Op])
