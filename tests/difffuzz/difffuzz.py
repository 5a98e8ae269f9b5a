"""A differential fuzzer against eager PyTorch on the CPU.

A *case* is a small program -- a chain of one to three ops from ``OPS`` over
one or two input tensors of a random dtype, shape and layout (transposed,
permuted, sliced with a step, expanded with stride 0, offset into a larger
storage, channels_last, 0-size, 0-dim) -- written as Python source, so that a
failure prints as a runnable reproducer. Each case runs in up to five modes and
each result is compared with eager CPU:

* ``eager``: the inputs moved to the ``nkipy`` device, the program run eagerly;
* ``compiled``: ``torch.compile(backend="nkipy")`` on the CPU inputs;
* ``compiled_device``: the same on device inputs;
* ``dynamic``: compiled with ``dynamic=True`` and called at three lengths of the
  first input's leading dimension;
* ``grad``: for float programs, the gradients of the outputs' sum, eagerly on
  the device.

Comparisons (``compare``): integers and bools exactly; floats with a relative
and an absolute tolerance per dtype (float64 1e-9, float32 1e-4, float16 1e-2,
bfloat16 5e-2; the absolute one scaled by the result's magnitude and, for
reductions and products, by the square root of the reduced length; a float
result of half-precision inputs gets the inputs' tolerance, since eager rounds
half intermediates that compiled graphs keep in float32, as inductor does), NaN
equal to NaN. When eager CPU raises, the device must raise too; when eager works and
the device refuses with an error, that is reported as a *refusal* -- loud, not a
silent mismatch -- and counted apart. ``shrink`` reduces a failing case (fewer
ops, smaller shapes, plain layouts, fewer modes) while it still fails.

``KNOWN`` lists the open mismatches with what they are; the test slice and the
CLI (``tools/fuzz_torch.py``) report a case matching one as known, never as new.
"""
from __future__ import annotations

import dataclasses
import math
import random
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")
FLOATS = ("float32", "float16", "bfloat16", "float64")
LAYOUTS = ("contiguous", "transposed", "permuted", "step", "expanded", "offset",
           "channels_last", "empty", "scalar")
MODES = ("eager", "compiled", "compiled_device", "dynamic", "grad")

#: The device the cases run on: "nkipy" (every mode), or "spyre" (torch_spyre's
#: device, in a process of its own: eager, compiled on device inputs with
#: torch.compile's default backend, grad; no float64, which it does not hold).
#: Set by use_device().
DEVICE = "nkipy"
BACKEND = "nkipy"
GEN_DTYPES = DTYPES
SPYRE_MODES = ("eager", "compiled_device", "grad")


def use_device(name: str) -> None:
    """Runs the cases on device ``name`` ("nkipy" or "spyre"; the process's
    PrivateUse1 device must be that one)."""
    global DEVICE, BACKEND, GEN_DTYPES
    if name not in ("nkipy", "spyre"):
        raise ValueError(f"unknown device {name!r}: 'nkipy' or 'spyre'")
    DEVICE = name
    BACKEND = "nkipy" if name == "nkipy" else "inductor"
    GEN_DTYPES = DTYPES if name == "nkipy" else tuple(d for d in DTYPES if d != "float64")


#: dtype -> (rtol, atol)
TOL = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-2),
       "bfloat16": (5e-2, 5e-2)}


# ---- the op catalogue ----------------------------------------------------------
#
# Each op: (template, arity, kinds it takes, what its result is). The template is
# a format string over the operand sources {a} {b} and random parameters drawn
# by `params`. Kinds: "f" float, "i" integer, "b" bool. `reduces` marks ops
# whose results sum over an axis (looser float tolerance).

@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    template: str
    arity: int = 1
    kinds: str = "fib"
    reduces: bool = False
    min_ndim: int = 0
    needs_nonempty: bool = False


def _ops() -> List[Op]:
    un = [("neg", "torch.neg({a})", "fi"), ("abs", "torch.abs({a})", "fi"),
          ("exp", "torch.exp({a})", "f"), ("log1p_abs", "torch.log1p({a}.abs())", "f"),
          ("sqrt_abs", "torch.sqrt({a}.abs())", "f"), ("tanh", "torch.tanh({a})", "f"),
          ("sigmoid", "torch.sigmoid({a})", "f"), ("relu", "torch.relu({a})", "fi"),
          ("gelu", "torch.nn.functional.gelu({a})", "f"), ("floor", "torch.floor({a})", "f"),
          ("round", "torch.round({a})", "f"), ("sign", "torch.sign({a})", "fi"),
          ("square", "torch.square({a})", "fi"), ("recip", "torch.reciprocal({a})", "f"),
          ("not", "torch.logical_not({a})", "fib"), ("isnan", "torch.isnan({a})", "fib"),
          ("to_f32", "{a}.to(torch.float32)", "fib"), ("to_i32", "{a}.to(torch.int32)", "fib"),
          ("to_bool", "{a}.to(torch.bool)", "fib"), ("to_f16", "{a}.to(torch.float16)", "fib"),
          ("clamp", "torch.clamp({a}, -1, 2)", "fi"), ("mul_scalar", "({a} * 3)", "fi"),
          ("add_scalar", "({a} + 0.5)", "fib"), ("pow2", "({a} ** 2)", "fi"),
          ("bitwise_not", "torch.bitwise_not({a})", "ib")]
    ops = [Op(n, t, 1, k) for n, t, k in un]
    bi = [("add", "({a} + {b})", "fib"), ("sub", "({a} - {b})", "fi"),
          ("mul", "({a} * {b})", "fib"), ("div", "({a} / {b})", "fi"),
          ("maximum", "torch.maximum({a}, {b})", "fib"), ("minimum", "torch.minimum({a}, {b})", "fi"),
          ("eq", "({a} == {b})", "fib"), ("lt", "({a} < {b})", "fi"),
          ("where", "torch.where({a} > 0, {a}, {b})", "fi"),
          ("atan2", "torch.atan2({a}, {b})", "f"), ("floor_div", "torch.floor_divide({a}, {b})", "f"),
          ("remainder", "torch.remainder({a}, {b})", "f")]
    ops += [Op(n, t, 2, k) for n, t, k in bi]
    red = [("sum", "{a}.sum(dim={d}, keepdim={k})", "fib"), ("mean", "{a}.mean(dim={d})", "f"),
           ("amax", "{a}.amax(dim={d}, keepdim={k})", "fi"), ("amin", "{a}.amin(dim={d})", "fi"),
           ("prod", "{a}.prod(dim={d})", "fi"), ("argmax", "{a}.argmax(dim={d})", "fi"),
           ("argmin", "{a}.argmin(dim={d}, keepdim={k})", "fi"), ("any", "{a}.any(dim={d})", "fib"),
           ("all", "{a}.all()", "fib"), ("var", "{a}.var(dim={d})", "f"),
           ("std", "{a}.std(dim={d}, keepdim={k})", "f"),
           ("logsumexp", "torch.logsumexp({a}, dim={d})", "f"), ("sum_all", "{a}.sum()", "fib"),
           ("cumsum", "torch.cumsum({a}, dim={d})", "fib"), ("cumprod", "torch.cumprod({a}, dim={d})", "fi"),
           ("softmax", "torch.softmax({a}, dim={d})", "f"),
           ("log_softmax", "torch.log_softmax({a}, dim={d})", "f"),
           # over one element the exact result is 0, which CPU kernels' fused
           # multiply-adds leave at ~1e-6 (a reciprocal after it differs by inf)
           ("layer_norm", "(torch.nn.functional.layer_norm({a}, {a}.shape[-1:]) "
                          "if {a}.shape[-1] > 1 else {a})", "f"),
           ("sort", "torch.sort({a}, dim={d}, stable=True).values", "fi"),
           ("topk", "torch.topk({a}, 1, dim={d}).values", "fi")]
    ops += [Op(n, t, 1, k, reduces=True, min_ndim=1) for n, t, k in red]
    mm = [("matmul", "({a} @ {a}.transpose(-1, -2))", "f"), ("mv", "({a} @ {a}[..., 0, :])", "f"),
          ("linear", "torch.nn.functional.linear({a}, {a}[:3])", "f"),
          ("bmm", "({a}[None] @ {a}[None].transpose(-1, -2))", "f")]
    ops += [Op(n, t, 1, k, reduces=True, min_ndim=2) for n, t, k in mm]
    shape = [("t", "{a}.transpose(0, -1)", 1), ("flip", "torch.flip({a}, [0])", 1),
             ("cat", "torch.cat([{a}, {a}], dim={d})", 1), ("stack", "torch.stack([{a}, {a}], dim=0)", 0),
             ("reshape", "{a}.reshape(-1)", 0), ("unsqueeze", "{a}.unsqueeze(0)", 0),
             ("expand", "{a}.unsqueeze(0).expand(2, *{a}.shape)", 0),
             ("slice", "{a}[..., ::2]", 1), ("narrow", "{a}.narrow(-1, 0, 1)", 1),
             ("split", "torch.split({a}, 1, dim={d})[0]", 1), ("roll", "torch.roll({a}, 1, {d})", 1),
             ("tril", "torch.tril({a})", 2), ("contiguous", "{a}.contiguous()", 0),
             ("repeat", "{a}.repeat(2, *([1] * ({a}.dim() - 1)))", 1)]
    ops += [Op(n, t, 1, "fib", min_ndim=m) for n, t, m in shape]
    idx = [("index_select", "torch.index_select({a}, 0, torch.tensor([0, {a}.shape[0] - 1, 0], "
                            "device={a}.device))", 1),
           ("gather", "torch.gather({a}, -1, torch.zeros_like({a}, dtype=torch.int64))", 1),
           ("getitem", "{a}[torch.tensor([0, {a}.shape[0] - 1], device={a}.device)]", 1),
           ("index_put", "{a}.index_put((torch.tensor([0], device={a}.device),), {a}[0:1] * 2)", 1),
           ("scatter", "torch.scatter({a}, -1, torch.zeros_like({a}, dtype=torch.int64), {a})", 1),
           ("masked_fill", "{a}.masked_fill({a} > 0, 7)", 0),
           ("take", "torch.take({a}, torch.tensor([0], device={a}.device))", 0)]
    ops += [Op(n, t, 1, "fi", min_ndim=m, needs_nonempty=True) for n, t, m in idx]
    conv = [("conv1d", "torch.nn.functional.conv1d({a}[None, :1], torch.ones(2, 1, 1, dtype={a}.dtype))", 2),
            ("max_pool1d", "torch.nn.functional.max_pool1d({a}[None], 1)", 2),
            ("avg_pool1d", "torch.nn.functional.avg_pool1d({a}[None], 1)", 2)]
    ops += [Op(n, t, 1, "f", reduces=True, min_ndim=m, needs_nonempty=True) for n, t, m in conv]
    return ops


OPS = _ops()
OPS_BY_NAME = {op.name: op for op in OPS}


# ---- cases ----------------------------------------------------------------------

@dataclasses.dataclass
class Input:
    shape: Tuple[int, ...]
    dtype: str
    layout: str
    seed: int

    def source(self) -> str:
        """Python source building this input on the CPU."""
        dt = f"torch.{self.dtype}"
        base = f"_rand({list(self.shape)}, {dt}, {self.seed})"
        s = self.shape
        if self.layout == "transposed" and len(s) >= 2:
            base = f"_rand({[s[-1], s[-2]] + list(s[:-2])[::-1]}, {dt}, {self.seed})"
            return f"{base}.permute({list(range(len(s)))[::-1]})"
        if self.layout == "permuted" and len(s) >= 3:
            return f"_rand({[s[1], s[0]] + list(s[2:])}, {dt}, {self.seed}).transpose(0, 1)"
        if self.layout == "step" and len(s) >= 1:
            return f"_rand({[s[0] * 2] + list(s[1:])}, {dt}, {self.seed})[::2]"
        if self.layout == "expanded" and len(s) >= 1:
            return f"_rand({[1] + list(s[1:])}, {dt}, {self.seed}).expand({list(s)})"
        if self.layout == "offset":
            n = math.prod(s)
            return f"_rand([{n + 3}], {dt}, {self.seed})[3:].reshape({list(s)})"
        if self.layout == "channels_last" and len(s) == 4:
            return f"{base}.contiguous(memory_format=torch.channels_last)"
        return base


@dataclasses.dataclass
class Case:
    inputs: List[Input]
    ops: List[Tuple[str, Dict[str, Any]]]      # (op name, params); applied in a chain
    modes: Tuple[str, ...]

    def program(self) -> str:
        """The program as a lambda's source over a (and b)."""
        expr = "a"
        for i, (name, params) in enumerate(self.ops):
            op = OPS_BY_NAME[name]
            b = "b" if op.arity == 2 else None
            if op.arity == 2 and i > 0:
                b = "b" if len(self.inputs) > 1 else expr
            expr = op.template.format(a=expr, b=b if b else "a", **params)
        args = "a, b" if len(self.inputs) > 1 else "a"
        return f"lambda {args}: {expr}"

    def repro(self) -> str:
        """A runnable reproducer (one statement per line)."""
        ins = ", ".join(i.source() for i in self.inputs)
        if DEVICE == "spyre":
            return (f"import torch, torch_spyre; from tests.difffuzz.difffuzz import _rand, check, "
                    f"use_device; use_device('spyre') or check({self.program()!r}, [{ins}], "
                    f"modes={list(self.modes)!r})")
        return (f"import torch, spike_torch; from tests.difffuzz.difffuzz import _rand, check; "
                f"check({self.program()!r}, [{ins}], modes={list(self.modes)!r})")


def _rand(shape: Sequence[int], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Deterministic values of a dtype: normal floats (a few exact zeros and
    repeats), small integers, random bools."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(tuple(shape), generator=g) > 0.5
    if dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        return torch.randint(-4 if dtype != torch.uint8 else 0, 5, tuple(shape), generator=g,
                             dtype=torch.int64).to(dtype)
    x = torch.randn(tuple(shape), generator=g, dtype=torch.float64) * 2
    if x.numel() > 2:
        x.view(-1)[0] = 0.0
        x.view(-1)[-1] = x.view(-1)[1]
    return x.to(dtype)


def _kind(dtype: str) -> str:
    return "f" if dtype in FLOATS else ("b" if dtype == "bool" else "i")


def generate(rng: random.Random, modes: Sequence[str] = MODES) -> Case:
    """A random case (valid for eager CPU in most, not all, draws)."""
    if DEVICE == "spyre":
        modes = [m for m in modes if m in SPYRE_MODES]
    dtype = rng.choice(GEN_DTYPES)
    layout = rng.choice(LAYOUTS)
    if layout == "scalar":
        shape: Tuple[int, ...] = ()
    elif layout == "empty":
        shape = tuple(rng.choice([0, 2, 3]) for _ in range(rng.randint(1, 3)))
        if 0 not in shape:
            shape = (0,) + shape[1:]
    elif layout == "channels_last":
        shape = tuple(rng.randint(1, 4) for _ in range(4))
    else:
        shape = tuple(rng.choice([1, 2, 3, 5, 7, 8, 17, 33]) for _ in range(rng.randint(1, 3)))
    inputs = [Input(shape, dtype, layout, rng.randrange(1 << 30))]
    ops: List[Tuple[str, Dict[str, Any]]] = []
    ndim = len(shape)
    for _ in range(rng.randint(1, 3)):
        kind = _kind(dtype) if not ops else rng.choice("fib")
        choices = [op for op in OPS if kind in op.kinds and op.min_ndim <= ndim
                   and not (op.needs_nonempty and 0 in shape)]
        op = rng.choice(choices)
        if op.arity == 2 and len(inputs) == 1:
            other = rng.choice(GEN_DTYPES) if rng.random() < 0.3 else dtype
            bshape = shape if rng.random() < 0.7 else shape[-1:] if shape else ()
            inputs.append(Input(bshape, other, rng.choice(("contiguous", "offset")),
                                rng.randrange(1 << 30)))
        params = {"d": rng.randrange(-max(ndim, 1), max(ndim, 1)) if ndim else 0,
                  "k": rng.choice([True, False])}
        ops.append((op.name, params))
    picked = tuple(m for m in modes if m == "eager" or rng.random() < 0.5)
    return Case(inputs, ops, picked)


# ---- running and comparing ----------------------------------------------------------

@dataclasses.dataclass
class Finding:
    case: Case
    mode: str
    kind: str              # "mismatch" (silent), "refusal" (device error, CPU works)
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.mode}: {self.detail}\n  {self.case.repro()}"


def _flat(r: Any) -> List[Any]:
    if isinstance(r, (list, tuple)):
        return [x for y in r for x in _flat(y)]
    return [r]


def compare(got: Any, want: Any, reduce_len: int = 1, floor: Optional[str] = None) -> Optional[str]:
    """None when ``got`` (from the device) equals ``want`` (eager CPU) at the
    tolerances of the module docstring; else what differs. ``floor``: the
    narrowest float dtype among the inputs, whose tolerance a wider float result
    gets too -- eager rounds half-precision intermediates where compiled graphs
    (here as in inductor) keep them in float32 until a result is stored."""
    g, w = _flat(got), _flat(want)
    if len(g) != len(w):
        return f"{len(g)} results, eager has {len(w)}"
    for k, (a, b) in enumerate(zip(g, w)):
        if not isinstance(b, torch.Tensor):
            if a != b and not (isinstance(a, float) and isinstance(b, float)
                               and math.isnan(a) and math.isnan(b)):
                return f"result {k}: {a!r}, eager {b!r}"
            continue
        if not isinstance(a, torch.Tensor):
            return f"result {k}: a {type(a).__name__}, eager a tensor"
        a = a.detach().cpu()
        b = b.detach()
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"result {k}: {a.dtype}{tuple(a.shape)}, eager {b.dtype}{tuple(b.shape)}"
        name = str(b.dtype).replace("torch.", "")
        if name not in TOL:
            if not torch.equal(a, b):
                bad = (a != b).nonzero()[:1].tolist()
                return f"result {k}: differs at {bad} ({a.reshape(-1)[:6].tolist()} vs eager " \
                       f"{b.reshape(-1)[:6].tolist()})"
            continue
        rtol, atol = TOL[name]
        if floor in TOL:
            rtol, atol = max(rtol, TOL[floor][0]), max(atol, TOL[floor][1])
        fin = b[torch.isfinite(b)].double()
        scale = max(1.0, float(fin.abs().max())) if fin.numel() else 1.0
        try:
            torch.testing.assert_close(a, b, rtol=rtol * math.sqrt(reduce_len),
                                       atol=atol * scale * math.sqrt(reduce_len), equal_nan=True)
        except AssertionError as e:
            return f"result {k} ({name}): " + " ".join(str(e).split())[:300]
    return None


def _as_held(want: Any) -> Any:
    """Eager CPU's result as the device holds it: on spyre an int64 tensor is
    int32 on the device, so a value past 32 bits keeps its low 32 bits
    (docs/spyre.md); on nkipy the result itself."""
    if DEVICE != "spyre":
        return want
    if isinstance(want, torch.Tensor) and want.dtype == torch.int64:
        return want.to(torch.int32).to(torch.int64)
    if isinstance(want, (list, tuple)):
        return type(want)(_as_held(w) for w in want)
    return want


def _to(x: Any, device: str) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _floor(case: Case) -> Optional[str]:
    """The narrowest float dtype among the case's inputs and casts (see compare)."""
    names = [i.dtype for i in case.inputs] + ["float16" for n, _ in case.ops if n == "to_f16"]
    for d in ("bfloat16", "float16", "float32"):
        if d in names:
            return d
    return None


def _reduce_len(case: Case) -> int:
    shape = case.inputs[0].shape
    if any(OPS_BY_NAME[n].reduces for n, _ in case.ops):
        return max([1] + list(shape))
    return 1


def _dynamic_inputs(case: Case, n: int) -> Optional[List[torch.Tensor]]:
    """The case's inputs with the first one's leading dimension set to n (the
    second too when it has the same leading length), or None if it has none."""
    first = case.inputs[0]
    if not first.shape or first.layout in ("expanded",):
        return None
    ins = []
    for i, inp in enumerate(case.inputs):
        shape = inp.shape
        if shape and (i == 0 or shape[0] == first.shape[0]) and len(shape) == len(first.shape):
            shape = (n,) + shape[1:]
        ins.append(eval(Input(shape, inp.dtype, inp.layout, inp.seed).source(),  # noqa: S307
                        {"torch": torch, "_rand": _rand}))
    return ins


def run_case(case: Case, backend_ready: Callable[[], None] = lambda: None) -> List[Finding]:
    """Runs ``case`` in its modes; the findings (empty: everything matched)."""
    env = {"torch": torch, "_rand": _rand}
    fn = eval(case.program(), env)  # noqa: S307  (our own generated source)
    inputs = [eval(i.source(), env) for i in case.inputs]  # noqa: S307
    findings: List[Finding] = []
    try:
        want = _as_held(fn(*inputs))
        cpu_error: Optional[BaseException] = None
    except Exception as e:  # noqa: BLE001
        want, cpu_error = None, e
    rlen = _reduce_len(case)
    floor = _floor(case)

    def judge(mode: str, run: Callable[[], Any], expect: Any = None,
              expect_error: Optional[BaseException] = None) -> None:
        try:
            got = run()
        except Exception as e:  # noqa: BLE001
            if expect_error is None:
                findings.append(Finding(case, mode, "refusal",
                                        f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
            return
        if expect_error is not None:
            findings.append(Finding(case, mode, "mismatch",
                                    f"returned a result where eager raises "
                                    f"{type(expect_error).__name__}: "
                                    f"{str(expect_error).splitlines()[0][:160]}"))
            return
        diff = compare(got, expect, rlen, floor)
        if diff:
            findings.append(Finding(case, mode, "mismatch", diff))

    for mode in case.modes:
        if mode == "eager":
            judge(mode, lambda: fn(*[_to(x, DEVICE) for x in inputs]), want, cpu_error)
        elif mode in ("compiled", "compiled_device"):
            if cpu_error is not None:
                continue          # Dynamo's own error paths are not ours to judge
            backend_ready()
            torch._dynamo.reset()
            dev = "cpu" if mode == "compiled" else DEVICE
            judge(mode, lambda: torch.compile(fn, backend=BACKEND)(
                *[_to(x, dev) for x in inputs]), want)
        elif mode == "dynamic":
            if cpu_error is not None:
                continue
            backend_ready()
            torch._dynamo.reset()
            c = torch.compile(fn, backend="nkipy", dynamic=True)
            for n in (3, 9, 17):
                ins = _dynamic_inputs(case, n)
                if ins is None:
                    break
                try:
                    w = fn(*ins)
                except Exception:  # noqa: BLE001
                    break
                before = len(findings)
                judge(f"dynamic(n={n})", lambda: c(*ins), w)
                if len(findings) > before:
                    break
        elif mode == "grad":
            if cpu_error is not None or case.inputs[0].dtype not in FLOATS:
                continue
            ref = _grads(fn, inputs, "cpu")
            if ref is None:
                continue
            judge(mode, lambda: _grads(fn, inputs, DEVICE), ref)
    return findings


def _grads(fn: Callable, inputs: List[torch.Tensor], device: str) -> Optional[List[Any]]:
    leaves = [x.detach().to(device).requires_grad_(x.is_floating_point()) for x in inputs]
    try:
        out = [o for o in _flat(fn(*leaves)) if isinstance(o, torch.Tensor)
               and o.is_floating_point() and o.requires_grad]
    except Exception:  # noqa: BLE001
        if device == "cpu":
            return None
        raise
    if not out:
        return None
    loss = sum(o.float().sum() for o in out)
    wrt = [x for x in leaves if x.requires_grad]
    if device == "cpu":
        try:
            return list(torch.autograd.grad(loss, wrt, allow_unused=True))
        except Exception:  # noqa: BLE001
            return None
    return list(torch.autograd.grad(loss, wrt, allow_unused=True))


def check(program: str, inputs: List[torch.Tensor], modes: Sequence[str] = MODES) -> None:
    """The reproducer's entry point: runs one program in ``modes`` and raises
    AssertionError listing the findings. ``dynamic`` compiles with
    ``dynamic=True`` and calls once on ``inputs`` as given (the fuzzer writes a
    dynamic finding's reproducer at the length that failed); ``grad`` compares
    the device's gradients of the outputs' sum with the CPU's."""
    fn = eval(program, {"torch": torch, "_rand": _rand})  # noqa: S307
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    found: List[str] = []
    names = [str(x.dtype).replace("torch.", "") for x in inputs if isinstance(x, torch.Tensor)]
    names += ["float16"] if "torch.float16)" in program else []
    floor = next((d for d in ("bfloat16", "float16", "float32") if d in names), None)
    want = err = None
    try:
        want = _as_held(fn(*inputs))
    except Exception as e:  # noqa: BLE001
        err = e
    for mode in modes:
        try:
            if mode == "eager":
                got = fn(*[_to(x, DEVICE) for x in inputs])
            elif mode in ("compiled", "compiled_device", "dynamic"):
                torch._dynamo.reset()
                dev = DEVICE if mode == "compiled_device" else "cpu"
                got = torch.compile(fn, backend=BACKEND, dynamic=mode == "dynamic")(
                    *[_to(x, dev) for x in inputs])
            elif mode == "grad":
                ref = _grads(fn, inputs, "cpu") if err is None else None
                if ref is None:
                    continue      # no float gradient to compare (as run_case)
                got = _grads(fn, inputs, DEVICE)
            else:
                continue
        except Exception as e:  # noqa: BLE001
            if err is None:
                found.append(f"{mode}: raised {type(e).__name__}: {e}")
            continue
        if err is not None:
            found.append(f"{mode}: returned a result where eager raises {err!r}")
            continue
        diff = compare(got, ref if mode == "grad" else want,
                       max([1] + [max(x.shape, default=1) for x in inputs]), floor)
        if diff:
            found.append(f"{mode}: {diff}")
    assert not found, "\n".join(found)


def reproducer(f: Finding) -> Case:
    """The case of a finding as its reproducer runs it: only the mode that
    failed, and for ``dynamic(n=K)`` the inputs at the length K that failed."""
    mode = f.mode.split("(")[0]
    case = dataclasses.replace(f.case, modes=(mode,))
    if mode == "dynamic" and "(n=" in f.mode:
        n = int(f.mode.split("(n=")[1].rstrip(")"))
        first = case.inputs[0]
        ins = [dataclasses.replace(i, shape=(n,) + i.shape[1:])
               if i.shape and (k == 0 or i.shape[0] == first.shape[0])
               and len(i.shape) == len(first.shape) else i
               for k, i in enumerate(case.inputs)]
        case = dataclasses.replace(case, inputs=ins)
    return case


def reproduces(case: Case) -> bool:
    """Whether ``case.repro()`` fails when run alone (through ``check``)."""
    try:
        exec(case.repro().split("; ", 2)[2], {"torch": torch, "_rand": _rand,  # noqa: S102
                                               "check": check, "use_device": use_device})
    except AssertionError:
        return True
    return False


# ---- shrinking ------------------------------------------------------------------------

def _variants(case: Case) -> List[Case]:
    out = []
    if len(case.ops) > 1:
        for i in range(len(case.ops)):
            out.append(dataclasses.replace(case, ops=case.ops[:i] + case.ops[i + 1:]))
    if len(case.modes) > 1:
        for m in case.modes:
            out.append(dataclasses.replace(case, modes=tuple(x for x in case.modes if x != m)))
    for k, inp in enumerate(case.inputs):
        for d, n in enumerate(inp.shape):
            for smaller in sorted({1, n // 2, n - 1}):
                if 0 < smaller < n:
                    shape = inp.shape[:d] + (smaller,) + inp.shape[d + 1:]
                    ins = list(case.inputs)
                    ins[k] = dataclasses.replace(inp, shape=shape)
                    out.append(dataclasses.replace(case, inputs=ins))
        if inp.layout != "contiguous":
            ins = list(case.inputs)
            ins[k] = dataclasses.replace(inp, layout="contiguous")
            out.append(dataclasses.replace(case, inputs=ins))
    return out


def shrink(case: Case, still_fails: Callable[[Case], bool], budget: int = 60) -> Case:
    """A smaller case that still fails (greedy: the first variant that fails is
    taken, until none does or ``budget`` runs are spent)."""
    runs = 0
    improved = True
    while improved and runs < budget:
        improved = False
        for v in _variants(case):
            runs += 1
            try:
                ok = still_fails(v)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
                ok = False
            if ok:
                case, improved = v, True
                break
            if runs >= budget:
                break
    return case


# ---- known open findings ---------------------------------------------------------------
#
# (op name, mode prefix, kind) -> what it is. A finding whose case uses the op in
# that mode with that kind is reported as known. Each entry names its cause.
KNOWN: Dict[Tuple[str, str, str], str] = {}


def known(f: Finding) -> Optional[str]:
    for name, _ in f.case.ops:
        why = KNOWN.get((name, f.mode.split("(")[0], f.kind))
        if why:
            return why
    return None
