"""spike-run: load a NEFF, feed it .npy inputs, run or benchmark it, save outputs.

Examples::

    spike-run add.neff -i a=a.npy -i b=b.npy -o out/
    spike-run add.neff -i a=a.npy -i b=b.npy --benchmark --warmup 5 --iterations 100
    spike-run add.neff -i a=a_{rank}.npy -i b=b.npy --num-cores 2 -o out/

With ``--num-cores N`` the model is loaded on N consecutive cores (from
``--core-id``) and run on them concurrently, one thread per core; ``{rank}``
in an input path is replaced by the core's rank, and outputs go to
``OUTDIR/rank<r>/``.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from typing import Dict, List, Optional, Sequence

import numpy as np

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of spike-run."""
    p = argparse.ArgumentParser(
        prog="spike-run",
        description="Run a NEFF on the nkrt runtime with .npy inputs and save its outputs.",
    )
    p.add_argument("neff", help="path of the NEFF file")
    p.add_argument("-i", "--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input tensor; {rank} in FILE is replaced by the rank (repeatable)")
    p.add_argument("-o", "--output-dir", default=None, metavar="OUTDIR",
                   help="directory for the outputs as <name>.npy (default: not saved)")
    p.add_argument("-v", "--verbose", action="store_true", help="print more, log debug messages")
    p.add_argument("--save-trace", action="store_true",
                   help="write a Chrome trace of the execution")
    p.add_argument("--ntff-name", default=None, help="trace file name (default <neff stem>.ntff)")
    p.add_argument("--benchmark", action="store_true", help="benchmark instead of one run")
    p.add_argument("--benchmark-mode", choices=("device", "host"), default="device",
                   help="timing source for --benchmark (default device)")
    p.add_argument("--warmup", type=int, default=5, metavar="N", help="warmup iterations")
    p.add_argument("--iterations", type=int, default=10, metavar="N",
                   help="benchmark iterations")
    p.add_argument("--name", default=None, help="model name (default: the NEFF's kernel name)")
    p.add_argument("--core-id", type=int, default=0, help="(first) logical core")
    p.add_argument("--cc-enabled", action="store_true", help="load with collectives enabled")
    p.add_argument("--rank-id", type=int, default=0, help="(first) rank in the collective group")
    p.add_argument("--world-size", type=int, default=None,
                   help="ranks in the collective group (default: --num-cores)")
    p.add_argument("--num-cores", type=int, default=1, metavar="N",
                   help="run on N cores concurrently, one thread each")
    return p


def _parse_inputs(specs: Sequence[str]) -> Dict[str, str]:
    inputs: Dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"input must be NAME=FILE.npy, got {spec!r}")
        if name in inputs:
            raise ValueError(f"input {name!r} given twice")
        inputs[name] = path
    return inputs


def _describe(array: np.ndarray) -> str:
    flat = array.reshape(-1)
    head = np.array2string(flat[:6], precision=4, separator=", ")
    return f"shape={array.shape} dtype={array.dtype} first={head}"


class _Run:
    """One rank's work: load, feed, run or benchmark, save."""

    def __init__(self, args: argparse.Namespace, index: int, input_paths: Dict[str, str]) -> None:
        self.args = args
        self.index = index
        self.core = args.core_id + index
        self.rank = args.rank_id + index
        self.input_paths = {k: v.replace("{rank}", str(self.rank)) for k, v in input_paths.items()}
        self.lines: List[str] = []
        self.error: Optional[BaseException] = None

    def prefix(self) -> str:
        return f"[rank {self.rank} core {self.core}] " if self.args.num_cores > 1 else ""

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by main()
            self.error = exc

    def _run(self) -> None:
        from . import SpikeModel, SpikeTensor
        from .safe_files import safe_child

        args = self.args
        world = args.world_size if args.world_size is not None else max(args.num_cores, 1)
        model = SpikeModel.load_from_neff(
            args.neff, name=args.name, core_id=self.core, cc_enabled=args.cc_enabled,
            rank_id=self.rank, world_size=world)
        self.lines.append(f"loaded {args.neff} as '{model.name}' on core {self.core}")
        if args.verbose:
            for kind, info in (("input", model.input_tensors_info),
                               ("output", model.output_tensors_info)):
                for name, meta in info.items():
                    alias = f" (aliases input '{meta.alias_of}')" if meta.alias_of else ""
                    self.lines.append(
                        f"  {kind} {name}: {meta.dtype}{list(meta.shape)}{alias}")
        inputs = {}
        for name, path in self.input_paths.items():
            array = np.load(path, allow_pickle=False)
            inputs[name] = SpikeTensor.from_numpy(array, name=name, core_id=self.core)
            self.lines.append(f"input {name} <- {path} ({_describe(array) if args.verbose else array.shape})")
        outputs = model._allocate_outputs()
        if args.benchmark:
            result = model.benchmark(inputs, outputs, warmup_iter=args.warmup,
                                     benchmark_iter=args.iterations, mode=args.benchmark_mode)
            self.lines.append(f"benchmark ({args.benchmark_mode}): {result}")
        else:
            ntff = args.ntff_name
            if args.save_trace:
                if ntff is None:
                    ntff = model._default_ntff_name()
                if args.num_cores > 1:
                    stem, ext = os.path.splitext(ntff)
                    ntff = f"{stem}_rank{self.rank}{ext or '.ntff'}"
            model(inputs, outputs, save_trace=args.save_trace, ntff_name=ntff)
            self.lines.append("executed")
            if args.save_trace:
                self.lines.append(f"trace written to {ntff}")
        bound = model._bind_outputs(inputs, outputs)
        out_dir = args.output_dir
        if out_dir is not None and args.num_cores > 1:
            out_dir = os.path.join(out_dir, f"rank{self.rank}")
        # every output name is checked before anything is written: a NEFF's
        # output named "../x" must not place a file outside OUTDIR
        paths = {name: safe_child(out_dir, f"{name}.npy", "output")
                 for name in bound} if out_dir is not None else {}
        for name, tensor in bound.items():
            array = tensor.numpy()
            if out_dir is not None:
                path = paths[name]
                os.makedirs(out_dir, exist_ok=True)
                np.save(path, array)
                self.lines.append(f"output {name} -> {path} ({_describe(array)})")
            else:
                self.lines.append(f"output {name}: {_describe(array)}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of spike-run; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.num_cores < 1:
        parser.error(f"--num-cores must be >= 1, got {args.num_cores}")
    if args.warmup < 0 or args.iterations < 1:
        parser.error("--warmup must be >= 0 and --iterations >= 1")
    if args.core_id < 0:
        parser.error(f"--core-id must be >= 0, got {args.core_id}")
    try:
        input_paths = _parse_inputs(args.input)
    except ValueError as exc:
        parser.error(str(exc))

    from . import SpikeRuntimeError, get_spike_singleton

    try:
        spike = get_spike_singleton()
        last = args.core_id + args.num_cores - 1
        if last >= spike.core_count:
            print(f"spike-run: error: core {last} is not visible: the runtime has "
                  f"{spike.core_count} core(s) (NEURON_RT_VISIBLE_CORES)", file=sys.stderr)
            return 1
    except SpikeRuntimeError as exc:
        print(f"spike-run: error: {exc}", file=sys.stderr)
        return 1

    runs = [_Run(args, i, input_paths) for i in range(args.num_cores)]
    if len(runs) == 1:
        runs[0].run()
    else:
        threads = [threading.Thread(target=r.run, name=f"spike-run-{r.rank}") for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    status = 0
    for r in runs:
        for line in r.lines:
            print(r.prefix() + line)
        if r.error is not None:
            if isinstance(r.error, (SpikeRuntimeError, ValueError, TypeError, OSError)):
                print(f"spike-run: error: {r.prefix()}{r.error}", file=sys.stderr)
                status = 1
            else:
                raise r.error
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
