"""The compile progress line (torch_to_nkipy.progress): redrawn on a terminal after
the delay, a start and an end line on a pipe, nothing when switched off."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import sys
import time
import types

import pytest

from torch_to_nkipy import progress


@pytest.fixture
def fast(monkeypatch):
    """No delay, quick redraws and a short idle end; no session left behind."""
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "TICK_S", 0.02)
    monkeypatch.setattr(progress, "IDLE_END_S", 0.15)
    monkeypatch.delenv(progress.ENV, raising=False)
    progress._reset_for_tests()
    progress.set_enabled(None)
    yield
    progress._reset_for_tests()
    progress.set_enabled(None)


def _pty_stderr(monkeypatch):
    """Standard error replaced by the slave side of a new pseudo-terminal; returns
    the master's fd (non-blocking) to read what was shown."""
    master, slave = pty.openpty()
    fl = fcntl.fcntl(master, fcntl.F_GETFL)
    fcntl.fcntl(master, fcntl.F_SETFL, fl | os.O_NONBLOCK)
    term = os.fdopen(slave, "w")
    assert term.isatty()
    monkeypatch.setattr(sys, "stderr", term)
    return master, term


def _read(fd: int) -> str:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def _wait_closed(limit_s: float = 20.0) -> None:
    deadline = time.monotonic() + limit_s
    while progress._session is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert progress._session is None, "the progress session did not end"


def _fake_kernel(seconds: float, compiled_now: bool = True):
    return types.SimpleNamespace(
        compiled_now=compiled_now,
        device_kernel=types.SimpleNamespace(compiled=types.SimpleNamespace(
            compile_seconds=seconds)))


def _compile_two(work_s: float = 0.15) -> None:
    g1, g2 = object(), object()
    with progress.tracing():
        progress.graph_created(g1)
        progress.graph_created(g2)
        time.sleep(work_s)
    with progress.building(g1, "compiling forward.fused_0") as b:
        time.sleep(work_s)
        b.built(_fake_kernel(1.25))
    with progress.building(g2, "compiling forward.fused_1") as b:
        time.sleep(work_s)
        b.built(_fake_kernel(0.0, compiled_now=False))


def test_progress_shown_on_a_terminal(fast, monkeypatch):
    master, term = _pty_stderr(monkeypatch)
    try:
        _compile_two()
        # nothing left to build: the line ended with the last build, not later
        assert progress._session is None
        out = _read(master)
    finally:
        term.close()
        os.close(master)
    assert re.search(r"nkipy: compiling forward\.fused_0 \(\d+\.\d s\): 0 kernels done, "
                     r"2 left; C compile 0\.0 s; ", out), out
    assert "1 kernel done, 1 left" in out, out
    # the final line: both kernels, the C compile time of the one compiled, a newline
    assert "nkipy: compiled: 2 kernels done (1 from the cache or shared); C compile 1.2 s" \
        in out, out
    assert out.rstrip(" \r").endswith("\n") or out.endswith("\r\n"), repr(out[-40:])


def test_progress_waits_for_the_delay(fast, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 60.0)
    master, term = _pty_stderr(monkeypatch)
    try:
        _compile_two(0.05)
        _wait_closed()
        out = _read(master)
    finally:
        term.close()
        os.close(master)
    assert out == ""   # a compile shorter than the delay shows nothing


def _on_a_pipe(monkeypatch, work_s: float) -> str:
    r, w = os.pipe()
    pipe = os.fdopen(w, "w")
    monkeypatch.setattr(sys, "stderr", pipe)
    try:
        _compile_two(work_s)
        _wait_closed()
        pipe.flush()
    finally:
        pipe.close()
    with os.fdopen(r) as f:
        return f.read()


def test_progress_on_a_pipe_a_start_and_an_end_line(fast, monkeypatch):
    """A log (not a terminal): no redraws, one line once the delay has passed
    and the summary at the end."""
    out = _on_a_pipe(monkeypatch, 0.15)
    assert "\r" not in out and "\x1b" not in out, repr(out)
    lines = out.splitlines()
    assert len(lines) == 2, lines
    assert re.match(r"nkipy: (compiling|tracing).*\d+ left; C compile", lines[0]), lines
    assert lines[1].startswith("nkipy: compiled: 2 kernels done (1 from the cache or shared)"), lines


def test_progress_on_a_pipe_nothing_before_the_delay(fast, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 60.0)
    assert _on_a_pipe(monkeypatch, 0.05) == ""   # a short compile says nothing


@pytest.mark.parametrize("how", ["env", "api"])
def test_progress_off_switch(fast, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv(progress.ENV, "0")
    else:
        progress.set_enabled(False)
    assert progress.enabled() is False
    master, term = _pty_stderr(monkeypatch)
    try:
        _compile_two(0.05)
        _wait_closed()
        out = _read(master)
    finally:
        term.close()
        os.close(master)
    assert out == ""


def test_progress_env_values(fast, monkeypatch):
    for value, on in (("1", True), ("auto", True), ("AUTO", True), ("0", False)):
        monkeypatch.setenv(progress.ENV, value)
        assert progress.enabled() is on
    monkeypatch.setenv(progress.ENV, "yes")
    with pytest.raises(ValueError, match=r"NKIPY_PROGRESS='yes' is not valid: use 0"):
        progress.enabled()
    with pytest.raises(TypeError, match="set_enabled takes True, False or None, not str"):
        progress.set_enabled("off")


def test_progress_of_a_real_compile(fast, backend, monkeypatch):
    """torch.compile through the backend: the hooks report the real kernel."""
    import torch

    master, term = _pty_stderr(monkeypatch)
    try:
        f = torch.compile(lambda x: torch.tanh(x) * 2.0 + 1.0, backend="nkipy", dynamic=False)
        x = torch.randn(3, 5)
        torch.testing.assert_close(f(x), torch.tanh(x) * 2.0 + 1.0)
        _wait_closed()
        out = _read(master)
    finally:
        term.close()
        os.close(master)
    assert "nkipy: compiled: 1 kernel done" in out, out
