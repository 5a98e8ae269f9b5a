"""The original torch_to_nkipy's helpers exported at its root:
gm_split_and_wrap (partitions cut at mark_subgraph_identity, each wrapped) and
save_string_to_file (with load_func_from_file)."""
from __future__ import annotations

import os

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torch_to_nkipy
from torch_to_nkipy import (gm_split_and_wrap, load_func_from_file, mark_subgraph_identity,
                            save_string_to_file)


def _layers(x):
    for _ in range(3):
        x = mark_subgraph_identity(torch.tanh(x) * 1.5 + 0.25)
    return x.sum(0)


def test_split_and_compile_each_partition(backend):
    gm = make_fx(_layers)(torch.randn(4, 8))
    before = torch_to_nkipy.kernel.STATS["kernels"]
    split = gm_split_and_wrap(gm)
    subs = [n for n, _ in split.named_children() if n.startswith("submod_")]
    assert len(subs) == 4
    x = torch.randn(4, 8)
    torch.testing.assert_close(split(x), _layers(x))
    # identical layers generate identical source: one kernel serves all three
    # (and one the sum)
    assert torch_to_nkipy.kernel.STATS["kernels"] - before == 2


def test_split_with_a_wrapper_of_ones_own(backend):
    gm = make_fx(_layers)(torch.randn(4, 8))
    seen = []

    def wrap(part, options):
        seen.append((type(part).__name__, options))
        return part                         # run the partition itself, eagerly
    split = gm_split_and_wrap(gm, wrap, {"pipelined": True})
    x = torch.randn(4, 8)
    torch.testing.assert_close(split(x), _layers(x))
    assert seen == [("GraphModule", {"pipelined": True})] * 4
    with pytest.raises(TypeError, match="wrapper must be callable"):
        gm_split_and_wrap(gm, 3)
    with pytest.raises(ValueError, match="unknown nkipy backend option 'pipelind'"):
        gm_split_and_wrap(gm, wrap, {"pipelind": True})


def test_save_string_to_file_round_trip(tmp_path):
    path = save_string_to_file("def nkipy_func(a):\n    return a * 7\n", str(tmp_path / "k.py"))
    assert path == str(tmp_path / "k.py") and load_func_from_file(path)(3) == 21
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o600)
    save_string_to_file("def nkipy_func(a):\n    return a\n", path)      # replaced whole
    assert load_func_from_file(path)(3) == 3
    with pytest.raises(TypeError, match="save_string_to_file writes a str, not bytes"):
        save_string_to_file(b"x", str(tmp_path / "b.py"))
