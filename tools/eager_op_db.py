"""Where eager ops of PyTorch's OpInfo database run on the nkipy device.

For each OpInfo of ``op_db`` that supports float32 on the CPU, the first sample
input runs once on the CPU and once on nkipy tensors; ``spike_torch.op_stats()``
says whether a device kernel ran and whether the CPU fallback did, and the
result is compared with the CPU's (float32 tolerances: rtol 1.3e-6, atol 1e-5).

    python tools/eager_op_db.py [--start N] [--limit N] [--verbose]

Prints one line per op (with --verbose) and the totals: ``device`` (a device
kernel ran, the result is right; ``device_only`` of them without any CPU
fallback), ``cpu_only`` (only the CPU fallback ran), ``neither`` (metadata
ops: views, copies), ``random`` (the CPU gives two different results: not
compared), ``wrong``, ``crash`` (raised on the device, not on the CPU).
This is a measurement, not a test: the whole-op_db tests are elsewhere.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import warnings


def _to(a, device):
    import torch

    if isinstance(a, torch.Tensor):
        return a.detach().to(device)
    if isinstance(a, (list, tuple)):
        return type(a)(_to(x, device) for x in a)
    if isinstance(a, dict):
        return {k: _to(v, device) for k, v in a.items()}
    return a


def _flat(r):
    import torch

    if isinstance(r, torch.Tensor):
        return [r]
    if isinstance(r, (list, tuple)):
        return [t for x in r for t in _flat(x)]
    return []


def _same(got, want) -> bool:
    import torch

    g, w = _flat(got), _flat(want)
    if len(g) != len(w):
        return False
    for a, b in zip(g, w):
        a = a.cpu() if a.device.type != "cpu" else a
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if b.dtype.is_floating_point or b.dtype.is_complex:
            try:
                torch.testing.assert_close(a, b, rtol=1.3e-6, atol=1e-5, equal_nan=True)
            except AssertionError:
                return False
        elif not torch.equal(a, b):
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("SPIKE_TORCH_FALLBACK_WARN", "0")
    warnings.simplefilter("ignore")
    import torch
    import spike_torch
    from torch.testing._internal.common_methods_invocations import op_db

    ops = op_db[args.start:]
    if args.limit is not None:
        ops = ops[:args.limit]
    totals: collections.Counter = collections.Counter()
    for k, info in enumerate(ops):
        name = info.name + ("." + info.variant_test_name if info.variant_test_name else "")
        if torch.float32 not in info.supported_dtypes("cpu"):
            totals["no_float32"] += 1
            continue
        try:
            torch.manual_seed(0)
            sample = next(iter(info.sample_inputs("cpu", torch.float32)))
            inp, a, kw = sample.input, sample.args, sample.kwargs
            torch.manual_seed(0)
            want = info.op(*_to([inp, *a], "cpu"), **_to(kw, "cpu"))
            torch.manual_seed(0)
            again = info.op(*_to([inp, *a], "cpu"), **_to(kw, "cpu"))
        except Exception:
            totals["cpu_error"] += 1
            continue
        random = not _same(again, want)
        dev = _to([inp, *a], "nkipy")
        dkw = _to(kw, "nkipy")
        before = spike_torch.op_stats()
        try:
            got = info.op(*dev, **dkw)
            err = None
        except Exception as exc:   # noqa: BLE001 - classified, not hidden
            got, err = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        after = spike_torch.op_stats()
        ran = after["device_calls"] > before["device_calls"]
        fell = after["cpu_fallback_calls"] > before["cpu_fallback_calls"]
        if err is not None:
            status = "crash"
        elif random:
            status = "random"
        elif not _same(got, want):
            status = "wrong"
        elif ran:
            status = "device"
            if not fell:
                totals["device_only"] += 1
        elif fell:
            status = "cpu_only"
        else:
            status = "neither"
        totals[status] += 1
        if args.verbose:
            print(f"{args.start + k:4d} {name:45s} {status}{' ' + err if err else ''}",
                  flush=True)
    print("totals:", dict(sorted(totals.items())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
