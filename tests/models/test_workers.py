"""Model calls on daemon threads: the pool, and the ordered map the ingest writes from."""

from __future__ import annotations

import threading
import time

import pytest

from vault_pipeline.models.workers import DaemonPool, ordered


def test_ordered_gives_results_in_the_items_order_whatever_finishes_first():
    def slow_for_small(n: int) -> int:
        time.sleep(0.02 * (5 - n))  # the first items finish last
        return n * n

    results = [(item, future.result()) for item, future in ordered(slow_for_small, range(5), workers=3)]
    assert results == [(n, n * n) for n in range(5)]


def test_ordered_keeps_errors_as_results():
    def fail_on_two(n: int) -> int:
        if n == 2:
            raise ValueError("two")
        return n

    futures = dict(ordered(fail_on_two, range(4), workers=2))
    assert [f.exception() is None for f in futures.values()] == [True, True, False, True]
    with pytest.raises(ValueError, match="two"):
        futures[2].result()


def test_ordered_reads_the_stream_a_bounded_way_ahead():
    read: list[int] = []

    def stream():
        for n in range(100):
            read.append(n)
            yield n

    first = next(iter(ordered(lambda n: n, stream(), workers=2)))
    assert first[0] == 0 and len(read) <= 9  # four times the workers ahead, not the whole stream


def test_one_worker_runs_in_the_callers_thread():
    seen = [item for item, future in ordered(lambda n: threading.current_thread().name, range(2), 1)]
    assert seen == [0, 1]
    names = {f.result() for _, f in ordered(lambda n: threading.current_thread().name, range(2), 1)}
    assert names == {threading.current_thread().name}


def test_the_pool_runs_on_daemon_threads_and_abandons_queued_calls():
    release = threading.Event()
    pool = DaemonPool(1, name="test-pool")
    running = pool.submit(release.wait, 5)
    while not running.running():  # the one thread has taken it
        time.sleep(0.01)
    queued = pool.submit(lambda: "never")
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("test-pool"))
    pool.shutdown()
    assert queued.cancelled()
    release.set()
    assert running.result(timeout=600) is True


def test_calls_in_flight_counts_the_calls_pool_threads_are_running():
    from vault_pipeline.models.workers import calls_in_flight

    before = calls_in_flight()
    release = threading.Event()
    pool = DaemonPool(2, name="test-flight")
    running = [pool.submit(release.wait, 600) for _ in range(2)]
    while not all(f.running() for f in running):
        time.sleep(0.01)
    assert calls_in_flight() == before + 2
    release.set()
    assert all(f.result(timeout=600) for f in running)
    while calls_in_flight() != before:  # the count drops once each call has returned
        time.sleep(0.01)
    pool.shutdown()
