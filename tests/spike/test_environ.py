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
