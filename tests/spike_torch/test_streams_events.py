"""Streams and events of the nkipy device, in torch.cuda's shape, and the
PyTorch tools that ask the current accelerator for them: every stream is the
core's one in-order queue, an event completes when recorded and times the host
interval between two recordings. Before these existed, ``import spike_torch``
alone broke ``torch.distributed.checkpoint`` (``current_stream`` missing) and
FSDP2 on the device."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
import torch

import spike_torch  # noqa: F401


def test_streams_are_the_device_queue():
    s = torch.nkipy.Stream()
    assert isinstance(s, torch.Stream) and s.device == torch.device("nkipy", 0)
    assert isinstance(s, torch.nkipy.Stream) and not isinstance(torch.Stream("cpu"),
                                                                torch.nkipy.Stream)
    assert isinstance(torch.nkipy.Event(), torch.nkipy.Event)
    torch.nkipy.current_stream().wait_stream(s)
    assert s == torch.nkipy.current_stream() == torch.nkipy.default_stream(0)
    assert torch.nkipy.Stream(priority=-1) == s
    assert s.query()
    s.synchronize()
    s.wait_stream(torch.nkipy.current_stream())
    with torch.nkipy.stream(s) as ctx:
        assert ctx.stream is s and torch.nkipy.current_stream() == s
        x = torch.arange(4.0, device="nkipy") + 1
    torch.nkipy.set_stream(torch.nkipy.default_stream())
    with torch.nkipy.stream(None):
        pass
    assert torch.equal(x.cpu(), torch.arange(4.0) + 1)
    assert torch.accelerator.current_stream().device.type == "nkipy"
    with pytest.raises(ValueError, match="set_stream needs a stream of the nkipy device, got "
                                         "one of 'cpu'"):
        torch.nkipy.set_stream(torch.Stream(device="cpu"))


def test_events_complete_when_recorded_and_time_the_interval():
    start = torch.nkipy.Event(enable_timing=True)
    end = torch.nkipy.Event(enable_timing=True)
    start.record()
    y = torch.ones(256, 256, device="nkipy") @ torch.ones(256, 256, device="nkipy")
    time.sleep(0.02)
    end.record()
    assert start.query() and end.query()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 20.0 <= ms < 10_000.0, ms
    assert start.elapsed_time(start) == 0.0
    assert float(y[0, 0]) == 256.0
    plain = torch.nkipy.Event()
    plain.record(torch.nkipy.current_stream())
    torch.nkipy.current_stream().wait_event(plain)
    with pytest.raises(ValueError, match="enable_timing=True"):
        plain.elapsed_time(end)
    # torch.Event through the device guard alike
    a, b = torch.Event(device="nkipy", enable_timing=True), torch.Event(device="nkipy",
                                                                         enable_timing=True)
    a.record()
    b.record()
    assert 0.0 <= a.elapsed_time(b) < 1000.0


_DCP_AND_FSDP2 = textwrap.dedent("""
    import os, tempfile, torch, torch.nn as nn
    import spike_torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch_to_nkipy  # the "nkipy" process group

    path = tempfile.mkdtemp()
    dcp.save({"w": torch.ones(2)}, checkpoint_id=path)            # CPU tensors
    sd = {"w": torch.zeros(2, device="nkipy")}
    dcp.load(sd, checkpoint_id=path)
    assert torch.equal(sd["w"].cpu(), torch.ones(2))
    dcp.save({"v": torch.arange(3.0, device="nkipy")}, checkpoint_id=path + "/dev")
    back = {"v": torch.zeros(3)}
    dcp.load(back, checkpoint_id=path + "/dev")
    assert torch.equal(back["v"], torch.arange(3.0))

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
    dist.init_process_group("nkipy", rank=0, world_size=1)
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    ref.load_state_dict(m.state_dict())
    m = m.to("nkipy")
    fully_shard(m[0]); fully_shard(m[2]); fully_shard(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(5, 8)
        loss = m(x.to("nkipy")).square().mean(); loss.backward(); opt.step(); opt.zero_grad()
        rl = ref(x).square().mean(); rl.backward(); ropt.step(); ropt.zero_grad()
        torch.testing.assert_close(loss.cpu(), rl, rtol=1e-5, atol=1e-6)
    dcp.save(m.state_dict(), checkpoint_id=path + "/fsdp")
    dist.destroy_process_group()
    print("ok")
""")


def test_checkpoint_and_fsdp2_with_the_device_loaded(tmp_path):
    """dcp.save/load of CPU and device tensors with spike_torch imported, and
    FSDP2 (fully_shard) training on the device in a world of one, equal to
    eager CPU; in a subprocess (a process group of its own)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import os

    env = dict(os.environ, PORT=str(port))
    proc = subprocess.run([sys.executable, "-c", _DCP_AND_FSDP2], capture_output=True,
                          text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
