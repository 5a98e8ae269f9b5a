"""Which ranks of a job share a host, and the runtime's transport between hosts.

Collectives inside compiled graphs run in the runtime's communicator: shared
memory within a host, a gloo group between hosts (docs/distributed.md). This
module finds the hosts through the job's store and hands them to the runtime
(:func:`setup_hosts`); ``init_nkipy_backend`` and the ``"nkipy"`` process group
call it on every rank.

Two ranks share a host when their hostnames match *and* each can see the
other's token file in its own ``/dev/shm``: every rank creates one there
(``nkipy-host-<random>``, mode 0600, created exclusively) and publishes its
hostname and token through the store. The hostname alone is not enough (two
containers of one machine may share a hostname yet not a ``/dev/shm``, and the
runtime's shared memory lives there). Each rank then publishes the lowest rank
it shares a host with; ``host_of[r]`` is that rank for every ``r``. The token
files are removed once every rank has looked (and when detection fails).
Everything read from the store is checked; a malformed or inconsistent entry is
refused with an error naming the rank and the value.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import re
import secrets
import socket
import stat
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, List, Optional, Sequence, Tuple

log = logging.getLogger("torch_to_nkipy")

#: Where the token files go: the directory the runtime's shared memory lives in.
SHM_DIR = "/dev/shm"
TOKEN_PREFIX = "nkipy-host-"
#: Runtime's default for $NKRT_CC_TIMEOUT (docs/runtime.md).
DEFAULT_TIMEOUT_S = 300.0
_MAX_TIMEOUT_S = 86400.0
_MAX_WORLD = 1024
_MAX_ENTRY = 1024          # bytes of one rank's store entry
_TOKEN = re.compile(r"[0-9a-f]{32}")
_LEAD = re.compile(r"[0-9]{1,4}")

#: Detection rounds of this process: every rank runs the same rounds in the same
#: order (setup_hosts is called collectively), so the counter names the keys.
_ROUNDS = itertools.count()


@dataclass(frozen=True)
class Hosts:
    """The hosts :func:`setup_hosts` set up: ``host_of[r]`` is the lowest rank on
    rank ``r``'s host; ``group`` the gloo group between hosts (None on one host)."""

    rank: int
    world_size: int
    host_of: Tuple[int, ...]
    group: Any = None

    @property
    def count(self) -> int:
        """How many hosts."""
        return len(set(self.host_of))

    @property
    def local_rank(self) -> int:
        """This rank's index among the ranks of its host."""
        mine = self.host_of[self.rank]
        return sum(1 for r in range(self.rank) if self.host_of[r] == mine)


_CURRENT: Optional[Hosts] = None


def current_hosts() -> Optional[Hosts]:
    """What the last :func:`setup_hosts` of this process set up (None before)."""
    return _CURRENT


def timeout_s() -> float:
    """How long a rank waits for the others: ``$NKRT_CC_TIMEOUT`` seconds (the
    runtime's collective timeout, 0.001 to 86400), else 300. It bounds host
    detection and every transfer of the gloo group between hosts."""
    raw = os.environ.get("NKRT_CC_TIMEOUT")
    if raw is None or not raw.strip():
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.001 <= value <= _MAX_TIMEOUT_S:        # also refuses nan
        raise ValueError(f"NKRT_CC_TIMEOUT={raw!r}: it must be a number of seconds between "
                         f"0.001 and {_MAX_TIMEOUT_S:.0f}")
    return value


def torchrun_store(timeout: float) -> Optional[Tuple[Any, str]]:
    """The store torchrun's agent runs for the job and a key prefix naming this
    run of it (``TORCHELASTIC_USE_AGENT_STORE=True`` at ``MASTER_ADDR:MASTER_PORT``,
    what ``init_process_group`` would use); None when there is none. Raises what
    connecting raises."""
    env = os.environ
    addr, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or not addr or not port.isdigit():
        return None
    import torch.distributed as dist

    store = dist.TCPStore(addr, int(port), is_master=False, timeout=timedelta(seconds=timeout))
    run = "{}/{}".format(env.get("TORCHELASTIC_RUN_ID", ""),
                         env.get("TORCHELASTIC_RESTART_COUNT", ""))
    return store, run


# ---- token files ------------------------------------------------------------


def _token_path(shm_dir: str, token: str) -> str:
    return os.path.join(shm_dir, TOKEN_PREFIX + token)


def _make_token(shm_dir: str) -> Tuple[str, str]:
    """A new token and its file, created exclusively, private, never through a link."""
    token = secrets.token_hex(16)
    path = _token_path(shm_dir, token)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.close(os.open(path, flags, 0o600))
    except OSError as e:
        raise RuntimeError(f"host detection: cannot create {path}: {e.strerror} (the ranks "
                           f"of one host meet in {shm_dir}, which must be writable)") from None
    return token, path


def _token_visible(shm_dir: str, token: str) -> bool:
    """Whether another rank's token file is in this rank's ``shm_dir``: it must
    then be a regular file of this user, private (a file that is not, under a
    random name only the job knows, is refused)."""
    path = _token_path(shm_dir, token)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise RuntimeError(f"host detection: {path} is not a private file of this user "
                           f"(mode {stat.filemode(st.st_mode)}, owner uid {st.st_uid}): "
                           "refusing to decide the hosts with it")
    return True


# ---- the store's entries ------------------------------------------------------


def _wait_get(store: Any, key: str, rank: int, what: str, deadline: float,
              timeout: float) -> bytes:
    left = deadline - time.monotonic()
    try:
        if left <= 0:
            raise TimeoutError("no time left")
        store.wait([key], timedelta(seconds=left))
        value = store.get(key)
    except Exception as e:  # noqa: BLE001  (the store's own errors vary by store)
        raise RuntimeError(f"host detection: rank {rank} did not publish its {what} within "
                           f"{timeout:g} s ($NKRT_CC_TIMEOUT): {e}") from None
    return bytes(value)


def _parse_host(rank: int, raw: bytes) -> Tuple[str, str]:
    """(hostname, token) from rank ``rank``'s entry, or RuntimeError naming it."""
    shown = raw[:80]

    def bad(why: str) -> RuntimeError:
        return RuntimeError(f"host detection: the store's entry of rank {rank} is {shown!r}: "
                            f"{why}")
    if len(raw) > _MAX_ENTRY:
        raise bad(f"longer than {_MAX_ENTRY} bytes")
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise bad("not a JSON object") from None
    if not isinstance(entry, dict) or set(entry) != {"host", "token"}:
        raise bad('not an object with exactly "host" and "token"')
    host, token = entry["host"], entry["token"]
    if not isinstance(host, str) or not 1 <= len(host) <= 255 or not host.isprintable():
        raise bad(f"its host {host!r} is not a hostname (1 to 255 printable characters)")
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise bad(f"its token {token!r} is not 32 lowercase hex digits")
    return host, token


def _parse_lead(rank: int, raw: bytes, world_size: int) -> int:
    text = raw.decode("ascii", "replace")
    if not _LEAD.fullmatch(text) or not 0 <= int(text) <= rank:
        raise RuntimeError(f"host detection: rank {rank} published {raw[:40]!r} as the lowest "
                           f"rank of its host: not a rank in [0, {rank}] of the "
                           f"{world_size}")
    return int(text)


def _check_host_of(host_of: Sequence[int], rank: int, mates: Sequence[int]) -> None:
    """Refuses a host_of that is not a partition of the ranks, or that disagrees
    with what this rank saw (``mates``: the ranks it shares a host with)."""
    for r, h in enumerate(host_of):
        if host_of[h] != h:
            raise RuntimeError(f"host detection: rank {r} says its host's lowest rank is {h}, "
                               f"but rank {h} says {host_of[h]}: the ranks disagree on "
                               f"the hosts (host_of={list(host_of)})")
    mine = host_of[rank]
    for r, h in enumerate(host_of):
        if (r in mates or r == rank) != (h == mine):
            seen = "shares" if r in mates else "does not share"
            raise RuntimeError(f"host detection: rank {rank} (this rank) {seen} a host with "
                               f"rank {r}, but rank {r} says its host's lowest rank is {h} "
                               f"and this rank's is {mine} (host_of={list(host_of)})")


def detect_hosts(store: Any, rank: int, world_size: int, *, prefix: str = "nkipy/hosts",
                 timeout: Optional[float] = None, shm_dir: str = SHM_DIR,
                 hostname: Optional[str] = None) -> List[int]:
    """``host_of`` for the job: ``host_of[r]`` is the lowest rank on rank ``r``'s
    host. Every rank calls it with the job's ``store``; ``prefix`` names the keys
    (the same on every rank, new for every round). ``shm_dir`` and ``hostname``
    stand in for ``/dev/shm`` and this machine's name (tests). Raises
    RuntimeError naming the rank when a rank does not publish within
    ``timeout`` seconds (default :func:`timeout_s`), or publishes an entry that
    is malformed or disagrees with the others."""
    if not 1 <= world_size <= _MAX_WORLD or not 0 <= rank < world_size:
        raise ValueError(f"host detection: rank {rank} of {world_size}: the world size must "
                         f"be 1 to {_MAX_WORLD} and the rank in [0, world_size)")
    if world_size == 1:
        return [0]
    timeout = timeout_s() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    host = socket.gethostname() if hostname is None else hostname
    token, path = _make_token(shm_dir)
    try:
        store.set(f"{prefix}/host/{rank}", json.dumps({"host": host, "token": token}))
        mates = []
        for r in range(world_size):
            if r == rank:
                continue
            other_host, other_token = _parse_host(
                r, _wait_get(store, f"{prefix}/host/{r}", r, "host", deadline, timeout))
            if other_token == token:
                raise RuntimeError(f"host detection: rank {r} published this rank's ({rank}) "
                                   "token: two ranks claim the same token file")
            if other_host == host and _token_visible(shm_dir, other_token):
                mates.append(r)
        lead = min([rank] + mates)
        store.set(f"{prefix}/lead/{rank}", str(lead))
        # A rank publishes its lead only after looking at every token file: once
        # all leads are in, no one needs this rank's file any more.
        host_of = [lead if r == rank else _parse_lead(
            r, _wait_get(store, f"{prefix}/lead/{r}", r, "host's lowest rank", deadline,
                         timeout), world_size) for r in range(world_size)]
        _check_host_of(host_of, rank, mates)
        return host_of
    finally:
        try:
            os.unlink(path)
        except OSError:  # pragma: no cover - removed by someone else: nothing to do
            pass


# ---- setting the runtime up ---------------------------------------------------


def _gloo_group(store: Any, rank: int, world_size: int, timeout: float) -> Any:
    """A gloo group of every rank, on its own keys of ``store``, for the runtime
    alone (its messages never interleave with the user's)."""
    import torch
    import torch.distributed as dist

    gloo = dist.ProcessGroupGloo(store, rank, world_size, timedelta(seconds=timeout))
    group = dist.ProcessGroup(store, rank, world_size)
    group._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)
    return group


def setup_hosts(store: Any, rank: int, world_size: int, *, prefix: str = "nkipy/hosts",
                shm_dir: str = SHM_DIR, hostname: Optional[str] = None) -> Hosts:
    """Detects the job's hosts (:func:`detect_hosts`) and tells the runtime: with
    several, a dedicated gloo group over every rank (on a prefix of ``store``)
    becomes its transport between hosts; with one, shared memory only. Every
    rank calls it, before the first collective of a kernel. Done once per
    process for a given rank and world size (later calls return the first
    result). Raises RuntimeError when detection fails or the runtime refuses
    the hosts (this build may not take several)."""
    global _CURRENT
    if _CURRENT is not None and (_CURRENT.rank, _CURRENT.world_size) == (rank, world_size):
        return _CURRENT
    import torch.distributed as dist

    import spike_torch.comm

    round_prefix = f"{prefix}/{next(_ROUNDS)}"
    host_of = detect_hosts(store, rank, world_size, prefix=round_prefix, shm_dir=shm_dir,
                           hostname=hostname)
    hosts = Hosts(rank, world_size, tuple(host_of))
    if hosts.count == 1:
        spike_torch.comm.clear_hosts(world_size)
    else:
        group = _gloo_group(dist.PrefixStore(f"{round_prefix}/gloo", store), rank, world_size,
                            timeout_s())
        try:
            spike_torch.comm.set_hosts(group, host_of)
        except RuntimeError as e:
            raise RuntimeError(f"the job's {world_size} ranks are on {hosts.count} hosts "
                               f"(host_of={host_of}), and the runtime did not take the "
                               f"transport between them: {e}") from None
        hosts = Hosts(rank, world_size, tuple(host_of), group)
    _CURRENT = hosts
    log.info("rank %d of %d: %d host(s), host_of=%s", rank, world_size, hosts.count, host_of)
    return hosts
