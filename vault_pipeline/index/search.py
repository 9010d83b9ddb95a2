"""Reading the index: the vector and full-text lanes, lookups by note id, statistics, ``Row``.

``Index.open`` reads metadata only; the embedding model is never loaded here. Similarities are
exact cosines recomputed from the stored vectors, and ties are broken by chunk id, so a lane's
answer does not depend on how LanceDB cut its page.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vault_pipeline.errors import IndexStateError
from vault_pipeline.index.manifest import MANIFEST_FILE, manifest_count, read_meta
from vault_pipeline.index.table import (
    ANN_MIN_ROWS,
    ANN_PROBES,
    INDEX_DIR,
    ROW_COLUMNS,
    TABLE,
    TEXT_COLUMN,
    VECTOR_COLUMN,
    batches,
    connect,
    isin,
    table_exists,
    vectors_of,
)
from vault_pipeline.vault.files import FOLDERS, STATE_DIR


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
    def open(cls, vault, embedder=None) -> Index:
        """Open the index of ``vault`` (a Vault or its root); IndexStateError when there is none."""
        state = Path(getattr(vault, "root", vault)) / STATE_DIR
        meta = read_meta(state / MANIFEST_FILE)
        db = connect(state / INDEX_DIR, strong=True) if (state / INDEX_DIR).is_dir() else None
        if not meta.get("embedder") or db is None or not table_exists(db):
            raise IndexStateError(f"no index in {state}; run `vault index` first")
        name = getattr(embedder, "name", None)
        if name is not None and name != meta["embedder"]:
            raise IndexStateError(
                f"the index was built with embedder {meta['embedder']}, not {name}; run `vault index` to rebuild it"
            )
        return cls(state.parent, db.open_table(TABLE), meta)

    def vector_search(
        self, vector: np.ndarray, k: int, *, include_archived: bool = False, with_vectors: bool = True
    ) -> list[Row]:
        """The ``k`` chunks nearest to ``vector``; similarity is the exact cosine."""
        return self._vector_top(self._query_vector(vector), k, include_archived, with_vectors)

    def vector_search_many(
        self, vectors: np.ndarray, k: int, *, include_archived: bool = False, with_vectors: bool = True
    ) -> list[list[Row]]:
        """``vector_search`` for several query vectors in one table query (one scan or probe set)."""
        queries = [self._query_vector(v) for v in vectors]
        if len(queries) <= 1 or k <= 0:
            return [self._vector_top(q, k, include_archived, with_vectors) for q in queries]
        rows = self._nearest(np.stack(queries), _page(k), include_archived)
        which = rows["query_index"].to_numpy()
        # Each query's share of the shared page is its first page; a later page is its own search.
        return [
            self._vector_top(q, k, include_archived, with_vectors, first=rows.filter(pa.array(which == i)))
            for i, q in enumerate(queries)
        ]

    def _vector_top(
        self, query: np.ndarray, k: int, include_archived: bool, with_vectors: bool, first: pa.Table | None = None
    ) -> list[Row]:
        def fetch(limit: int) -> pa.Table:
            return first if first is not None and limit == _page(k) else self._nearest(query, limit, include_archived)

        def score(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
            sims = self._cosines(rows, query)
            return sims, sims

        return _top(fetch, score, k, "vector", with_vectors)

    def _nearest(self, query: np.ndarray, limit: int, include_archived: bool) -> pa.Table:
        """Rows nearest to one query vector, or to each row of a 2-d array (``query_index`` says which)."""
        # The probe settings only matter once the table has an ANN index; flat search ignores them.
        search = (
            self.table.search(query if query.ndim == 1 else list(query), vector_column_name=VECTOR_COLUMN)
            .distance_type("dot")
            .nprobes(ANN_PROBES)
            .select([*ROW_COLUMNS, VECTOR_COLUMN])
            .limit(limit)
        )
        return (search if include_archived else search.where("active", prefilter=True)).to_arrow()

    def text_search(
        self,
        query: str,
        k: int,
        *,
        include_archived: bool = False,
        vector: np.ndarray | None = None,
        with_vectors: bool = True,
    ) -> list[Row]:
        """The ``k`` best BM25 matches for ``query``; similarity is the cosine to ``vector`` if given."""
        if not query.strip() or k <= 0:
            return []
        qvec = None if vector is None else self._query_vector(vector)

        def fetch(limit: int) -> pa.Table:
            search = (
                self.table.search(query, query_type="fts", fts_columns=TEXT_COLUMN)
                .select([*ROW_COLUMNS, VECTOR_COLUMN])
                .limit(limit)
            )
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
        parts = [
            self.table.search()
            .where(isin("note_id", batch))
            .select([*ROW_COLUMNS, VECTOR_COLUMN])
            .limit(None)
            .to_arrow()
            for batch in batches(list(order))
        ]
        rows = pa.concat_tables(parts)
        out = _to_rows(rows, np.zeros(rows.num_rows), np.full(rows.num_rows, np.nan), "lookup", with_vectors)
        return sorted(out, key=lambda r: (order[r.note_id], r.ordinal))

    def conversation_rows(self, conversations, *, include_archived: bool = False) -> list[Row]:
        """Every chunk whose ``source_conversation`` is one of ``conversations`` (with vectors),
        sorted by chunk id: the funnel's one-hop expansion reads a session's other turns here."""
        wanted = sorted({c for c in conversations if c})
        if not wanted:
            return []
        out = [
            r
            for batch in batches(wanted)
            for r in _to_rows(
                *_lookup(self.table.search().where(_where(isin("source_conversation", batch), include_archived)))
            )
        ]
        return sorted(out, key=lambda r: r.chunk_id)

    def rows_by_stem(self, stems, *, include_archived: bool = False) -> list[Row]:
        """Every chunk of the notes whose file name (without ``.md``) is one of ``stems``, in any
        vault folder, with vectors, sorted by chunk id: a topic hub's members, from its links."""
        paths = sorted({f"{folder}/{stem}.md" for stem in stems if stem for folder in FOLDERS})
        out = [
            r
            for batch in batches(paths)
            for r in _to_rows(*_lookup(self.table.search().where(_where(isin("path", batch), include_archived))))
        ]
        return sorted(out, key=lambda r: r.chunk_id)

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
        notes = (
            self.table.search()
            .where("ordinal = 0")
            .select(["tier", "status", "category", "active"])
            .limit(None)
            .to_arrow()
        )
        kinds = {c.index_type for c in self.table.list_indices()}
        return {
            "rows": int(self.table.count_rows()),
            "notes": notes.num_rows,
            "files": manifest_count(state / MANIFEST_FILE),
            "tiers": _counts(notes["tier"]),
            "statuses": _counts(notes["status"]),
            "categories": _counts(notes["category"]),
            "inactive_notes": notes.num_rows - int(pc.sum(notes["active"]).as_py() or 0),
            "last_sync": meta.get("last_sync", ""),
            "embedder": meta.get("embedder", ""),
            "dim": int(meta.get("dim") or self.dim),
            "schema_version": int(meta.get("schema_version") or 0),
            "ann_index": bool(kinds - {"FTS", "BTree", "Bitmap", "LabelList"}),
            "fts_index": "FTS" in kinds,
            "ann_min_rows": ANN_MIN_ROWS,
            "table_version": int(self.table.version),
        }

    def _query_vector(self, vector: np.ndarray) -> np.ndarray:
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise IndexStateError(
                f"query vector has {q.shape[0]} dimensions, the index {self.dim}; "
                "run `vault index` with the same embedder"
            )
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q

    def _cosines(self, rows: pa.Table, query: np.ndarray) -> np.ndarray:
        """Exact cosine: the dot product of unit vectors, in float64."""
        return vectors_of(rows[VECTOR_COLUMN], self.dim).astype(np.float64) @ query.astype(np.float64)


def _where(expr, include_archived: bool):
    """``expr``, and only active rows unless archived ones are wanted."""
    if include_archived:
        return expr
    from lancedb.expr import col

    return expr & (col("active") == True)  # noqa: E712 (builds an expression; it compares nothing here)


def _lookup(search) -> tuple[pa.Table, np.ndarray, np.ndarray, str, bool]:
    """The arguments of ``_to_rows`` for a lookup (no lane score, no query): rows with their vectors."""
    rows = search.select([*ROW_COLUMNS, VECTOR_COLUMN]).limit(None).to_arrow()
    return rows, np.zeros(rows.num_rows), np.full(rows.num_rows, np.nan), "lookup", True


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
    return [
        Row(
            **v,
            similarity=float(sims[i]),
            score=float(scores[i]),
            lane=lane,
            vector=None if vectors is None else vectors[i],
        )
        for i, v in enumerate(values)
    ]


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    return {
        str(v["values"]): int(v["counts"])
        for v in sorted(pc.value_counts(column).to_pylist(), key=lambda v: str(v["values"]))
    }
