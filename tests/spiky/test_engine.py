"""Pipelining, statistics, the memory pool and profiles."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import spiky


def test_pipelined_stream_of_changing_inputs_has_no_stale_data(backend):
    """Outputs returned before their kernel finished read as the right values;
    inputs changed in place between calls are seen by the next call."""
    torch.manual_seed(0)
    m = nn.Linear(64, 32)
    c = torch.compile(m, backend="nkipy", options={"pipelined": True,
                                                   "keep_outputs_on_device": True})
    x = torch.randn(256, 64)
    outs, wants = [], []
    with torch.no_grad():
        for i in range(12):
            x.mul_(0.5).add_(i)           # the same tensor, new values each call
            outs.append(c(x))
            wants.append(m(x))
        for got, want in zip(outs, wants):
            assert got.device.type == "nkipy"
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-4)
    spiky.flush()


def test_pipelined_outputs_feed_the_next_compiled_call(backend):
    import copy

    torch.manual_seed(0)
    a, b = nn.Linear(16, 16), nn.Linear(16, 4)
    opts = {"pipelined": True, "keep_outputs_on_device": True}
    ca = torch.compile(copy.deepcopy(a), backend="nkipy", options=opts)
    cb = torch.compile(copy.deepcopy(b).to("nkipy"), backend="nkipy", options=opts)
    with torch.no_grad():
        for n in range(5):
            x = torch.randn(8, 16) + n
            y = cb(torch.relu(ca(x)))       # device outputs into an eager op and on
            torch.testing.assert_close(y.cpu(), b(torch.relu(a(x))), rtol=1e-5, atol=1e-5)


def test_pipelined_with_dynamic_sizes(backend):
    torch.manual_seed(0)
    m = nn.Linear(8, 8)
    c = torch.compile(m, backend="nkipy", options={"pipelined": True,
                                                   "keep_outputs_on_device": True})
    with torch.no_grad():
        outs = []
        for n in (3, 7, 5, 8, 2):
            x = torch.randn(n, 8)
            torch._dynamo.maybe_mark_dynamic(x, 0)
            outs.append((c(x), m(x)))
        for got, want in outs:
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_stats_move_and_reset(backend):
    c = torch.compile(nn.Linear(4, 4), backend="nkipy")
    with torch.no_grad():
        for _ in range(3):
            c(torch.randn(2, 4))
    s = spiky.get_stats()
    assert s.total_executions == 3 and s.total_compile_count == 1
    assert s.bucket_hits == {} and s.mean_pad_ratio == 1.0
    assert 0 < s.min_execution_time_ms <= s.mean_execution_time_ms <= s.max_execution_time_ms
    assert s.total_execution_time_ms >= s.total_nrt_exec_time_ms > 0
    s.total_executions = 99                    # a snapshot: the counters are not touched
    assert spiky.get_stats().total_executions == 3
    spiky.reset_stats()
    s = spiky.get_stats()
    assert (s.total_executions, s.total_compile_count, s.bucket_hits,
            s.total_execution_time_ms) == (0, 0, {}, 0.0)


def test_memory_stats_move_with_device_outputs_and_trim_releases(backend):
    c = torch.compile(lambda x: x * 2, backend="nkipy",
                      options={"keep_outputs_on_device": True, "pipelined": False})
    spiky.clear_memory_pool()
    before = spiky.get_memory_stats()
    with torch.no_grad():
        outs = [c(torch.randn(256, 1024)) for _ in range(4)]    # 1 MiB each, kept
    during = spiky.get_memory_stats()
    assert during["used_bytes"] >= before["used_bytes"] + 4 * 2**20
    assert during["allocation_count"] >= before["allocation_count"] + 4
    del outs
    freed = spiky.get_memory_stats()
    assert freed["used_bytes"] <= during["used_bytes"] - 4 * 2**20
    assert freed["cached_bytes"] >= 4 * 2**20
    with torch.no_grad():
        c(torch.randn(256, 1024))
    again = spiky.get_memory_stats()
    assert again["reuse_count"] > freed["reuse_count"]
    released = spiky.trim_memory_pool(target_bytes=0)
    after = spiky.get_memory_stats()
    assert released > 0 and after["cached_bytes"] < freed["cached_bytes"]
    assert after["total_bytes"] == after["used_bytes"] + after["cached_bytes"]


def test_calls_on_cpu_tensors_hold_no_device_memory(backend):
    """A compiled graph called with CPU tensors runs the kernel on them where
    they lie: after its first call, later calls allocate no device memory, and
    the figures stay consistent (total = used + cached; the pool's cache)."""
    import spike
    import spike_torch

    c = torch.compile(lambda x, w: torch.relu(x @ w) - 3.5, backend="nkipy")
    x, w = torch.randn(248, 264), torch.randn(264, 232)
    # float32, a 264-deep product of values ~16: eager's and the device's GEMMs sum
    # in different orders, each ~3e-5 from the float64 product
    tol = dict(rtol=1e-5, atol=1e-4)
    with torch.no_grad():                             # shapes no other test compiles
        want = torch.relu(x @ w) - 3.5
        torch.testing.assert_close(c(x, w), want, **tol)
        rt = spike.get_spike_singleton()
        allocs = rt.memory_stats(0)["total_allocations"]
        for _ in range(3):
            torch.testing.assert_close(c(x, w), want, **tol)
        assert rt.memory_stats(0)["total_allocations"] == allocs
    stats = spiky.get_memory_stats()
    pool = spike_torch.memory_pool_stats()
    assert stats["total_bytes"] == stats["used_bytes"] + stats["cached_bytes"]
    assert stats["cached_bytes"] == pool["cached_bytes"]
    assert stats["used_bytes"] >= pool["used_bytes"]


#: Run in a fresh process: only whole free segments can be released, so a device
#: tensor some earlier test keeps alive (its segment's free blocks stay cached)
#: would make "nothing cached after trim(0)" depend on the order of the tests.
_TRIM_SCRIPT = """
import pytest, torch
import spike_torch, spiky
xs = [torch.empty(2**20, device="nkipy") for _ in range(6)]
del xs
cached = spiky.get_memory_stats()["cached_bytes"]
assert cached >= 6 * 4 * 2**20, cached
spiky.trim_memory_pool(target_bytes=cached // 2)
assert spiky.get_memory_stats()["cached_bytes"] <= cached // 2
with pytest.raises(ValueError, match="target_bytes must be >= 0"):
    spiky.trim_memory_pool(-1)
spiky.trim_memory_pool(0)
assert spiky.get_cached_blocks() == 0, spiky.get_cached_blocks()
assert spiky.get_memory_stats()["cached_bytes"] == 0, spiky.get_memory_stats()
ys = [torch.empty(2**20, device="nkipy") for _ in range(3)]
del ys
assert spiky.get_cached_blocks() >= 1          # the freed memory is held again
assert spiky.get_memory_stats()["cached_bytes"] >= 3 * 4 * 2**20
print("trim ok")
"""


def test_trim_to_a_target_and_errors():
    r = subprocess.run([sys.executable, "-c", _TRIM_SCRIPT], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "trim ok" in r.stdout, r.stdout + r.stderr


def test_save_ntff_writes_perfetto_traces_for_selected_executions(backend, tmp_path):
    m = nn.Linear(8, 8)
    c = torch.compile(m, backend="nkipy", options={
        "save_ntff": True, "save_ntff_dir": str(tmp_path), "save_ntff_exe_idx": [1, 2]})
    with torch.no_grad():
        for n in (5, 9, 7):                 # buckets 8, 16 (compiled by call 1), 8
            x = torch.randn(n, 8)
            torch._dynamo.maybe_mark_dynamic(x, 0)
            c(x)
    dirs = list(tmp_path.glob("kernel_*"))
    assert len(dirs) >= 1
    files = sorted(p.name for d in dirs for p in d.iterdir())
    assert [f for f in files if f.endswith(".ntff")] == ["1.ntff", "2.ntff"]
    assert "file.neff" in files
    doc = json.loads(next(tmp_path.glob("kernel_*/1.ntff")).read_text())
    ev = doc["traceEvents"]
    cats = {e.get("cat") for e in ev}
    assert {"nc_exec_running", "tensor_write", "host"} <= cats, cats
    names = [e["name"] for e in ev if e.get("cat") == "host"]
    assert any(n.startswith("compile kernel_") for n in names)     # call 1 compiled bucket 16
    assert any(n.startswith("inputs (pad)") for n in names)
    assert any(n.startswith("outputs (unpad)") for n in names)
    assert any(e["ph"] == "M" and e["args"]["name"].startswith("nkipy core") for e in ev)
    for e in ev:
        if e["ph"] == "X":
            assert e["dur"] > 0 and e["ts"] > 0


def test_execution_profile_records_any_code(tmp_path):
    import numpy as np

    import spike

    with spiky.ExecutionProfile() as prof:
        t = spike.SpikeTensor.from_numpy(np.ones(1024, np.float32), name="ones")
        t.numpy()
    prof.span("my phase", 1, 2)
    path = prof.save(str(tmp_path / "p" / "trace.ntff"))
    doc = json.loads(open(path).read())
    names = {e["name"] for e in doc["traceEvents"]}
    assert "tensor_write ones" in names and "tensor_read ones" in names and "my phase" in names
    assert not os.path.exists(tmp_path / "p" / "file.neff")


def test_runtime_lifecycle_calls():
    spiky.init(0)
    assert spiky.is_initialized() and spiky.device_count() >= 1


def test_profile_save_never_follows_planted_symlinks(tmp_path):
    """A symlink planted at the profile's old temporary name, at the trace path
    or at file.neff beside it is replaced, never written through."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = tmp_path / "trace.ntff"
    (tmp_path / f"trace.ntff.tmp{os.getpid()}").symlink_to(victim)
    (tmp_path / "file.neff").symlink_to(victim)
    neff = tmp_path / "k.neff"
    neff.write_bytes(b"neff bytes")
    prof = spiky.ExecutionProfile()
    prof.span("phase", 1, 2)
    prof.save(str(path), neff_path=str(neff))
    assert victim.read_text() == "precious"
    assert json.loads(path.read_text())["traceEvents"]
    path.unlink()
    path.symlink_to(victim)
    prof.save(str(path))
    assert victim.read_text() == "precious" and not path.is_symlink()
