"""Shared fixtures of the spike tests.

Test NEFFs are the C kernels of runtime/tests/kernels, built by
``make test-py`` into $NKRT_TEST_NEFF_DIR (default build/neff); one that is
missing there is compiled on the fly. ``compile_neff`` builds a NEFF from a
C source string for custom cases. Helpers live in spike_helpers.py.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional

import pytest

import spike
from spike import spike_singleton
from spike._spike import Spike
from spike_helpers import ENV_KEYS, KERNEL_DIR, NEFF_DIR, build_neff, quiet_reset


@pytest.fixture(scope="session")
def neff(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """neff("add") -> path of the add test NEFF (built if missing)."""
    built: Dict[str, str] = {}

    def get(name: str) -> str:
        if name not in built:
            path = NEFF_DIR / f"{name}.neff"
            if not path.is_file():
                out_dir = tmp_path_factory.mktemp("neff")
                path = build_neff(KERNEL_DIR / f"{name}.c", out_dir / f"{name}.neff")
            built[name] = str(path)
        return built[name]

    return get


@pytest.fixture
def compile_neff(tmp_path: Path) -> Callable[..., str]:
    """compile_neff(c_source, name="custom") -> path of a NEFF built in tmp_path
    (cc -shared -fPIC -O2 -I <spike.get_include()>)."""

    def compile_(source: str, name: str = "custom") -> str:
        src = tmp_path / f"{name}.c"
        src.write_text(source)
        return str(build_neff(src, tmp_path / f"{name}.neff"))

    return compile_


#: the runtime's environment when the tests were collected (before any ran)
_BASELINE = {k: os.environ.get(k) for k in ENV_KEYS}


@pytest.fixture(autouse=True)
def _restore_runtime_env() -> Iterator[None]:
    """Before every test: the runtime as the session started, should tests of
    another directory that ran in between in this process (pytest-xdist
    interleaves files) have configured it otherwise. After it: if it configured
    the singleton (changed the runtime's environment variables or options),
    reset it and restore the environment."""
    _restore(_BASELINE)
    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    yield
    _restore(saved)


def _restore(env: Dict[str, Optional[str]]) -> None:
    """The singleton reset and these runtime variables set back, if the
    environment or the singleton's options differ from them."""
    if any(os.environ.get(k) != v for k, v in env.items()) or spike_singleton._options:
        quiet_reset()
        spike_singleton._options.clear()
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def fresh_spike() -> Iterator[None]:
    """For tests that configure or reset the singleton: none before, none after."""
    quiet_reset()
    yield
    quiet_reset()
    spike_singleton._options.clear()


@pytest.fixture
def raw_spike(fresh_spike: None) -> Iterator[Spike]:
    """A low-level Spike instance (the singleton is reset first)."""
    s = Spike()
    yield s
    s.close()


@pytest.fixture
def two_cores(fresh_spike: None) -> Iterator[None]:
    """The singleton configured with visible cores [0, 1]."""
    spike.configure(visible_cores=[0, 1])
    yield
