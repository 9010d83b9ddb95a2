"""Storage and reading: the LanceDB ``chunks`` table, the sqlite manifest, integrity checks, ``Index``.

Layout, all derived and rebuildable from the vault:
``<vault>/.vault_pipeline/index/`` (LanceDB database, table ``chunks``) and
``<vault>/.vault_pipeline/index.sqlite`` (table ``indexed``: what was indexed from which file
content, table ``meta``: embedder identity, schema version, table version, last sync).

lancedb is imported inside functions only: importing it costs 1-3 s, which ``vault --help``
must not pay.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vault_pipeline.errors import IndexStateError
from vault_pipeline.vault.files import STATE_DIR

SCHEMA_VERSION = 1
TABLE = "chunks"
INDEX_DIR = "index"
MANIFEST_FILE = "index.sqlite"
TEXT_COLUMN = "text"
VECTOR_COLUMN = "vector"
# Above this many rows the table gets an ANN index. Measured on this 2-core box at 384 dims
# (clustered random unit vectors, default-retrieval filter on): flat search p50 18 ms at 10k
# rows, 67 ms at 50k, 313 ms at 100k, against a 50 ms query budget. So: exact below 20k rows.
# The index is IVF_FLAT with sqrt(rows) partitions: it keeps the raw vectors (exact distances
# inside the probed partitions) and built in 7.5 s at 100k rows, against 84 s for IVF_HNSW_SQ
# (which would cost ~10% of a 100k-note sync's embedding time); p50 6-8 ms on a bare table,
# ~25 ms through Index.vector_search on the full 100k-note table, recall@15 0.995+ at 32 probes.
# IVF_HNSW_SQ (ef 300) answered in 9-12 ms but missed more true neighbours in the same test.
ANN_MIN_ROWS = 20_000
# Partitions searched per query (of about sqrt(rows)). A fixed number: with no maximum, LanceDB
# 0.40 searched 200 of 347 partitions at 120k rows (22 ms a query instead of 15).
ANN_PROBES = 32
# Retrain the ANN index when the table has doubled since it was built: optimize() only files
# new rows into the existing partitions, so partitions drift and grow.
ANN_RETRAIN_GROWTH = 2.0
# optimize() after this many write operations or rows written (deleted + added) since the last:
# lancedb's own rule of thumb is 20 operations or 100k rows; a one-note edit is 2 operations.
OPTIMIZE_WRITES = 40
OPTIMIZE_MIN_ROWS = 2_000
OPTIMIZE_FRACTION = 0.05
PREDICATE_CHUNK = 2_000  # paths per ``path IN (...)`` predicate

# Column order of the table; ``vector`` last. ``active`` is false for archived, superseded and
# duplicate notes, so default retrieval filters on one boolean instead of three strings (a
# boolean prefilter measured ~1.5x faster than the string one at 50k rows).
STRING_COLUMNS = ("chunk_id", "note_id", "path", "type", "tier", "status", "category", "speaker",
                  "created", "source_kind", "source_conversation", "source_messages", "heading")
ROW_COLUMNS = (*STRING_COLUMNS, "level", "ordinal", "synopsis", TEXT_COLUMN, "tokens", "sha256",
               "superseded_by", "duplicate_of", "active")
_TYPES = {"level": pa.int32(), "ordinal": pa.int32(), "tokens": pa.int32(),
          "synopsis": pa.bool_(), "active": pa.bool_()}


def chunk_schema(dim: int, identity: dict[str, str] | None = None) -> pa.Schema:
    """The ``chunks`` table schema for vectors of ``dim`` dimensions (identity kept as metadata)."""
    fields = [pa.field(name, _TYPES.get(name, pa.string()), nullable=False) for name in ROW_COLUMNS]
    fields.append(pa.field("row_check", pa.string(), nullable=False))
    fields.append(pa.field(VECTOR_COLUMN, pa.list_(pa.float32(), dim), nullable=False))
    metadata = {f"vault_pipeline.{k}": str(v) for k, v in (identity or {}).items()}
    return pa.schema(fields, metadata=metadata or None)


def row_check(chunk_id: str, path: str, sha256: str, text: str, vector: bytes) -> str:
    """A digest binding a row's identity to its content, so a welded row cannot pass."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (chunk_id, path, sha256, text):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    digest.update(vector)
    return digest.hexdigest()


def text_key(text: str) -> str:
    """Key of an embedded text, for carrying a vector over when the text did not change."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def to_json_list(values: Iterable[Any]) -> str:
    """A JSON list of strings (how ``source_messages`` is stored)."""
    return json.dumps([str(v) for v in values], ensure_ascii=False)


# --------------------------------------------------------------------------- manifest


class ManifestEntry(NamedTuple):
    """What was indexed from one file: its note id, content hash, stat, and chunk count."""

    relpath: str
    note_id: str
    sha256: str
    size: int
    mtime_ns: int
    chunks: int


class Manifest:
    """The sqlite record of indexed files plus key/value metadata (WAL mode: readers never block)."""

    def __init__(self, path: Path):
        self.path = path
        self._db = sqlite3.connect(path, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS indexed (relpath TEXT PRIMARY KEY, note_id TEXT NOT NULL,"
                         " sha256 TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,"
                         " chunks INTEGER NOT NULL)")
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
            self._db.executemany("INSERT OR REPLACE INTO indexed VALUES (?, ?, ?, ?, ?, ?)",
                                 ((e.relpath, e.note_id, e.sha256, e.size, e.mtime_ns, e.chunks) for e in upserts))

    def meta(self) -> dict[str, str]:
        """All metadata keys and values."""
        return dict(self._db.execute("SELECT key, value FROM meta"))

    def set_meta(self, **values: Any) -> None:
        """Set metadata keys (values stored as strings)."""
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 ((k, str(v)) for k, v in values.items()))

    def clear(self) -> None:
        """Forget every indexed file and all metadata (a rebuild starts here)."""
        with self._db:
            self._db.execute("DELETE FROM indexed")
            self._db.execute("DELETE FROM meta")


@contextmanager
def opened_manifest(path: Path) -> Iterator[Manifest]:
    """A read-write manifest, closed on exit."""
    manifest = Manifest(path)
    try:
        yield manifest
    finally:
        manifest.close()


def read_meta(path: Path) -> dict[str, str]:
    """Metadata from a manifest file, read-only (empty when the file or table is missing)."""
    if not path.exists():
        return {}
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)) as db:
        try:
            return dict(db.execute("SELECT key, value FROM meta"))
        except sqlite3.OperationalError:
            return {}


def manifest_count(path: Path) -> int:
    """How many files the manifest records (0 when it is missing)."""
    if not path.exists():
        return 0
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)) as db:
        try:
            return int(db.execute("SELECT count(*) FROM indexed").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


# --------------------------------------------------------------------------- table


def connect(index_dir: Path, *, strong: bool = False):
    """A LanceDB connection; ``strong`` makes every read see the latest committed version."""
    import os
    from datetime import timedelta

    # Lance logs a deprecation warning to stderr on every search; only errors belong there.
    os.environ.setdefault("LANCEDB_LOG", "error")
    import lancedb

    interval = timedelta(0) if strong else None
    return lancedb.connect(str(index_dir), read_consistency_interval=interval)


def table_exists(db, name: str = TABLE) -> bool:
    """True if the database holds table ``name``."""
    return name in db.list_tables().tables


class ChunkTable:
    """Writes to the ``chunks`` table: batched deletes and adds, index upkeep, integrity scans."""

    def __init__(self, db, dim: int, identity: dict[str, str]):
        from lancedb.index import FTS

        self.db = db
        self.dim = dim
        if table_exists(db):
            self.table = db.open_table(TABLE)
        else:
            self.table = db.create_table(TABLE, schema=chunk_schema(dim, identity))
            # Native FTS (no tantivy); new rows are searched flat until optimize() folds them in.
            self.table.create_index(TEXT_COLUMN, config=FTS())
        self.writes = 0  # write operations (each delete or add commits a version)
        self.rows_written = 0
        self.optimized = False

    @property
    def version(self) -> int:
        """The table's current version number."""
        return int(self.table.version)

    def count(self) -> int:
        """Rows in the table."""
        return int(self.table.count_rows())

    def scan(self, columns: Sequence[str], paths: Sequence[str] | None = None) -> pa.Table:
        """Selected columns of every row, or of the rows of ``paths``."""
        if paths is None:
            return self.table.search().select(list(columns)).limit(None).to_arrow()
        parts = [self.table.search().where(_in("path", batch)).select(list(columns)).limit(None).to_arrow()
                 for batch in _batches(sorted(set(paths)))]
        return pa.concat_tables(parts) if parts else chunk_schema(self.dim).empty_table().select(list(columns))

    def delete_paths(self, paths: Iterable[str]) -> None:
        """Delete every row of ``paths``: one predicate per batch of paths, never per row."""
        for batch in _batches(sorted(set(paths))):
            result = self.table.delete(_in("path", batch))
            self.writes += 1
            self.rows_written += int(getattr(result, "num_deleted_rows", 0) or 0)

    def add(self, rows: pa.Table) -> None:
        """Append rows in one write."""
        if rows.num_rows:
            self.table.add(rows)
            self.writes += 1
            self.rows_written += rows.num_rows

    def finish(self, meta: dict[str, str], *, force: bool = False) -> dict[str, str]:
        """Fold writes into the indexes when they add up; build the ANN index when large.

        Returns the metadata to record (pending write counts, rows under the ANN index).
        """
        writes = int(meta.get("pending_writes") or 0) + self.writes
        rows_written = int(meta.get("pending_rows") or 0) + self.rows_written
        rows = self.count()
        # optimize() compacts fragments (at 100k rows that rewrites the ~330 MB main fragment:
        # 1-3 s), folds new rows into the FTS and vector indexes and prunes versions older than
        # 7 days (a concurrent reader keeps its files). Until then new rows are searched flat,
        # which costs little, so a one-note edit does not pay for it.
        self.optimized = bool(writes) and (force or writes >= OPTIMIZE_WRITES
                                           or rows_written >= max(OPTIMIZE_MIN_ROWS, rows * OPTIMIZE_FRACTION))
        if self.optimized:
            self.table.optimize()
            writes = rows_written = 0
        out = {"pending_writes": str(writes), "pending_rows": str(rows_written)}
        built = int(meta.get("ann_rows") or 0)
        # LanceDB 0.40's optimize() leaves the vector index with 8 partitions (347 before it at
        # 120k rows): every search then compares all vectors (15-25 ms instead of 10), so the
        # index is built again after each optimize (5.6 s at 120k rows; optimize itself about 4 s).
        if rows > ANN_MIN_ROWS and (not built or self.optimized or rows >= built * ANN_RETRAIN_GROWTH):
            self._build_ann(rows)
            out["ann_rows"] = str(rows)
        if rows and not meta.get("active_index"):
            self._build_active_index()
            out["active_index"] = "bitmap"
        return out

    def _build_active_index(self) -> None:
        from lancedb.index import Bitmap

        # Both lanes prefilter on ``active``; without an index that reads the column of every row
        # (5 ms a search at 120k rows, a third of a full-text search). 20 ms to build at 120k.
        self.table.create_index("active", config=Bitmap(), replace=True)

    def _build_ann(self, rows: int) -> None:
        from lancedb.index import IvfFlat

        # Unit vectors: dot product is the cosine, so "dot" needs no normalisation pass. A lighter
        # k-means (32 samples a partition, 10 rounds) than LanceDB's default (256, 50): at 120k
        # rows 5.6 s instead of 31 s, and recall@15 against exact search 0.945 against 0.933.
        config = IvfFlat(distance_type="dot", num_partitions=max(1, round(math.sqrt(rows))),
                         sample_rate=32, max_iterations=10)
        self.table.create_index(VECTOR_COLUMN, config=config, replace=True)


def _in(column: str, values: Sequence[str]):
    """``column IN (values)`` as a typed expression (no SQL quoting to get wrong)."""
    from lancedb.expr import col

    return col(column).isin(list(values))


def _batches(values: Sequence[str], size: int = PREDICATE_CHUNK) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


# --------------------------------------------------------------------------- rows


def rows_table(notes: Sequence[tuple[ManifestEntry, dict[str, Any], Sequence[Any]]], vectors: np.ndarray,
               dim: int) -> pa.Table:
    """Arrow rows for (manifest entry, shared columns, chunks) triples, each row with its check."""
    columns: dict[str, list[Any]] = {name: [] for name in (*ROW_COLUMNS, "row_check")}
    i = 0
    for entry, shared, chunks in notes:
        for ordinal, chunk in enumerate(chunks):
            chunk_id = f"{entry.note_id}:{ordinal}"
            values = {**shared, "chunk_id": chunk_id, "note_id": entry.note_id, "path": entry.relpath,
                      "heading": " > ".join(chunk.heading_path), "level": chunk.level, "ordinal": ordinal,
                      "synopsis": chunk.synopsis, "text": chunk.text, "tokens": chunk.tokens, "sha256": entry.sha256,
                      "row_check": row_check(chunk_id, entry.relpath, entry.sha256, chunk.text, vectors[i].tobytes())}
            for name, value in values.items():
                columns[name].append(value)
            i += 1
    schema = chunk_schema(dim)
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema if f.name != "vector"]
    arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), type=pa.float32()), dim))
    return pa.Table.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------- integrity

LAYOUT_COLUMNS = ("path", "note_id", "chunk_id", "ordinal", "sha256")
CONTENT_COLUMNS = ("chunk_id", "path", "sha256", TEXT_COLUMN, "row_check", VECTOR_COLUMN)


def layout_faults(layout: pa.Table, manifest: dict[str, ManifestEntry]) -> dict[str, str]:
    """Paths whose rows disagree with the manifest, each with the first fault found."""
    faults: dict[str, str] = {}
    expected = pc.binary_join_element_wise(layout["note_id"], pc.cast(layout["ordinal"], pa.string()), ":")
    for path in pc.filter(layout["path"], pc.not_equal(layout["chunk_id"], expected)).to_pylist():
        faults.setdefault(path, "chunk id does not match note id and ordinal")
    if pc.count_distinct(layout["chunk_id"]).as_py() != layout.num_rows:
        counts = layout.group_by("chunk_id").aggregate([("chunk_id", "count")])
        dup = pc.filter(counts["chunk_id"], pc.greater(counts["chunk_id_count"], 1))
        for path in pc.filter(layout["path"], pc.is_in(layout["chunk_id"], dup)).to_pylist():
            faults.setdefault(path, "duplicate chunk ids")
    # Vectorised: at 100k notes a per-path Python loop costs more than the rest of a no-op sync.
    # Distinct ordinals per path follow from the checks above (unique chunk ids, each equal to
    # note_id:ordinal) plus one note id per path, so count, min and max pin them to 0..n-1.
    groups = layout.group_by("path").aggregate(
        [("ordinal", "count"), ("ordinal", "min"), ("ordinal", "max"),
         ("note_id", "min"), ("note_id", "max"), ("sha256", "min"), ("sha256", "max")])
    entries = manifest.values()
    expected = pa.table({"path": pa.array(list(manifest), pa.string()),
                         "m_note": pa.array([e.note_id for e in entries], pa.string()),
                         "m_sha": pa.array([e.sha256 for e in entries], pa.string()),
                         "m_chunks": pa.array([e.chunks for e in entries], pa.int64())})
    joined = groups.join(expected, "path", join_type="full outer")
    for g in joined.filter(_mismatch(joined)).to_pylist():
        faults.setdefault(g["path"], _group_fault(g, manifest.get(g["path"])))
    return faults


def _mismatch(j: pa.Table) -> pa.ChunkedArray:
    """Rows of the path/manifest join where anything differs (nulls: one side is missing)."""
    n = j["ordinal_count"]
    checks = [pc.not_equal(n, j["m_chunks"]), pc.not_equal(j["ordinal_min"], 0), pc.not_equal(j["ordinal_max"], pc.subtract(n, 1)),
              pc.not_equal(j["note_id_min"], j["m_note"]), pc.not_equal(j["note_id_max"], j["m_note"]),
              pc.not_equal(j["sha256_min"], j["m_sha"]), pc.not_equal(j["sha256_max"], j["m_sha"])]
    bad = pc.or_kleene(pc.is_null(j["m_chunks"]), pc.and_kleene(pc.is_null(n), pc.greater(j["m_chunks"], 0)))
    for check in checks:
        bad = pc.or_kleene(bad, pc.fill_null(check, False))
    return pc.fill_null(bad, False)


def _group_fault(g: dict[str, Any], entry: ManifestEntry | None) -> str:
    """What is wrong with one path's rows, or '' when they match its manifest entry."""
    if entry is None:
        return "rows for a path the manifest does not know"
    n = g["ordinal_count"]
    if n is None:
        return "rows missing"
    if n != entry.chunks:
        return f"{n} rows, manifest says {entry.chunks}"
    if g["ordinal_min"] != 0 or g["ordinal_max"] != n - 1:
        return "ordinals are not 0..n-1"
    if g["note_id_min"] != entry.note_id or g["note_id_max"] != entry.note_id:
        return "note id differs from the manifest"
    if g["sha256_min"] != entry.sha256 or g["sha256_max"] != entry.sha256:
        return "content hash differs from the manifest"
    return ""


def content_faults(rows: pa.Table) -> dict[str, str]:
    """Paths with a row whose stored check does not match its id, path, hash, text and vector."""
    faults: dict[str, str] = {}
    dim = rows.schema.field(VECTOR_COLUMN).type.list_size
    vectors = vectors_of(rows[VECTOR_COLUMN], dim)
    columns = [rows[c].to_pylist() for c in ("chunk_id", "path", "sha256", TEXT_COLUMN, "row_check")]
    for i, (chunk_id, path, sha, text, check) in enumerate(zip(*columns)):
        if row_check(chunk_id, path, sha, text, vectors[i].tobytes()) != check:
            faults.setdefault(path, f"row {chunk_id} content does not match its check")
    return faults


def vectors_of(column: pa.ChunkedArray | pa.Array, dim: int) -> np.ndarray:
    """A fixed-size-list vector column as a contiguous (n, dim) float32 array."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(array) == 0:
        return np.zeros((0, dim), dtype=np.float32)
    flat = array.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat, dtype=np.float32).reshape(len(array), dim)



# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Row:
    """One chunk as stored, plus how a lane scored it (``vector`` only when asked for)."""

    chunk_id: str
    note_id: str
    path: str
    type: str
    tier: str
    status: str
    category: str
    speaker: str
    created: str
    source_kind: str
    source_conversation: str
    source_messages: str  # JSON list of message ids
    heading: str
    level: int
    ordinal: int
    synopsis: bool
    text: str
    tokens: int
    sha256: str
    superseded_by: str
    duplicate_of: str
    active: bool
    similarity: float = math.nan  # cosine to the query vector; NaN when none was given
    score: float = 0.0  # the lane's own score: cosine (vector) or BM25 (text)
    lane: str = ""  # "vector" | "text" | "lookup"
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def messages(self) -> tuple[str, ...]:
        """The source message ids."""
        return tuple(json.loads(self.source_messages or "[]"))


class Index:
    """Read access to the index: vector and full-text lanes, lookups, statistics.

    Opening reads metadata only; the embedding model is never loaded here. Each read sees the
    latest committed sync, so a long-lived reader stays fresh; concurrent readers are safe.
    """

    def __init__(self, root: Path, table, meta: dict[str, str]):
        self.root = root
        self.table = table
        self.meta = meta
        self.dim = int(meta.get("dim") or table.schema.field(VECTOR_COLUMN).type.list_size)

    @classmethod
    def open(cls, vault, embedder=None) -> "Index":
        """Open the index of ``vault`` (a Vault or its root); IndexStateError when there is none."""
        state = Path(getattr(vault, "root", vault)) / STATE_DIR
        meta = read_meta(state / MANIFEST_FILE)
        db = connect(state / INDEX_DIR, strong=True) if (state / INDEX_DIR).is_dir() else None
        if not meta.get("embedder") or db is None or not table_exists(db):
            raise IndexStateError(f"no index in {state}; run `vault index` first")
        name = getattr(embedder, "name", None)
        if name is not None and name != meta["embedder"]:
            raise IndexStateError(f"the index was built with embedder {meta['embedder']}, not {name}; "
                                  "run `vault index` to rebuild it")
        return cls(state.parent, db.open_table(TABLE), meta)

    def vector_search(self, vector: np.ndarray, k: int, *, include_archived: bool = False,
                      with_vectors: bool = True) -> list[Row]:
        """The ``k`` chunks nearest to ``vector``; similarity is the exact cosine."""
        return self._vector_top(self._query_vector(vector), k, include_archived, with_vectors)

    def vector_search_many(self, vectors: np.ndarray, k: int, *, include_archived: bool = False,
                           with_vectors: bool = True) -> list[list[Row]]:
        """``vector_search`` for several query vectors in one table query (one scan or probe set)."""
        queries = [self._query_vector(v) for v in vectors]
        if len(queries) <= 1 or k <= 0:
            return [self._vector_top(q, k, include_archived, with_vectors) for q in queries]
        rows = self._nearest(np.stack(queries), _page(k), include_archived)
        which = rows["query_index"].to_numpy()
        # Each query's share of the shared page is its first page; a later page is its own search.
        return [self._vector_top(q, k, include_archived, with_vectors, first=rows.filter(pa.array(which == i)))
                for i, q in enumerate(queries)]

    def _vector_top(self, query: np.ndarray, k: int, include_archived: bool, with_vectors: bool,
                    first: pa.Table | None = None) -> list[Row]:
        def fetch(limit: int) -> pa.Table:
            return first if first is not None and limit == _page(k) else self._nearest(query, limit, include_archived)

        def score(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
            sims = self._cosines(rows, query)
            return sims, sims

        return _top(fetch, score, k, "vector", with_vectors)

    def _nearest(self, query: np.ndarray, limit: int, include_archived: bool) -> pa.Table:
        """Rows nearest to one query vector, or to each row of a 2-d array (``query_index`` says which)."""
        # The probe settings only matter once the table has an ANN index; flat search ignores them.
        search = (self.table.search(query if query.ndim == 1 else list(query), vector_column_name=VECTOR_COLUMN)
                  .distance_type("dot").nprobes(ANN_PROBES)
                  .select([*ROW_COLUMNS, VECTOR_COLUMN]).limit(limit))
        return (search if include_archived else search.where("active", prefilter=True)).to_arrow()

    def text_search(self, query: str, k: int, *, include_archived: bool = False,
                    vector: np.ndarray | None = None, with_vectors: bool = True) -> list[Row]:
        """The ``k`` best BM25 matches for ``query``; similarity is the cosine to ``vector`` if given."""
        if not query.strip() or k <= 0:
            return []
        qvec = None if vector is None else self._query_vector(vector)

        def fetch(limit: int) -> pa.Table:
            search = (self.table.search(query, query_type="fts", fts_columns=TEXT_COLUMN)
                      .select([*ROW_COLUMNS, VECTOR_COLUMN]).limit(limit))
            return (search if include_archived else search.where("active", prefilter=True)).to_arrow()

        def score(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
            bm25 = rows["_score"].to_numpy().astype(np.float64)
            sims = np.full(rows.num_rows, np.nan) if qvec is None else self._cosines(rows, qvec)
            return bm25, sims

        return _top(fetch, score, k, "text", with_vectors)

    def rows(self, note_ids, *, with_vectors: bool = False) -> list[Row]:
        """Every chunk of ``note_ids`` (any status), in the order given, then by ordinal."""
        order = {nid: i for i, nid in enumerate(dict.fromkeys(note_ids))}
        if not order:
            return []
        parts = [self.table.search().where(_in("note_id", batch)).select([*ROW_COLUMNS, VECTOR_COLUMN])
                 .limit(None).to_arrow() for batch in _batches(list(order))]
        rows = pa.concat_tables(parts)
        out = _to_rows(rows, np.zeros(rows.num_rows), np.full(rows.num_rows, np.nan), "lookup", with_vectors)
        return sorted(out, key=lambda r: (order[r.note_id], r.ordinal))

    def all_vectors(self, *, include_archived: bool = False) -> tuple[list[str], list[str], np.ndarray]:
        """(note ids, paths, vectors) of every atomic note's first chunk, sorted by note id."""
        where = "type = 'atomic' AND ordinal = 0" + ("" if include_archived else " AND active")
        rows = self.table.search().where(where).select(["note_id", "path", VECTOR_COLUMN]).limit(None).to_arrow()
        rows = rows.sort_by("note_id")
        return rows["note_id"].to_pylist(), rows["path"].to_pylist(), vectors_of(rows[VECTOR_COLUMN], self.dim)

    def stats(self) -> dict[str, Any]:
        """Row and note counts (per tier, status, category), last sync, embedder, indexes."""
        state = self.root / STATE_DIR
        meta = read_meta(state / MANIFEST_FILE)
        notes = self.table.search().where("ordinal = 0").select(["tier", "status", "category", "active"]) \
            .limit(None).to_arrow()
        kinds = {c.index_type for c in self.table.list_indices()}
        return {"rows": int(self.table.count_rows()), "notes": notes.num_rows,
                "files": manifest_count(state / MANIFEST_FILE),
                "tiers": _counts(notes["tier"]), "statuses": _counts(notes["status"]),
                "categories": _counts(notes["category"]),
                "inactive_notes": notes.num_rows - int(pc.sum(notes["active"]).as_py() or 0),
                "last_sync": meta.get("last_sync", ""), "embedder": meta.get("embedder", ""),
                "dim": int(meta.get("dim") or self.dim), "schema_version": int(meta.get("schema_version") or 0),
                "ann_index": bool(kinds - {"FTS", "BTree", "Bitmap", "LabelList"}), "fts_index": "FTS" in kinds,
                "ann_min_rows": ANN_MIN_ROWS, "table_version": int(self.table.version)}

    def _query_vector(self, vector: np.ndarray) -> np.ndarray:
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise IndexStateError(f"query vector has {q.shape[0]} dimensions, the index {self.dim}; "
                                  "run `vault index` with the same embedder")
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q

    def _cosines(self, rows: pa.Table, query: np.ndarray) -> np.ndarray:
        """Exact cosine: the dot product of unit vectors, in float64."""
        return vectors_of(rows[VECTOR_COLUMN], self.dim).astype(np.float64) @ query.astype(np.float64)


def _page(k: int) -> int:
    """Rows fetched for a top ``k``: a margin, since the library's cut and our exact re-score may
    disagree by float noise, and room for BM25 ties (templated notes tie often: with k + 5 rows
    a third of full-text searches had to fetch again; with 3k + 10 none did at 120k rows)."""
    return 3 * k + 10


def _top(fetch, score, k: int, lane: str, with_vectors: bool) -> list[Row]:
    """Top ``k`` by score desc, then chunk id asc, fetching more while ties cross the cut."""
    if k <= 0:
        return []
    limit = _page(k)
    while True:
        rows = fetch(limit)
        scores, sims = score(rows)
        out = sorted(_to_rows(rows, scores, sims, lane, with_vectors), key=lambda r: (-r.score, r.chunk_id))
        # A full page whose last score still equals the k-th may hide tied rows with smaller ids.
        if rows.num_rows < limit or len(out) <= k or out[k - 1].score != out[-1].score:
            return out[:k]
        limit *= 4


def _to_rows(rows: pa.Table, scores: np.ndarray, sims: np.ndarray, lane: str, with_vectors: bool) -> list[Row]:
    vectors = vectors_of(rows[VECTOR_COLUMN], rows.schema.field(VECTOR_COLUMN).type.list_size) if with_vectors else None
    values = rows.select(list(ROW_COLUMNS)).to_pylist()
    return [Row(**v, similarity=float(sims[i]), score=float(scores[i]), lane=lane,
                vector=None if vectors is None else vectors[i]) for i, v in enumerate(values)]


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    return {str(v["values"]): int(v["counts"]) for v in sorted(pc.value_counts(column).to_pylist(),
                                                               key=lambda v: str(v["values"]))}
