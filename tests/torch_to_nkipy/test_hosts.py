"""Host detection (torch_to_nkipy/hosts.py), the gloo transport between hosts
(spike_torch/csrc/comm_gloo.cpp, driven without the runtime) and rank -> core.

Detection runs here as threads of one process sharing a store, each "host" a
directory standing in for its /dev/shm; test_multihost.py runs real hosts
(namespaces) under torchrun.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from torch_to_nkipy import hosts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def detect_all(placement, tmp_path, timeout=60.0, store=None, prefix="t"):
    """host_of as each rank found it; placement[r] = (hostname, shm dir name)."""
    store = store or dist.HashStore()
    for _, shm in placement:
        (tmp_path / shm).mkdir(exist_ok=True)
    got, errors = {}, {}

    def run(r):
        host, shm = placement[r]
        try:
            got[r] = hosts.detect_hosts(store, r, len(placement), prefix=prefix,
                                        timeout=timeout, shm_dir=str(tmp_path / shm),
                                        hostname=host)
        except Exception as e:  # noqa: BLE001
            errors[r] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(placement))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for _, shm in placement:
        assert os.listdir(tmp_path / shm) == []   # every token file removed
    return [got[r] for r in range(len(placement))]


def test_same_hostname_separate_shm_are_two_hosts(tmp_path):
    """Two containers of one machine: same hostname, separate /dev/shm: two hosts."""
    got = detect_all([("box", "a"), ("box", "a"), ("box", "b"), ("box", "b")], tmp_path)
    assert got == [[0, 0, 2, 2]] * 4


def test_same_shm_is_one_host(tmp_path):
    assert detect_all([("box", "a")] * 4, tmp_path) == [[0, 0, 0, 0]] * 4


def test_other_hostname_is_another_host(tmp_path):
    """A /dev/shm that looks shared (same directory) but another hostname: another host."""
    got = detect_all([("n1", "a"), ("n2", "a"), ("n1", "a")], tmp_path)
    assert got == [[0, 1, 0]] * 3


def test_interleaved_ranks(tmp_path):
    got = detect_all([("box", "a"), ("box", "b"), ("box", "a"), ("box", "b")], tmp_path)
    assert got == [[0, 1, 0, 1]] * 4
    h = hosts.Hosts(3, 4, tuple(got[0]))
    assert (h.count, h.local_rank) == (2, 1)


def test_one_rank_needs_no_store():
    assert hosts.detect_hosts(None, 0, 1) == [0]


def fake_rank(store, rank, host="elsewhere", token="0" * 32, lead=None, prefix="t"):
    entry = json.dumps({"host": host, "token": token}) if isinstance(token, str) else token
    store.set(f"{prefix}/host/{rank}", entry)
    if lead is not None:
        store.set(f"{prefix}/lead/{rank}", lead)


def detect_rank0(store, tmp_path, world=2, timeout=30.0, host="box"):
    shm = tmp_path / "shm"
    shm.mkdir(exist_ok=True)
    before = set(os.listdir(shm))
    try:
        return hosts.detect_hosts(store, 0, world, prefix="t", timeout=timeout,
                                  shm_dir=str(shm), hostname=host)
    finally:
        assert set(os.listdir(shm)) == before      # this rank's token file removed


@pytest.mark.parametrize("entry, message", [
    (b"not json", "is b'not json': not a JSON object"),
    (json.dumps(["box", "0" * 32]).encode(), 'not an object with exactly "host" and "token"'),
    (json.dumps({"host": "box"}).encode(), 'not an object with exactly "host" and "token"'),
    (json.dumps({"host": 7, "token": "0" * 32}).encode(), "its host 7 is not a hostname"),
    (json.dumps({"host": "a\nb", "token": "0" * 32}).encode(), "is not a hostname"),
    (json.dumps({"host": "box", "token": "../../etc/passwd"}).encode(),
     "its token '../../etc/passwd' is not 32 lowercase hex digits"),
    (json.dumps({"host": "box", "token": "A" * 32}).encode(), "is not 32 lowercase hex"),
    (b"{" + b" " * 2000 + b"}", "longer than 1024 bytes"),
])
def test_bad_host_entry_refused(tmp_path, entry, message):
    store = dist.HashStore()
    fake_rank(store, 1, token=entry)
    with pytest.raises(RuntimeError, match="host detection: the store's entry of rank 1 ") as e:
        detect_rank0(store, tmp_path)
    assert message in str(e.value)


@pytest.mark.parametrize("lead, message", [
    ("5", "rank 1 published b'5' as the lowest rank of its host: not a rank in [0, 1] of the 2"),
    ("-1", "rank 1 published b'-1' as the lowest rank"),
    ("zero", "rank 1 published b'zero' as the lowest rank"),
    # rank 1 (another host) claims rank 0's host
    ("0", "rank 0 (this rank) does not share a host with rank 1, but rank 1 says its "
          "host's lowest rank is 0 and this rank's is 0"),
])
def test_bad_lead_refused(tmp_path, lead, message):
    store = dist.HashStore()
    fake_rank(store, 1, lead=lead)
    with pytest.raises(RuntimeError) as e:
        detect_rank0(store, tmp_path)
    assert message in str(e.value)


def test_inconsistent_leads_refused(tmp_path):
    """Rank 2 says its host's lowest rank is 1, but rank 1 says it is 0."""
    store = dist.HashStore()
    fake_rank(store, 1, lead="0", token="1" * 32)
    fake_rank(store, 2, lead="1", token="2" * 32)
    with pytest.raises(RuntimeError, match=r"rank 2 says its host's lowest rank is 1, but "
                                           r"rank 1 says 0: the ranks disagree"):
        detect_rank0(store, tmp_path, world=3)


def test_missing_rank_named_within_the_timeout(tmp_path):
    store = dist.HashStore()
    with pytest.raises(RuntimeError, match=r"host detection: rank 1 did not publish its host "
                                           r"within 0.3 s \(\$NKRT_CC_TIMEOUT\)"):
        detect_rank0(store, tmp_path, timeout=0.3)


def test_foreign_token_file_refused(tmp_path):
    """A file under another rank's token name that is not private to this user
    (someone planted it) is refused, not taken as proof of a shared host."""
    store = dist.HashStore()
    shm = tmp_path / "shm"
    shm.mkdir()
    planted = shm / (hosts.TOKEN_PREFIX + "3" * 32)
    planted.write_text("")
    planted.chmod(0o644)
    fake_rank(store, 1, host="box", token="3" * 32)
    with pytest.raises(RuntimeError, match=r"nkipy-host-3{32} is not a private file of this "
                                           r"user \(mode -rw-r--r--"):
        detect_rank0(store, tmp_path)
    planted.unlink()
    os.symlink("/etc/passwd", planted)
    with pytest.raises(RuntimeError, match="is not a private file of this user"):
        detect_rank0(store, tmp_path)


def test_token_dir_missing(tmp_path):
    with pytest.raises(RuntimeError, match=r"host detection: cannot create .*nope/nkipy-host-"
                                           r"[0-9a-f]{32}: No such file or directory"):
        hosts.detect_hosts(dist.HashStore(), 0, 2, shm_dir=str(tmp_path / "nope"), timeout=1)


def test_bad_world(tmp_path):
    with pytest.raises(ValueError, match=r"host detection: rank 2 of 2: the world size must "
                                         r"be 1 to 1024"):
        hosts.detect_hosts(dist.HashStore(), 2, 2)


@pytest.mark.parametrize("value", ["abc", "0", "1e9", "nan", "-1"])
def test_timeout_env_refused(monkeypatch, value):
    monkeypatch.setenv("NKRT_CC_TIMEOUT", value)
    with pytest.raises(ValueError, match=f"NKRT_CC_TIMEOUT='{value}': it must be a number of "
                                         "seconds between 0.001 and 86400"):
        hosts.timeout_s()


def test_timeout_env(monkeypatch):
    monkeypatch.delenv("NKRT_CC_TIMEOUT", raising=False)
    assert hosts.timeout_s() == 300.0
    monkeypatch.setenv("NKRT_CC_TIMEOUT", "2.5")
    assert hosts.timeout_s() == 2.5


def test_set_hosts_arguments_refused():
    import spike_torch.comm as comm

    with pytest.raises(ValueError, match=r"host_of\[1\] is 2: each rank's host must be the "
                                         r"lowest rank on that host"):
        comm.set_hosts(None, [0, 2, 2])
    with pytest.raises(ValueError, match=r"host_of\[2\] is 1: each rank's host must be"):
        comm.set_hosts(None, [0, 0, 1])
    with pytest.raises(TypeError, match=r"host_of\[0\] must be an int, not str '0'"):
        comm.set_hosts(None, ["0"])
    with pytest.raises(ValueError, match="host_of has 0 entries: a job has 1 to 1024 ranks"):
        comm.set_hosts(None, [])
    with pytest.raises(TypeError, match="group must be a torch.distributed ProcessGroup, "
                                        "not NoneType"):
        comm.set_hosts(None, [0, 1])
    group = hosts._gloo_group(dist.HashStore(), 0, 1, 5.0)
    with pytest.raises(RuntimeError, match="comm_set_hosts: the gloo group has 1 ranks, "
                                           "host_of 2: the group must hold every rank"):
        comm.set_hosts(group, [0, 1])
    comm.set_hosts(group, [0])          # one host: shared memory only
    comm.clear_hosts(1)
    with pytest.raises(RuntimeError, match="comm_clear_hosts: world size 0 is not 1 to 1024"):
        comm.clear_hosts(0)


def test_local_rank_sets_the_core(monkeypatch):
    """rank = global rank, core = local rank + core_offset (the second node's
    rank 2 with LOCAL_RANK=0 uses core 0)."""
    from torch_to_nkipy.config import (NKIPyBackendConfig, _detect_local_rank,
                                       _detect_rank)

    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert _detect_rank(None) == 2 and _detect_local_rank(None) == 0
    cfg = NKIPyBackendConfig("p", rank=2, world_size=4, core_offset=1, local_rank=0)
    assert cfg.visible_core == 1
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0")
    with pytest.raises(RuntimeError, match=r"NeuronCore 1 \(local rank 0 \+ core_offset 1\) "
                                           r"is not visible to this process"):
        cfg.device_core
    monkeypatch.delenv("LOCAL_RANK")
    assert _detect_local_rank(hosts.Hosts(3, 4, (0, 0, 2, 2))) == 1
    assert _detect_local_rank(None) is None
    assert NKIPyBackendConfig("p", rank=3, world_size=4).visible_core == 3
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(ValueError, match="environment variable LOCAL_RANK must be an integer"):
        _detect_local_rank(None)


# ---- the gloo transport, two processes ---------------------------------------

TRANSPORT = textwrap.dedent("""
    import os, sys, time, torch
    import torch.distributed as dist
    import spike_torch.comm as comm
    from torch_to_nkipy import hosts
    mode, rank = sys.argv[1], int(os.environ["RANK"])
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), 2, rank == 0)
    group = hosts._gloo_group(dist.PrefixStore("g", store), rank, 2, float(sys.argv[2]))
    peer = 1 - rank
    def ex(peers, sends, bufs):
        comm._exchange(group, peers, sends, bufs)
    if mode == "ok":
        # several transfers with one peer match in the order they are posted;
        # an empty one is skipped on both sides; 4 MiB moves whole
        mine = [torch.full((n,), 10 * rank + i, dtype=torch.uint8) for i, n in
                enumerate((3, 0, 4 << 20, 5))]
        got = [torch.zeros(t.numel(), dtype=torch.uint8) for t in mine]
        ex([peer] * 8, [1] * 4 + [0] * 4, mine + got)
        for i, g in enumerate(got):
            assert torch.equal(g, torch.full_like(g, 10 * peer + i)), (i, g[:4])
        try:
            ex([rank], [1], [mine[0]])
        except RuntimeError as e:
            want = ("between hosts: transfer 0 names rank %d, not another rank of the 2 "
                    "in the gloo group" % rank)
            assert want in str(e), e
        else:
            raise AssertionError("a transfer to itself was taken")
        got = torch.zeros(2)                   # still usable after a refused call
        ex([peer, peer], [1, 0], [torch.full((2,), float(rank)), got])
        assert got.tolist() == [float(peer)] * 2
        print("OK", rank, flush=True)
    elif mode == "dies":
        ex([peer, peer], [1, 0], [torch.ones(4), torch.zeros(4)])   # connected
        if rank == 1:
            store.set("dying", "1")
            os._exit(3)
        store.wait(["dying"])
        time.sleep(0.5)
        t0 = time.monotonic()
        try:
            ex([peer, peer], [1, 0], [torch.ones(1 << 20), torch.zeros(1 << 20)])
        except RuntimeError as e:
            print("ERR1", time.monotonic() - t0, str(e).replace("\\n", " "), flush=True)
        try:
            ex([peer], [0], [torch.zeros(4)])
        except RuntimeError as e:
            print("ERR2", str(e).replace("\\n", " "), flush=True)
    elif mode == "hangs":
        ex([peer, peer], [1, 0], [torch.ones(4), torch.zeros(4)])
        if rank == 1:
            time.sleep(4)
            os._exit(0)
        t0 = time.monotonic()
        try:
            ex([peer], [0], [torch.zeros(4)])
        except RuntimeError as e:
            print("ERR1", time.monotonic() - t0, str(e).replace("\\n", " "), flush=True)
        os._exit(0)
""")


def run_transport(mode, timeout_s):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items()
           if k not in ("NEURON_RT_VISIBLE_CORES", "LOCAL_RANK", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=ROOT, MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable, "-W", "ignore", "-c", TRANSPORT, mode,
                               str(timeout_s)], env={**env, "RANK": str(r)}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for r in range(2)]
    return [p.communicate(timeout=240) + (p.returncode,) for p in procs]


@pytest.mark.slow
def test_transport_exchange():
    outs = run_transport("ok", 60)
    for r, (out, err, rc) in enumerate(outs):
        assert rc == 0 and f"OK {r}" in out, err[-3000:]


@pytest.mark.slow
def test_transport_peer_killed_is_named():
    """A peer that died: the exchange fails at once naming it (not after the
    group's 120 s timeout); the transport then refuses every exchange."""
    (out, err, rc), (_, _, rc1) = run_transport("dies", 120)
    assert rc1 == 3 and rc == 0, err[-3000:]
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith("ERR"))
    took, msg = lines["ERR1"].split(" ", 1)
    assert float(took) < 60, took
    assert "between hosts: the transfer with rank 1 failed over gloo (rank 1: " in msg, msg
    assert "NRT_FAILURE" in msg, msg
    assert ("between hosts: an earlier transfer failed, so transfers between hosts can no "
            "longer be matched") in lines["ERR2"]
    assert "the transfer with rank 1 failed" in lines["ERR2"]


@pytest.mark.slow
def test_transport_timeout_is_named():
    """A peer alive but silent: the exchange fails after the group's timeout
    (here 1 s), NRT_TIMEOUT, naming the peer."""
    (out, err, rc), _ = run_transport("hangs", 1)
    line = next((ln for ln in out.splitlines() if ln.startswith("ERR1")), None)
    assert line, err[-3000:]
    took, msg = line[5:].split(" ", 1)
    assert 0.5 < float(took) < 25, took
    assert "NRT_TIMEOUT" in msg and "the transfer with rank 1 failed over gloo " \
        "(rank 1: recv of 16 bytes: " in msg, msg


def test_runtime_refusal_is_reported(monkeypatch, tmp_path):
    """Two hosts found, the runtime refuses them (a build without collectives
    between hosts did): every rank raises saying so, with the runtime's reason."""
    import itertools

    import spike_torch.comm

    def refuse(group, host_of):
        assert group.size() == 2 and list(host_of) == [0, 1]
        raise RuntimeError("the runtime refused the job's hosts: NRT_INVALID: not here")

    monkeypatch.setattr(spike_torch.comm, "set_hosts", refuse)
    monkeypatch.setattr(hosts, "_CURRENT", None)
    monkeypatch.setattr(hosts, "_ROUNDS", itertools.repeat(0))   # threads share the counter
    store, errors = dist.HashStore(), {}

    def run(r):
        (tmp_path / str(r)).mkdir()
        try:
            hosts.setup_hosts(store, r, 2, shm_dir=str(tmp_path / str(r)), hostname="box")
        except RuntimeError as e:
            errors[r] = str(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == {r: "the job's 2 ranks are on 2 hosts (host_of=[0, 1]), and the runtime "
                         "did not take the transport between them: the runtime refused the "
                         "job's hosts: NRT_INVALID: not here" for r in range(2)}
    assert hosts.current_hosts() is None


def test_token_claimed_twice_refused(monkeypatch, tmp_path):
    store = dist.HashStore()
    monkeypatch.setattr(hosts.secrets, "token_hex", lambda n: "7" * 32)
    fake_rank(store, 1, host="box", token="7" * 32)
    with pytest.raises(RuntimeError, match=r"host detection: rank 1 published this rank's "
                                           r"\(0\) token: two ranks claim the same token file"):
        detect_rank0(store, tmp_path)


def test_comm_ops_check_their_arguments():
    """The C++ ops check what spike_torch.comm checks before them, and more."""
    import torch

    import spike_torch.comm as comm

    group = hosts._gloo_group(dist.HashStore(), 0, 1, 5.0)
    with pytest.raises(TypeError, match="world_size must be an int, not str"):
        comm.clear_hosts("2")
    with pytest.raises(RuntimeError, match="comm_set_hosts: host_of has 0 entries; a job has "
                                           "1 to 1024 ranks"):
        torch.ops.spike_torch.comm_set_hosts(group.boxed(), [])
    with pytest.raises(RuntimeError, match=r"comm_set_hosts: host_of\[0\] is 1: each rank's "
                                           r"host is the lowest rank on it"):
        torch.ops.spike_torch.comm_set_hosts(group.boxed(), [1])
    with pytest.raises(RuntimeError, match="_comm_gloo_exchange: peers, sends and buffers "
                                           "differ in length"):
        comm._exchange(group, [0], [], [])
    with pytest.raises(RuntimeError, match="_comm_gloo_exchange: buffer 0 is not a contiguous "
                                           "CPU tensor"):
        comm._exchange(group, [0], [1], [torch.ones(4, 2).t()])
