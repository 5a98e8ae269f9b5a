#!/usr/bin/env python3
"""Standalone GEMM benchmark: the nkrt runtime's GEMM providers against
torch.mm and numpy.matmul, row-major C = A @ B, GFLOP/s.

    python bench/bench_gemm.py                      # default shapes, 1 and 2 threads
    python bench/bench_gemm.py --lowp               # also bfloat16 / float16
    python bench/bench_gemm.py --shapes 512x512x512,1x4096x4096 --threads 2 --seconds 2
    python bench/bench_gemm.py --stat best                  # fastest call, for a busy host

It compiles a small C harness together with runtime/src/*.c (cc -O2, like the
Makefile), which calls the runtime's batched GEMM entry on a worker pool of 1
or 2 threads with provider "mkl" (found like the runtime does: NKRT_GEMM_PATH,
defaulting here to <sys.prefix>/lib where `pip install mkl` puts it) and
"reference" (the built-in C kernel). numpy and torch (when importable) run in
subprocesses with their thread counts pinned. Each cell is the median call
over >= 3 calls and >= --seconds of calls, after one warm-up call (the median
keeps a busy neighbour's bursts out); the ratio compares with torch.mm at the
same thread count. Not a test.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SHAPES = "64x64x64,256x256x256,1024x1024x1024,2048x2048x2048,1x4096x4096,32x4096x4096"

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gemm.h"
static double now(void) { return (double)nkrt_now_ns() * 1e-9; }
static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}
static uint16_t to16(uint32_t dt, float v) {
  return dt == NKRT_DTYPE_BFLOAT16 ? nkrt_float_to_bf16(v) : nkrt_float_to_half(v);
}
int main(int argc, char **argv) {
  if (argc < 6) return 2;
  const nkrt_gemm_provider_t *p = nkrt_gemm_find(argv[1]);
  if (!p) { printf("unavailable\n"); return 0; }
  if (getenv("BENCH_REF_ISA") && !nkrt_gemm_ref_force_isa(getenv("BENCH_REF_ISA"))) return 3;
  nkrt_pool_t *pool = NULL;
  nkrt_status_t st = nkrt_pool_create((uint32_t)atoi(argv[2]), &pool);
  if (st) return 4;
  uint32_t dt = !strcmp(argv[3], "bf16") ? NKRT_DTYPE_BFLOAT16
              : !strcmp(argv[3], "f16") ? NKRT_DTYPE_FLOAT16 : NKRT_DTYPE_FLOAT32;
  size_t es = dt == NKRT_DTYPE_FLOAT32 ? 4 : 2;
  double secs = atof(argv[4]);
  for (int s = 5; s < argc; s++) {
    long m, n, k;
    if (sscanf(argv[s], "%ldx%ldx%ld", &m, &n, &k) != 3) return 5;
    void *a = malloc((size_t)(m * k) * es), *b = malloc((size_t)(k * n) * es);
    void *c = malloc((size_t)(m * n) * es);
    if (!a || !b || !c) return 6;
    for (long i = 0; i < m * k; i++) {
      float v = (float)((i * 7) % 13) / 13.f - 0.5f;
      if (es == 4) ((float *)a)[i] = v; else ((uint16_t *)a)[i] = to16(dt, v);
    }
    for (long i = 0; i < k * n; i++) {
      float v = (float)((i * 5) % 11) / 11.f - 0.5f;
      if (es == 4) ((float *)b)[i] = v; else ((uint16_t *)b)[i] = to16(dt, v);
    }
    double end = 0, *times = malloc(100000 * sizeof(double));
    int reps = 0;
    if (!times) return 6;
    for (int warm = 1;; warm = 0) {
      double t0 = now();
      if (es == 4)
        nkrt_gemm_sgemm_batched(p, pool, 1, 0, 0, m, n, k, 1.f, a, k, 0, b, n, 0, 0.f, c, n, 0);
      else
        nkrt_gemm_lowp_batched(p, pool, dt, 1, 0, 0, m, n, k, 1.f, a, k, 0, b, n, 0, 0.f, c, n, 0);
      double t1 = now();
      if (warm) { end = t1 + secs; continue; }
      times[reps] = t1 - t0;
      if (++reps >= 100000 || (reps >= 3 && t1 >= end)) break;
    }
    qsort(times, (size_t)reps, sizeof(double), cmp);
    printf("%s %.3f %.3f\n", argv[s], 2.0 * m * n * k / times[reps / 2] * 1e-9,
           2.0 * m * n * k / times[0] * 1e-9);
    free(times);
    fflush(stdout);
    free(a), free(b), free(c);
  }
  nkrt_pool_destroy(pool);
  return 0;
}
"""

PY_BENCH = r"""
import sys, time
which, threads, dtype, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
import numpy as np
if which == "torch":
    import torch
    torch.set_num_threads(threads)
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
for shape in sys.argv[5:]:
    m, n, k = map(int, shape.split("x"))
    a = ((np.arange(m * k) % 13) / 13 - 0.5).astype(np.float32).reshape(m, k)
    b = ((np.arange(k * n) % 11) / 11 - 0.5).astype(np.float32).reshape(k, n)
    if which == "torch":
        ta, tb = torch.from_numpy(a).to(tdt), torch.from_numpy(b).to(tdt)
        c = torch.empty(m, n, dtype=tdt)
        f = lambda: torch.mm(ta, tb, out=c)
    else:
        if dtype != "f32":
            print(shape, "nan", "nan"); continue
        c = np.empty((m, n), np.float32)
        f = lambda: np.matmul(a, b, out=c)
    f()
    times, end = [], time.perf_counter() + secs
    while True:
        t0 = time.perf_counter(); f(); t1 = time.perf_counter()
        times.append(t1 - t0)
        if len(times) >= 100000 or (len(times) >= 3 and t1 >= end): break
    times.sort()
    print(shape, 2.0 * m * n * k / times[len(times) // 2] * 1e-9,
          2.0 * m * n * k / times[0] * 1e-9, flush=True)
"""


def build_harness(workdir: Path) -> Path:
    exe = workdir / "gemm_harness"
    src = workdir / "gemm_harness.c"
    src.write_text(HARNESS)
    rt = sorted(str(p) for p in (ROOT / "runtime" / "src").glob("*.c"))
    cmd = [os.environ.get("CC", "cc"), "-std=c11", "-D_GNU_SOURCE", "-O2",
           f"-I{ROOT / 'runtime' / 'include'}", f"-I{ROOT / 'runtime' / 'src'}",
           *rt, str(src), "-o", str(exe), "-ldl", "-lpthread"]
    subprocess.run(cmd, check=True)
    return exe


STAT = 1  # 1: median call, 2: fastest call (column of the harness output)


def parse(out: str) -> dict[str, float]:
    res = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            res[parts[0]] = float(parts[STAT])
    return res


def run_c(exe: Path, provider: str, threads: int, dtype: str, secs: float, shapes, isa=None):
    env = dict(os.environ)
    if isa:
        env["BENCH_REF_ISA"] = isa
    p = subprocess.run([str(exe), provider, str(threads), dtype, str(secs), *shapes],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0 or "unavailable" in p.stdout:
        return None
    return parse(p.stdout)


def run_py(which: str, threads: int, dtype: str, secs: float, shapes):
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    p = subprocess.run([sys.executable, "-c", PY_BENCH, which, str(threads), dtype, str(secs),
                        *shapes], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return None
    return parse(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated MxNxK")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--seconds", type=float, default=1.0, help="time per cell")
    ap.add_argument("--lowp", action="store_true", help="also bfloat16 and float16")
    ap.add_argument("--stat", choices=["median", "best"], default="median",
                    help="median call (default) or fastest call; the fastest is the better "
                         "estimate on a host shared with other jobs")
    ap.add_argument("--ref-isas", action="store_true",
                    help="also the reference kernel forced to avx2+fma and generic")
    args = ap.parse_args()
    global STAT
    STAT = 2 if args.stat == "best" else 1
    os.environ.setdefault("NKRT_GEMM_PATH", os.path.join(sys.prefix, "lib"))
    shapes = args.shapes.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    dtypes = ["f32"] + (["bf16", "f16"] if args.lowp else [])
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_harness(Path(tmp))
        for dtype in dtypes:
            for t in threads:
                cols: list[tuple[str, dict | None]] = [
                    ("nkrt:mkl", run_c(exe, "mkl", t, dtype, args.seconds, shapes)),
                    ("nkrt:reference", run_c(exe, "reference", t, dtype, args.seconds, shapes)),
                ]
                if args.ref_isas and dtype == "f32":
                    for isa in ("avx2+fma", "generic"):
                        cols.append((f"nkrt:ref-{isa}",
                                     run_c(exe, "reference", t, dtype, args.seconds, shapes, isa)))
                cols.append(("torch.mm", run_py("torch", t, dtype, args.seconds, shapes)))
                cols.append(("numpy", run_py("numpy", t, dtype, args.seconds, shapes)))
                base = dict(cols).get("torch.mm")
                print(f"\n{dtype}, {t} thread(s): GFLOP/s of the {args.stat} call (x torch.mm)")
                print(f"{'MxNxK':>16} " + " ".join(f"{name:>19}" for name, _ in cols))
                for s in shapes:
                    cells = []
                    for _, res in cols:
                        v = res.get(s) if res else None
                        if v is None or v != v:
                            cells.append(f"{'-':>19}")
                        elif base and base.get(s):
                            cells.append(f"{v:>10.1f} ({v / base[s]:4.2f}x)")
                        else:
                            cells.append(f"{v:>19.1f}")
                    print(f"{s:>16} " + " ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
