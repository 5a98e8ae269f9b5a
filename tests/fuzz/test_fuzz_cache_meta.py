"""Fuzzing nkipy's kernel cache check (issue 11, item 17): the bytes of a cache
entry's meta.json and kernel.neff come from disk, so they are untrusted.

nkipy.compiler.build._entry_valid decides whether an entry is loaded or
rebuilt; its documented behaviour (build.py's docstring) is that an entry whose
meta.json is missing or unreadable, or whose NEFF does not match the recorded
hash, is rebuilt: it returns False and raises nothing. These tests feed it
arbitrary bytes, arbitrary JSON and near-valid metadata and check that it
never raises and never accepts an entry whose NEFF hash does not match.

(torch_to_nkipy's io_specs.json is written for people to read; nothing reads
it back, so there is no parser of it to fuzz.)
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nkipy.compiler import build

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    report_multiple_bugs=False, suppress_health_check=[HealthCheck.too_slow])



def _entry(root: Path, meta: bytes | None, neff: bytes | None) -> Path:
    entry = root / "k_0123456789abcdef"
    entry.mkdir()
    if meta is not None:
        (entry / "meta.json").write_bytes(meta)
    if neff is not None:
        (entry / "kernel.neff").write_bytes(neff)
    return entry


def _check(meta: bytes | None, neff: bytes | None) -> bool:
    with tempfile.TemporaryDirectory() as d:
        result = build._entry_valid(_entry(Path(d), meta, neff))
    assert isinstance(result, bool)
    return result


def _valid_meta(neff: bytes, **override) -> dict:
    meta = {"name": "k", "compiler_version": build.COMPILER_VERSION, "flags": ["-O3"],
            "inputs": [], "outputs": [], "neff_sha256": hashlib.sha256(neff).hexdigest()}
    meta.update(override)
    return meta


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


def test_valid_entry_is_accepted():
    """The baseline the properties below are measured against."""
    neff = b"\x7fELF not really"
    assert _check(json.dumps(_valid_meta(neff)).encode(), neff) is True


@SETTINGS
@given(st.binary(max_size=512))
@example(b"0")
@example(b"[]")
@example(b"\xff\xfe")
def test_arbitrary_bytes_never_raise_or_accept(meta):
    assert _check(meta, b"neff") is False


@SETTINGS
@given(json_values)
@example(None)
@example([build.COMPILER_VERSION])
def test_arbitrary_json_never_raises_or_accepts(value):
    assert _check(json.dumps(value).encode(), b"neff") is False


@pytest.mark.parametrize("meta", [b"0", b"[]", b'"compiler_version"', b"null"])
def test_meta_not_an_object_is_rebuilt(meta):
    assert _check(meta, b"neff") is False


def test_meta_nested_too_deeply_is_rebuilt():
    assert _check(b"[" * 100_000, b"neff") is False


def _mutations(good: str):
    """Recorded hashes that are not the NEFF's (and values that are not hashes)."""
    flipped = good[:-1] + ("0" if good[-1] != "0" else "1")
    return st.sampled_from([flipped, good.upper(), good[:-1], good + "0", " " + good, good + "\n",
                            "", None, 0, [good], {"sha256": good},
                            hashlib.sha256(b"other").hexdigest()]) | st.text(max_size=70)


@SETTINGS
@given(neff=st.binary(max_size=256), data=st.data())
def test_neff_hash_mismatch_is_never_accepted(neff, data):
    good = hashlib.sha256(neff).hexdigest()
    recorded = data.draw(_mutations(good))
    extra = data.draw(st.dictionaries(st.text(max_size=8), json_values, max_size=3))
    meta = {**extra, **_valid_meta(neff, neff_sha256=recorded)}
    assert _check(json.dumps(meta).encode(), neff) is (recorded == good)


@SETTINGS
@given(neff=st.binary(max_size=256), version=st.one_of(
    st.text(max_size=20), st.none(), st.integers(),
    st.sampled_from([build.COMPILER_VERSION + " ", build.COMPILER_VERSION.upper()])))
def test_other_compiler_version_is_never_accepted(neff, version):
    meta = _valid_meta(neff, compiler_version=version)
    assert _check(json.dumps(meta).encode(), neff) is (version == build.COMPILER_VERSION)


@SETTINGS
@given(neff=st.binary(max_size=256), other=st.binary(max_size=256))
def test_meta_of_another_neff_is_never_accepted(neff, other):
    """An entry whose kernel.neff was swapped for other bytes (a NEFF another
    user or a crashed build left) is rebuilt."""
    meta = json.dumps(_valid_meta(other)).encode()
    assert _check(meta, neff) is (neff == other)


@pytest.mark.parametrize("case", ["no meta", "no neff", "neff is a directory",
                                  "meta is a directory", "meta not utf-8"])
def test_missing_or_unreadable_files_are_rebuilt(case, tmp_path):
    neff = b"\x7fELF"
    meta = json.dumps(_valid_meta(neff)).encode()
    entry = _entry(tmp_path, None if case in ("no meta", "meta is a directory") else meta,
                   None if case in ("no neff", "neff is a directory") else neff)
    if case == "neff is a directory":
        (entry / "kernel.neff").mkdir()
    if case == "meta is a directory":
        (entry / "meta.json").mkdir()
    if case == "meta not utf-8":
        (entry / "meta.json").write_bytes(b"\xff" + meta)
    assert build._entry_valid(entry) is False


def test_meta_fifo_is_not_waited_on(tmp_path):
    entry = tmp_path / "k_0123456789abcdef"
    entry.mkdir()
    os.mkfifo(entry / "meta.json")
    (entry / "kernel.neff").write_bytes(b"neff")
    assert build._entry_valid(entry) is False
