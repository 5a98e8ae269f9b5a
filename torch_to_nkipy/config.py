"""The backend's process-wide configuration (the one documented singleton)."""
from __future__ import annotations

import dataclasses
import logging
import operator
import os
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from spike.environ import env_int
from spike.safe_files import private_dir

log = logging.getLogger("torch_to_nkipy")

_CONFIG: Optional["NKIPyBackendConfig"] = None

#: What :func:`reset_nkipy_backend` runs after forgetting the configuration: the
#: modules built on this one register here (the kernel cache its clear), so this
#: module imports none of them.
_RESET_HOOKS: List[Callable[[], None]] = []


@dataclass(frozen=True)
class NKIPyBackendConfig:
    """What ``init_nkipy_backend`` was given (and detected).

    The fields keep the original's order (``nkipy_cache_prefix, log_level,
    rank, world_size, additional_compiler_args, ...``); ``nkipy_cache`` is
    derived as ``<nkipy_cache_prefix>/rank_<rank>`` when not given.
    """

    nkipy_cache_prefix: str
    log_level: int = logging.INFO
    rank: int = 0
    world_size: int = 1
    additional_compiler_args: str = ""
    max_bucket_size: int = 2048
    bucket_strategy: str = "power_of_2"
    pad_on_device: bool = True
    keep_outputs_on_device: bool = False
    pipelined: bool = True
    input_layout: str = "auto"
    output_layout: str = "unpad"
    core_offset: int = 0
    nkipy_cache: Optional[str] = None   # nkipy_cache_prefix/rank_<rank>
    local_rank: Optional[int] = None   # the rank among its host's; None: rank

    def __post_init__(self) -> None:
        if self.nkipy_cache is None:
            object.__setattr__(self, "nkipy_cache",
                               os.path.join(os.fspath(self.nkipy_cache_prefix),
                                            f"rank_{self.rank}"))

    @property
    def visible_core(self) -> int:
        """The NeuronCore this process uses: ``local_rank + core_offset`` (a
        physical id; ``rank`` stands for ``local_rank`` when that is unknown)."""
        return (self.rank if self.local_rank is None else self.local_rank) + self.core_offset

    @property
    def device_core(self) -> int:
        """``visible_core`` as the runtime numbers it (its index among the cores
        ``NEURON_RT_VISIBLE_CORES`` makes visible: a process started with
        ``LOCAL_RANK=1`` sees core 1 as its core 0)."""
        ids = visible_core_ids()
        if self.visible_core in ids:
            return ids.index(self.visible_core)
        if len(ids) == 1 and self.world_size == 1 and self.core_offset == 0:
            return 0        # one process, one visible core: that is its core
        which = "rank" if self.local_rank is None else "local rank"
        raise RuntimeError(
            f"NeuronCore {self.visible_core} ({which} "
            f"{self.rank if self.local_rank is None else self.local_rank} + core_offset "
            f"{self.core_offset}) is not visible to this process (NEURON_RT_VISIBLE_CORES="
            f"{os.environ.get('NEURON_RT_VISIBLE_CORES', '')!r})")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in (
            "nkipy_cache", "rank", "world_size", "local_rank", "core_offset", "log_level",
            "additional_compiler_args", "max_bucket_size", "bucket_strategy", "pad_on_device",
            "keep_outputs_on_device", "pipelined", "input_layout", "output_layout"))
        return f"NKIPyBackendConfig({fields})"


def visible_core_ids() -> list:
    """Physical ids of the cores the runtime sees, in its order
    (``NEURON_RT_VISIBLE_CORES`` like ``"0,1"`` or ``"2-3"``; unset: all 32)."""
    spec = os.environ.get("NEURON_RT_VISIBLE_CORES", "").strip()
    if not spec:
        return list(range(32))
    ids: list = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


def _as_int(name: str, value: object) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__} {value!r}") from None


def _detect_rank(rank: Optional[int]) -> int:
    if rank is not None:
        return _as_int("rank", rank)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:  # pragma: no cover - torch without distributed
        pass
    for var in ("RANK", "LOCAL_RANK"):     # the global rank first
        value = env_int(var, minimum=0)
        if value is not None:
            return value
    return 0


def _detect_world_size(world_size: Optional[int]) -> Tuple[int, bool]:
    """(the world size, whether anything gave it): ``world_size``, else
    ``torch.distributed``'s, else ``WORLD_SIZE``; else (1, False), a single
    process whose rank was not checked against any world."""
    if world_size is not None:
        return _as_int("world_size", world_size), True
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size(), True
    except Exception:  # pragma: no cover
        pass
    value = env_int("WORLD_SIZE", minimum=1)
    return (1, False) if value is None else (value, True)


#: How long a rank waits to reach torchrun's store when agreeing on the name.
_STORE_TIMEOUT_S = 60


def _agree_through_torchrun_store() -> Optional[str]:
    """A random name agreed through the store torchrun's agent runs for the job
    (``TORCHELASTIC_USE_AGENT_STORE=True`` at ``MASTER_ADDR:MASTER_PORT``, what
    ``init_process_group`` would use): the first rank to ask stores it, the others
    read it. None when there is no such store to reach."""
    env = os.environ
    addr, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or not addr or not port.isdigit():
        return None
    from .hosts import torchrun_store

    try:
        store, run = torchrun_store(_STORE_TIMEOUT_S)
        key = f"nkipy/cc_id/{run}"
        got = _draw_in(store, key)
    except Exception as e:  # noqa: BLE001  (any failure to reach it: no store)
        log.warning("cannot reach torchrun's store at %s:%s to agree on the communicator "
                    "name: %s", addr, port, e)
        return None
    return _drawn_name(got, f"torchrun's store at {addr}:{port}", key)


def _draw_in(store: Any, key: str) -> Any:
    """Offers a fresh random draw under `key`: the first rank's draw wins, and
    every rank gets that one back (the raw value, checked by _drawn_name)."""
    import secrets

    return store.compare_set(key, "", secrets.token_hex(16))


def _drawn_name(got: Any, where: str, key: str) -> str:
    """The communicator name of a draw read back from `where`, refused unless it
    is one (32 lowercase hex digits)."""
    token = got.decode() if isinstance(got, bytes) else str(got)
    if len(token) != 32 or any(ch not in "0123456789abcdef" for ch in token):
        raise RuntimeError(f"{where} holds {token!r} under {key!r}, not a communicator name "
                           "drawn by a rank of this job")
    return f"job-{token}"


def _agree_in_store(store: Any) -> str:
    """A random name agreed through a process group's store (the group is being
    created; torch.distributed is not initialised yet): the first rank to ask
    stores its draw, the others read it."""
    key = "nkipy/cc_id"
    return _drawn_name(_draw_in(store, key), "the process group's store", key)


def _communicator_id(world_size: int, store: Any = None) -> Optional[str]:
    """The name every rank's runtime joins for collectives inside compiled graphs
    (``$NKRT_CC_ID``, docs/runtime.md). Kept if set. Else a random name no other
    user can guess (another user who knows it could make the segment first and
    deny the job its collectives): agreed through ``torch.distributed`` when it
    is initialised (rank 0 draws it, every rank calls this, as every rank calls
    ``init_nkipy_backend``), else through torchrun's store (the agent's, what
    ``init_process_group`` would use). A process group being created passes its
    ``store``: agreed there. Else None: no name is derived from the environment
    (it would be guessable), and kernels with collectives then fail saying
    NKRT_CC_ID is missing."""
    if world_size < 2 or os.environ.get("NKRT_CC_ID"):
        return os.environ.get("NKRT_CC_ID")
    import torch.distributed as dist

    if store is not None:
        cc_id: Optional[str] = _agree_in_store(store)
    elif dist.is_available() and dist.is_initialized():
        import secrets

        box = [secrets.token_hex(16) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        cc_id = f"torch-{box[0]}"
    else:
        cc_id = _agree_through_torchrun_store()
    if cc_id is None:
        log.warning("world size %d, but neither torch.distributed nor torchrun's store is "
                    "there to agree on a private communicator name: compiled graphs with "
                    "collectives will fail. Initialise torch.distributed before "
                    "init_nkipy_backend, run under torchrun, or set NKRT_CC_ID to a name "
                    "private to the job on every rank", world_size)
        return None
    os.environ["NKRT_CC_ID"] = cc_id
    return cc_id


def _setup_hosts(rank: int, world_size: int) -> Optional[Any]:
    """The job's hosts (torch_to_nkipy.hosts.setup_hosts: detected through the
    job's store, handed to the runtime with the gloo transport between them),
    through the default group's store when torch.distributed is initialised,
    else torchrun's agent store. None when there is one rank, or no store to
    detect them through (every rank is then taken to be on this host)."""
    if world_size < 2:
        return None
    import torch.distributed as dist

    from . import hosts

    if dist.is_available() and dist.is_initialized():
        if (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
            log.warning("rank %d of %d is not torch.distributed's (%d of %d): the hosts are "
                        "not detected, every rank is taken to be on this host", rank,
                        world_size, dist.get_rank(), dist.get_world_size())
            return None
        return hosts.setup_hosts(dist.distributed_c10d._get_default_store(), rank, world_size)
    if (env_int("RANK", minimum=0), env_int("WORLD_SIZE", minimum=1)) != (rank, world_size):
        got = None
    else:
        try:
            got = hosts.torchrun_store(_STORE_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001  (any failure to reach it: no store)
            log.warning("cannot reach torchrun's store to detect the hosts: %s", e)
            got = None
    if got is None:
        log.debug("no store to detect the hosts through: every rank is taken to be on "
                  "this host")
        return None
    store, run = got
    return hosts.setup_hosts(store, rank, world_size, prefix=f"nkipy/hosts/{run}")


def _detect_local_rank(hosts: Optional[Any]) -> Optional[int]:
    """This rank's index among its host's: ``LOCAL_RANK``, else what host
    detection found, else None (the rank stands for it)."""
    value = env_int("LOCAL_RANK", minimum=0)
    if value is not None:
        return value
    return None if hosts is None else hosts.local_rank


def default_cache_dir() -> str:
    """Where compiled graphs are cached by default: a per-user directory,
    ``$XDG_CACHE_HOME/torch_to_nkipy`` (else ``~/.cache/torch_to_nkipy``),
    never the working directory, which other users may be able to write."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch_to_nkipy")


def init_nkipy_backend(nkipy_cache: Optional[str] = None, log_level: int = logging.INFO,
                       rank: Optional[int] = None, world_size: Optional[int] = None,
                       core_offset: int = 0, additional_compiler_args: str = "",
                       pad_on_device: bool = True, keep_outputs_on_device: bool = False,
                       pipelined: bool = True, input_layout: str = "auto",
                       output_layout: str = "unpad", max_bucket_size: int = 2048,
                       bucket_strategy: str = "power_of_2") -> None:
    """Initialises the nkipy ``torch.compile`` backend (once per process).

    ``rank``/``world_size`` default to ``torch.distributed`` when it is
    initialised, else ``RANK`` (else ``LOCAL_RANK``) and ``WORLD_SIZE``, else 0
    and 1. The rank is checked against a world size only when one was given
    (the argument, the process group or ``WORLD_SIZE``): a single process may
    carry any rank, which names its cache (``rank=7`` caches under ``rank_7``), as
    in the original.
    Kernels are cached under ``<nkipy_cache>/rank_<rank>/`` (``nkipy_cache``
    defaults to :func:`default_cache_dir`; the directories are created private,
    and one that another user owns or may write is refused: docs/security.md);
    the device core is
    ``local_rank + core_offset``, the local rank being ``LOCAL_RANK``, else the
    rank's index among the ranks of its host, else the rank (``rank`` is the
    global rank: ``torch.distributed``'s, else ``RANK``). With ``world_size > 1``
    the ranks agree on the name of the runtime communicator that collectives
    inside compiled graphs use (``$NKRT_CC_ID``; a random name agreed through
    ``torch.distributed`` when it is initialised, else through torchrun's store)
    and detect which ranks share a host through that store, handing the hosts to
    the runtime (shared memory within a host, a gloo group between hosts:
    docs/distributed.md), so every rank must call this. The other arguments are the defaults of the per-function options
    (docs/spiky.md); ``max_bucket_size`` and
    ``bucket_strategy`` (``"power_of_2"`` or ``"linear"``) shape the buckets of
    dynamic graphs. Raises RuntimeError when already initialised.
    """
    global _CONFIG
    if _CONFIG is not None:
        raise RuntimeError("NKIPy backend has already been initialized "
                           "(call reset_nkipy_backend() first to re-initialize)")
    r, (ws, ws_known) = _detect_rank(rank), _detect_world_size(world_size)
    if ws < 1 or r < 0 or (ws_known and r >= ws):
        raise ValueError(f"invalid rank {r} / world_size {ws}: the rank must be in "
                         f"[0, world_size) and world_size at least 1")
    if input_layout not in ("auto", "padded"):
        raise ValueError(f"input_layout must be 'auto' or 'padded', not {input_layout!r}")
    if output_layout not in ("unpad", "padded"):
        raise ValueError(f"output_layout must be 'unpad' or 'padded', not {output_layout!r}")
    from spiky.buckets import STRATEGIES

    for name, value in (("pad_on_device", pad_on_device),
                        ("keep_outputs_on_device", keep_outputs_on_device),
                        ("pipelined", pipelined)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, not {type(value).__name__} {value!r}")

    if bucket_strategy not in STRATEGIES:
        raise ValueError(f"bucket_strategy must be one of {', '.join(STRATEGIES)}, "
                         f"not {bucket_strategy!r}")
    if isinstance(max_bucket_size, bool) or not isinstance(max_bucket_size, int) \
            or max_bucket_size < 1:
        raise ValueError(f"max_bucket_size must be a positive int, not {max_bucket_size!r}")
    if core_offset < 0:
        raise ValueError(f"core_offset must be >= 0, not {core_offset}")
    prefix = os.fspath(nkipy_cache if nkipy_cache is not None else default_cache_dir())
    cfg = NKIPyBackendConfig(
        nkipy_cache_prefix=prefix, nkipy_cache=os.path.join(prefix, f"rank_{r}"),
        log_level=log_level, rank=r, world_size=ws, core_offset=core_offset,
        additional_compiler_args=additional_compiler_args, pad_on_device=pad_on_device,
        keep_outputs_on_device=keep_outputs_on_device, pipelined=pipelined,
        input_layout=input_layout, output_layout=output_layout,
        max_bucket_size=max_bucket_size, bucket_strategy=bucket_strategy)
    private_dir(prefix, "torch_to_nkipy cache directory")
    private_dir(cfg.nkipy_cache, "torch_to_nkipy cache directory")
    log.setLevel(log_level)
    if not log.handlers and not logging.getLogger().handlers:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    import spike_torch  # noqa: F401  (the nkipy device; LOCAL_RANK picks its core)

    cc_id = _communicator_id(ws)
    if ws > 1:
        log.debug("collectives of compiled graphs: communicator %r", cc_id)
    cfg = dataclasses.replace(cfg, local_rank=_detect_local_rank(_setup_hosts(r, ws)))
    _CONFIG = cfg
    log.debug("nkipy backend initialized: %r", cfg)


def is_nkipy_backend_initialized() -> bool:
    return _CONFIG is not None


def get_nkipy_backend_config() -> Optional[NKIPyBackendConfig]:
    """The configuration :func:`init_nkipy_backend` (or
    :func:`set_nkipy_backend_config`) installed; None before that."""
    return _CONFIG


def require_nkipy_backend_config() -> NKIPyBackendConfig:
    """The configuration, or RuntimeError saying the backend is not initialised
    (what the backend's own code calls where it needs one)."""
    if _CONFIG is None:
        raise RuntimeError("nkipy backend is not initialized: call init_nkipy_backend() first")
    return _CONFIG


def _check_config(cfg: object) -> NKIPyBackendConfig:
    """Refuses what :func:`set_nkipy_backend_config` cannot install, naming the field."""
    if not isinstance(cfg, NKIPyBackendConfig):
        raise TypeError(f"set_nkipy_backend_config needs an NKIPyBackendConfig, not "
                        f"{type(cfg).__name__}")
    for name in ("rank", "world_size", "core_offset", "max_bucket_size", "log_level"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"NKIPyBackendConfig.{name} must be an int, not "
                            f"{type(value).__name__} {value!r}")
    # a single process may carry any rank (it names the cache, as in the
    # original); in a world of several the rank must be one of its ranks
    single = cfg.world_size == 1
    if cfg.world_size < 1 or cfg.rank < 0 or (not single and cfg.rank >= cfg.world_size):
        raise ValueError(f"invalid rank {cfg.rank} / world_size {cfg.world_size}: the rank "
                         f"must be in [0, world_size) and world_size at least 1")
    if cfg.local_rank is not None and (isinstance(cfg.local_rank, bool)
                                       or not isinstance(cfg.local_rank, int)
                                       or cfg.local_rank < 0
                                       or (not single and cfg.local_rank >= cfg.world_size)):
        raise ValueError(f"NKIPyBackendConfig.local_rank must be None or an int in "
                         f"[0, world_size), not {cfg.local_rank!r}")
    if cfg.core_offset < 0 or cfg.max_bucket_size < 1:
        raise ValueError(f"NKIPyBackendConfig: core_offset must be >= 0 and max_bucket_size "
                         f">= 1 (got {cfg.core_offset}, {cfg.max_bucket_size})")
    for name in ("pad_on_device", "keep_outputs_on_device", "pipelined"):
        if not isinstance(getattr(cfg, name), bool):
            raise TypeError(f"NKIPyBackendConfig.{name} must be a bool, not "
                            f"{getattr(cfg, name)!r}")
    from spiky.buckets import STRATEGIES

    for name, allowed in (("input_layout", ("auto", "padded")),
                          ("output_layout", ("unpad", "padded")),
                          ("bucket_strategy", tuple(STRATEGIES))):
        if getattr(cfg, name) not in allowed:
            raise ValueError(f"NKIPyBackendConfig.{name} must be one of "
                             f"{', '.join(map(repr, allowed))}, not {getattr(cfg, name)!r}")
    if not isinstance(cfg.additional_compiler_args, str):
        raise TypeError("NKIPyBackendConfig.additional_compiler_args must be a str")
    return cfg


def set_nkipy_backend_config(config: NKIPyBackendConfig) -> None:
    """Installs ``config`` as the backend's configuration (replacing any), as
    ``init_nkipy_backend`` would have; its fields are checked (TypeError /
    ValueError naming the field) and its cache directories created private
    (one another user owns or may write is refused). Kernels loaded under a
    previous configuration are forgotten. Unlike ``init_nkipy_backend`` it
    detects nothing and agrees on no communicator name."""
    global _CONFIG
    cfg = _check_config(config)
    private_dir(os.fspath(cfg.nkipy_cache_prefix), "torch_to_nkipy cache directory")
    private_dir(cfg.nkipy_cache, "torch_to_nkipy cache directory")
    import spike_torch  # noqa: F401  (the nkipy device, as init_nkipy_backend)

    replaced = _CONFIG is not None and _CONFIG != cfg
    _CONFIG = cfg
    if replaced:
        for hook in _RESET_HOOKS:
            hook()


def reset_nkipy_backend_config() -> Optional[NKIPyBackendConfig]:
    """Forgets the configuration (and the loaded kernels, as
    :func:`reset_nkipy_backend`); returns the one that was installed, or None."""
    old = _CONFIG
    reset_nkipy_backend()
    return old


def on_reset(hook: Callable[[], None]) -> Callable[[], None]:
    """Registers ``hook`` to run at every :func:`reset_nkipy_backend` (returns it)."""
    _RESET_HOOKS.append(hook)
    return hook


def reset_nkipy_backend() -> None:
    """Forgets the configuration and the loaded kernels (the disk cache stays)."""
    global _CONFIG
    _CONFIG = None
    for hook in _RESET_HOOKS:
        hook()
