"""Progress of a long compile, on a terminal.

When compiling takes longer than :data:`DELAY_S` (2 s), one line on standard
error, redrawn in place a few times a second, says what is happening::

    nkipy: compiling forward.fused_3 (1.2 s): 3 kernels done, 5 left; C compile 2.4 s; 6.1 s

*done* counts kernels built (compiled, or loaded from the cache) since the compile
began, *left* the compiled graphs created meanwhile whose kernel is not built yet
(graphs compile lazily, on their first call), *C compile* the time nkipy spent
turning kernels into NEFFs (its IR passes, C generation and the C compiler). The
line is finished with a summary when no kernel build follows within
:data:`IDLE_END_S` (at once when no compiled graph is left to build).
When standard error is not a terminal (a pipe, a file, a CI log) nothing is
redrawn: a compile longer than the delay writes one line when it passes the
delay and one (the summary) when it ends, so a log never sits silent through a
long compile. Nothing at all is shown with ``NKIPY_PROGRESS=0`` or
:func:`set_enabled(False) <set_enabled>`.

This is the one place in the backend that writes to the terminal; everything
else reports through :mod:`logging`.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any, Iterator, Optional, Set

#: The environment variable: "0" turns the display off; "1" or "auto" (or unset)
#: shows it (redrawn on a terminal, a start and an end line elsewhere).
ENV = "NKIPY_PROGRESS"
#: Seconds a compile must run before anything is shown.
DELAY_S = 2.0
#: A compile is over when no kernel build follows the last one within this many seconds.
IDLE_END_S = 0.5
#: Seconds between redraws.
TICK_S = 0.2

_ON_VALUES = {"1": True, "auto": True, "": True, "0": False}

_lock = threading.Lock()
_enabled: Optional[bool] = None     # set_enabled(); None: the environment decides


def set_enabled(enabled: Optional[bool]) -> None:
    """Turns the progress display off (False) or back on (True: on a terminal);
    None returns the choice to ``NKIPY_PROGRESS``."""
    global _enabled
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_enabled takes True, False or None, not {type(enabled).__name__}")
    _enabled = enabled


def enabled() -> bool:
    """Whether the display may be shown (by :func:`set_enabled`, else ``NKIPY_PROGRESS``).

    Raises ValueError for a value of ``NKIPY_PROGRESS`` other than 0, 1 or auto."""
    if _enabled is not None:
        return _enabled
    raw = os.environ.get(ENV, "")
    value = _ON_VALUES.get(raw.strip().lower())
    if value is None:
        raise ValueError(f"{ENV}={raw!r} is not valid: use 0 (no compile progress), "
                         f"1 or auto (progress on a terminal)")
    return value


class _Session:
    """One compile: from the first build (or trace) until the builds stop."""

    def __init__(self, stream: Any, plain: bool = False) -> None:
        self.stream = stream          # standard error, or None: count but show nothing
        self.plain = plain            # not a terminal: whole lines, never redrawn
        self.start = time.monotonic()
        self.pending: Set[int] = set()
        self.done = 0
        self.cached = 0
        self.c_seconds = 0.0
        self.active: dict = {}        # id -> what is being done now
        self.last_end = self.start
        self.shown = False
        self.closed = False

    def line(self, now: float, final: bool = False) -> str:
        what = next(iter(self.active.values()), None)
        if final:
            head = "nkipy: compiled: "
        elif what:
            head = f"nkipy: {what[0]} ({now - what[1]:.1f} s): "
        else:
            head = "nkipy: compiling: "
        text = f"{head}{self.done} kernel{'s' if self.done != 1 else ''} done"
        if not final:
            text += f", {len(self.pending)} left"
        if self.cached:
            text += f" ({self.cached} from the cache or shared)"
        return text + f"; C compile {self.c_seconds:.1f} s; {now - self.start:.1f} s"

    def draw(self, now: float, final: bool = False) -> None:
        if self.stream is None or (self.plain and self.shown and not final):
            return
        try:
            if self.plain:   # a log: the start line once, then the summary
                self.stream.write(self.line(now, final) + "\n")
            else:
                self.stream.write("\r" + self.line(now, final) + "\x1b[K" + ("\n" if final else ""))
            self.stream.flush()
        except (OSError, ValueError):   # the terminal went away: stop showing
            self.stream = None
            return
        self.shown = True


_session: Optional[_Session] = None


def _stderr() -> Any:
    """(standard error, whether it is not a terminal) when the display is on;
    (None, False) when it is off or there is no standard error."""
    if not enabled():
        return None, False
    err = sys.stderr
    if err is None:
        return None, False
    try:
        return err, not err.isatty()
    except (AttributeError, ValueError, OSError):
        return err, True


def _ticker(s: _Session) -> None:
    while True:
        time.sleep(TICK_S)
        with _lock:
            if s.closed:
                return
            now = time.monotonic()
            if not s.active and now - s.last_end >= IDLE_END_S:
                _close(s, now)
                return
            if now - s.start >= DELAY_S:
                s.draw(now)


def _close(s: _Session, now: float) -> None:
    """Ends the session (under _lock): a final line if anything was shown."""
    global _session
    s.closed = True
    if s.shown:
        s.draw(now, final=True)
    if _session is s:
        _session = None


def _open() -> _Session:
    """The current session, opened if none is (under _lock)."""
    global _session
    s = _session
    if s is None or s.closed:
        s = _session = _Session(*_stderr())
        if s.stream is not None:
            threading.Thread(target=_ticker, args=(s,), name="nkipy-progress",
                             daemon=True).start()
    return s


def graph_created(graph: Any) -> None:
    """A compiled graph whose kernel will be built on its first call (counted as left)."""
    with _lock:
        if _session is not None and not _session.closed:
            _session.pending.add(id(graph))


@contextlib.contextmanager
def building(graph: Any, what: str) -> Iterator["_Build"]:
    """Around the build of one kernel of ``graph``; ``what`` names it on the line.

    The caller reports the built kernel with ``b.built(kernel)``."""
    with _lock:
        s = _open()
        token = object()
        s.active[id(token)] = (what, time.monotonic())
    b = _Build(s, graph)
    try:
        yield b
    finally:
        with _lock:
            s.active.pop(id(token), None)
            s.pending.discard(id(graph))
            s.last_end = time.monotonic()
            if not s.active and (s.stream is None or not s.pending):
                # nothing left to build (or nothing shown): the line ends now, before
                # the caller prints anything; else the ticker ends it when idle
                _close(s, s.last_end)


@contextlib.contextmanager
def tracing(what: str = "tracing the graph") -> Iterator[None]:
    """Around the backend's own work before kernels are built (AOTAutograd)."""
    with _lock:
        s = _open()
        token = object()
        s.active[id(token)] = (what, time.monotonic())
    try:
        yield
    finally:
        with _lock:
            s.active.pop(id(token), None)
            s.last_end = time.monotonic()
            if s.stream is None and not s.active:
                _close(s, s.last_end)


class _Build:
    def __init__(self, session: _Session, graph: Any) -> None:
        self.session = session
        self.graph = graph

    def built(self, kernel: Any, new: bool = True) -> None:
        """Counts ``kernel`` (an NKIPyKernel) as done, with its C compile time when
        it is ``new`` (not one shared with another graph) and was compiled now."""
        with _lock:
            s = self.session
            s.done += 1
            if not new:
                s.cached += 1
            elif getattr(kernel, "compiled_now", False):
                compiled = getattr(getattr(kernel, "device_kernel", None), "compiled", None)
                s.c_seconds += float(getattr(compiled, "compile_seconds", 0.0) or 0.0)
            else:
                s.cached += 1


def _reset_for_tests() -> None:
    """Forgets the current session (tests only)."""
    global _session
    with _lock:
        if _session is not None:
            _session.closed = True
        _session = None
