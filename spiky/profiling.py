"""Execution profiles (``save_ntff``): one trace file per selected execution.

A profile records, on the runtime's monotonic clock, what the runtime did
during one call of a compiled function (kernel executions, host-to-device and
device-to-host copies, pitched pad/unpad copies and memsets, per core) and the
host-side phases the engine marks (compile, pad, execute, unpad). ``save``
writes Chrome Trace Event JSON, which https://ui.perfetto.dev opens: one
process per device core plus one for the host.

The original wrote Neuron NTFF files here; the name ``.ntff`` and the layout
``<save_ntff_dir>/kernel_<hash>/<exe_idx>.ntff`` (NEFF copied beside it as
``file.neff``) are kept so scripts that look for them work.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from spike.safe_files import write_atomic


class ExecutionProfile:
    """Records one execution; use as a context manager around the call."""

    def __init__(self, core_id: Optional[int] = None) -> None:
        import spike

        self._session = spike.SystemTraceSession(spike.get_spike_singleton(), core_id)
        self.spans: List[Tuple[str, int, int, Dict[str, Any]]] = []

    def __enter__(self) -> "ExecutionProfile":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self._session.stop()
        return False

    def span(self, name: str, start_ns: int, end_ns: int, **args: Any) -> None:
        """Adds a host-side phase ``[start_ns, end_ns]`` (time.monotonic_ns clock)."""
        self.spans.append((name, start_ns, end_ns, args))

    def chrome_events(self) -> List[Dict[str, Any]]:
        """The profile as Chrome Trace Event dicts (timestamps in microseconds)."""
        self._session.stop()
        events: List[Dict[str, Any]] = []
        opened: Dict[Tuple[int, str], Dict[str, Any]] = {}
        cores = set()
        for e in self._session.drain_events():
            key = (e["tracking_id"], e["event_type"])
            ts = e["data"]["nc_timestamp_ns"] / 1e3
            if e["phase"] == "start":
                opened[key] = {"ts": ts, "event": e}
                continue
            start = opened.pop(key, None)
            if start is None:
                continue
            core = int(e.get("nc_idx", 0))
            cores.add(core)
            args = {k: v for k, v in e.get("data", {}).items() if k != "nc_timestamp_ns"}
            events.append({"name": f"{e['event_type']} {e.get('name', '')}".strip(),
                           "cat": e["event_type"], "ph": "X", "ts": start["ts"],
                           "dur": max(ts - start["ts"], 0.001), "pid": 1 + core, "tid": 1,
                           "args": args})
        for name, s, t, args in self.spans:
            events.append({"name": name, "cat": "host", "ph": "X", "ts": s / 1e3,
                           "dur": max((t - s) / 1e3, 0.001), "pid": 0, "tid": 1, "args": args})
        meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "host (spiky)"}}]
        meta += [{"name": "process_name", "ph": "M", "pid": 1 + c,
                  "args": {"name": f"nkipy core {c}"}} for c in sorted(cores)]
        return meta + sorted(events, key=lambda ev: ev["ts"])

    def save(self, path: str, neff_path: Optional[str] = None) -> str:
        """Writes the trace to ``path`` (directories created; NEFF copied beside it
        as ``file.neff`` once). Returns the path."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        doc = {"traceEvents": self.chrome_events(), "displayTimeUnit": "ns",
               "otherData": {"producer": "spiky", "clock": "CLOCK_MONOTONIC"}}
        write_atomic(path, json.dumps(doc))
        if neff_path:
            dst = os.path.join(os.path.dirname(os.path.abspath(path)), "file.neff")
            if not os.path.lexists(dst):
                with open(neff_path, "rb") as f:
                    write_atomic(dst, f.read())
        return path


def now_ns() -> int:
    """The clock profiles use (the runtime traces on CLOCK_MONOTONIC too)."""
    return time.monotonic_ns()


def ntff_path(save_dir: str, kernel_hash: str, exe_idx: int) -> str:
    """``<save_dir>/kernel_<hash>/<exe_idx>.ntff``."""
    return os.path.join(save_dir, f"kernel_{kernel_hash}", f"{exe_idx}.ntff")
