"""Float arguments of eager ops as kernel inputs (spike_torch/_scalar_slots.py):
one kernel serves every value, results equal eager CPU's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import spike_torch
from spike_torch import _C, _generic, _scalar_slots
from nkipy.core.trace import trace

# exact: a product or quotient by a float rounds once, on the device as on the CPU
EXACT = dict(rtol=0, atol=0)
# a sum with a scaled operand: the CPU's vector lanes fuse the multiply-add
FUSED = {torch.float32: dict(rtol=1.3e-6, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12),
         torch.float16: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=8e-3, atol=8e-3)}
VALUES = [0.5, -3.25, 1e-7, 0.1, 2.0, -0.0, 1.0 / 3, 12345.678]


def compiles() -> int:
    return _generic.stats["compiles"]


def fast_calls() -> int:
    return _C.eager_cache.eager_stats()["fast_calls"]


# ---- the module ------------------------------------------------------------------

def test_sentinels_distinct_however_converted():
    for which in (0, 1):
        vals = _scalar_slots.sentinels(_scalar_slots.MAX_SLOTS, which)
        seen = set()
        for dtype, via in _scalar_slots.CHAINS:
            conv = [float(_scalar_slots.convert(v, dtype, via)) for v in vals]
            assert len(set(conv)) == len(vals) and all(np.isfinite(conv)) and 0 not in conv
            seen |= {(dtype, c) for c in conv}
        assert len(seen) == len(_scalar_slots.CHAINS) * len(vals)   # each way its own values
        assert not any(float(np.float32(v)) == v for v in vals)
        assert all(v < -2 for v in vals) if which == 0 else all(0 < v < 0.5 for v in vals)
    # PyTorch's conversion of a Python scalar to a half type: through float32
    assert _scalar_slots.convert(0.1, np.float16) == torch.tensor(0.1).half().item()
    with pytest.raises(ValueError, match="scalar slots, at most"):
        _scalar_slots.sentinels(_scalar_slots.MAX_SLOTS + 1, 0)


def test_slot_positions_of_allowed_ops_only():
    aten = torch.ops.aten
    assert _scalar_slots.slot_positions(aten.add.Tensor._schema) == ((0, "self"), (1, "other"),
                                                                      (2, "alpha"))
    assert _scalar_slots.slot_positions(aten._foreach_addcdiv_.ScalarList._schema) == \
        ((3, "scalars"),)
    assert _scalar_slots.slot_positions(aten.pow.Tensor_Scalar._schema) == ()
    assert _scalar_slots.slot_positions(aten.div.Tensor_mode._schema) == ()


def test_take_and_substitute_in_schema_order():
    positions = ((1, "other"), (2, "alpha"))
    args, kwargs = ["x", [0.5, 2, 1.5]], {"alpha": 0.25}
    assert _scalar_slots.take(positions, args, kwargs) == [0.5, 1.5, 0.25]
    a, k = _scalar_slots.substitute(positions, args, kwargs, [7.0, 8.0, 9.0])
    assert a == ["x", [7.0, 2, 8.0]] and k == {"alpha": 9.0}
    assert args == ["x", [0.5, 2, 1.5]] and kwargs == {"alpha": 0.25}   # not modified


def _graph(fn, s):
    return trace(lambda x: fn(x, s), np.ones(4, np.float32))


def test_lift_makes_constants_inputs():
    a, b = _scalar_slots.sentinels(1, 0), _scalar_slots.sentinels(1, 1)
    g = _graph(lambda x, s: x * np.float32(s), a[0])
    lifted = _scalar_slots.lift(g, _graph(lambda x, s: x * np.float32(s), b[0]), a, b)
    assert lifted == [(0, np.dtype(np.float32), None)]
    assert [v.name for v in g.inputs][-1] == "slot0" and g.inputs[-1].shape == ()
    assert not any(n.op == "constant" for n in g.nodes)
    g.verify()


def test_lift_refuses_a_value_computed_with():
    a, b = _scalar_slots.sentinels(1, 0), _scalar_slots.sentinels(1, 1)

    def fn(x, s):   # a branch on the value: the two traces differ
        return x * np.float32(s) if s > 0 else x - np.float32(s)

    g = _graph(fn, a[0])
    before = str(g)
    assert _scalar_slots.lift(g, _graph(fn, b[0]), a, b) is None
    assert str(g) == before
    # a value the kernel never reads as itself (1 - s) is not a slot either
    g = _graph(lambda x, s: x * np.float32(1 - s), a[0])
    assert _scalar_slots.lift(g, _graph(lambda x, s: x * np.float32(1 - s), b[0]), a, b) is None
    # nor one rounded in a way no chain describes (to an integer)
    f = lambda x, s: x * np.float64(np.floor(s))     # noqa: E731
    g = trace(lambda x: f(x, a[0]), np.ones(4, np.float64))
    assert _scalar_slots.lift(g, trace(lambda x: f(x, b[0]), np.ones(4, np.float64)), a, b) \
        is None
    # a float32 constant holding the value rounded to float16 first is such a chain
    f = lambda x, s: x * np.float32(np.float32(s).astype(np.float16))     # noqa: E731
    g = trace(lambda x: f(x, a[0]), np.ones(4, np.float32))
    assert _scalar_slots.lift(g, trace(lambda x: f(x, b[0]), np.ones(4, np.float32)), a, b) \
        == [(0, np.dtype(np.float32), np.dtype(np.float16))]


def test_pack_converts_per_input():
    f16, f32, f64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
    raw = _scalar_slots.pack([0.1, 2.5], [(1, f64, None), (0, f32, None), (0, f32, f16)])
    assert len(raw) == 3 * _scalar_slots.SLOT_BYTES
    assert np.frombuffer(raw[:8], np.float64)[0] == 2.5
    assert np.frombuffer(raw[8:12], np.float32)[0] == np.float32(0.1)
    assert np.frombuffer(raw[16:20], np.float32)[0] == np.float32(np.float16(0.1))


# ---- eager ops ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_mul_and_div_by_changing_floats_one_kernel(dtype):
    x = torch.randn(33, 5).to(dtype)
    d = x.nkipy()
    for op in (torch.mul, torch.div):
        op(d, 0.75)      # built
        before, fast = compiles(), fast_calls()
        for v in VALUES:
            torch.testing.assert_close(op(d, v).cpu(), op(x, v), **EXACT)
        assert compiles() == before, f"{op.__name__} compiled again for a new value"
        assert fast_calls() == fast + len(VALUES), "every call ran from the C++ cache"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_add_sub_alpha_and_inplace(dtype):
    x, y = torch.randn(40).to(dtype), torch.randn(40).to(dtype)
    d, e = x.nkipy(), y.nkipy()
    torch.add(d, e, alpha=0.3)
    torch.sub(d, e, alpha=0.3)
    before = compiles()
    for v in VALUES:
        torch.testing.assert_close(torch.add(d, e, alpha=v).cpu(), torch.add(x, y, alpha=v),
                                   **FUSED[dtype])
        torch.testing.assert_close(torch.sub(d, e, alpha=v).cpu(), torch.sub(x, y, alpha=v),
                                   **FUSED[dtype])
        torch.testing.assert_close((d + v).cpu(), x + v, **EXACT)
    assert compiles() == before + 1       # d + v: its kernel, once
    dd, xx = d.clone(), x.clone()
    for v in VALUES:
        dd.mul_(v).add_(1.5)
        xx.mul_(v).add_(1.5)
    torch.testing.assert_close(dd.cpu(), xx, **EXACT)


def test_foreach_scalar_lists_as_adamw_uses_them():
    ps = [torch.randn(7, 3), torch.randn(5)]
    a = [torch.rand(7, 3) + 0.5, torch.rand(5) + 0.5]
    b = [torch.rand(7, 3) + 0.5, torch.rand(5) + 0.5]
    dps = [p.nkipy() for p in ps]
    da, db = [t.nkipy() for t in a], [t.nkipy() for t in b]
    torch._foreach_addcdiv_(dps, da, db, [0.1, 0.2])
    torch._foreach_addcdiv_(ps, a, b, [0.1, 0.2])
    counts = []
    for step in range(1, 6):
        scalars = [-1e-3 / (1 - 0.9 ** step), -2e-3 / (1 - 0.9 ** step)]
        torch._foreach_addcdiv_(dps, da, db, scalars)
        torch._foreach_addcdiv_(ps, a, b, scalars)
        torch._foreach_div_(da, [1 - 0.999 ** step] * 2)
        torch._foreach_div_(a, [1 - 0.999 ** step] * 2)
        counts.append(compiles())
    # (the device has no fused foreach kernels: PyTorch calls the op per tensor)
    assert counts == counts[:1] * len(counts), f"kernels compiled for new values: {counts}"
    for dp, p in zip(dps + da, ps + a):
        torch.testing.assert_close(dp.cpu(), p, **FUSED[torch.float32])


def test_adamw_steps_compile_once():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    dev = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    dev.load_state_dict(model.state_dict())
    dev = dev.to("nkipy")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, dev)]
    x, y = torch.randn(16, 6), torch.randn(16, 2)
    counts = []
    for _ in range(8):
        for m, opt, xx, yy in ((model, opts[0], x, y), (dev, opts[1], x.nkipy(), y.nkipy())):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(xx), yy).backward()
            opt.step()
        counts.append(compiles())
    assert counts[-1] == counts[2], f"AdamW compiled kernels after its third step: {counts}"
    for p, q in zip(model.parameters(), dev.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-5)


def test_a_kernel_that_cannot_read_its_slots_bakes_them(monkeypatch):
    """Where lifting fails, each value gets its own kernel (as before slots) and
    the C++ cache, whose key has no value, files none of them."""
    monkeypatch.setattr(_scalar_slots, "lift", lambda *a: None)
    _generic.clear_cache()
    x = torch.randn(9)
    d = x.nkipy()
    before, fast = compiles(), fast_calls()
    for v in (0.5, 0.25, 0.5):
        torch.testing.assert_close((d * v).cpu(), x * v, **EXACT)
    assert compiles() == before + 2 and fast_calls() == fast
    monkeypatch.undo()
    _generic.clear_cache()
    assert spike_torch.op_stats()["device_calls"] > 0


def test_register_refuses_a_kernel_without_the_calls_slots():
    reg = _C.eager_cache.eager_register
    d = torch.randn(2).nkipy()
    with pytest.raises(TypeError):
        reg("aten::exp", [d], None, 0, [0], [([2], torch.float32)], 1, [], [("output", 0)])
    # outside a fallback call nothing is filed, whatever the slots
    assert reg("aten::exp", [d], None, 0, [0], [([2], torch.float32)], 1, [],
               [("output", 0)], [], 0, [False], [], [], False) is False
    with pytest.raises(ValueError, match="eager_lift: no operator"):
        _C.eager_cache.eager_lift("aten::no_such_op.Tensor", [0])


@pytest.mark.parametrize("xd, yd", [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                                    (torch.bfloat16, torch.float16), (torch.float16, torch.float16),
                                    (torch.float16, torch.int64), (torch.bfloat16, torch.int32)])
def test_alpha_beside_mixed_dtypes_as_the_cpu_takes_it(xd, yd):
    """alpha is rounded to a half type only where both tensors are of it (the
    op computes in it): a float16 tensor plus a float32 one takes it as is."""
    torch.manual_seed(2)
    x, y = torch.randn(64).to(xd), (torch.randn(64) * 100).to(yd)
    for v in (1 / 3, 0.1, -1e-3, 2049):
        for op in (torch.add, torch.sub):
            torch.testing.assert_close(op(x.nkipy(), y.nkipy(), alpha=v).cpu(), op(x, y, alpha=v),
                                       rtol=0, atol=0)
        got = x.nkipy().add_(y.nkipy(), alpha=v).cpu()
        torch.testing.assert_close(got, x.clone().add_(y, alpha=v), rtol=0, atol=0)
        x0 = x[0].clone()       # a 0-dim first operand: the other's dtype wins
        torch.testing.assert_close(torch.add(x0.nkipy(), y.nkipy(), alpha=v).cpu(),
                                   torch.add(x0, y, alpha=v), rtol=0, atol=0)


def test_register_refuses_bad_slot_inputs_and_raw_flags():
    """eager_register checks its arguments before it looks at the call in
    progress: a slot input of an integer dtype, one per kernel input raw flag,
    a dtype or None per slot limit."""
    reg = _C.eager_cache.eager_register
    d = torch.randn(2).nkipy()
    common = ("aten::exp", [d], None, 0, [0], [([2], torch.float32)], 1, [], [("output", 0)])
    assert reg(*common, [], 0, [False], [], [], False) is False  # no call in progress: nothing filed
    x = torch.randn(3)
    dx = x.nkipy()
    real = _C.eager_cache.eager_register
    seen = {}

    def spy(*args):
        (name, ts, model, core, in_idx, outs, n, muts, rets, slot_inputs, n_slots, raw,
         inplace, limits, overlap) = args
        head = (name, ts, model, core, in_idx, outs, n, muts, rets)
        for bad, match in (([(0, torch.int32, None)], "a slot input is a float dtype"),
                           ([(5, torch.float32, None)], "slot < n_slots")):
            with pytest.raises(ValueError, match=match):
                real(*head, bad, n_slots, raw, inplace, limits, overlap)
        with pytest.raises(ValueError, match="one raw flag per kernel input"):
            real(*head, slot_inputs, n_slots, list(raw) + [False], inplace, limits, overlap)
        for bad in ([torch.float32] * (n_slots + 1), ["float"] * n_slots):
            with pytest.raises(ValueError, match="limits are a dtype or None per slot"):
                real(*head, slot_inputs, n_slots, raw, inplace, bad, overlap)
        seen["checked"] = True
        return real(*args)

    _C.eager_cache.eager_register = spy
    try:
        _generic.clear_cache()
        torch.testing.assert_close((dx * 0.25).cpu(), x * 0.25, rtol=0, atol=0)
    finally:
        _C.eager_cache.eager_register = real
    assert seen.get("checked")
