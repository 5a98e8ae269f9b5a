"""Shared set-up of the nkipy language tests.

Helpers live in ``op_cases.py`` (op cases as data + the reference/compare
harness, reused by the compiled-execution tests). Hypothesis runs with a
fixed, small example budget so the suite stays fast and deterministic.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "nkipy", max_examples=int(os.environ.get("NKIPY_HYPOTHESIS_EXAMPLES", "40")),
        deadline=None, derandomize=True, print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much])
    settings.load_profile("nkipy")
except ImportError:  # pragma: no cover - hypothesis is optional
    pass


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
