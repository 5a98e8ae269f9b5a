"""Memory a person can inspect, as torch.cuda offers it: memory_snapshot,
_record_memory_history / _snapshot / _dump_snapshot in the format PyTorch's
memory visualizer and torch.cuda._memory_viz read, memory_summary and
mem_get_info."""
from __future__ import annotations

import os
import pickle

import pytest
import torch
from torch.cuda import _memory_viz

import spike
from spike_torch_helpers import CORE_MEMORY

HERE = os.path.abspath(__file__)


@pytest.fixture(autouse=True)
def history_off():
    yield
    torch.nkipy._record_memory_history(None)


def _block_of(snap, t):
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["address"] == t.data_ptr():
                return seg, b
    raise AssertionError(f"no block at {t.data_ptr():#x}")


def _here(frames):
    """Lines of this file in a stack."""
    return [f["line"] for f in frames if os.path.abspath(f["filename"]) == HERE]


def test_snapshot_has_every_segment_and_block_with_its_stack():
    torch.nkipy.empty_cache()
    torch.nkipy._record_memory_history(stacks="python")
    t = torch.empty(1000, device="nkipy")                       # small pool
    big = torch.empty(3 << 20, dtype=torch.uint8, device="nkipy")  # large pool
    line = _line_of("big = torch.empty(3 << 20")
    snap = torch.nkipy._snapshot()
    seg, b = _block_of(snap, t)
    assert b["state"] == "active_allocated" and b["requested_size"] == 4000
    assert b["size"] == 4096 and seg["segment_type"] == "small" and seg["device"] == 0
    seg2, b2 = _block_of(snap, big)
    assert seg2["segment_type"] == "large" and b2["requested_size"] == 3 << 20
    assert line in _here(b2["frames"])                           # where it was allocated
    for s in snap["segments"]:
        assert s["total_size"] == sum(x["size"] for x in s["blocks"])
        assert s["allocated_size"] == sum(x["size"] for x in s["blocks"]
                                          if x["state"] == "active_allocated")
        assert s["stream"] == 0 and s["is_expandable"] is False
    assert sum(s["total_size"] for s in snap["segments"]) == \
        torch.nkipy.memory_reserved(0) + torch.nkipy.memory_reserved(1)
    assert torch.nkipy.memory_snapshot() == snap["segments"]
    del t
    _, b = _block_of(torch.nkipy._snapshot(), big)
    assert b["state"] == "active_allocated"


def _line_of(text):
    with open(HERE) as f:
        for i, line in enumerate(f, 1):
            if text in line and "_line_of" not in line:
                return i
    raise AssertionError(text)


def test_trace_records_allocations_frees_and_segments():
    torch.nkipy.empty_cache()
    torch.nkipy._record_memory_history(enabled="all", context="all", stacks="python")
    a = torch.empty(256, device="nkipy")
    addr = a.data_ptr()
    del a
    torch.nkipy.empty_cache()
    trace = torch.nkipy._snapshot()["device_traces"][0]
    acts = [(e["action"], e["addr"]) for e in trace]
    seg_addr = next(e["addr"] for e in trace if e["action"] == "segment_alloc")
    assert acts == [("segment_alloc", seg_addr), ("alloc", addr), ("free_requested", addr),
                    ("free_completed", addr), ("segment_free", seg_addr)]
    assert [e["size"] for e in trace][1:4] == [1024] * 3
    times = [e["time_us"] for e in trace]
    assert times == sorted(times) and all(e["stream"] == 0 for e in trace)
    # context="all": the free has the stack of the line that dropped the tensor
    assert _line_of("    del a") in _here(trace[2]["frames"])
    # the tools PyTorch ships read it
    snap = torch.nkipy._snapshot()
    assert "free completed" in _memory_viz.trace(snap)
    assert "<!DOCTYPE html>" in _memory_viz.trace_plot(snap)
    assert _memory_viz.segsum(snap).startswith("Summary of segments")
    assert "<!DOCTYPE html>" in _memory_viz.segment_plot(snap)


def test_context_alloc_keeps_no_free_stacks_and_state_records_no_trace():
    torch.nkipy._record_memory_history(context="alloc", stacks="python")
    a = torch.empty(8, device="nkipy")
    del a
    trace = torch.nkipy._snapshot()["device_traces"][0]
    assert trace[-2]["action"] == "free_requested" and trace[-2]["frames"] == []
    assert _here(trace[-3]["frames"])                       # the alloc's stack
    torch.nkipy._record_memory_history(enabled="state", stacks="python")
    b = torch.empty(8, device="nkipy")
    snap = torch.nkipy._snapshot()
    assert snap["device_traces"][0] == trace                # no new events
    assert _here(_block_of(snap, b)[1]["frames"])
    torch.nkipy._record_memory_history(None)
    c = torch.empty(8, device="nkipy")
    assert _block_of(torch.nkipy._snapshot(), c)[1]["frames"] == []
    assert _block_of(torch.nkipy._snapshot(), b)[1]["frames"]   # kept while b lives


def test_max_entries_keeps_the_newest_and_reenabling_starts_afresh():
    torch.nkipy._record_memory_history(max_entries=4, stacks="python")
    ts = [torch.empty(16, device="nkipy") for _ in range(6)]
    trace = torch.nkipy._snapshot()["device_traces"][0]
    assert [e["addr"] for e in trace] == [t.data_ptr() for t in ts[2:]]
    torch.nkipy._record_memory_history(None)
    torch.nkipy._record_memory_history(stacks="python")
    assert torch.nkipy._snapshot()["device_traces"][0] == []


def test_out_of_memory_is_in_the_trace():
    torch.nkipy._record_memory_history(stacks="python")
    with pytest.raises(torch.OutOfMemoryError, match="nkipy out of memory"):
        torch.empty(CORE_MEMORY * 2, dtype=torch.uint8, device="nkipy")
    oom = torch.nkipy._snapshot()["device_traces"][0][-1]
    assert oom["action"] == "oom" and oom["size"] == CORE_MEMORY * 2
    assert 0 < oom["device_free"] <= CORE_MEMORY
    assert "raise OutOfMemoryError" in _memory_viz.trace(torch.nkipy._snapshot())


def test_dump_snapshot_writes_a_private_pickle(tmp_path):
    torch.nkipy._record_memory_history(stacks="python")
    keep = torch.ones(5, device="nkipy")
    path = tmp_path / "snap.pickle"
    torch.nkipy._dump_snapshot(str(path))
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert _block_of(snap, keep)[1]["state"] == "active_allocated"
    assert set(snap) >= {"segments", "device_traces", "allocator_settings"}
    # a planted link is replaced, never written through
    os.symlink(tmp_path / "other", tmp_path / "link.pickle")
    torch.nkipy._dump_snapshot(str(tmp_path / "link.pickle"))
    assert not (tmp_path / "other").exists() and not os.path.islink(tmp_path / "link.pickle")


def test_summary_and_memory_info():
    keep = torch.empty(1 << 20, dtype=torch.uint8, device="nkipy")
    text = torch.nkipy.memory_summary()
    assert "nkipy memory summary, device ID 0" in text
    row = next(line for line in text.splitlines() if line.startswith(" Allocated memory"))
    st = torch.nkipy.memory_stats()
    assert f"{st['allocated_bytes.all.current'] / 2**20:.1f} MiB" in row
    assert "Runtime allocations" in text and "Runtime allocations" not in \
        torch.nkipy.memory_summary(abbreviated=True)
    free, total = torch.nkipy.mem_get_info()
    ms = spike.get_spike_singleton().memory_stats(0)
    assert total == ms["capacity_bytes"] == CORE_MEMORY
    assert free == ms["capacity_bytes"] - ms["allocated_bytes"] and free < total
    assert torch.nkipy.mem_get_info(1)[1] == CORE_MEMORY
    del keep


@pytest.mark.parametrize("kwargs,message", [
    ({"enabled": "yes"}, "enabled must be one of (None, 'state', 'all'), not 'yes'"),
    ({"context": "free"}, "context must be one of (None, 'state', 'alloc', 'all'), not 'free'"),
    ({"stacks": "cpp"}, "stacks must be one of ('python', 'all'), not 'cpp'"),
    ({"max_entries": 0}, "max_entries must be an int >= 1, not 0"),
])
def test_history_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=__import__("re").escape(message)):
        torch.nkipy._record_memory_history(**kwargs)


def test_trace_across_a_runtime_reset_frees_what_the_runtime_took():
    """Closing the runtime frees every block and segment: the trace says so,
    so that replaying it never shows memory the next runtime reuses."""
    import warnings

    import spike_torch

    torch.nkipy._record_memory_history(stacks="python")
    x = torch.randn(1000, device="nkipy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spike_torch.reset()
    spike.configure([0, 1], core_memory_bytes=CORE_MEMORY)
    del x
    y = torch.randn(1000, device="nkipy")
    trace = torch.nkipy._snapshot()["device_traces"][0]
    live, segs = {}, {}
    for e in trace:
        if e["action"] == "alloc":
            assert e["addr"] not in live, "an address the trace still shows allocated"
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
        elif e["action"] == "segment_alloc":
            assert e["addr"] not in segs
            segs[e["addr"]] = e["size"]
        elif e["action"] == "segment_free":
            segs.pop(e["addr"], None)       # (one taken before the trace began, too)
    assert list(live) == [y.data_ptr()]
    now = {seg["address"] for seg in torch.nkipy._snapshot()["segments"] if seg["device"] == 0}
    assert set(segs) <= now and any(a <= y.data_ptr() < a + n for a, n in segs.items())


def test_enabling_the_trace_again_starts_it_afresh():
    torch.nkipy._record_memory_history(stacks="python")
    a = torch.empty(16, device="nkipy")
    assert torch.nkipy._snapshot()["device_traces"][0]
    torch.nkipy._record_memory_history(stacks="python")      # on again, without stopping
    assert torch.nkipy._snapshot()["device_traces"][0] == []
    del a
