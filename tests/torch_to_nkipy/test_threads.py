"""Compiled functions called from other threads while one thread compiles (or
otherwise traces with torch.fx): Dynamo asks whether FX symbolic tracing is
active, a process-wide flag that AOTAutograd sets while it traces; calls from 8
threads failed with "Detected that you are using FX to symbolically trace a
dynamo-optimized function" whenever another thread recompiled."""
from __future__ import annotations

import threading

import pytest
import torch
import torch.fx

from torch_to_nkipy import threads


def test_a_call_while_another_thread_traces(backend):
    c = torch.compile(lambda x: x * 2 + 1, backend="nkipy")
    x = torch.arange(4.0)
    assert torch.equal(c(x), x * 2 + 1)
    inside, release = threading.Event(), threading.Event()

    def slow(t):
        inside.set()                 # the flag is set from here ...
        release.wait(30)             # ... until this trace ends
        return t + 1

    tracer = threading.Thread(target=lambda: torch.fx.symbolic_trace(slow))
    tracer.start()
    try:
        assert inside.wait(30)
        assert torch.fx._symbolic_trace._is_fx_tracing_flag       # another thread traces
        assert not threads.tracing_here()
        assert torch.equal(c(x), x * 2 + 1)                       # this thread still runs it
    finally:
        release.set()
        tracer.join(30)


def test_tracing_a_compiled_function_in_this_thread_still_fails(backend):
    c = torch.compile(lambda x: x * 2 + 1, backend="nkipy")
    c(torch.arange(3.0))
    with pytest.raises(RuntimeError, match="symbolically trace a dynamo-optimized function"):
        torch.fx.symbolic_trace(lambda x: c(x))
    assert not threads.tracing_here()


def test_many_threads_with_recompiles(backend):
    """8 threads calling a module compiled with dynamic batches while new sizes
    keep compiling: every call returns eager's result."""
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    c = torch.compile(m, backend="nkipy")
    errors, wrong = [], []

    def worker(k):
        for i in range(12):
            x = torch.randn(1 + (k * 12 + i) % 40, 8)
            try:
                with torch.no_grad():
                    if not torch.allclose(c(x), m(x), atol=1e-5):
                        wrong.append(x.shape)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e)[:200])

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    assert not errors and not wrong, (errors[:3], wrong[:3])
