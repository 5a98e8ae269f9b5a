"""Random ops and the device's RNG state under Dynamo, as torch.cuda's behave.

``torch.nkipy``'s RNG functions (get/set_rng_state, manual_seed, ...) and the
device's Python kernels are never traced or compiled by Dynamo: a call inside
a compiled region graph-breaks and runs eagerly; a frame entered while Dynamo
is on (PyTorch's ``freeze_rng_state`` calls get_rng_state under
``no_dispatch()``, as OpInfo's bernoulli and dropout samples do) runs as it is.
Compiled random functions on nkipy and CPU tensors are checked by their
statistics (shape, dtype, range, mean within a loose bound), by reproducibility
under ``torch.manual_seed`` (equal to eager, which draws from the same
generators), by a bounded number of graph breaks, and by a get/set_rng_state
round trip around and inside a compiled region."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import spike_torch  # noqa: F401  (registers the device and torch.nkipy)

DEVICES = ["cpu", "nkipy"]
N = 4096  # elements per draw: a mean of N uniform draws is within 0.05 of 0.5 w.p. ~1 - 1e-20


def _dropout(x):
    return torch.nn.functional.dropout(x, p=0.5, training=True)


def _bernoulli(x):
    return torch.bernoulli(x)


def _rand_like(x):
    return torch.rand_like(x) * 2.0


def _randn_like(x):
    return torch.randn_like(x) + x


def _multinomial(x):
    probs = torch.softmax(x.reshape(64, -1), dim=-1)
    return torch.multinomial(probs, 8, replacement=True)


def _check_stats(name, x, y) -> None:
    """Shape, dtype, range and a mean within a loose bound, per function."""
    y = y.cpu()
    if name == "dropout":      # x is ones: kept elements are 2, dropped 0, half of each
        assert y.shape == x.shape and y.dtype == torch.float32
        assert set(torch.unique(y).tolist()) <= {0.0, 2.0}
        assert abs((y == 0).float().mean().item() - 0.5) < 0.05
    elif name == "bernoulli":  # x is 0.5 everywhere
        assert y.shape == x.shape and y.dtype == torch.float32
        assert set(torch.unique(y).tolist()) <= {0.0, 1.0}
        assert abs(y.mean().item() - 0.5) < 0.05
    elif name == "rand_like":  # 2 * U[0, 1)
        assert y.shape == x.shape and y.dtype == torch.float32
        assert y.min().item() >= 0.0 and y.max().item() < 2.0
        assert abs(y.mean().item() - 1.0) < 0.1
    elif name == "randn_like":  # N(x, 1) with x = 0.5
        assert y.shape == x.shape and y.dtype == torch.float32
        assert abs(y.mean().item() - 0.5) < 0.1 and abs(y.std().item() - 1.0) < 0.1
    else:                      # multinomial: 64 rows of 8 indices into 64 categories
        assert y.shape == (64, 8) and y.dtype == torch.int64
        assert y.min().item() >= 0 and y.max().item() < 64
        assert abs(y.float().mean().item() - 31.5) < 4.0  # near-uniform probabilities


FUNCS = {"dropout": (_dropout, 1.0), "bernoulli": (_bernoulli, 0.5),
         "rand_like": (_rand_like, 0.0), "randn_like": (_randn_like, 0.5),
         "multinomial": (_multinomial, 0.0)}


def _input(fill: float, device: str) -> torch.Tensor:
    return torch.full((64, N // 64), fill, device=device)


@pytest.fixture(params=[False, True], ids=["lowered", "fallback_random"])
def fallback(request, monkeypatch):
    """Random ops lowered onto the device (Philox, torch_to_nkipy.random), or
    run in CPU partitions as eager ones (``fallback_random``)."""
    import torch._dynamo
    import torch_to_nkipy.random as R

    monkeypatch.setattr(R, "fallback_random", request.param)
    torch._dynamo.reset()
    yield request.param
    torch._dynamo.reset()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_compiled_random_function(name, device, backend, fallback) -> None:
    fn, fill = FUNCS[name]
    x = _input(fill, device)
    compiled = torch.compile(fn, backend="nkipy")
    torch.manual_seed(1234)
    y1 = compiled(x)
    assert y1.device.type == device
    _check_stats(name, x, y1)
    # reproducible under torch.manual_seed, and with fallback_random equal to
    # eager (same generators; lowered, the values are Philox's)
    torch.manual_seed(1234)
    y2 = compiled(x)
    torch.manual_seed(1234)
    y_eager = fn(x)
    assert torch.equal(y1.cpu(), y2.cpu())
    if fallback or name == "multinomial":
        assert torch.equal(y1.cpu(), y_eager.cpu())
    # a fresh draw differs
    assert not torch.equal(compiled(x).cpu(), y1.cpu())


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_no_graph_break_explosion(name, backend) -> None:
    """A random op alone compiles to one graph, without graph breaks."""
    import torch._dynamo

    fn, fill = FUNCS[name]
    explanation = torch._dynamo.explain(fn)(_input(fill, "nkipy"))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def _state_module(device: str):
    return torch.nkipy if device == "nkipy" else torch.random


@pytest.mark.parametrize("device", DEVICES)
def test_rng_state_round_trip_around_compiled_region(device, backend) -> None:
    """bernoulli draws from the tensor's device generator, eagerly and compiled.
    (Random ops that reach the CPU fallback, native_dropout and multinomial,
    draw from the CPU generator in eager mode and so in compiled regions.)"""
    mod = _state_module(device)
    compiled = torch.compile(_bernoulli, backend="nkipy")
    x = _input(0.5, device)
    state = mod.get_rng_state()
    y1 = compiled(x)
    assert not torch.equal(mod.get_rng_state(), state)  # the region drew from the generator
    mod.set_rng_state(state)
    y2 = compiled(x)
    assert torch.equal(y1.cpu(), y2.cpu())


def _draw_and_restore(x):
    state = torch.nkipy.get_rng_state()
    y = torch.bernoulli(x)
    torch.nkipy.set_rng_state(state)
    return y * 3.0


def test_rng_state_calls_inside_compiled_region_graph_break(backend, fallback) -> None:
    """torch.nkipy.get/set_rng_state inside a compiled function graph-break
    (as torch.cuda's do) and run eagerly: the state restored inside the region
    makes every call draw the same values, as in eager."""
    import torch._dynamo

    x = _input(0.5, "nkipy")
    explanation = torch._dynamo.explain(_draw_and_restore)(x)
    assert explanation.graph_break_count >= 1
    assert any("RNG state" in str(r) or "disable" in str(r)
               for r in explanation.break_reasons), explanation.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(_draw_and_restore, backend="nkipy")
    torch.manual_seed(7)
    before = torch.nkipy.get_rng_state()
    y1, y2 = compiled(x), compiled(x)
    assert torch.equal(torch.nkipy.get_rng_state(), before)
    torch.manual_seed(7)
    assert torch.equal(y1.cpu(), y2.cpu())
    if fallback:   # lowered, the region's values are Philox's, not eager's
        assert torch.equal(y1.cpu(), _draw_and_restore(x).cpu())
    _check_stats("bernoulli", x, y1 / 3.0)


@pytest.mark.parametrize("device", DEVICES)
def test_opinfo_style_freeze_rng_state(device, backend) -> None:
    """OpInfo's random samples run the op under freeze_rng_state (no_dispatch()
    around get_rng_state) with a fixed seed: compiled, they no longer assert
    and equal eager."""
    pytest.importorskip("expecttest")
    from torch.testing._internal.common_methods_invocations import wrapper_set_seed

    def f(x):
        return wrapper_set_seed(torch.nn.functional.dropout, x, p=0.5, training=True)

    def g(x):
        return wrapper_set_seed(torch.bernoulli, x)

    for fn, fill in ((f, 1.0), (g, 0.5)):
        x = _input(fill, device)
        torch._dynamo.reset()
        out = torch.compile(fn, backend="nkipy")(x)
        assert torch.equal(out.cpu(), fn(x).cpu())


def test_rng_functions_do_not_import_dynamo(tmp_path) -> None:
    """Eager use of torch.nkipy's RNG functions (torch.manual_seed calls
    manual_seed_all) does not import torch._dynamo (about a second)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import sys, torch, spike_torch\n"
            "torch.manual_seed(3)\n"
            "s = torch.nkipy.get_rng_state(); torch.nkipy.set_rng_state(s)\n"
            "x = torch.randn(4, device='nkipy')\n"
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
