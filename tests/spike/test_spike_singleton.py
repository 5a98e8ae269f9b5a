"""configure / reset / get_spike_singleton and the objects' lifetime around them."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import spike
from spike import SpikeError, SpikeModel, SpikeTensor
from spike._spike import Spike
from spike.spike_singleton import is_active


def test_lazy_creation_and_identity(fresh_spike):
    assert not is_active()
    s = spike.get_spike_singleton()
    assert isinstance(s, Spike) and is_active()
    assert spike.get_spike_singleton() is s


def test_concurrent_first_use_creates_one_runtime(fresh_spike):
    results = []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        results.append(spike.get_spike_singleton())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r is results[0] for r in results)


def test_configure_sets_visible_cores(fresh_spike):
    spike.configure(visible_cores=[0, 1])
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "0,1"
    assert spike.get_spike_singleton().core_count == 2


def test_configure_generators_and_ranges(fresh_spike):
    spike.configure(visible_cores=range(3, 6))
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "3,4,5"
    spike.configure(visible_cores=(c for c in [7]))
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "7"
    assert spike.get_spike_singleton().core_count == 1


def test_configure_none_keeps_environment(fresh_spike, monkeypatch):
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "2-3")
    spike.configure()
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "2-3"
    assert spike.get_spike_singleton().core_count == 2


@pytest.mark.parametrize("variable, value, message", [
    ("NEURON_RT_VISIBLE_CORES", "0,0",
     'NEURON_RT_VISIBLE_CORES: invalid core list "0,0": core 0 is listed twice'),
    ("NEURON_RT_VISIBLE_CORES", "0-3,2", "core 2 is listed twice"),
    ("NKRT_NUM_WORKERS", "many",
     'NKRT_NUM_WORKERS: invalid value "many" (expected a number of threads from 1 to 1024; '
     "unset it for the CPU count)"),
    ("NKRT_NUM_WORKERS", "4x", 'NKRT_NUM_WORKERS: invalid value "4x"'),
])
def test_bad_environment_refused_by_name(fresh_spike, monkeypatch, variable, value, message):
    """The environment spike.configure would refuse ([0, 0]) is refused as
    well, and a bad NKRT_NUM_WORKERS is an error, not ignored."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(spike.NrtError, match="NRT_INVALID") as info:
        spike.get_spike_singleton()
    assert message in str(info.value)


@pytest.mark.parametrize("value, exc, match", [
    (1, TypeError, "visible_cores must be an iterable of ints"),
    ("0,1", TypeError, "visible_cores must be an iterable of ints"),
    ([0, "1"], TypeError, "visible_cores must contain ints, got str"),
    ([0, 1.0], TypeError, "visible_cores must contain ints, got float"),
    ([True], TypeError, "visible_cores must contain ints, got bool"),
    (object(), TypeError, "visible_cores must be an iterable"),
    ([0, -1], ValueError, "visible_cores must be non-negative, got -1"),
    ([], ValueError, "at least one core"),
    ([1, 1], ValueError, "must not repeat"),
])
def test_configure_bad_cores(fresh_spike, value, exc, match):
    with pytest.raises(exc, match=match):
        spike.configure(visible_cores=value)


@pytest.mark.parametrize("kwargs, exc", [
    ({"core_memory_bytes": 0}, ValueError),
    ({"core_memory_bytes": -1}, ValueError),
    ({"core_memory_bytes": "1G"}, TypeError),
    ({"num_workers": 0}, ValueError),
    ({"num_workers": 2.0}, TypeError),
])
def test_configure_bad_options(fresh_spike, kwargs, exc):
    with pytest.raises(exc):
        spike.configure(**kwargs)


def test_configure_after_first_use(fresh_spike):
    spike.get_spike_singleton()
    with pytest.raises(RuntimeError, match="before the runtime is first used.*reset"):
        spike.configure(visible_cores=[0])


def test_configure_options_reach_runtime(fresh_spike):
    spike.configure(visible_cores=[4], core_memory_bytes=16 << 20, num_workers=1)
    s = spike.get_spike_singleton()
    assert (s.core_count, s.core_memory_bytes, s.num_workers) == (1, 16 << 20, 1)


def test_reset_warns_and_allows_reconfigure(fresh_spike):
    spike.configure(visible_cores=[0])
    first = spike.get_spike_singleton()
    with pytest.warns(UserWarning, match="runtime was closed"):
        spike.reset()
    assert first.closed and not is_active()
    spike.configure(visible_cores=[2, 3])
    second = spike.get_spike_singleton()
    assert second is not first and second.core_count == 2


def test_reset_without_runtime_is_silent(fresh_spike, recwarn):
    spike.reset()
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]


def test_objects_after_reset(fresh_spike, neff):
    model = SpikeModel.load_from_neff(neff("add"))
    a = SpikeTensor.from_numpy(np.ones((64, 33), np.float32), name="a")
    with pytest.warns(UserWarning):
        spike.reset()
    with pytest.raises(SpikeError, match="Tensor 'a' belongs to a runtime that is closed"):
        a.numpy()
    with pytest.raises(SpikeError, match="closed"):
        a.write_from_numpy(np.ones((64, 33), np.float32))
    with pytest.raises(SpikeError, match="Model 'add' belongs to a runtime that is closed"):
        model({"a": a, "b": a})
    with pytest.raises(SpikeError, match="closed"):
        model.benchmark({"a": a, "b": a})
    # using stale objects does not bring up a new runtime
    assert not is_active()
    spike.configure(visible_cores=[0])  # still possible
    fresh = SpikeTensor.from_numpy(np.ones(2, np.float32))
    with pytest.raises(SpikeError, match="closed"):
        model({"a": fresh, "b": fresh})
    del model, a  # destructors after reset are no-ops


def test_singleton_blocks_second_low_level_spike(fresh_spike):
    spike.get_spike_singleton()
    with pytest.raises(SpikeError, match="already active"):
        Spike()
