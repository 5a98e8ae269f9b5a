"""The memory-pool view of the caching allocator: spike_torch.memory_pool_stats()
and spike_torch.trim_memory_pool() (the figures behind spiky.get_memory_stats(),
spiky.trim_memory_pool() and spiky.clear_memory_pool())."""
from __future__ import annotations

import gc
import threading

import pytest
import torch

from spike_torch_helpers import run_python

MiB = 1 << 20
KEYS = ("used_bytes", "cached_bytes", "total_bytes", "allocation_count", "reuse_count",
        "cache_hit_count", "cache_miss_count")


@pytest.fixture(autouse=True)
def clean(nkipy):
    gc.collect()
    nkipy.empty_cache()
    yield
    gc.collect()
    nkipy.empty_cache()


def pool(nkipy, device=0):
    return nkipy.memory_pool_stats(device)


def delta(after, before):
    return {k: after[k] - before[k] for k in KEYS}


def runtime_allocated(core=0):
    import spike

    return spike.get_spike_singleton().memory_stats(core)["allocated_bytes"]


def u8(n, device="nkipy"):
    return torch.empty(n, dtype=torch.uint8, device=device)


def check_consistent(s):
    assert s["total_bytes"] == s["used_bytes"] + s["cached_bytes"]
    assert s["allocation_count"] == s["reuse_count"] + s["cache_miss_count"]
    assert 0 <= s["cache_hit_count"] <= s["reuse_count"]
    assert min(s.values()) >= 0


def test_keys_and_all_devices_sum(nkipy):
    a, b = u8(3000), u8(5 * MiB, "nkipy:1")
    s_all, s0, s1 = nkipy.memory_pool_stats(), pool(nkipy, 0), pool(nkipy, 1)
    assert tuple(s_all) == KEYS
    assert all(type(v) is int for v in s_all.values())
    for k in KEYS:
        assert s_all[k] == s0[k] + s1[k]
    for s in (s_all, s0, s1):
        check_consistent(s)
    # the same figures as torch.nkipy.memory_stats()
    assert s0["used_bytes"] == torch.nkipy.memory_allocated(0)
    assert s1["total_bytes"] == torch.nkipy.memory_reserved(1)
    # device spellings
    assert nkipy.memory_pool_stats("nkipy:1") == s1
    assert nkipy.memory_pool_stats(torch.device("nkipy", 1)) == s1
    del a, b


def test_allocation_raises_used_bytes(nkipy):
    before = pool(nkipy)
    a = u8(1001)  # rounds up to 1024
    d = delta(pool(nkipy), before)
    assert d["used_bytes"] == 1024
    assert d["allocation_count"] == 1
    b = u8(12 * MiB)  # its own segment of 12 MiB
    d = delta(pool(nkipy), before)
    assert d["used_bytes"] == 1024 + 12 * MiB
    assert d["total_bytes"] == 2 * MiB + 12 * MiB  # a small segment and a large one
    check_consistent(pool(nkipy))
    del a, b


def test_free_moves_bytes_to_cached(nkipy):
    a = u8(300 * 1024)
    keep = u8(4096)
    before = pool(nkipy)
    del a
    d = delta(pool(nkipy), before)
    assert d["used_bytes"] == -300 * 1024
    assert d["cached_bytes"] == 300 * 1024
    assert d["total_bytes"] == 0
    assert d["allocation_count"] == 0  # frees do not count
    check_consistent(pool(nkipy))
    del keep


def test_same_size_reuse_is_a_cache_hit(nkipy):
    # a large request has its own segment: freed, it is one block of exactly its size
    a = u8(12 * MiB)
    ptr = a.data_ptr()
    del a
    before = pool(nkipy)
    b = u8(12 * MiB)
    assert b.data_ptr() == ptr
    d = delta(pool(nkipy), before)
    assert d == {"used_bytes": 12 * MiB, "cached_bytes": -12 * MiB, "total_bytes": 0,
                 "allocation_count": 1, "reuse_count": 1, "cache_hit_count": 1,
                 "cache_miss_count": 0}
    del b


def test_small_same_size_reuse_is_a_cache_hit(nkipy):
    a = u8(4096)
    neighbour = u8(4096)  # keeps a's block from merging with the segment's free rest
    ptr = a.data_ptr()
    del a
    before = pool(nkipy)
    b = u8(4000)  # rounds to the same 4096
    assert b.data_ptr() == ptr
    d = delta(pool(nkipy), before)
    assert (d["reuse_count"], d["cache_hit_count"], d["cache_miss_count"]) == (1, 1, 0)
    del b, neighbour


def test_reuse_by_split_is_not_a_hit(nkipy):
    big = u8(256 * 1024)
    del big
    before = pool(nkipy)
    small = u8(10 * 1024)
    d = delta(pool(nkipy), before)
    assert (d["allocation_count"], d["reuse_count"], d["cache_hit_count"],
            d["cache_miss_count"]) == (1, 1, 0, 0)
    assert d["total_bytes"] == 0
    del small


def test_fresh_size_is_a_cache_miss(nkipy):
    small = u8(1000)
    before = pool(nkipy)
    big = u8(30 * MiB)  # nothing cached fits: a new segment
    d = delta(pool(nkipy), before)
    assert (d["allocation_count"], d["reuse_count"], d["cache_hit_count"],
            d["cache_miss_count"]) == (1, 0, 0, 1)
    assert d["total_bytes"] == 30 * MiB
    assert d["used_bytes"] == 30 * MiB
    del small, big


def test_empty_tensors_are_not_counted(nkipy):
    before = pool(nkipy)
    e = torch.empty(0, device="nkipy")
    assert delta(pool(nkipy), before) == {k: 0 for k in KEYS}
    del e


def test_trim_zero_releases_every_free_segment(nkipy):
    ts = [u8(n) for n in (1000, 3 * MiB, 12 * MiB, 30 * MiB)]
    segments = torch.nkipy.memory_stats(0)["segment.all.current"]
    assert segments == 3  # 12 MiB share the 20 MiB segment of the 3 MiB request
    del ts
    s = pool(nkipy)
    assert s["used_bytes"] == 0 and s["cached_bytes"] == s["total_bytes"] > 0
    cached = s["cached_bytes"]
    reserved_rt = runtime_allocated(0)
    stats_before = torch.nkipy.memory_stats(0)
    released = nkipy.trim_memory_pool(0, device=0)
    assert released == cached
    s = pool(nkipy)
    assert s["cached_bytes"] == 0 and s["total_bytes"] == 0
    assert torch.nkipy.memory_reserved(0) == 0
    assert reserved_rt - runtime_allocated(0) == released  # given back to the runtime
    stats_after = torch.nkipy.memory_stats(0)
    assert stats_after["num_device_free"] - stats_before["num_device_free"] == segments
    assert stats_after["segment.all.current"] == 0
    assert nkipy.get_cached_blocks(0) == 0
    assert nkipy.trim_memory_pool() == 0  # nothing left to release


def test_trim_keeps_partly_used_segments(nkipy):
    keep = u8(4096)  # its 2 MiB segment cannot be released
    extra = u8(12 * MiB)
    del extra
    s = pool(nkipy)
    assert s["cached_bytes"] == 2 * MiB - 4096 + 12 * MiB
    assert nkipy.trim_memory_pool(0) == 12 * MiB
    s = pool(nkipy)
    assert s["cached_bytes"] == 2 * MiB - 4096  # above the target: nothing more to release
    assert s["used_bytes"] == 4096 and s["total_bytes"] == 2 * MiB
    assert keep.fill_(7).cpu()[0].item() == 7
    del keep
    assert nkipy.trim_memory_pool(0) == 2 * MiB
    assert pool(nkipy)["total_bytes"] == 0


def test_trim_to_target(nkipy):
    ts = [u8(n * MiB) for n in (12, 14, 16)]  # three own segments
    del ts
    assert pool(nkipy)["cached_bytes"] == 42 * MiB
    # already under the target: nothing released
    assert nkipy.trim_memory_pool(42 * MiB) == 0
    assert nkipy.trim_memory_pool(1 << 62) == 0
    reserved_rt = runtime_allocated(0)
    # excess 22 MiB: no single segment covers it, the largest (16) goes; then the
    # excess is 6 MiB and the smallest covering it (12) goes; 14 MiB stay cached
    released = nkipy.trim_memory_pool(20 * MiB)
    assert released == 28 * MiB
    s = pool(nkipy)
    assert s["cached_bytes"] == 14 * MiB <= 20 * MiB
    assert reserved_rt - runtime_allocated(0) == released
    # excess 1 MiB: the one 14 MiB segment covers it
    assert nkipy.trim_memory_pool(13 * MiB) == 14 * MiB
    assert pool(nkipy)["cached_bytes"] == 0


def test_trim_prefers_the_smallest_segment_covering_the_excess(nkipy):
    ts = [u8(n * MiB) for n in (12, 30)]
    del ts
    assert pool(nkipy)["cached_bytes"] == 42 * MiB
    assert nkipy.trim_memory_pool(40 * MiB) == 12 * MiB  # not the 30 MiB one
    assert pool(nkipy)["cached_bytes"] == 30 * MiB


def test_trim_per_device_and_all_devices(nkipy):
    a, b = u8(12 * MiB, "nkipy:0"), u8(14 * MiB, "nkipy:1")
    del a, b
    assert nkipy.trim_memory_pool(0, device="nkipy:1") == 14 * MiB
    assert pool(nkipy, 1)["cached_bytes"] == 0
    assert pool(nkipy, 0)["cached_bytes"] == 12 * MiB
    c = u8(16 * MiB, "nkipy:1")
    del c
    # device None: the target bounds the cache summed over the devices
    assert nkipy.memory_pool_stats()["cached_bytes"] == 28 * MiB
    assert nkipy.trim_memory_pool(14 * MiB) == 16 * MiB  # the one covering the excess
    assert nkipy.memory_pool_stats()["cached_bytes"] == 12 * MiB
    assert pool(nkipy, 1)["cached_bytes"] == 0
    assert nkipy.trim_memory_pool() == 12 * MiB
    assert nkipy.memory_pool_stats()["total_bytes"] == 0


def test_trim_then_allocate_again(nkipy):
    a = u8(12 * MiB)
    del a
    nkipy.trim_memory_pool()
    before = pool(nkipy)
    b = u8(12 * MiB)
    d = delta(pool(nkipy), before)
    assert (d["cache_miss_count"], d["reuse_count"]) == (1, 0)
    assert b.fill_(3).cpu()[-1].item() == 3
    del b


def test_errors(nkipy):
    with pytest.raises(ValueError, match=r"trim_memory_pool: target_bytes must be >= 0, got -1"):
        nkipy.trim_memory_pool(-1)
    with pytest.raises(TypeError, match=r"trim_memory_pool: target_bytes must be an int, got "
                                        r"float"):
        nkipy.trim_memory_pool(1.5)
    with pytest.raises(TypeError, match="must be an int, got bool"):
        nkipy.trim_memory_pool(True)
    msg = r"Invalid nkipy device index 5: there are 2 nkipy device\(s\), valid indices are 0..1"
    with pytest.raises(ValueError, match=msg):
        nkipy.trim_memory_pool(0, device=5)
    with pytest.raises(ValueError, match=msg):
        nkipy.memory_pool_stats(5)
    with pytest.raises(ValueError, match="Invalid nkipy device index -1"):
        nkipy.memory_pool_stats(-1)
    with pytest.raises(ValueError, match="expected an nkipy device, got cpu"):
        nkipy.memory_pool_stats("cpu")
    with pytest.raises(TypeError, match="device must be an int"):
        nkipy.memory_pool_stats(1.0)


def test_reset_accumulated_stats_resets_counters(nkipy):
    a = u8(1000)
    assert pool(nkipy)["allocation_count"] >= 1
    torch.nkipy.reset_accumulated_memory_stats(0)
    s = pool(nkipy)
    assert (s["allocation_count"], s["reuse_count"], s["cache_hit_count"],
            s["cache_miss_count"]) == (0, 0, 0, 0)
    assert s["used_bytes"] == 1024  # current figures are kept
    del a


def test_trim_is_thread_safe(nkipy):
    errors = []
    stop = threading.Event()

    def churn(device):
        try:
            nkipy.set_device(device)
            for i in range(200):
                t = u8((i % 7 + 1) * 300 * 1024 if i % 5 else 11 * MiB)
                t.fill_(1)
                del t
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def trimmer():
        try:
            while not stop.is_set():
                nkipy.trim_memory_pool(MiB)
                nkipy.memory_pool_stats()
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    workers = [threading.Thread(target=churn, args=(d,)) for d in (0, 1, 0)]
    tr = threading.Thread(target=trimmer)
    tr.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    tr.join()
    assert not errors
    for dev in (0, 1, None):
        s = nkipy.memory_pool_stats(dev)
        check_consistent(s)
        assert s["used_bytes"] == 0
    nkipy.trim_memory_pool()
    assert nkipy.memory_pool_stats()["total_bytes"] == 0


def test_after_reset_generation():
    code = (
        "import warnings, torch, spike, spike_torch\n"
        "warnings.simplefilter('ignore')\n"
        "spike_torch.reset(); spike_torch.configure([0, 1])\n"
        "live = torch.ones(1000, device='nkipy')\n"
        "free = torch.ones(12 << 20, dtype=torch.uint8, device='nkipy'); del free\n"
        "print('BEFORE', spike_torch.memory_pool_stats()['cached_bytes'] > 0)\n"
        "spike_torch.reset()\n"
        "print('STALE', spike_torch.trim_memory_pool(), spike_torch.memory_pool_stats())\n"
        "del live\n"  # freeing memory of the closed runtime: harmless, not counted
        "x = torch.ones(1000, device='nkipy')\n"  # a new runtime comes up
        "s = spike_torch.memory_pool_stats(0)\n"
        "print('NEW', s['used_bytes'], s['allocation_count'], s['cache_miss_count'])\n"
        "del x\n"
        "print('TRIM', spike_torch.trim_memory_pool(), spike_torch.memory_pool_stats()['total_bytes'])\n"
    )
    r = run_python(code, env={"NKRT_CORE_MEMORY": "64M"})
    assert r.returncode == 0, r.stderr
    assert "BEFORE True" in r.stdout
    zeros = {k: 0 for k in KEYS}
    assert f"STALE 0 {zeros}" in r.stdout
    assert "NEW 4096 1 1" in r.stdout
    assert f"TRIM {2 * MiB} 0" in r.stdout


def test_small_device_serves_every_allocation_that_fits():
    """On a 16 MiB core a 2-9 MiB request used to fail on an empty device: the
    pool asked for its usual 20 MiB segment and had no smaller fallback."""
    r = run_python(
        "import torch, spike_torch\n"
        "for mib in range(1, 15):\n"
        "    t = torch.ones(mib * 2**20, dtype=torch.uint8, device='nkipy')\n"
        "    assert int(t.sum()) == mib * 2**20\n"
        "    del t\n"
        "    spike_torch.empty_cache()\n"
        "print('ok')\n", env={"NKRT_CORE_MEMORY": "16M"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_oom_still_raised_when_the_request_cannot_fit():
    r = run_python(
        "import torch, spike_torch\n"
        "try:\n"
        "    torch.empty(20 * 2**20, dtype=torch.uint8, device='nkipy')\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print('OOM', e)\n", env={"NKRT_CORE_MEMORY": "16M"})
    assert r.returncode == 0 and "OOM nkipy out of memory: tried to allocate 20971520 bytes" \
        in r.stdout, r.stdout + r.stderr
