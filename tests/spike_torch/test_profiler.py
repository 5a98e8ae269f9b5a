"""torch.profiler shows the device (spike_torch/csrc/profiler.cpp): with
ProfilerActivity.PrivateUse1, kernel executions and copies are device
activities with device time, linked to the op that launched them and so
nested under record_function ranges, on their own track in the Chrome trace;
for eager ops, compiled graphs and backward."""
from __future__ import annotations

import json

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

BOTH = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _warm(fn, *args):
    """Runs ``fn`` once so that its kernels are built before the profile."""
    fn(*args)
    return fn


def _device_events(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def test_eager_kernels_and_copies_have_device_time_under_their_ops(tmp_path):
    a = torch.randn(64, 64, device="nkipy")
    b = torch.randn(64, 64, device="nkipy")

    def step(a, b):
        return (torch.relu(a + b) * 2).cpu()

    _warm(step, a, b)
    with profile(activities=BOTH) as prof:
        with record_function("my_block"):
            out = step(a, b)
    torch.testing.assert_close(out, (torch.relu(a.cpu() + b.cpu()) * 2))
    dev = _device_events(prof)
    names = [e.name for e in dev]
    assert {"nkipy_eager_aten_add_Tensor", "nkipy_eager_aten_relu",
            "nkipy_eager_aten_mul_Tensor"} <= set(names)
    assert any(n.startswith("Memcpy DtoH") for n in names)
    assert all(e.device_index == 0 and e.time_range.elapsed_us() >= 0 for e in dev)
    avg = {e.key: e for e in prof.key_averages()}
    for op in ("aten::add", "aten::relu", "aten::mul"):
        assert avg[op].self_device_time_total > 0, op        # linked to the op that ran it
    block = avg["my_block"]
    assert block.device_time_total >= sum(e.time_range.elapsed_us() for e in dev) * 0.99
    table = prof.key_averages().table(sort_by="self_device_time_total")
    assert "Self NKIPY" in table and "nkipy_eager_aten_relu" in table
    # the Chrome trace: device events on their own track, inside their op's interval
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    ev = json.loads(path.read_text())["traceEvents"]
    kernels = {e["name"]: e for e in ev if e.get("cat") == "kernel"}
    cpu_ops = {e["name"]: e for e in ev if e.get("cat") == "cpu_op"}
    relu, k = cpu_ops["aten::relu"], kernels["nkipy_eager_aten_relu"]
    assert relu["ts"] <= k["ts"] and k["ts"] + k["dur"] <= relu["ts"] + relu["dur"] + 1
    assert k["pid"] != relu["pid"]
    assert any(e.get("cat") == "gpu_memcpy" for e in ev)


def test_compiled_graphs_and_backward_show_their_kernels(nkipy_cache):
    import torch_to_nkipy

    torch_to_nkipy.reset_nkipy_backend()
    torch_to_nkipy.init_nkipy_backend(nkipy_cache=nkipy_cache)
    torch._dynamo.reset()
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4)).to("nkipy")
        fast = torch.compile(model, backend="nkipy")
        x = torch.randn(8, 16, device="nkipy")
        fast(x).sum().backward()                  # builds forward and backward kernels
        with profile(activities=BOTH) as prof:
            loss = fast(x).sum()
            loss.backward()
        names = [e.name for e in _device_events(prof)]
        assert sum(n.startswith("kernel_") for n in names) >= 2, names   # forward, backward
    finally:
        torch._dynamo.reset()
        torch_to_nkipy.reset_nkipy_backend()


def test_profiles_are_independent_and_cpu_only_records_no_device():
    a = torch.ones(32, device="nkipy")
    _warm(torch.neg, a)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.neg(a)
    assert _device_events(prof) == []
    counts = []
    for k in (1, 3):
        with profile(activities=BOTH) as prof:
            for _ in range(k):
                torch.neg(a)
        counts.append(sum(e.name == "nkipy_eager_aten_neg" for e in _device_events(prof)))
    assert counts == [1, 3]                        # each profile only its own work


def test_the_runtime_trace_and_the_profiler_record_side_by_side():
    """SystemTraceSession (the Perfetto path) and torch.profiler read the same
    runtime events, independently."""
    import spike

    a = torch.ones(32, device="nkipy")
    _warm(torch.neg, a)
    with spike.SystemTraceSession() as trace:
        with profile(activities=BOTH) as prof:
            torch.neg(a)
        events = json.loads(trace.fetch_events_json())["events"]
    assert any(e["name"] == "nkipy_eager_aten_neg" for e in events)
    assert [e.name for e in _device_events(prof)].count("nkipy_eager_aten_neg") == 1


@pytest.mark.parametrize("activity", [ProfilerActivity.PrivateUse1])
def test_schedule_and_step_profiles_collect_device_time(activity, tmp_path):
    a = torch.ones(64, device="nkipy")
    _warm(torch.exp, a)
    done = []
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with profile(activities=[ProfilerActivity.CPU, activity], schedule=sched,
                 on_trace_ready=lambda p: done.append(len(_device_events(p)))) as prof:
        for _ in range(5):
            torch.exp(a)
            prof.step()
    assert done == [2]


def test_a_queued_copy_counts_for_the_op_that_queued_it():
    """A non_blocking copy from pinned memory starts after its copy_ returned;
    the runtime records when it was queued, and the activity is linked to the
    op running then, not to whatever runs when the copy starts."""
    src = torch.randn(4 << 20).pin_memory()
    a = torch.ones(64, device="nkipy")
    _warm(torch.neg, a)
    torch.nkipy.synchronize()
    with profile(activities=BOTH) as prof:
        with record_function("COPY"):
            d = src.to("nkipy", non_blocking=True)
        with record_function("AFTER"):
            torch.neg(a)
        torch.nkipy.synchronize()
    avg = {e.key: e for e in prof.key_averages()}
    copies = [e for e in _device_events(prof) if e.name.startswith("Memcpy HtoD")]
    assert len(copies) == 1
    assert avg["COPY"].device_time_total >= copies[0].time_range.elapsed_us() * 0.99
    assert avg["AFTER"].device_time_total < copies[0].time_range.elapsed_us()
    assert torch.equal(d.cpu(), src)
