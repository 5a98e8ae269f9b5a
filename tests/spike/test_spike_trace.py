"""SystemTraceSession: recording, draining, saving, lifetime."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import spike
from spike import SpikeError, SpikeModel, SpikeTensor, SystemTraceSession
from spike._spike import Spike


@pytest.fixture
def noop(neff):
    model = SpikeModel.load_from_neff(neff("noop"))
    x = SpikeTensor.from_numpy(np.ones(1, np.float32))
    return model, x


def pairs(events, kind="nc_exec_running"):
    """{tracking_id: (start_event, stop_event)} of one event type."""
    out = {}
    for e in events:
        if e["event_type"] == kind:
            out.setdefault(e["tracking_id"], {})[e["phase"]] = e
    return out


def test_records_executions_and_copies(noop):
    model, x = noop
    with SystemTraceSession() as session:
        assert session.active and session.core_id is None
        out = model({"x": x})
        out["output0"].numpy()
    assert not session.active
    doc = json.loads(session.fetch_events_json())
    events = doc["events"]
    execs = pairs(events)
    assert len(execs) == 1
    (pair,) = execs.values()
    assert pair["start"]["name"] == "noop" and pair["start"]["nc_idx"] == 0
    assert pair["stop"]["data"]["nc_timestamp_ns"] >= pair["start"]["data"]["nc_timestamp_ns"]
    assert pairs(events, "tensor_read"), events
    assert session.event_count == len(events)
    assert "stopped" in repr(session)


def test_drain_removes_events(noop):
    model, x = noop
    session = SystemTraceSession(core_id=0)
    model({"x": x})
    first = session.drain_events()
    assert isinstance(first, list) and first and isinstance(first[0], dict)
    assert session.drain_events() == []
    model({"x": x})
    assert len(pairs(session.drain_events())) == 1
    session.stop()
    model({"x": x})  # not recorded after stop
    assert session.drain_events() == []
    session.stop()  # idempotent


def test_core_filter(neff):
    m0 = SpikeModel.load_from_neff(neff("noop"), core_id=0)
    m1 = SpikeModel.load_from_neff(neff("noop"), core_id=1)
    x0 = SpikeTensor.from_numpy(np.ones(1, np.float32), core_id=0)
    x1 = SpikeTensor.from_numpy(np.ones(1, np.float32), core_id=1)
    with SystemTraceSession(spike.get_spike_singleton(), 1) as only1, SystemTraceSession() as all_:
        m0({"x": x0})
        m1({"x": x1})
    assert {e["nc_idx"] for e in only1.drain_events()} == {1}
    assert len(pairs(all_.drain_events())) == 2
    assert SystemTraceSession(0).core_id == 0  # positional core id


def test_save_chrome_trace(noop, tmp_path):
    model, x = noop
    with SystemTraceSession() as session:
        for _ in range(3):
            model({"x": x})
    path = tmp_path / "trace.json"
    session.save(path)
    doc = json.loads(path.read_text())
    execs = [e for e in doc["traceEvents"] if e.get("cat") == "nc_exec_running"]
    assert len(execs) == 3 and all(e["ph"] == "X" and e["dur"] >= 0 for e in execs)
    # three calls one after the other: their spans follow one another in order
    execs.sort(key=lambda e: e["ts"])
    for a, b in zip(execs, execs[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1.0    # µs; 1 µs for float rounding
    from spike import NrtError
    with pytest.raises(NrtError, match=r"cannot write trace file '.*no_such_dir/t.json': cannot "
                       r"create a temporary file in '.*no_such_dir/': No such file or directory"):
        session.save(tmp_path / "no_such_dir" / "t.json")


def test_save_replaces_planted_symlinks_instead_of_following_them(noop, tmp_path):
    """A symlink planted at the trace's path, or at the temporary name the
    writer used to open, must not redirect the write to another file."""
    model, x = noop
    with SystemTraceSession() as session:
        model({"x": x})
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = tmp_path / "trace.json"
    path.symlink_to(victim)
    (tmp_path / f"trace.json.tmp{os.getpid() % 100000}").symlink_to(victim)
    session.save(path)
    assert victim.read_text() == "precious"
    assert not path.is_symlink()
    assert json.loads(path.read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "trace.json", f"trace.json.tmp{os.getpid() % 100000}", "victim"]   # no temporary left


def test_argument_errors(fresh_spike):
    with pytest.raises(SpikeError, match="no Spike runtime is active"):
        SystemTraceSession()
    spike.get_spike_singleton()
    with pytest.raises(TypeError, match="core_id must be an int or None"):
        SystemTraceSession(core_id="0")
    with pytest.raises(ValueError, match="core_id must be a non-negative"):
        SystemTraceSession(core_id=-1)
    with pytest.raises(TypeError, match="spike must be a Spike instance"):
        SystemTraceSession("spike", 0)
    from spike import NrtError
    with pytest.raises(NrtError, match="not visible"):
        SystemTraceSession(core_id=100)


def test_session_after_close(fresh_spike, neff):
    s = Spike()
    session = SystemTraceSession(s)
    s.close()
    assert not session.active and "closed" in repr(session)
    with pytest.raises(SpikeError, match="closed"):
        session.fetch_events_json()
    with pytest.raises(SpikeError, match="closed"):
        session.drain_events()
    session.stop()  # harmless
    del session


def test_many_sessions_are_independent(noop):
    model, x = noop
    a = SystemTraceSession()
    model({"x": x})
    b = SystemTraceSession()
    model({"x": x})
    assert len(pairs(a.drain_events())) == 2
    assert len(pairs(b.drain_events())) == 1
    del a
    model({"x": x})
    assert len(pairs(b.drain_events())) == 1
