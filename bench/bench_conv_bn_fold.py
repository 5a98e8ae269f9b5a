#!/usr/bin/env python3
"""The conv + batch norm fold (torch_to_nkipy/conv_bn_fold.py) A/B, in one process.

For each CNN of bench/cnn_models.py (one 224 x 224 image, eval mode,
``torch.no_grad()``), compiled with ``backend="nkipy"`` and CPU tensors four ways,
timed interleaved (round robin, per-call medians):

- ``nofold``: the fold switched off (the graph keeps its batch norms);
- ``fold2``: pairs folded only where the weight has at most twice as many
  elements as the output (``MAX_WEIGHT_PER_OUTPUT = 2``);
- ``fold``: every pair folded (the default, ``MAX_WEIGHT_PER_OUTPUT = None``);
- ``no_bn``: the net with its batch norms replaced by ``nn.Identity`` (a
  different function: the bound on what removing batch norm could give).

Prints each variant's median and ``nofold / variant`` (above 1: faster). Not a test.

    python bench/bench_conv_bn_fold.py [--models resnet18,mobilenet_v2] [--rounds 30]
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import cnn_models  # noqa: E402
import torch_to_nkipy  # noqa: E402
import torch_to_nkipy.backend as backend_mod  # noqa: E402
from torch_to_nkipy import conv_bn_fold  # noqa: E402


def _strip_bn(m: nn.Module) -> nn.Module:
    for name, c in m.named_children():
        if isinstance(c, nn.modules.batchnorm._BatchNorm):
            setattr(m, name, nn.Identity())
        else:
            _strip_bn(c)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    torch_to_nkipy.init_nkipy_backend(nkipy_cache=tempfile.mkdtemp(prefix="nkipy_fold_"))
    real = conv_bn_fold.fold_conv_batch_norm
    default = conv_bn_fold.MAX_WEIGHT_PER_OUTPUT
    for name in args.models.split(","):
        torch.manual_seed(0)
        m = getattr(cnn_models, name)().eval()
        x = torch.randn(1, 3, 224, 224)
        fns = {}
        with torch.no_grad():
            want = m(x)
            for v in ("nofold", "fold2", "fold", "no_bn"):
                mod = _strip_bn(copy.deepcopy(m)) if v == "no_bn" else copy.deepcopy(m)
                backend_mod.fold_conv_batch_norm = (lambda g: 0) if v == "nofold" else real
                conv_bn_fold.MAX_WEIGHT_PER_OUTPUT = 2.0 if v == "fold2" else default
                torch._dynamo.reset()
                c = torch.compile(mod, backend="nkipy")
                got = c(x)   # compiles now, under this variant's settings
                if v != "no_bn":
                    print(f"{name} {v}: max |diff| vs eager {(got - want).abs().max().item():.2e}")
                fns[v] = c
            backend_mod.fold_conv_batch_norm = real
            conv_bn_fold.MAX_WEIGHT_PER_OUTPUT = default
            times = {v: [] for v in fns}
            for _ in range(args.rounds):
                for v, c in fns.items():
                    t = time.perf_counter()
                    c(x)
                    times[v].append(time.perf_counter() - t)
        med = {v: statistics.median(t) for v, t in times.items()}
        print(name, "  ".join(f"{v} {1e3 * t:.1f} ms" for v, t in med.items()))
        print(name, "  ".join(f"nofold/{v} {med['nofold'] / t:.3f}" for v, t in med.items()
                              if v != "nofold"), flush=True)


if __name__ == "__main__":
    main()
