"""Shared by every Python test directory: the repository importable, one kernel
cache per test session."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


# ---- two devices, two processes -------------------------------------------
# PyTorch has one PrivateUse1 device per process. The spyre device's tests
# (tests/torch_spyre) run in a pytest process of their own, started by
# tests/test_spyre_process.py with TORCH_SPYRE_TESTS=1; in that process every
# other test directory is left out, and in every other process that one.
_SPYRE_DIR = os.path.join(ROOT, "tests", "torch_spyre")
SPYRE_PROCESS = os.environ.get("TORCH_SPYRE_TESTS") == "1"


def pytest_ignore_collect(collection_path, config):
    path = str(collection_path)
    in_spyre = path == _SPYRE_DIR or path.startswith(_SPYRE_DIR + os.sep)
    if SPYRE_PROCESS:
        # keep tests/ itself and its conftest, the spyre directory, nothing else
        return not (in_spyre or path == os.path.join(ROOT, "tests") or
                    _SPYRE_DIR.startswith(path + os.sep))
    return True if in_spyre else None


@pytest.fixture(scope="session")
def nkipy_cache(tmp_path_factory) -> str:
    """A torch_to_nkipy cache directory shared by the session's tests."""
    return str(tmp_path_factory.mktemp("nkipy_cache"))


# ---- the slowest test files, printed at the end of every run -------------
# `make test` shows where the suite's time goes, per file (setup, call and
# teardown of every test in it, summed); NKIPY_SLOWEST_FILES sets how many
# (0: none).
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    count = int(os.environ.get("NKIPY_SLOWEST_FILES", "15"))
    if count <= 0 or not _FILE_SECONDS:
        return
    slowest = sorted(_FILE_SECONDS.items(), key=lambda kv: kv[1], reverse=True)[:count]
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_sep("=", f"{len(slowest)} slowest test files "
                                    f"(of {len(_FILE_SECONDS)}, {total:.0f} s in tests)")
    for path, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")


# ---- the slowest files start first ----------------------------------------
# pytest-xdist (`make test`) hands whole files to its workers in collection
# order: a long file collected last keeps one worker busy while the others
# are idle. These (the slowest of the report above, measured) are collected
# first; the rest keep their order.
_LONG_FIRST = ("tests/nkipy/test_compiled_ops.py", "tests/torch_to_nkipy/test_opinfo_compiled.py",
               "tests/test_spyre_process.py", "tests/torch_to_nkipy/test_multihost.py",
               "tests/spike_torch/test_eager_training.py", "tests/difffuzz/test_difffuzz.py",
               "tests/torch_to_nkipy/test_process_group.py", "tests/spike_torch/test_opinfo_db.py")


def pytest_collection_modifyitems(session, config, items) -> None:
    rank = {path: i for i, path in enumerate(_LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
