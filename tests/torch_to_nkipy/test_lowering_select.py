"""Compiled equals eager for the registry entries of
spike_torch/lowering/aten_select.py (adaptive max pooling with indices, mode,
nonzero_static): uneven windows, ties, NaNs, keepdim, padding with the fill
value. Helpers are shared with test_lowering_breadth.py.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from test_lowering_breadth import _aten_ops, check, ints, lowered, rnd  # noqa: F401  (fixture)


def pools(x2, x3, x1):
    return (F.adaptive_max_pool2d(x2, (3, 2), return_indices=True),
            F.adaptive_max_pool2d(x2[0], 4, return_indices=True),
            F.adaptive_max_pool3d(x3, (2, 3, 2), return_indices=True),
            F.adaptive_max_pool1d(x1, 3, return_indices=True))


def test_adaptive_max_pooling(lowered):
    x2 = rnd(2, 3, 7, 5)
    x2[0, 0, 1, 1] = float("nan")
    x2[0, 0, 2, 3] = float("nan")
    x2[1, 1, :, :] = 1.0                       # ties: the first maximum
    check(lowered, pools, x2, rnd(1, 2, 5, 6, 4, seed=1), rnd(2, 3, 8, seed=2))


def modes(x, i):
    return torch.mode(x), torch.mode(x, 0, keepdim=True), torch.mode(i, 1)


def test_mode(lowered):
    nan = float("nan")
    x = torch.tensor([[1.0, 2.0, 2.0, 1.0, 3.0, 0.0], [nan] * 6,
                      [3.0, nan, 1.0, nan, 1.0, 2.0], [4.0, 4.0, 4.0, 0.5, 0.5, 0.5],
                      [2.0, 2.0, nan, 1.0, 1.0, 1.0], [nan, 5.0, 5.0, -1.0, 5.0, nan]])
    check(lowered, modes, x, ints(4, 16, lo=0, hi=3))


def long_mode(x):
    return torch.mode(x)


def test_mode_of_more_than_16_elements_runs_on_the_cpu(lowered):
    check(lowered, long_mode, rnd(3, 17), cpu=["aten.mode.default"])


def nonzeros(x, b):
    return (torch.nonzero_static(x, size=4), torch.nonzero_static(x, size=40, fill_value=-7),
            torch.nonzero_static(b, size=3))


def test_nonzero_static(lowered):
    x = ints(3, 4, 2, lo=-1, hi=2)
    check(lowered, nonzeros, x, torch.tensor([0.0, 2.0, 0.0, -1.0, 5.0]))


def test_every_aten_select_entry_has_a_case():
    from spike_torch.lowering import aten_select
    from spike_torch.lowering.registry import _REGISTRY

    mine = {n for n, f in _REGISTRY.items() if getattr(f, "__module__", "") == aten_select.__name__}
    seen = _aten_ops(pools, (rnd(2, 3, 7, 5), rnd(1, 2, 5, 6, 4), rnd(2, 3, 8)))
    seen |= _aten_ops(modes, (rnd(4, 5), ints(4, 9)))
    seen |= _aten_ops(nonzeros, (ints(3, 4, 2), rnd(5)))
    seen |= _aten_ops(grid_samples, _grid_args())
    assert sorted(mine - seen) == []


def grid_samples(x2, g2, x3, g3):
    out = []
    for mode in ("bilinear", "nearest"):
        for pad in ("zeros", "border"):
            for ac in (False, True):
                out.append(F.grid_sample(x2, g2, mode=mode, padding_mode=pad, align_corners=ac))
    out.append(F.grid_sample(x3, g3, align_corners=False))
    out.append(F.grid_sample(x3, g3, mode="nearest", padding_mode="border", align_corners=True))
    return tuple(out)


def _grid_args():
    return (rnd(2, 3, 5, 6), rnd(2, 4, 3, 2, lo=-1.3, hi=1.3, seed=1),
            rnd(1, 2, 3, 4, 5, seed=2), rnd(1, 2, 3, 2, 3, lo=-1.2, hi=1.2, seed=3))


def test_grid_sample(lowered):
    check(lowered, grid_samples, *_grid_args())


def reflection(x, g):
    return F.grid_sample(x, g, padding_mode="reflection", align_corners=False)


def test_grid_sample_with_reflection_runs_on_the_cpu(lowered):
    check(lowered, reflection, rnd(1, 1, 4, 4), rnd(1, 2, 2, 2, seed=1),
          cpu=["aten.grid_sampler_2d.default"])
