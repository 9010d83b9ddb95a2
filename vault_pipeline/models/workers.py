"""Model calls on daemon threads: a bounded pool, and an ordered map over a stream.

A model call that hangs past its deadline must not hold the program open: ``ThreadPoolExecutor``
joins its threads when the interpreter exits, so a call still waiting on a server kept ``vault
query`` alive long after it printed its package. ``DaemonPool`` runs calls on daemon threads and
``shutdown`` abandons what is queued; the calls themselves end by their own timeouts.
``ordered`` runs a function over a stream on such a pool, a bounded number ahead, and gives the
results back in the stream's order, so what is written from them is deterministic.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")

_STOP = None
AHEAD = 4  # items read ahead per worker: room for short conversations to pass a long one


_busy = 0  # calls running on pool threads now, over every pool
_busy_lock = threading.Lock()


def calls_in_flight() -> int:
    """How many calls pool threads are running now: a command ending with calls still out (a gate past
    its deadline, its request still waiting on the server) ends its process at once (``cli.main``)."""
    return _busy


class DaemonPool:
    """Up to ``workers`` daemon threads taking calls in the order they were submitted."""

    def __init__(self, workers: int, name: str = "vault-model"):
        self.workers = max(1, workers)
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Future, Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._pending: set[Future] = set()
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Out], /, *args: Any) -> Future[Out]:
        """Run ``fn(*args)`` on a pool thread; its Future."""
        future: Future[Out] = Future()
        with self._lock:
            self._pending.add(future)
            if len(self._threads) < min(self.workers, len(self._pending)):
                thread = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._jobs.put((future, fn, args))
        return future

    def _work(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            future, fn, args = job
            if future.set_running_or_notify_cancel():
                _count(1)
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # handed to whoever reads the future
                    future.set_exception(exc)
                finally:
                    _count(-1)
            with self._lock:
                self._pending.discard(future)

    def shutdown(self) -> None:
        """Cancel what has not started and let the threads end after their current call (nobody waits)."""
        with self._lock:
            for future in self._pending:
                future.cancel()
            threads = len(self._threads)
        for _ in range(threads):
            self._jobs.put(_STOP)


def _count(step: int) -> None:
    global _busy
    with _busy_lock:
        _busy += step


def ordered(
    fn: Callable[[In], Out], items: Iterable[In], workers: int, ahead: int | None = None
) -> Iterator[tuple[In, Future[Out]]]:
    """``fn`` over ``items`` on ``workers`` daemon threads, at most ``ahead`` (default four times the
    workers) read ahead of the one being given back: a slow item holds the order, not the workers.
    Yields (item, its finished Future) in the items' order. One worker runs everything in the
    caller's thread."""
    if workers <= 1:
        for item in items:
            done: Future[Out] = Future()
            try:
                done.set_result(fn(item))
            except Exception as exc:
                done.set_exception(exc)
            yield item, done
        return
    pool = DaemonPool(workers, name="vault-ingest")
    window: deque[tuple[In, Future[Out]]] = deque()
    try:
        for item in items:
            window.append((item, pool.submit(fn, item)))
            if len(window) >= (ahead or AHEAD * workers):
                yield _finished(window.popleft())
        while window:
            yield _finished(window.popleft())
    finally:
        pool.shutdown()


def _finished(entry: tuple[In, Future[Out]]) -> tuple[In, Future[Out]]:
    entry[1].exception()  # waits for it
    return entry
