#!/usr/bin/env python3
"""The differential fuzzer against eager PyTorch (tests/difffuzz/difffuzz.py),
for as long as asked: random small programs run eagerly on the ``nkipy`` device,
compiled on CPU and device inputs, with dynamic shapes and through autograd,
each compared with eager CPU. Every new finding is shrunk and written, with a
runnable one-line reproducer, to the report file.

    python tools/fuzz_torch.py --seconds 600 --seed 1 [--report build/fuzz-torch.txt]

Exit status 1 when a new silent mismatch was found (refusals -- the device
raising where eager works -- are reported, not failed on)."""
from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import tempfile
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=0, help="stop after this many cases (0: time)")
    ap.add_argument("--report", default=os.path.join(REPO, "build", "fuzz-torch.txt"))
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--device", choices=("nkipy", "spyre"), default="nkipy",
                    help="spyre: torch_spyre's device (eager, compiled with torch.compile's "
                         "default backend, grad)")
    args = ap.parse_args(argv)

    warnings.simplefilter("ignore")
    logging.disable(logging.ERROR)      # fake tensors log the meta errors of invalid draws
    import torch
    if args.device == "spyre":
        import torch_spyre  # noqa: F401
    else:
        import spike_torch  # noqa: F401
        import torch_to_nkipy

        torch_to_nkipy.init_nkipy_backend(nkipy_cache=tempfile.mkdtemp(prefix="fuzz_torch_"),
                                          log_level=logging.ERROR)
    from tests.difffuzz import difffuzz as df

    df.use_device(args.device)
    torch._dynamo.config.cache_size_limit = 64
    rng = random.Random(args.seed)
    os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
    deadline = time.monotonic() + args.seconds
    n = mismatches = refusals = known = 0
    seen = set()
    with open(args.report, "w") as report:
        report.write(f"# fuzz_torch seed {args.seed}\n")
        while time.monotonic() < deadline and (not args.cases or n < args.cases):
            case = df.generate(rng)
            n += 1
            for f in df.run_case(case):
                why = df.known(f)
                key = (f.kind, f.mode.split("(")[0], tuple(op for op, _ in f.case.ops))
                if key in seen:
                    continue
                seen.add(key)
                if why:
                    known += 1
                    continue
                if f.kind == "refusal":
                    refusals += 1
                else:
                    mismatches += 1
                small = f.case if args.no_shrink or f.kind == "refusal" else df.shrink(
                    f.case, lambda c, m=f.mode, k=f.kind: any(
                        g.kind == k and g.mode.split("(")[0] == m.split("(")[0]
                        for g in df.run_case(dataclasses_replace(c, m))))
                if f.kind == "mismatch":
                    again = [g for g in df.run_case(df.reproducer(df.Finding(
                        small, f.mode, f.kind, f.detail))) if g.kind == f.kind]
                    f = again[0] if again else f     # the shrunk case's own detail and length
                    small = df.reproducer(df.Finding(small, f.mode, f.kind, f.detail))
                    if not df.reproduces(small):
                        f = df.Finding(small, f.mode, f.kind,
                                       f.detail + " [the reproducer alone does not fail]")
                text = str(df.Finding(small, f.mode, f.kind, f.detail))
                print(text, flush=True)
                report.write(text + "\n")
                report.flush()
    print(f"fuzz_torch: {n} cases, {mismatches} new mismatches, {refusals} refusals, "
          f"{known} known; report {args.report}")
    return 1 if mismatches else 0


def dataclasses_replace(case, mode):
    """The case run in the one mode that failed (shrinking runs only it)."""
    import dataclasses

    return dataclasses.replace(case, modes=(mode.split("(")[0],))


if __name__ == "__main__":
    sys.exit(main())
