"""The LanceDB ``chunks`` table: its schema and rows, and the ANN, full-text and optimize policy.

The table lives in ``<vault>/.vault_pipeline/index/`` (LanceDB database, table ``chunks``);
like the manifest it is derived and rebuildable from the vault.

lancedb is imported inside functions only: importing it costs 1-3 s, which ``vault --help``
must not pay.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from vault_pipeline.index.manifest import ManifestEntry
from vault_pipeline.models.embed import MINILM_MAX_TOKENS, minilm_tokens
from vault_pipeline.vault.format import EMBEDDING_TEXT_VERSION
from vault_pipeline.vault.frontmatter import source_properties
from vault_pipeline.vault.note import iso, note_tier

# 2: ``source_position`` (a note's place in its message), so packages keep a procedure's order.
SCHEMA_VERSION = 2
TABLE = "chunks"
# The manifest key naming the version of ``vault.format.embedding_text`` the vectors were made with.
EMBEDDING_TEXT_KEY = "embedding_text"
INDEX_DIR = "index"
TEXT_COLUMN = "text"
VECTOR_COLUMN = "vector"
# Exact search below this many rows (a flat search outgrows the query's latency budget past it),
# an IVF_FLAT index above: it keeps the raw vectors, so distances inside the probed partitions are
# exact, and builds far faster than IVF_HNSW_SQ. Measurements: docs/decisions/0007-lancedb-index.md.
ANN_MIN_ROWS = 20_000
# Partitions searched per query (of about sqrt(rows)). A fixed number: with no maximum LanceDB
# probes most partitions, and a search costs half again as much.
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
# optimize() deletes the files of table versions older than this (LanceDB's default keeps 7 days,
# so an index edited daily grew past twice its fresh size). A reader that opened an older version
# is a query in flight, well under this; a read that still meets a removed file reads again
# (``Index._complete``'s fallback). Decision 0132.
VERSION_GRACE = timedelta(minutes=5)

# Column order of the table; ``vector`` last. ``active`` is false for archived, superseded and
# duplicate notes, so default retrieval filters on one boolean instead of three strings (faster
# as a prefilter).
STRING_COLUMNS = (
    "chunk_id",
    "note_id",
    "path",
    "type",
    "tier",
    "status",
    "category",
    "speaker",
    "created",
    "source_kind",
    "source_conversation",
    "source_messages",
    "heading",
)
ROW_COLUMNS = (
    *STRING_COLUMNS,
    "level",
    "ordinal",
    "synopsis",
    TEXT_COLUMN,
    "tokens",
    "sha256",
    "superseded_by",
    "duplicate_of",
    "active",
    "source_position",
)
_TYPES = {
    "level": pa.int32(),
    "ordinal": pa.int32(),
    "tokens": pa.int32(),
    "synopsis": pa.bool_(),
    "active": pa.bool_(),
    "source_position": pa.int32(),
}
# What a ``Row`` field holds when a reader left its column out: its type's empty value.
EMPTY_VALUES = {name: {pa.int32(): 0, pa.bool_(): False}.get(_TYPES.get(name), "") for name in ROW_COLUMNS}


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


def outdated_embedding(meta: dict[str, str], embedder: str | None = None) -> str:
    """Why an index's vectors are not of the texts this build embeds (an older ``embedding_text``,
    or MiniLM reading another number of tokens than ``embedder`` does), or '' (no index recorded
    yet, or the same texts): such vectors must never mix with new ones."""
    if not meta.get("embedder"):
        return ""
    if embedder is not None and (cut := _other_cut(meta["embedder"], embedder)):
        return cut
    was, now = meta.get(EMBEDDING_TEXT_KEY) or "1", str(EMBEDDING_TEXT_VERSION)
    if was == now:
        return ""
    if was == "1":
        return (
            "the index embeds each row's text with its Source links and block ids; this build embeds"
            f" it without them (embedding text 1 -> {now}), so the index is built again once"
            " (a text without ids keeps its stored vector)"
        )
    return f"the embedded text changed (embedding text {was} -> {now}), so the index is built again once"


def _other_cut(was: str, now: str) -> str:
    """Why an index of MiniLM reading another number of tokens is built again, or ''."""
    read, reads = minilm_tokens(was), minilm_tokens(now)
    if read is None or reads is None or read == reads:
        return ""
    why = " (the length it was trained on)" if reads == MINILM_MAX_TOKENS else ""
    return (
        f"the index's vectors read up to {read} tokens of a row; this build's MiniLM reads"
        f" {reads}{why}, so the index is built again once"
    )


def text_key(text: str) -> str:
    """Key of an embedded text, for carrying a vector over when the text did not change."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def to_json_list(values: Iterable[Any]) -> str:
    """A JSON list of strings (how ``source_messages`` is stored)."""
    return json.dumps([str(v) for v in values], ensure_ascii=False)


def note_columns(frontmatter: dict[str, Any], relpath: str) -> dict[str, Any]:
    """The row columns a note's chunks share, from its frontmatter and folder."""
    source = source_properties(frontmatter)  # flat source_* keys, or the nested form of older notes
    archived = relpath.startswith("archive/")  # the archive folder is out of default retrieval
    status = _text(frontmatter.get("status")) or ("archived" if archived else "")
    superseded_by, duplicate_of = _text(frontmatter.get("superseded_by")), _text(frontmatter.get("duplicate_of"))
    return {
        "type": _text(frontmatter.get("type")),
        "tier": note_tier(frontmatter, relpath),
        "status": status,
        "category": _text(frontmatter.get("category")),
        "speaker": _text(frontmatter.get("speaker")),
        "created": iso(frontmatter.get("created")),
        "source_kind": _text(source["source_kind"]),
        "source_conversation": _text(source["source_conversation"]),
        "source_messages": to_json_list(source["source_messages"]),
        "superseded_by": superseded_by,
        "duplicate_of": duplicate_of,
        # Default retrieval leaves out archived, superseded and duplicate notes.
        "active": not archived and status != "archived" and not superseded_by and not duplicate_of,
        "source_position": _position(frontmatter.get("source_position")),
    }


def _position(value: Any) -> int:
    """``source_position`` as a whole number >= 1, or 0 when the note has none (or not a number)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    text = str(value or "").strip()
    return int(text) if text.isdigit() else 0


def _text(value: Any) -> str:
    """A frontmatter value as one string (dates as ISO, lists comma-joined, None as '')."""
    if value is None:
        return ""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value if v is not None)
    return str(value).strip()


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
        parts = [
            self.table.search().where(isin("path", batch)).select(list(columns)).limit(None).to_arrow()
            for batch in batches(sorted(set(paths)))
        ]
        return pa.concat_tables(parts) if parts else chunk_schema(self.dim).empty_table().select(list(columns))

    def delete_paths(self, paths: Iterable[str]) -> None:
        """Delete every row of ``paths``: one predicate per batch of paths, never per row."""
        for batch in batches(sorted(set(paths))):
            result = self.table.delete(isin("path", batch))
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
        # optimize() compacts fragments (seconds at 100k rows), folds new rows into the FTS and
        # vector indexes and deletes the files of versions older than ``VERSION_GRACE`` (a query
        # in flight keeps its files). Until then new rows are searched flat, which costs little,
        # so a one-note edit does not pay for it.
        self.optimized = bool(writes) and (
            force or writes >= OPTIMIZE_WRITES or rows_written >= max(OPTIMIZE_MIN_ROWS, rows * OPTIMIZE_FRACTION)
        )
        if self.optimized:
            self.table.optimize(cleanup_older_than=VERSION_GRACE)
            writes = rows_written = 0
        out = {"pending_writes": str(writes), "pending_rows": str(rows_written)}
        built = int(meta.get("ann_rows") or 0)
        # LanceDB's optimize() leaves the vector index with a handful of partitions, so every
        # search would compare nearly all vectors: the index is built again after each optimize
        # (docs/decisions/0007-lancedb-index.md).
        if rows > ANN_MIN_ROWS and (not built or self.optimized or rows >= built * ANN_RETRAIN_GROWTH):
            self._build_ann(rows)
            out["ann_rows"] = str(rows)
        if rows:
            out.update(self._scalar_indexes(meta))
        return out

    def _scalar_indexes(self, meta: dict[str, str]) -> dict[str, str]:
        """Build the scalar indexes the metadata does not record yet; returns what to record."""
        out = {}
        if not meta.get("active_index"):
            self._build_active_index()
            out["active_index"] = "bitmap"
        if not meta.get("conversation_index"):
            self._build_conversation_index()
            out["conversation_index"] = "btree"
        return out

    def _build_conversation_index(self) -> None:
        from lancedb.index import BTree

        # The funnel's one hop reads a session's other turns by ``source_conversation``; without an
        # index that filter reads the column of every row.
        self.table.create_index("source_conversation", config=BTree(), replace=True)

    def _build_active_index(self) -> None:
        from lancedb.index import Bitmap

        # Both lanes prefilter on ``active``; without an index that reads the column of every row
        # (a third of a full-text search's time). Cheap to build.
        self.table.create_index("active", config=Bitmap(), replace=True)

    def _build_ann(self, rows: int) -> None:
        from lancedb.index import IvfFlat

        # Unit vectors: dot product is the cosine, so "dot" needs no normalisation pass. A lighter
        # k-means (32 samples a partition, 10 rounds) than LanceDB's default (256, 50): a rebuild
        # several times faster, with no loss of recall against exact search (decision 0007).
        config = IvfFlat(
            distance_type="dot", num_partitions=max(1, round(math.sqrt(rows))), sample_rate=32, max_iterations=10
        )
        self.table.create_index(VECTOR_COLUMN, config=config, replace=True)


def isin(column: str, values: Sequence[str]):
    """``column IN (values)`` as a typed expression (no SQL quoting to get wrong)."""
    from lancedb.expr import col

    return col(column).isin(list(values))


def batches(values: Sequence[str], size: int = PREDICATE_CHUNK) -> Iterator[Sequence[str]]:
    """``values`` in slices of ``size`` (one predicate each)."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


def rows_table(
    notes: Sequence[tuple[ManifestEntry, dict[str, Any], Sequence[Any]]], vectors: np.ndarray, dim: int
) -> pa.Table:
    """Arrow rows for (manifest entry, shared columns, chunks) triples, each row with its check."""
    columns: dict[str, list[Any]] = {name: [] for name in (*ROW_COLUMNS, "row_check")}
    i = 0
    for entry, shared, chunks in notes:
        for ordinal, chunk in enumerate(chunks):
            chunk_id = f"{entry.note_id}:{ordinal}"
            values = {
                **shared,
                **(chunk.columns or {}),
                "chunk_id": chunk_id,
                "note_id": entry.note_id,
                "path": entry.relpath,
                "heading": " > ".join(chunk.heading_path),
                "level": chunk.level,
                "ordinal": ordinal,
                "synopsis": chunk.synopsis,
                "text": chunk.text,
                "tokens": chunk.tokens,
                "sha256": entry.sha256,
                "row_check": row_check(chunk_id, entry.relpath, entry.sha256, chunk.text, vectors[i].tobytes()),
            }
            for name, value in values.items():
                columns[name].append(value)
            i += 1
    schema = chunk_schema(dim)
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema if f.name != "vector"]
    arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), type=pa.float32()), dim))
    return pa.Table.from_arrays(arrays, schema=schema)


def vectors_of(column: pa.ChunkedArray | pa.Array, dim: int) -> np.ndarray:
    """A fixed-size-list vector column as a contiguous (n, dim) float32 array."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(array) == 0:
        return np.zeros((0, dim), dtype=np.float32)
    flat = array.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat, dtype=np.float32).reshape(len(array), dim)
