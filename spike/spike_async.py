"""``SpikeAsync``: asyncio-style futures over the runtime's asynchronous execution.

The API of the original's ``feat/spike-async`` branch, over
:meth:`Spike.execute_async` (``nkrt_execute_async``)::

    sa = SpikeAsync()
    model = sa.load_model("add.neff")
    x, out = sa.allocate_tensor(4096), sa.allocate_tensor(4096)

    async def step(data):
        await sa.tensor_write(x, data)
        await sa.execute(model, {"x": x}, {"output0": out})
        return await sa.tensor_read(out)

    result = sa.submit(step(data)).wait()

Executions are queued on the device and their futures complete when the
runtime reports them done (polled by the loop; :meth:`SpikeAsyncFuture.wait`
and ``await`` drive it). Tensor writes and reads run when their turn comes
(after their ``deps``, their stream's previous operation); the runtime orders
a copy touching a tensor after the queued executions that use it, so a read
never sees bytes an execution has yet to write. ``deps=`` lists futures
(or coroutines) an operation waits for; streams (:meth:`SpikeAsync.create_stream`)
order every operation made while they are current. The low-level
"nonblock" calls and the batched reads/writes of the original are not
provided (docs/spike.md).
"""
from __future__ import annotations

import asyncio
import math
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Union

from ._spike import ExecutionEvent, NrtModel, NrtTensor, Spike

#: Seconds between two polls of the queued executions while the loop waits.
_POLL_S = 0.0002


def _check_timeout(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}")
    return float(timeout)


def _run(loop: asyncio.AbstractEventLoop, aw: Awaitable[Any], timeout: Optional[float],
         what: str) -> Any:
    timeout = _check_timeout(timeout)
    if loop.is_running():
        raise RuntimeError(f"{what}.wait() called inside a coroutine running on the "
                           f"SpikeAsync loop: await it instead")
    if loop.is_closed():
        raise RuntimeError(f"{what}.wait(): its SpikeAsync is closed")
    if timeout is None:
        return loop.run_until_complete(aw)
    try:
        return loop.run_until_complete(asyncio.wait_for(asyncio.shield(aw), timeout))
    except asyncio.TimeoutError:
        raise TimeoutError(f"{what} not done after {timeout:g} s") from None


class SpikeAsyncFuture(asyncio.Future):
    """A future of one operation; ``await`` it in a coroutine, or
    :meth:`wait` for it from plain code."""

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Runs the loop until done; returns the result or raises the
        operation's error (TimeoutError after ``timeout`` seconds)."""
        return _run(self.get_loop(), self, timeout, "SpikeAsyncFuture")


class SpikeAsyncTask(asyncio.Task):
    """A coroutine running on the SpikeAsync loop (from :meth:`SpikeAsync.submit`
    or an operation with dependencies)."""

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Runs the loop until the coroutine returns; its value, or its error
        (TimeoutError after ``timeout`` seconds)."""
        return _run(self.get_loop(), self, timeout, "SpikeAsyncTask")


Dep = Union[SpikeAsyncFuture, SpikeAsyncTask, Awaitable[Any]]


class SpikeStream:
    """Orders the operations made on it (each waits for the previous one);
    streams run concurrently with one another. ``with stream:`` makes it the
    default of operations given no ``stream=``."""

    def __init__(self, owner: "SpikeAsync") -> None:
        self._owner = owner
        self._last: Optional[asyncio.Future] = None
        self._prev: List[Optional[SpikeStream]] = []

    def __enter__(self) -> "SpikeStream":
        self._prev.append(self._owner._default_stream)
        self._owner._default_stream = self
        return self

    def __exit__(self, *exc: object) -> None:
        self._owner._default_stream = self._prev.pop()

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Waits for the stream's last operation; its value (None when empty)."""
        return None if self._last is None else self._last.wait(timeout)

    def record_event(self) -> Optional[asyncio.Future]:
        """The stream's current last operation (None when empty), for
        :meth:`wait_event` of another stream or ``deps=``."""
        return self._last

    def wait_event(self, event: Optional[Dep]) -> None:
        """Makes the stream's next operations wait for ``event`` too."""
        if event is not None:
            self._owner.custom_op(_noop(), deps=[event], stream=self)


async def _noop() -> None:
    return None


class SpikeAsync:
    """Asynchronous runtime operations as futures on an event loop of its own.

    Args:
        verbose_level: passed to the :class:`Spike` it opens.
        spike: a runtime to use instead (not closed by :meth:`close`).
    """

    def __init__(self, verbose_level: int = 0, *, spike: Optional[Spike] = None) -> None:
        if spike is not None and not isinstance(spike, Spike):
            raise TypeError(f"SpikeAsync(spike=...) needs a spike._spike.Spike, not "
                            f"{type(spike).__name__}")
        self._owns = spike is None
        self.spike: Spike = Spike(verbose_level=verbose_level) if spike is None else spike
        self._loop = asyncio.new_event_loop()
        self._loop.set_task_factory(
            lambda loop, coro, **kw: SpikeAsyncTask(coro, loop=loop, **kw))
        self._pending: List[tuple] = []          # (ExecutionEvent, future)
        self._polling = False
        self._default_stream: Optional[SpikeStream] = None

    # ---- lifetime --------------------------------------------------------------

    def close(self) -> None:
        """Waits for the queued executions, closes the loop (and the runtime when
        it opened it). Idempotent."""
        if self._loop.is_closed():
            return
        for ev, _ in self._pending:
            try:
                ev.wait()
            except Exception:  # noqa: BLE001  (its future carries the error)
                pass
        self._pending.clear()
        self._loop.close()
        if self._owns:
            self.spike.close()

    def __enter__(self) -> "SpikeAsync":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- conveniences over the runtime -----------------------------------------

    def load_model(self, neff_file: str, core_id: int = 0, cc_enabled: bool = False,
                   rank_id: int = 0, world_size: int = 1) -> NrtModel:
        """``Spike.load_model``."""
        return self.spike.load_model(neff_file, core_id, cc_enabled, rank_id, world_size)

    def allocate_tensor(self, size: int, core_id: int = 0,
                        name: Optional[str] = None) -> NrtTensor:
        """``Spike.allocate_tensor``."""
        return self.spike.allocate_tensor(size, core_id, name)

    def create_tensor_set(self, tensor_map: Mapping[str, NrtTensor]) -> Dict[str, NrtTensor]:
        """The name -> tensor mapping :meth:`execute` takes (checked, copied)."""
        if not isinstance(tensor_map, Mapping):
            raise TypeError(f"create_tensor_set needs a dict of name -> NrtTensor, not "
                            f"{type(tensor_map).__name__}")
        for k, v in tensor_map.items():
            if not isinstance(k, str) or not isinstance(v, NrtTensor):
                raise TypeError(f"create_tensor_set: entry {k!r} must map a str to an "
                                f"NrtTensor, not {type(v).__name__}")
        return dict(tensor_map)

    # ---- the loop ---------------------------------------------------------------

    def _future(self) -> SpikeAsyncFuture:
        if self._loop.is_closed():
            raise RuntimeError("SpikeAsync is closed")
        return SpikeAsyncFuture(loop=self._loop)

    def _poll(self) -> None:
        still = []
        for ev, fut in self._pending:
            if not ev.done:
                still.append((ev, fut))
                continue
            try:
                ev.wait(timeout=0)
            except BaseException as e:  # noqa: BLE001  (the execution's error)
                if not fut.done():
                    fut.set_exception(e)
            else:
                if not fut.done():
                    fut.set_result(None)
        self._pending = still
        if still:
            self._loop.call_later(_POLL_S, self._poll)
        else:
            self._polling = False

    def _watch(self, ev: ExecutionEvent, fut: SpikeAsyncFuture) -> None:
        self._pending.append((ev, fut))
        if not self._polling:
            self._polling = True
            self._loop.call_soon(self._poll)

    def _schedule(self, start: Callable[[], asyncio.Future], deps: Optional[Sequence[Dep]],
                  stream: Optional[SpikeStream]) -> asyncio.Future:
        """Starts the operation now, or in a task once ``deps`` and the
        stream's previous operation are done; the stream then ends with it."""
        if self._loop.is_closed():
            raise RuntimeError("SpikeAsync is closed")
        if stream is None:
            stream = self._default_stream
        elif not isinstance(stream, SpikeStream) or stream._owner is not self:
            raise TypeError("stream= must be a SpikeStream of this SpikeAsync")
        waits = list(deps or ())
        if stream is not None and stream._last is not None:
            waits.append(stream._last)
        if not waits:
            fut = start()
        else:
            async def after() -> Any:
                for d in waits:
                    await d
                return await start()

            fut = self._loop.create_task(after())
        if stream is not None:
            stream._last = fut
        return fut

    def _now(self, op: Callable[[], Any]) -> SpikeAsyncFuture:
        fut = self._future()
        try:
            fut.set_result(op())
        except Exception as e:  # noqa: BLE001  (the operation's error, at await/wait)
            fut.set_exception(e)
        return fut

    # ---- operations -------------------------------------------------------------

    def tensor_write(self, tensor: NrtTensor, data: Any, offset: int = 0, size: int = 0,
                     deps: Optional[Sequence[Dep]] = None,
                     stream: Optional[SpikeStream] = None) -> asyncio.Future:
        """Writes ``data`` (a buffer: bytes, NumPy array) into ``tensor`` at
        ``offset`` (its first ``size`` bytes when ``size`` > 0); future of None."""
        def start() -> SpikeAsyncFuture:
            def op() -> None:
                buf = memoryview(data).cast("B")
                if size:
                    if size < 0 or size > buf.nbytes:
                        raise ValueError(f"tensor_write: size {size} outside the "
                                         f"{buf.nbytes} bytes given")
                    buf = buf[:size]
                self.spike.tensor_write_from_pybuffer(tensor, buf, offset=offset)
            return self._now(op)

        return self._schedule(start, deps, stream)

    def tensor_read(self, tensor: NrtTensor, dest: Any = None, offset: int = 0, size: int = 0,
                    deps: Optional[Sequence[Dep]] = None,
                    stream: Optional[SpikeStream] = None) -> asyncio.Future:
        """Reads ``tensor`` from ``offset`` (``size`` bytes, 0: to its end):
        a future of the bytes, or of ``dest`` filled when one (a writable
        buffer) is given."""
        def start() -> SpikeAsyncFuture:
            def op() -> Any:
                if dest is None:
                    return self.spike.tensor_read(tensor, offset, size)
                self.spike.tensor_read_to_pybuffer(tensor, dest, offset=offset, size=size)
                return dest
            return self._now(op)

        return self._schedule(start, deps, stream)

    def execute(self, model: NrtModel, inputs: Mapping[str, NrtTensor],
                outputs: Mapping[str, NrtTensor], ntff_name: Optional[str] = None,
                save_trace: bool = False, deps: Optional[Sequence[Dep]] = None,
                stream: Optional[SpikeStream] = None) -> asyncio.Future:
        """Queues one execution (``Spike.execute_async``); a future of None
        that completes when the device has run it (its error raised at
        ``await``/``wait``). Tracing is not supported asynchronously."""
        if save_trace or ntff_name is not None:
            raise ValueError("SpikeAsync.execute cannot save a trace (save_trace/ntff_name): "
                             "use Spike.execute for a traced execution")

        def start() -> SpikeAsyncFuture:
            fut = self._future()
            try:
                ev = self.spike.execute_async(model, dict(inputs), dict(outputs))
            except Exception as e:  # noqa: BLE001  (refused at submission)
                fut.set_exception(e)
            else:
                self._watch(ev, fut)
            return fut

        return self._schedule(start, deps, stream)

    def custom_op(self, coro: Awaitable[Any], deps: Optional[Sequence[Dep]] = None,
                  stream: Optional[SpikeStream] = None) -> asyncio.Future:
        """Runs the coroutine ``coro`` on the loop (after ``deps`` and the
        stream's previous operation): a task."""
        if not asyncio.iscoroutine(coro):
            raise TypeError(f"custom_op/submit needs a coroutine, not {type(coro).__name__}")

        async def run() -> Any:
            return await coro

        return self._schedule(lambda: self._loop.create_task(run()), deps, stream)

    def submit(self, coro: Awaitable[Any], deps: Optional[Sequence[Dep]] = None,
               stream: Optional[SpikeStream] = None) -> asyncio.Future:
        """Same as :meth:`custom_op`."""
        return self.custom_op(coro, deps, stream)

    def create_stream(self) -> SpikeStream:
        """A new, empty :class:`SpikeStream`."""
        return SpikeStream(self)

    @staticmethod
    async def all(futs: Sequence[Dep]) -> List[Any]:
        """Awaits each of ``futs`` in order; their results."""
        return [await f for f in futs]
