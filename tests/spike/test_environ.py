"""spike.environ.env_int: integer settings from the environment, refused by name."""
from __future__ import annotations

import pytest

from spike.environ import env_int


@pytest.mark.parametrize("raw, want", [(None, 7), ("", 7), ("  ", 7), ("3", 3), (" +4 ", 4),
                                       ("-2", -2)])
def test_values_and_default(monkeypatch, raw, want):
    if raw is None:
        monkeypatch.delenv("NKIPY_TEST_INT", raising=False)
    else:
        monkeypatch.setenv("NKIPY_TEST_INT", raw)
    assert env_int("NKIPY_TEST_INT", 7) == want


@pytest.mark.parametrize("raw, message", [
    ("abc", "must be an integer, got 'abc'"), ("1.5", "must be an integer, got '1.5'"),
    ("1e3", "must be an integer"), ("٣", "must be an integer"), ("0", "must be >= 1, got '0'")])
def test_bad_values_name_the_variable(monkeypatch, raw, message):
    monkeypatch.setenv("NKIPY_TEST_INT", raw)
    with pytest.raises(ValueError, match=f"environment variable NKIPY_TEST_INT {message}"):
        env_int("NKIPY_TEST_INT", 1, minimum=1)


def test_nkipy_world_size_uses_it(monkeypatch):
    from nkipy.core.ops.collectives import get_world_size

    monkeypatch.setenv("WORLD_SIZE", "abc")
    with pytest.raises(ValueError, match="WORLD_SIZE must be an integer"):
        get_world_size()
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert get_world_size() == 4


@pytest.mark.parametrize("var, value, message", [
    ("NKRT_LOG_LEVEL", "abc", 'NKRT_LOG_LEVEL: invalid value "abc" (expected 0 errors'),
    ("NKRT_LOG_LEVEL", "99", 'NKRT_LOG_LEVEL: invalid value "99"'),
    ("NKRT_GEMM", "MKL", 'NKRT_GEMM: invalid value "MKL" (expected auto, mkl or reference'),
    ("NKRT_GEMM_LIBRARY", "/nonexistent.so", 'NKRT_GEMM_LIBRARY: "/nonexistent.so" cannot be '
                                             'used'),
    ("NEURON_RT_VISIBLE_CORES", "99999999999999999999",
     'core number "99999999999999999999" is out of range'),
])
def test_runtime_settings_are_strict(var, value, message):
    """Every runtime setting is checked when the runtime is created and a bad
    value refused naming the variable (these were accepted silently, warned
    only, or reported core 18446744073709551615)."""
    import os
    import subprocess
    import sys

    code = ("import spike\ntry:\n    spike.get_spike_singleton()\nexcept spike.NrtError as e:\n"
            "    print('REFUSED', e)\nelse:\n    print('ACCEPTED')\n")
    env = dict(os.environ, **{var: value})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120).stdout
    assert out.startswith("REFUSED") and message in out, out


def test_numeric_settings_allow_surrounding_spaces():
    import os
    import subprocess
    import sys

    env = dict(os.environ, NKRT_NUM_WORKERS=" 2 ", NKRT_LOG_LEVEL=" 1 ", NKRT_CORE_MEMORY=" 64M ")
    code = "import spike\nprint(spike.get_spike_singleton().num_workers)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.stdout.strip() == "2", out.stderr


def test_absurd_tensor_size_names_the_shape():
    import numpy as np

    import spike

    with pytest.raises(ValueError, match=r"SpikeTensor.empty: a uint8 tensor of shape "
                                         r"\(4611686018427387904, 4\) needs 18446744073709551616 "
                                         r"bytes, more than any device can address"):
        spike.SpikeTensor.empty((2 ** 62, 4), np.uint8)
