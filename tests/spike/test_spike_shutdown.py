"""Interpreter exit with live tensors, models and sessions: exit status 0 and
no error output, whatever the order things are left in."""
from __future__ import annotations

import textwrap

import pytest

from spike_helpers import run_python

SCENARIOS = {
    "singleton_live_objects": """
        import numpy as np, spike
        from spike import SpikeModel, SpikeTensor
        model = SpikeModel.load_from_neff(NEFF)
        a = SpikeTensor.from_numpy(np.ones((64, 33), np.float32))
        out = model({"a": a, "b": a})
        session = spike.SystemTraceSession()
        keep = [model, a, out, session]
        print("done")
    """,
    "low_level_spike_deleted_first": """
        from spike._spike import Spike
        s = Spike()
        t = s.allocate_tensor(1024, name="t")
        sl = s.slice_from_tensor(t, 16, 16)
        m = s.load_model(NEFF)
        del s
        print("done")
    """,
    "low_level_never_closed": """
        from spike._spike import Spike, SystemTraceSession
        s = Spike()
        t = s.allocate_tensor(64)
        m = s.load_model(NEFF)
        session = SystemTraceSession(s)
        print("done")
    """,
    "reference_cycle": """
        from spike._spike import Spike
        s = Spike()
        class Holder: pass
        h = Holder()
        h.me = h
        h.tensor = s.allocate_tensor(64)
        h.model = s.load_model(NEFF)
        h.spike = s
        del h, s
        print("done")
    """,
    "after_reset": """
        import warnings, numpy as np, spike
        warnings.simplefilter("ignore")
        t = spike.SpikeTensor.from_numpy(np.zeros(4, np.float32))
        m = spike.SpikeModel.load_from_neff(NEFF)
        spike.reset()
        t2 = spike.SpikeTensor.from_numpy(np.zeros(4, np.float32))
        print("done")
    """,
    "daemon_thread_executing": """
        import threading, numpy as np, spike
        from spike import SpikeModel, SpikeTensor
        model = SpikeModel.load_from_neff(NEFF)
        a = SpikeTensor.from_numpy(np.ones((64, 33), np.float32))
        out = {"output0": SpikeTensor.from_numpy(np.zeros((64, 33), np.float32))}
        started = threading.Event()
        def loop():
            started.set()
            try:
                while True:
                    model({"a": a, "b": a}, out)
            except spike.SpikeError:
                pass
        threading.Thread(target=loop, daemon=True).start()
        started.wait()
        print("done")
    """,
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_clean_exit(name, neff):
    code = f"NEFF = {neff('add')!r}\n" + textwrap.dedent(SCENARIOS[name])
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    assert result.stderr == ""
