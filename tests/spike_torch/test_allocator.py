"""The caching allocator: reuse, best fit with splitting, empty_cache, stats, OOM."""
from __future__ import annotations

import gc

import pytest
import torch

from spike_torch_helpers import CORE_MEMORY

MiB = 1 << 20


@pytest.fixture(autouse=True)
def clean(nkipy):
    # the tests count every live allocation: device tensors held by reference
    # cycles of earlier tests in this process (a failed call's traceback) go first
    gc.collect()
    nkipy.empty_cache()
    yield
    nkipy.empty_cache()


def stats(dev=0):
    return torch.nkipy.memory_stats(dev)


@pytest.mark.parametrize("n", [0, 1, 7, 512, 513, 4096, MiB, MiB + 1, 3 * MiB, 12 * MiB])
def test_alloc_sizes(nkipy, n):
    t = torch.empty(n, dtype=torch.uint8, device="nkipy")
    assert t.numel() == n
    if n:
        assert t.data_ptr() != 0
        base, size, core = nkipy.get_tensor_info(t)
        assert base <= t.data_ptr() < base + size and core == 0
        assert torch.nkipy.memory_allocated() >= n


def test_reuse_after_free(nkipy):
    t = torch.empty(1000, device="nkipy")
    ptr = t.data_ptr()
    del t
    assert nkipy.get_cached_blocks() >= 1
    u = torch.empty(1000, device="nkipy")
    assert u.data_ptr() == ptr


def test_best_fit_splits_blocks(nkipy):
    big = torch.empty(256 * 1024, dtype=torch.uint8, device="nkipy")
    before = stats()["num_device_alloc"]
    ptr = big.data_ptr()
    del big
    # a smaller request is served from the freed block (not an exact size match)
    small = torch.empty(10 * 1024, dtype=torch.uint8, device="nkipy")
    assert small.data_ptr() == ptr
    other = torch.empty(10 * 1024, dtype=torch.uint8, device="nkipy")
    assert stats()["num_device_alloc"] == before
    assert other.data_ptr() != small.data_ptr()
    s = stats()
    assert s["inactive_split.all.current"] >= 1


def test_large_pool_best_fit(nkipy):
    a = torch.empty(30 * MiB, dtype=torch.uint8, device="nkipy")
    ptr = a.data_ptr()
    del a
    before = stats()["num_device_alloc"]
    b = torch.empty(12 * MiB, dtype=torch.uint8, device="nkipy")
    assert b.data_ptr() == ptr
    c = torch.empty(12 * MiB, dtype=torch.uint8, device="nkipy")
    assert stats()["num_device_alloc"] == before
    assert c.data_ptr() == ptr + 12 * MiB


def test_free_blocks_merge(nkipy):
    a = torch.empty(100 * 1024, dtype=torch.uint8, device="nkipy")
    b = torch.empty(100 * 1024, dtype=torch.uint8, device="nkipy")
    pa = a.data_ptr()
    del a, b
    c = torch.empty(200 * 1024, dtype=torch.uint8, device="nkipy")
    assert c.data_ptr() == pa


def test_empty_cache_returns_memory(nkipy):
    ts = [torch.empty(MiB, dtype=torch.uint8, device="nkipy") for _ in range(4)]
    assert torch.nkipy.memory_reserved() > 0
    del ts
    assert nkipy.get_cached_blocks() > 0
    assert torch.nkipy.memory_allocated() == 0
    nkipy.empty_cache()
    assert nkipy.get_cached_blocks() == 0
    assert torch.nkipy.memory_reserved() == 0
    s = stats()
    assert s["num_device_free"] >= 1
    assert s["segment.all.current"] == 0


def test_stats_keys_and_peaks(nkipy):
    torch.nkipy.reset_peak_memory_stats()
    a = torch.empty(MiB // 4, device="nkipy")  # 1 MiB
    peak = torch.nkipy.max_memory_allocated()
    assert peak >= MiB
    del a
    assert torch.nkipy.memory_allocated() == 0
    assert torch.nkipy.max_memory_allocated() == peak
    torch.nkipy.reset_peak_memory_stats()
    assert torch.nkipy.max_memory_allocated() == 0
    s = stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                "allocated_bytes.all.allocated", "allocated_bytes.all.freed",
                "reserved_bytes.all.current", "active_bytes.all.current",
                "requested_bytes.all.current", "allocation.all.current", "segment.all.current",
                "num_alloc_retries", "num_ooms", "inactive_split_bytes.all.current"):
        assert key in s
    assert torch.nkipy.max_memory_reserved() >= torch.nkipy.memory_reserved()
    torch.nkipy.reset_accumulated_memory_stats()
    assert stats()["allocated_bytes.all.allocated"] == 0


def test_requested_bytes(nkipy):
    before = stats()["requested_bytes.all.current"]
    a = torch.empty(1001, dtype=torch.uint8, device="nkipy")
    assert stats()["requested_bytes.all.current"] - before == 1001
    assert stats()["allocated_bytes.all.current"] % 512 == 0
    del a


def test_per_device_stats(nkipy):
    a = torch.empty(MiB, dtype=torch.uint8, device="nkipy:1")
    assert torch.nkipy.memory_allocated(1) >= MiB
    assert torch.nkipy.memory_allocated(0) == 0
    assert nkipy.get_tensor_info(a)[2] == 1
    del a


def test_oom_frees_cache_and_raises(nkipy):
    # fill the cache with freed blocks, then ask for more than fits with them
    held = torch.empty(CORE_MEMORY // 2, dtype=torch.uint8, device="nkipy")
    del held
    assert torch.nkipy.memory_reserved() >= CORE_MEMORY // 2
    # served after the retry frees the cached (split-unfit) segment
    big = torch.empty(CORE_MEMORY // 2 + 8 * MiB, dtype=torch.uint8, device="nkipy")
    assert stats()["num_alloc_retries"] >= 1
    with pytest.raises(torch.OutOfMemoryError, match=r"nkipy out of memory: tried to allocate "
                       r"\d+ bytes .* on nkipy:0\. Device capacity \d+ bytes"):
        torch.empty(CORE_MEMORY, dtype=torch.uint8, device="nkipy")
    assert stats()["num_ooms"] >= 1
    del big
    # still usable afterwards
    assert torch.ones(4, device="nkipy").cpu().sum().item() == 4


def test_oom_is_runtime_error(nkipy):
    with pytest.raises(RuntimeError, match="out of memory"):
        torch.empty(2 * CORE_MEMORY, dtype=torch.uint8, device="nkipy:1")


def test_get_nrt_tensor(nkipy):
    import spike

    x = torch.arange(10, dtype=torch.float32).nkipy()
    t = nkipy.get_nrt_tensor(x[2:])
    assert t.size == 32 and t.core_id == 0
    data = spike.get_spike_singleton().tensor_read(t)
    assert torch.equal(torch.frombuffer(bytearray(data), dtype=torch.float32),
                       torch.arange(2, 10, dtype=torch.float32))
    with pytest.raises(ValueError, match="nkipy device"):
        nkipy.get_nrt_tensor(torch.ones(2))
    with pytest.raises(TypeError):
        nkipy.get_tensor_info("x")


def test_get_tensor_info_by_address(nkipy):
    import spike

    x = torch.empty(100, device="nkipy")
    base, size, core = nkipy.get_tensor_info(x.data_ptr() + 40)
    assert base <= x.data_ptr() and size >= 400 and core == 0
    with pytest.raises(spike.NrtError):
        nkipy.get_tensor_info(16)
