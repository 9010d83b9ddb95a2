"""A store of embedded texts' vectors that outlives the index: each distinct text is embedded once.

``<vault>/.vault_pipeline/embeddings.sqlite`` holds one row per (embedder name, text key) with the
text's unit vector as float32 bytes. The text is the one embedded (a row's ``embedding_text``, not
its stored text), so a vector is found again only for the very text it was made from.
``vault index --rebuild``, a schema change or a damaged index set aside then re-embed nothing they
embedded before; the vectors are the embedder's own output, so an index built from the store
holds what a fresh embedding would. Like the index it is
derived: deleting the file costs only the time to embed again. A store that cannot be read or
written is left alone and the sync embeds as if it were empty (``CacheError`` is never raised to
the caller; ``broken`` says why the store was switched off).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

CACHE_FILE = "embeddings.sqlite"
LOOKUP_CHUNK = 500  # keys per ``IN (...)`` lookup (under sqlite's variable limit)
# Drop the vectors of texts no row holds any more once the store holds this many times the rows.
PRUNE_GROWTH = 2.0


def cache_key(embedder: str, text: str) -> bytes:
    """The store's key of ``text`` embedded by ``embedder``: a 16-byte digest of both."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(embedder.encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.digest()


class VectorCache:
    """Vectors by (embedder, text) in sqlite; every failure switches the store off, never the sync."""

    def __init__(self, path: Path, embedder: str, dim: int):
        self.path, self.embedder, self.dim = path, embedder, dim
        self.broken = ""
        self.hits = 0
        self._db: sqlite3.Connection | None = None
        try:
            self._db = sqlite3.connect(path, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (embedder TEXT NOT NULL, key BLOB NOT NULL,"
                " vector BLOB NOT NULL, PRIMARY KEY (embedder, key)) WITHOUT ROWID"
            )
            self._db.commit()
        except sqlite3.Error as exc:
            self._off(exc)

    def close(self) -> None:
        """Close the store."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def get(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of those of ``texts`` the store holds, by text (a wrong-sized or
        non-finite stored vector counts as absent: it is embedded again and overwritten)."""
        if self._db is None or not texts:
            return {}
        by_key = {cache_key(self.embedder, t): t for t in dict.fromkeys(texts)}
        keys = list(by_key)
        out: dict[str, np.ndarray] = {}
        try:
            for start in range(0, len(keys), LOOKUP_CHUNK):
                part = keys[start : start + LOOKUP_CHUNK]
                marks = ",".join("?" * len(part))
                query = f"SELECT key, vector FROM vectors WHERE embedder = ? AND key IN ({marks})"
                for key, blob in self._db.execute(query, (self.embedder, *part)):
                    vector = np.frombuffer(blob, dtype=np.float32)
                    if vector.shape == (self.dim,) and np.isfinite(vector).all():
                        out[by_key[key]] = vector
        except sqlite3.Error as exc:
            self._off(exc)
            return {}
        self.hits += len(out)
        return out

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store ``vectors`` (one row per text) in one transaction."""
        if self._db is None or not len(texts):
            return
        rows = [
            (self.embedder, cache_key(self.embedder, t), np.asarray(v, np.float32).tobytes())
            for t, v in zip(texts, vectors)
        ]
        try:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
        except sqlite3.Error as exc:
            self._off(exc)

    def prune(self, kept_texts: Callable[[], Iterable[str]], rows: int) -> int:
        """Drop the vectors of texts not in ``kept_texts()`` (read only then) once the store holds
        ``PRUNE_GROWTH`` times the index's ``rows`` (edits leave old texts behind); returns how many went."""
        if self._db is None:
            return 0
        try:
            stored = int(self._db.execute("SELECT count(*) FROM vectors").fetchone()[0])
            if stored <= max(1, rows) * PRUNE_GROWTH:
                return 0
            keep = {cache_key(self.embedder, t) for t in kept_texts()}
            gone = [
                (e, k)
                for e, k in self._db.execute("SELECT embedder, key FROM vectors")
                if e != self.embedder or k not in keep
            ]
            with self._db:
                self._db.executemany("DELETE FROM vectors WHERE embedder = ? AND key = ?", gone)
            return len(gone)
        except sqlite3.Error as exc:
            self._off(exc)
            return 0

    def _off(self, exc: sqlite3.Error) -> None:
        self.broken = f"{self.path.name}: {' '.join(str(exc).split())}"
        self.close()
