"""Per-function execution options: ``torch.compile(backend="nkipy", options={...})``.

Every key overrides the backend default set by ``init_nkipy_backend`` for that
one compiled function; unknown keys and wrong types are errors.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Tuple

from spiky.buckets import check_buckets

#: Option keys and their accepted types.
OPTION_TYPES: Dict[str, Any] = {
    "buckets": (list, tuple), "jit": bool, "pipelined": bool, "pad_on_device": bool,
    "keep_outputs_on_device": bool, "input_layout": str, "output_layout": str,
    "unpad_outputs": bool, "save_ntff": bool, "save_ntff_dir": str,
    "save_ntff_exe_idx": (list, tuple), "slice_buckets": bool,
}


@dataclass(frozen=True)
class ExecOptions:
    """How one compiled function runs (see docs/spiky.md)."""

    buckets: Optional[Tuple[int, ...]] = None   # None: inferred from the config's strategy
    jit: bool = True                 # compile a bucket for a size beyond the largest one
    pipelined: bool = False          # submit asynchronously, double-buffered inputs
    pad_on_device: bool = True       # False: pad on the host before the copy
    keep_outputs_on_device: bool = False   # outputs as nkipy tensors (no host round trip)
    input_layout: str = "auto"       # "padded": inputs may come padded (PaddingMetadata)
    output_layout: str = "unpad"     # "padded": outputs stay padded, with PaddingMetadata
    slice_buckets: bool = True       # a size between buckets runs as slices (200: 128+64+8)
    save_ntff: bool = False          # write a Perfetto trace per selected execution
    save_ntff_dir: str = "./ntff_dir"
    save_ntff_exe_idx: Optional[Tuple[int, ...]] = None   # None: every execution


def validate_options(options: Any) -> Dict[str, Any]:
    """Checks per-function options; unknown keys and wrong types raise ValueError."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ValueError(f"options must be a dict, not {type(options).__name__}")
    for key, value in options.items():
        if key not in OPTION_TYPES:
            raise ValueError(f"unknown nkipy backend option {key!r} "
                             f"(known: {', '.join(sorted(OPTION_TYPES))})")
        if not isinstance(value, OPTION_TYPES[key]):
            raise ValueError(f"nkipy backend option {key!r} has the wrong type "
                             f"{type(value).__name__}")
    if options.get("input_layout", "auto") not in ("auto", "padded"):
        raise ValueError("option input_layout must be 'auto' or 'padded'")
    if options.get("output_layout", "unpad") not in ("unpad", "padded"):
        raise ValueError("option output_layout must be 'unpad' or 'padded'")
    if "buckets" in options:
        try:
            check_buckets(options["buckets"])
        except ValueError as exc:
            raise ValueError(f"option {exc}") from None
    idx = options.get("save_ntff_exe_idx")
    if idx is not None and any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                               for i in idx):
        raise ValueError("option save_ntff_exe_idx must list execution indices >= 0")
    return dict(options)


def resolve_options(options: Any, config: Any) -> ExecOptions:
    """The backend defaults of ``config`` overridden by ``options`` (validated)."""
    opts = validate_options(options)
    base = ExecOptions(pipelined=config.pipelined, pad_on_device=config.pad_on_device,
                       keep_outputs_on_device=config.keep_outputs_on_device,
                       input_layout=config.input_layout, output_layout=config.output_layout)
    if "unpad_outputs" in opts:   # the original's explicit override of output_layout
        layout = "unpad" if opts.pop("unpad_outputs") else "padded"
        if opts.setdefault("output_layout", layout) != layout:
            raise ValueError(f"options unpad_outputs and output_layout={opts['output_layout']!r} "
                             "contradict each other")
    if "buckets" in opts:
        opts["buckets"] = tuple(check_buckets(opts["buckets"]))
    if "save_ntff_exe_idx" in opts:
        opts["save_ntff_exe_idx"] = tuple(opts["save_ntff_exe_idx"])
    return replace(base, **opts)
