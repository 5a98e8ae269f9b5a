#!/usr/bin/env python3
"""torch.compile(backend="nkipy") against eager PyTorch and inductor, one process,
same threads: per-call time (median of --iters calls after two warm-ups), cold
compile time of the first call, and the ratio to eager. Not a test.

    python bench/bench_torch_compile.py                 # mlp, bert, tiny
    python bench/bench_torch_compile.py --models mlp --no-inductor
    python bench/bench_torch_compile.py --device nkipy  # inputs and weights on the nkipy device

Models: "mlp" (4 x Linear(1024, 1024) + GELU, batch 64), "bert" (a BERT-base
encoder layer: nn.TransformerEncoderLayer(768, 12, 3072), sequence 128, eval),
"tiny" (Linear(8, 8), batch 2: per-call overhead).
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def models():
    torch.manual_seed(0)
    return {
        "mlp": (nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.GELU())
                                for _ in range(4)]), torch.randn(64, 1024)),
        "bert": (nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, dropout=0.0,
                                            activation="gelu").eval(), torch.randn(1, 128, 768)),
        "tiny": (nn.Linear(8, 8), torch.randn(2, 8)),
    }


def per_call_ms(f, x, iters):
    with torch.no_grad():
        f(x)
        f(x)
        times = []
        for _ in range(iters):
            t = time.perf_counter()
            f(x)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def cold_s(f, x):
    t = time.perf_counter()
    with torch.no_grad():
        f(x)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,bert,tiny")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--device", default="cpu", choices=("cpu", "nkipy"))
    args = ap.parse_args()
    from torch_to_nkipy import init_nkipy_backend

    init_nkipy_backend(nkipy_cache=tempfile.mkdtemp(prefix="bench_t2n_"))
    if args.device == "nkipy":
        import spike_torch  # noqa: F401
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, inputs on {args.device}")
    print(f"{'model':6} {'eager ms':>9} {'nkipy ms':>9} {'x eager':>8} {'inductor ms':>12} "
          f"{'cold nkipy s':>13} {'cold inductor s':>16}")
    for name, (model, x) in models().items():
        if name not in args.models.split(","):
            continue
        eager = per_call_ms(model, x, args.iters)
        torch._dynamo.reset()
        m = copy.deepcopy(model).to(args.device)
        xd = x.to(args.device)
        cn = torch.compile(m, backend="nkipy")
        cold_n = cold_s(cn, xd)
        nk = per_call_ms(cn, xd, args.iters)
        ind = cold_i = float("nan")
        if not args.no_inductor:
            torch._dynamo.reset()
            ci = torch.compile(model)
            cold_i = cold_s(ci, x)
            ind = per_call_ms(ci, x, args.iters)
        print(f"{name:6} {eager:9.3f} {nk:9.3f} {eager / nk:8.2f} {ind:12.3f} {cold_n:13.2f} "
              f"{cold_i:16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
