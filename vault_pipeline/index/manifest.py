"""The sqlite manifest of the index: what was indexed from which file content, plus metadata.

``<vault>/.vault_pipeline/index.sqlite`` holds table ``indexed`` (one row per indexed file: note
id, content hash, stat, chunk count) and table ``meta`` (embedder identity, schema version,
table version, pending writes, last sync). Like the table it is derived and rebuildable.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from vault_pipeline.vault.state import connect_read_only

MANIFEST_FILE = "index.sqlite"


class ManifestEntry(NamedTuple):
    """What was indexed from one file: its note id, content hash, stat, and chunk count."""

    relpath: str
    note_id: str
    sha256: str
    size: int
    mtime_ns: int
    chunks: int


class Manifest:
    """The sqlite record of indexed files plus key/value metadata (WAL mode: readers never block).

    ``read_only``: for readers (``status``, ``check``), which must work where the state folder
    cannot be written (another user, a read-only mount)."""

    def __init__(self, path: Path, *, read_only: bool = False):
        self.path = path
        if read_only:
            self._db = connect_read_only(path)
            return
        self._db = sqlite3.connect(path, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS indexed (relpath TEXT PRIMARY KEY, note_id TEXT NOT NULL,"
            " sha256 TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,"
            " chunks INTEGER NOT NULL)"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.commit()

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def entries(self) -> dict[str, ManifestEntry]:
        """Every indexed file, by vault-relative path."""
        cur = self._db.execute("SELECT relpath, note_id, sha256, size, mtime_ns, chunks FROM indexed")
        # A NamedTuple: 100k of them load in a fraction of what frozen dataclasses cost.
        return {row[0]: ManifestEntry._make(row) for row in cur}

    def apply(self, upserts: Sequence[ManifestEntry] = (), deletes: Iterable[str] = ()) -> None:
        """Insert or replace ``upserts`` and delete ``deletes`` in one transaction."""
        with self._db:
            self._db.executemany("DELETE FROM indexed WHERE relpath = ?", ((p,) for p in deletes))
            self._db.executemany(
                "INSERT OR REPLACE INTO indexed VALUES (?, ?, ?, ?, ?, ?)",
                ((e.relpath, e.note_id, e.sha256, e.size, e.mtime_ns, e.chunks) for e in upserts),
            )

    def meta(self) -> dict[str, str]:
        """All metadata keys and values."""
        return dict(self._db.execute("SELECT key, value FROM meta"))

    def set_meta(self, **values: Any) -> None:
        """Set metadata keys (values stored as strings)."""
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", ((k, str(v)) for k, v in values.items()))

    def clear(self) -> None:
        """Forget every indexed file and all metadata (a rebuild starts here)."""
        with self._db:
            self._db.execute("DELETE FROM indexed")
            self._db.execute("DELETE FROM meta")


@contextmanager
def opened_manifest(path: Path, *, read_only: bool = False) -> Iterator[Manifest]:
    """A manifest (read-write unless ``read_only``), closed on exit."""
    manifest = Manifest(path, read_only=read_only)
    try:
        yield manifest
    finally:
        manifest.close()


def read_meta(path: Path) -> dict[str, str]:
    """Metadata from a manifest file, read-only (empty when the file or table is missing)."""
    if not path.exists():
        return {}
    with closing(connect_read_only(path)) as db:
        try:
            return dict(db.execute("SELECT key, value FROM meta"))
        except sqlite3.OperationalError:
            return {}


def manifest_count(path: Path) -> int:
    """How many files the manifest records (0 when it is missing)."""
    if not path.exists():
        return 0
    with closing(connect_read_only(path)) as db:
        try:
            return int(db.execute("SELECT count(*) FROM indexed").fetchone()[0])
        except sqlite3.OperationalError:
            return 0
