"""What every benchmark chart under docs/benchmarks/ shares: matplotlib loaded
headless (or None when it is not installed), ratio axes that stay readable when
ratios span decades, a legend for every colour, and a canvas that keeps every
label.

Each bench script draws its own panels and takes ``--replot``: the PNG drawn
again from the JSON the last run wrote, without measuring anything.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

#: Tick values a ratio axis may show (times 10^k).
_NICE = (1.0, 2.0, 5.0)


def pyplot() -> Optional[Any]:
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _ticks(lo: float, hi: float) -> list:
    """1-2-5 values covering [lo, hi] (positive), at most about eight of them."""
    out = []
    for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0 ** k for m in _NICE]
    inside = [t for t in out if lo / 1.0001 <= t <= hi * 1.0001]
    while len(inside) > 8:      # thin out: keep 1-5 or only the powers of ten
        keep = {1.0} if len(inside) > 16 else {1.0, 5.0}
        inside = [t for t in inside if round(t / 10.0 ** math.floor(math.log10(t)), 6) in keep]
    return inside


def _label(v: float, unit: str) -> str:
    text = f"{v:g}" if v >= 0.001 else f"{v:.0e}"
    return text + unit


def ratio_axis(ax: Any, values: Iterable[float], axis: str = "x", unit: str = "x",
               log_above: float = 8.0, extra: Sequence[float] = (1.0,)) -> None:
    """Scales ``ax``'s ``axis`` for the positive ``values`` (plus ``extra``, by
    default the 1x line): logarithmic when they span more than ``log_above``
    times (so a 1.2x bar is not a sliver beside a 70x one), with plain labels at
    1-2-5 steps and no minor labels (log axes' default minor labels overlap);
    linear otherwise."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    vals = [float(v) for v in list(values) + list(extra) if v is not None and v > 0]
    if not vals:
        return
    lo, hi = min(vals), max(vals)
    get = ax.xaxis if axis == "x" else ax.yaxis
    if hi / lo <= log_above:
        (ax.set_xlim if axis == "x" else ax.set_ylim)(0, hi * 1.08)
        get.set_major_formatter(FuncFormatter(lambda v, _: _label(v, unit) if v else "0"))
        return
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    (ax.set_xlim if axis == "x" else ax.set_ylim)(lo / 1.5, hi * 1.5)
    get.set_major_locator(FixedLocator(_ticks(lo / 1.5, hi * 1.5)))
    get.set_major_formatter(FuncFormatter(lambda v, _: _label(v, unit)))
    get.set_minor_locator(NullLocator())
    get.set_minor_formatter(NullFormatter())


def color_legend(ax: Any, entries: Sequence[Tuple[str, str]], **kw: Any) -> None:
    """A legend with one patch per (label, colour): for bars coloured by meaning
    (met / missed, a mode) rather than drawn with ``label=``."""
    from matplotlib.patches import Patch

    kw.setdefault("fontsize", 7)
    ax.legend(handles=[Patch(color=c, label=label) for label, c in entries], **kw)


def save(fig: Any, path: Path) -> None:
    """Writes ``fig`` with every label inside the canvas, and closes it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)


def load_result(out: Path, name: str) -> Dict[str, Any]:
    """The JSON a bench script last wrote (``--replot``), or SystemExit naming it."""
    path = Path(out) / name
    if not path.exists():
        raise SystemExit(f"--replot: {path} does not exist (run the benchmark first)")
    return json.loads(path.read_text())
