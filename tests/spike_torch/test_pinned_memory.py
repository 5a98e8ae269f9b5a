"""Pinned host memory for the nkipy device (spike_torch/csrc/pinned_memory.cpp):
pin_memory()/is_pinned(), DataLoader(pin_memory=True), non_blocking copies to
the device queued on the core, and the allocator never reusing a block that a
copy still reads; synchronizing a stream, an event or the device waits for
those copies."""
from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from spike_torch import _C

N = 4 << 20          # 16 MiB of float32: a copy long enough to be in flight


def test_pin_memory_and_is_pinned():
    x = torch.randn(1000)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x) and p.data_ptr() % 4096 == 0
    assert p[10:].is_pinned()                           # a view inside the block
    assert torch.empty(8, pin_memory=True).is_pinned()
    assert not torch.empty(8).is_pinned()
    dl = DataLoader(TensorDataset(torch.randn(8, 4), torch.arange(8)), batch_size=4,
                    pin_memory=True)
    for xb, yb in dl:
        assert xb.is_pinned() and yb.is_pinned()


def test_non_blocking_copies_from_pinned_memory_arrive():
    x = torch.randn(N).pin_memory()
    want = x.clone()
    d = x.to("nkipy", non_blocking=True)
    assert torch.equal((d * 2).cpu(), want * 2)               # device work is ordered after it
    torch.nkipy.synchronize()
    assert torch.equal(d.cpu(), want)
    # into an existing tensor, and ordered with events as on CUDA
    out = torch.empty(N, device="nkipy")
    ev = torch.nkipy.Event()
    out.copy_(x, non_blocking=True)
    ev.record()
    ev.synchronize()
    assert ev.query() and torch.nkipy.current_stream().query()
    assert torch.equal(out.cpu(), want)
    # pageable memory: non_blocking is accepted and the copy is done on return
    y = torch.randn(100)
    assert torch.equal(y.to("nkipy", non_blocking=True).cpu(), y)


def test_a_block_a_copy_reads_is_not_reused_before_it_is_done():
    """Freeing the pinned source right after a non_blocking copy: the next
    pinned allocation of that size must not be that block while the copy reads
    it; the device gets the original values whatever is written next."""
    torch.nkipy.synchronize()
    for _ in range(5):
        x = torch.full((N,), 3.0).pin_memory()
        ptr = x.data_ptr()
        d = x.to("nkipy", non_blocking=True)
        del x
        pending = _C.pinned_stats()["pending_blocks"]
        y = torch.empty(N, pin_memory=True)
        if pending:
            assert y.data_ptr() != ptr                      # the block was still being read
        y.fill_(-1.0)
        assert torch.equal(d.cpu(), torch.full((N,), 3.0))
        del y
    torch.nkipy.synchronize()
    assert _C.pinned_stats()["pending_blocks"] == 0


def test_freed_blocks_are_cached_and_released():
    torch.nkipy.synchronize()
    x = torch.empty(5000, pin_memory=True)     # 20000 bytes: a 32 KiB block
    ptr = x.data_ptr()
    before = _C.pinned_stats()
    del x
    after = _C.pinned_stats()
    assert after["live_bytes"] == before["live_bytes"] - 32768
    assert after["cached_bytes"] >= 32768
    assert torch.empty(8000, pin_memory=True).data_ptr() == ptr       # same size class
    _C.lib.spike_torch_pinned_empty_cache()
    assert _C.pinned_stats()["cached_bytes"] == 0


def test_a_block_freed_while_another_thread_synchronizes_is_not_reused():
    """synchronize() waits on references of its own and leaves the copies in
    their blocks: a source freed by another thread meanwhile still waits for
    its copy before the allocator hands it out again (it went straight back to
    the cache, and the copy read the next user's bytes: a reviewer's find)."""
    import threading
    import time

    for _ in range(4):
        _C.lib.spike_torch_pinned_empty_cache()
        holder = {"p": torch.full((N,), 1.0).pin_memory()}
        src = holder["p"].data_ptr()
        go, out = threading.Event(), {}

        def other_thread():
            go.wait()
            time.sleep(0.002)
            del holder["p"]                              # the user is done with it
            out["busy"] = not torch.nkipy.current_stream().query()
            q = torch.empty(N, pin_memory=True)
            out["reused"] = q.data_ptr() == src
            q.fill_(7.0)
            out["q"] = q

        t = threading.Thread(target=other_thread)
        t.start()
        d = holder["p"].to("nkipy", non_blocking=True)
        go.set()
        torch.nkipy.synchronize()
        t.join()
        assert torch.equal(d.cpu(), torch.full((N,), 1.0))
        if out["reused"]:
            assert not out["busy"]       # only once the copy was done
