"""Writes queue, reads never wait: concurrent `remember` calls take turns, none is refused.

Twenty calls at once used to refuse each other ("vault is locked by `remember` (pid ...)", the pid
the server's own): each thread asked `flock` on its own descriptor. Now threads of one process wait
their turn in the lock's queue (bounded by the call's wait), hold the lock only to write their files,
and share the index syncs after them. A client's memories go into one running session note.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.serve.test_mcp import call, tools  # noqa: F401  (the fixture)
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import split_frontmatter

SUBJECTS = [
    "billing service",
    "search cluster",
    "mail relay",
    "build farm",
    "photo archive",
    "metrics pipeline",
    "wiki server",
    "payroll export",
]


def _memory(i: int, subject: str) -> str:
    return f"The {subject} stores its nightly backups in bucket number {100 + i}."


@pytest.fixture
def patient(tools):  # noqa: F811
    tools.lock_wait = 600.0  # bounded, but far above what eight queued calls take
    return tools


def test_concurrent_remembers_all_land_once_and_none_is_refused(patient, monkeypatch):
    import vault_pipeline.index.sync as index_sync

    real, syncs = index_sync.sync, []

    def slow_sync(*args, **kwargs):  # a sync that takes a while, as a real embedder's does
        syncs.append(1)
        time.sleep(1.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(index_sync, "sync", slow_sync)
    texts = [_memory(i, s) for i, s in enumerate(SUBJECTS)]
    start = threading.Barrier(len(texts))

    def one(text):
        start.wait()
        return patient.remember(text, client="load")

    with ThreadPoolExecutor(len(texts)) as pool:
        reports = list(pool.map(one, texts))
    # How many syncs the calls share depends on how their extractions interleave on the machine
    # (test_one_sync_serves_every_call_that_wrote_before_it_began pins the sharing itself): no call
    # pays for more than one.
    assert 1 <= len(syncs) <= len(texts), len(syncs)
    written = [path for r in reports for path in r.written]
    assert all(r.written and not r.refused for r in reports), [r.to_dict() for r in reports]
    assert len(written) == len(set(written)) == len(texts)  # each note once
    bodies = [(patient.root / p).read_text(encoding="utf-8") for p in written]
    for text in texts:
        assert sum(text in body for body in bodies) == 1
    assert all(r.indexed for r in reports)
    found = patient.search("bucket number 105 photo archive", 5)
    assert any(hit["path"] in written for hit in found)


def test_a_client_s_memories_share_one_running_session(patient):
    first = call(patient, "remember", {"text": _memory(1, "mail relay")})
    second = call(patient, "remember", {"text": _memory(2, "wiki server")})
    assert not first.is_error and not second.is_error
    session = first.structured_content["session"]
    assert session == second.structured_content["session"] and session.startswith("sessions/")
    sessions = sorted(p.name for p in (patient.root / "sessions").glob("*.md"))
    assert len(sessions) == 1, sessions
    text = (patient.root / session).read_text(encoding="utf-8")
    assert _memory(1, "mail relay") in text and _memory(2, "wiki server") in text
    for path in [*first.structured_content["written"], *second.structured_content["written"]]:
        _, body = split_frontmatter((patient.root / path).read_text(encoding="utf-8"))
        stem = session.rsplit("/", 1)[1][:-3]
        assert f"[[{stem}#^m-" in body  # the note cites its own message in the running session
    vault = Vault(patient.root)
    try:
        from vault_pipeline.index.check import check

        report = check(vault)
    finally:
        vault.close()
    assert not report.to_dict().get("dangling_blocks"), report.to_dict()


def test_another_client_gets_its_own_session(patient):
    patient.remember(_memory(3, "build farm"), client="one")
    patient.remember(_memory(4, "payroll export"), client="two")
    assert len(list((patient.root / "sessions").glob("*.md"))) == 2


def test_one_sync_serves_every_call_that_wrote_before_it_began():
    """Group commit, without timing: while one sync runs, five calls finish their writes; when it
    ends, one more sync serves all five."""
    from vault_pipeline.serve.remember import _Syncs

    syncs, runs, release = _Syncs(), [], threading.Event()

    def first_run():
        runs.append("first")
        assert release.wait(timeout=600)

    first = threading.Thread(target=syncs.after_write, args=(first_run,), kwargs={"deadline": time.monotonic() + 600})
    first.start()
    while not runs:
        time.sleep(0.01)
    served = []

    def one():
        served.append(syncs.after_write(lambda: runs.append("shared"), deadline=time.monotonic() + 600))

    callers = [threading.Thread(target=one) for _ in range(5)]
    for t in callers:
        t.start()
    while len(syncs._cond._waiters) < 5:  # every caller waits for a sync begun after its write
        time.sleep(0.01)
    release.set()
    for t in [first, *callers]:
        t.join()
    assert runs == ["first", "shared"] and served == [True] * 5
