"""Every op case of op_cases.py: traced, evaluated by run_graph, compared with NumPy."""
from __future__ import annotations

import warnings

import pytest

from op_cases import ALL_CASES, OpCase, case_id, check_case


@pytest.mark.parametrize("case", ALL_CASES, ids=case_id)
def test_op(case: OpCase) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's overflow/invalid warnings
        check_case(case)
