"""A vault whose state folder this user cannot write: `status` and `check` report, `query` finds the index.

Another user reading someone's vault, or a vault on a read-only mount, cannot create SQLite's
``-shm`` file beside the state and index manifest databases (WAL mode). Before, `status` and
`check` failed ("Read-only file system") and `query` said there was no index. The vault is
made read-only with ``chmod -w``; where the test runs as root (whom file modes do not stop), the
commands run with the capabilities that let root pass them dropped (``setpriv``), and, where the
system's Python can load this project, as the unprivileged ``nobody`` account.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes import HANG_GUARD
from tests.support.paths import REPO
from vault_pipeline.vault.files import STATE_DIR, Vault
from vault_pipeline.vault.note import Note
from vault_pipeline.vault.state import StateStore, cannot_write, connect_read_only

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")

SETPRIV = shutil.which("setpriv")
DROP = ["--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all", "--"]
QUESTION = "What does the raked gravel in a dry garden stand for?"


def _quiesce(state: Path) -> None:
    """Close every SQLite file of the state folder as its last user would: the ``-wal`` is
    checkpointed and it and the ``-shm`` are removed, as after any command that ended."""
    for db in state.glob("*.sqlite"):
        sqlite3.connect(db).close()
    assert not list(state.glob("*.sqlite-shm")) and not list(state.glob("*.sqlite-wal"))


def _set_writable(root: Path, writable: bool) -> None:
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files, ""]:
            path = Path(folder, name)
            mode = stat.S_IMODE(path.stat().st_mode)
            path.chmod(mode | stat.S_IWUSR if writable else mode & ~0o222)


@pytest.fixture
def read_only_vault(indexed_example, tmp_path) -> Iterator[Path]:
    """The indexed example vault with a note written through the state (so ``state.sqlite`` holds a
    record), every file and folder then without write permission."""
    root = tmp_path / "vault"
    shutil.copytree(indexed_example, root)
    vault = Vault.open(root)
    note = Note("n-ro-pump", "atomic", "inbox", "heat-pump-defrost", {"id": "n-ro-pump", "type": "atomic"}, "x\n")
    vault.write(note)
    vault.close()
    _quiesce(root / STATE_DIR)
    _set_writable(root, False)
    yield root
    _set_writable(root, True)


def _as_reader() -> list[str]:
    """The argv prefix that runs a command as a user the vault's modes apply to (empty: this user)."""
    if os.geteuid() != 0:
        return []
    if SETPRIV is None:
        pytest.skip("running as root without setpriv: no way to be a user who cannot write")
    probe = subprocess.run([SETPRIV, *DROP, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop capabilities here: {probe.stderr.decode().strip()}")
    return [SETPRIV, *DROP]


def _vault(prefix: list[str], python: str, *args: str, pythonpath: str = str(REPO)) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": pythonpath, "HOME": "/tmp"}
    return subprocess.run(
        [*prefix, python, "-m", "vault_pipeline.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=HANG_GUARD,
    )


def _assert_reads(root: Path, prefix: list[str], python: str = sys.executable, pythonpath: str = str(REPO)) -> None:
    # The reader really cannot write the state folder (else the test proves nothing).
    touch = subprocess.run([*prefix, "touch", str(root / STATE_DIR / "probe")], capture_output=True)
    assert touch.returncode != 0

    status = _vault(prefix, python, "status", "--vault", str(root), "--json", pythonpath=pythonpath)
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["index"] is not None and report["index"]["notes"] > 0
    assert report["pending"]["new"] == 1  # the note written after the index was built

    check = _vault(prefix, python, "check", "--vault", str(root), "--json", pythonpath=pythonpath)
    found = json.loads(check.stdout)  # a report, not an error
    assert found["notes"] > 0
    # Its one problem is the note the index has not seen yet (exit 1, as for any problem found).
    assert found["problems"] == 1 and check.returncode == 1, check.stdout
    assert [m[0] for m in found["index_mismatches"]] == ["inbox/heat-pump-defrost.md"]

    query = _vault(prefix, python, "query", QUESTION, "--vault", str(root), "--json", pythonpath=pythonpath)
    assert "no index" not in query.stderr, query.stderr
    assert query.returncode == 0, query.stderr
    package = json.loads(query.stdout)
    assert package["found"] and package["blocks"]
    assert not list((root / STATE_DIR).glob("*.sqlite-shm"))  # nothing was written


def test_status_check_and_query_read_a_state_folder_this_user_cannot_write(read_only_vault):
    _assert_reads(read_only_vault, _as_reader())


SYSTEM_PYTHON = "/usr/bin/python3"


def test_status_check_and_query_work_for_another_os_user(read_only_vault, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no `nobody` account to act as a second user")
    # The test's interpreter may sit in a folder only root can enter (pyenv under /root): the
    # system's Python of the same version, given this environment's packages, can be run by anyone.
    site = next((p for p in sys.path if p.endswith("site-packages") and not p.startswith("/root")), None)
    runuser = shutil.which("runuser")
    if not os.path.exists(SYSTEM_PYTHON) or site is None or runuser is None:
        pytest.skip("no interpreter and packages another user can run, or no runuser")
    pythonpath = os.pathsep.join([str(REPO), site])
    probe = subprocess.run(
        [runuser, "-u", "nobody", "--", SYSTEM_PYTHON, "-c", "import vault_pipeline.cli, lancedb, onnxruntime"],
        capture_output=True,
        env={"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"},
        cwd="/",
    )
    if probe.returncode != 0:
        pytest.skip("`nobody` cannot load this project (another Python version, or folders it cannot enter)")
    reachable = read_only_vault
    for parent in reachable.parents:  # tmp_path's folders are owner-only: let others through, no more
        if parent == Path(parent.anchor) or not os.access(parent, os.W_OK):
            break
        parent.chmod(stat.S_IMODE(parent.stat().st_mode) | 0o055)
    for folder, dirs, files in os.walk(reachable):  # a vault others may read, not write
        for name in [*dirs, *files, ""]:
            path = Path(folder, name)
            path.chmod(stat.S_IMODE(path.stat().st_mode) | (0o055 if path.is_dir() else 0o044))
    _assert_reads(reachable, [runuser, "-u", "nobody", "--"], SYSTEM_PYTHON, pythonpath)


# --------------------------------------------------------------------------- the store alone


def test_a_state_store_that_cannot_write_reads_and_refuses_to_record(tmp_path, monkeypatch):
    from vault_pipeline.errors import StorageError

    store = StateStore(tmp_path / "state.sqlite")
    store.record("inbox/a.md", "n-a", "0" * 64, 10, 20)
    store.close()
    _quiesce(tmp_path)
    # What SQLite answers where it cannot create the ``-shm`` file (root's file modes cannot be
    # made to refuse root): the read-write open fails with SQLITE_READONLY; URIs open as asked.
    real_connect = sqlite3.connect

    def connect(path, *args, **kwargs):
        if str(path) == str(store.path):
            refusal = sqlite3.OperationalError("attempt to write a readonly database")
            refusal.sqlite_errorcode = 8  # type: ignore[attr-defined]
            raise refusal
        return real_connect(path, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    reader = StateStore(tmp_path / "state.sqlite")
    assert reader.paths_for("n-a") == ["inbox/a.md"]
    assert reader.read_only
    reader.cache_ids([("inbox/a.md", "n-a", 10, 20)], gone=[])  # a cache: skipped, no error
    with pytest.raises(StorageError, match=r"state\.sqlite"):
        reader.record("inbox/b.md", "n-b", "1" * 64, 1, 2)
    reader.close()
    assert StateStore(tmp_path / "state.sqlite").paths_for("n-b") == []  # nothing recorded


def test_only_a_write_refusal_falls_back_to_a_read_only_open(tmp_path):
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 5  # type: ignore[attr-defined]
    readonly = sqlite3.OperationalError("attempt to write a readonly database")
    readonly.sqlite_errorcode = 8  # type: ignore[attr-defined]
    assert cannot_write(readonly) and not cannot_write(locked)
    db = tmp_path / "x.sqlite"
    with pytest.raises(sqlite3.OperationalError):
        connect_read_only(db)  # nothing to read: an error, never an empty database made up
    assert not db.exists()
