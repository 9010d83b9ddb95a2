"""Reading the index: the vector and full-text lanes, lookups by note id, statistics, ``Row``.

``Index.open`` reads metadata only; the embedding model is never loaded here. Similarities are
exact cosines recomputed from the stored vectors, and ties are broken by chunk id, so a lane's
answer does not depend on how LanceDB cut its page.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vault_pipeline.errors import IndexOutdatedError, IndexStateError, VaultError
from vault_pipeline.index.manifest import MANIFEST_FILE, manifest_count, read_meta
from vault_pipeline.index.table import (
    ANN_MIN_ROWS,
    ANN_PROBES,
    EMPTY_VALUES,
    INDEX_DIR,
    ROW_COLUMNS,
    TABLE,
    TEXT_COLUMN,
    VECTOR_COLUMN,
    batches,
    connect,
    isin,
    outdated_embedding,
    table_exists,
    vectors_of,
)
from vault_pipeline.index.topk import Ranked, page, ranked, take_positions, text_score
from vault_pipeline.text import link_target
from vault_pipeline.vault.files import FOLDERS, STATE_DIR
from vault_pipeline.vault.frontmatter import split_frontmatter


@dataclass(frozen=True)
class Row:
    """One chunk as stored, plus how a lane scored it (``vector`` only when asked for); a field
    whose column the reader left out (``Index.open``'s ``columns``) holds its type's empty value."""

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
    source_position: int  # the note's place among the notes of its first source message (0: not known)
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

    def __init__(self, root: Path, table, meta: dict[str, str], columns: Sequence[str] = ROW_COLUMNS):
        unknown = sorted(set(columns) - set(ROW_COLUMNS))
        if unknown:
            raise ValueError(f"no such index columns: {', '.join(unknown)}")
        self.root = root
        self.table = table
        self.meta = meta
        # An index built before a column existed (an older schema, rebuilt by the next ``vault index``)
        # still answers: the rows it cannot fill hold the column's empty value.
        self.present = frozenset(table.schema.names)
        self.columns = frozenset(columns) & self.present
        self.dim = int(meta.get("dim") or table.schema.field(VECTOR_COLUMN).type.list_size)

    @classmethod
    def open(cls, vault, embedder=None, *, columns: Sequence[str] = ROW_COLUMNS) -> Index:
        """Open the index of ``vault`` (a Vault or its root); IndexStateError when there is none.

        Its rows carry the ``columns`` the caller reads (and those a read itself needs), the other
        fields their type's empty value: LanceDB's reads cost per column."""
        # A path is a vault root as it is (``Path.root`` is its anchor, "/", not the vault's).
        root = vault if isinstance(vault, (str, os.PathLike)) else vault.root
        state = Path(root) / STATE_DIR
        meta = read_meta(state / MANIFEST_FILE)
        db = connect(state / INDEX_DIR, strong=True) if (state / INDEX_DIR).is_dir() else None
        if not meta.get("embedder") or db is None or not table_exists(db):
            raise IndexStateError(f"no index in {state}; run `vault index` first")
        name = getattr(embedder, "name", None)
        if name is not None and (outdated := outdated_embedding(meta, name)):  # old vectors never meet new ones
            raise IndexOutdatedError(outdated)
        if name is not None and name != meta["embedder"]:
            raise IndexStateError(
                f"the index was built with embedder {meta['embedder']}, not {name}; run `vault index` to rebuild it"
            )
        return cls(state.parent, db.open_table(TABLE), meta, columns)

    def vector_search(
        self, vector: np.ndarray, k: int, *, include_archived: bool = False, with_vectors: bool = True
    ) -> list[Row]:
        """The ``k`` chunks nearest to ``vector``; similarity is the exact cosine."""
        return self.vector_search_many(
            np.asarray(vector).reshape(1, -1), k, include_archived=include_archived, with_vectors=with_vectors
        )[0]

    def vector_search_many(
        self, vectors: np.ndarray, k: int, *, include_archived: bool = False, with_vectors: bool = True
    ) -> list[list[Row]]:
        """``vector_search`` for several query vectors in one table query (one probe set each).

        Two phases: the search reads only chunk ids and vectors (the exact re-score needs them),
        then one ``take`` reads the other columns of every query's top ``k`` together. Reading all
        columns of the whole page (3k + 10 rows a query) cost about half the vector lane at 100k rows.
        """
        queries = [self._query_vector(v) for v in vectors]
        if not queries or k <= 0:
            return [[] for _ in queries]
        tops = [(top, "vector") for top in self._vector_ranked(queries, k, include_archived)]
        return self._complete(
            tops, with_vectors, lambda: [self._vector_full(q, k, include_archived, with_vectors) for q in queries]
        )

    def text_search(
        self,
        query: str,
        k: int,
        *,
        include_archived: bool = False,
        vector: np.ndarray | None = None,
        with_vectors: bool = True,
    ) -> list[Row]:
        """The ``k`` best BM25 matches for ``query``; similarity is the cosine to ``vector`` if given.

        Two phases, like ``vector_search_many``: the search reads chunk ids and scores only, one
        ``take`` reads the top ``k``'s columns (and vectors).
        """
        if not query.strip() or k <= 0:
            return []
        qvec = None if vector is None else self._query_vector(vector)
        top = self._text_ranked(query, k, include_archived, qvec)
        return self._complete(
            [(top, "text")], with_vectors, lambda: [self._text_full(query, k, include_archived, qvec, with_vectors)]
        )[0]

    def start_search(
        self, texts: Sequence[str], k: int, *, include_archived: bool = False, with_vectors: bool = True
    ) -> LaneSearch:
        """Start both lanes for several query texts: the full-text searches begin now, on the search
        threads, while the caller embeds the texts; ``LaneSearch.finish`` with their vectors runs the
        vector lane and reads the rows of both (the funnel's ``Retriever``)."""
        texts = list(texts)
        pool = _search_pool()
        pending = [
            pool.submit(self._text_ranked, text, k, include_archived, None) if text.strip() and k > 0 else None
            for text in texts
        ]
        return LaneSearch(self, texts, k, include_archived, with_vectors, pending)

    def hybrid_search(
        self,
        texts: Sequence[str],
        vectors: np.ndarray,
        k: int,
        *,
        include_archived: bool = False,
        with_vectors: bool = True,
    ) -> tuple[list[list[Row]], list[list[Row]]]:
        """Both lanes for several query texts and their unit vectors (one row a text): (vector hits,
        full-text hits) per text. Each list equals ``vector_search_many`` / ``text_search`` of the
        same query; full-text hits carry no similarity (NaN), as there."""
        return self.start_search(texts, k, include_archived=include_archived, with_vectors=with_vectors).finish(vectors)

    # ------------------------------------------------------------------ the two phases

    def _vector_ranked(self, queries: list[np.ndarray], k: int, include_archived: bool) -> list[Ranked]:
        """Each query's exact top ``k`` (slim rows), from one table query for all of them."""
        first = self._nearest(np.stack(queries), page(k), include_archived, _SLIM_VECTOR)
        which = first["query_index"].to_numpy() if "query_index" in first.column_names else np.zeros(first.num_rows)

        def fetch_for(i: int):
            # Each query's share of the shared page is its first page; a later page is its own search.
            def fetch(limit: int) -> pa.Table:
                if limit == page(k):
                    return first.filter(pa.array(which == i)) if len(queries) > 1 else first
                return self._nearest(queries[i], limit, include_archived, _SLIM_VECTOR)

            return fetch

        def score_for(i: int):
            def score(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
                sims = self._cosines(rows, queries[i])
                return sims, sims

            return score

        return [ranked(fetch_for(i), score_for(i), k) for i in range(len(queries))]

    def _text_ranked(self, query: str, k: int, include_archived: bool, qvec: np.ndarray | None) -> Ranked:
        """The full-text top ``k`` (slim rows); the cosine needs the vectors in this phase, else they wait."""
        return ranked(
            self._fts(query, include_archived, _SLIM if qvec is None else _SLIM_VECTOR),
            text_score(qvec, self._cosines),
            k,
        )

    def _vector_full(self, query: np.ndarray, k: int, include_archived: bool, with_vectors: bool) -> list[Row]:
        """One query's vector top ``k`` read in one phase (every column of the page): the fallback."""

        def score(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
            sims = self._cosines(rows, query)
            return sims, sims

        columns = self._full()
        return _top(
            lambda limit: self._nearest(query, limit, include_archived, columns), score, k, "vector", with_vectors
        )

    def _text_full(
        self, query: str, k: int, include_archived: bool, qvec: np.ndarray | None, with_vectors: bool
    ) -> list[Row]:
        """One query's full-text top ``k`` read in one phase: the fallback."""
        score = text_score(qvec, self._cosines)
        return _top(self._fts(query, include_archived, self._full()), score, k, "text", with_vectors)

    def _nearest(self, query: np.ndarray, limit: int, include_archived: bool, columns: Sequence[str]) -> pa.Table:
        """Rows nearest to one query vector, or to each row of a 2-d array (``query_index`` says which)."""
        # The probe settings only matter once the table has an ANN index; flat search ignores them.
        search = (
            self.table.search(query if query.ndim == 1 else list(query), vector_column_name=VECTOR_COLUMN)
            .distance_type("dot")
            .nprobes(ANN_PROBES)
            .select(list(columns))
            .with_row_id(True)
            .limit(limit)
        )
        return (search if include_archived else search.where("active", prefilter=True)).to_arrow()

    def _fts(self, query: str, include_archived: bool, columns: Sequence[str]) -> Callable[[int], pa.Table]:
        """A page fetcher for the full-text search of ``query``."""

        def fetch(limit: int) -> pa.Table:
            search = (
                self.table.search(query, query_type="fts", fts_columns=TEXT_COLUMN)
                .select(list(columns))
                .with_row_id(True)
                .limit(limit)
            )
            return (search if include_archived else search.where("active", prefilter=True)).to_arrow()

        return fetch

    def _complete(
        self, tops: Sequence[tuple[Ranked | None, str]], with_vectors: bool, fallback: Callable[[], list[list[Row]]]
    ) -> list[list[Row]]:
        """Rows for each ranked top (None: no search, no rows): one ``take`` of the missing columns
        for all of them together (a take costs about the same for 20 rows as for 150: it is per column).

        Row ids belong to a table version; if a sync committed between the search and the take
        (the chunk ids read back differ), the searches run again in one phase (``fallback``).
        """
        found = [top for top, _ in tops if top is not None]
        ids = sorted({int(r) for top in found for r in top.rows["_rowid"].to_pylist()})
        if not ids:
            return [[] for _ in tops]
        need_vectors = with_vectors and any(VECTOR_COLUMN not in top.rows.column_names for top in found)
        columns = [*self._columns(), *([VECTOR_COLUMN] if need_vectors else [])]
        try:
            taken = self.table.take_row_ids(ids).select(columns).with_row_id().to_arrow()
        except (OSError, RuntimeError, ValueError):  # a file of that version went (compaction): read again
            return fallback()
        where = {int(r): i for i, r in enumerate(taken["_rowid"].to_pylist())}
        chunk_ids = taken["chunk_id"].to_pylist()
        out: list[list[Row]] = []
        for top, lane in tops:
            if top is None:
                out.append([])
                continue
            positions = take_positions(top, where, chunk_ids)
            if positions is None:
                return fallback()  # the take read another version's rows
            out.append(self._rows_of(top, lane, taken.take(pa.array(positions, pa.int64())), with_vectors))
        return out

    def _rows_of(self, top: Ranked, lane: str, rows: pa.Table, with_vectors: bool) -> list[Row]:
        """One ranked top's rows, its columns taken (``rows``, in the top's order)."""
        vectors = None
        if with_vectors:
            source = top.rows if VECTOR_COLUMN in top.rows.column_names else rows
            vectors = vectors_of(source[VECTOR_COLUMN], self.dim)
        return _build_rows(rows, top.scores, top.sims, lane, vectors)

    def rows(self, note_ids, *, with_vectors: bool = False) -> list[Row]:
        """Every chunk of ``note_ids`` (any status), in the order given, then by ordinal."""
        order = {nid: i for i, nid in enumerate(dict.fromkeys(note_ids))}
        if not order:
            return []
        parts = [
            self.table.search()
            .where(isin("note_id", batch))
            .select([*self._columns("note_id", "ordinal"), VECTOR_COLUMN])
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
        return self.read_conversations(conversations, include_archived=include_archived)[0]

    def read_conversations(
        self, conversations, *, include_archived: bool = False
    ) -> tuple[list[Row], dict[tuple[str, str], str]]:
        """``conversation_rows`` and ``superseded_messages`` of ``conversations`` from one read: the
        superseded notes are inactive rows of the same conversations, so every row is read and the
        inactive ones are dropped here (one read, not two)."""
        wanted = sorted({c for c in conversations if c})
        columns = self._columns("source_conversation", "source_messages", "superseded_by", "active")
        rows = [
            r
            for batch in batches(wanted)
            for r in _to_rows(*_lookup(self.table.search().where(isin("source_conversation", batch)), columns))
        ]
        links = _superseded_links(
            (r.source_conversation, r.source_messages, r.superseded_by) for r in rows if r.superseded_by
        )
        return sorted((r for r in rows if include_archived or r.active), key=lambda r: r.chunk_id), links

    def superseded_messages(self, conversations: Sequence[str]) -> dict[tuple[str, str], str]:
        """(conversation, message) -> the ``superseded_by`` link of a note citing that message which a
        newer note superseded: what those turns said no longer holds (one filtered read, three columns)."""
        from lancedb.expr import col

        columns = ["source_conversation", "source_messages", "superseded_by"]
        found = [
            self.table.search()
            .where(isin("source_conversation", batch) & (col("superseded_by") != ""))
            .select(columns)
            .limit(None)
            .to_arrow()
            for batch in batches(sorted({c for c in conversations if c}))
        ]
        return _superseded_links(row for part in found for row in zip(*(part[c].to_pylist() for c in columns)))

    def related_stems(self, paths: Sequence[str]) -> dict[str, list[str]]:
        """Vault-relative note path -> the file names its ``related`` property links to: the links
        the nightly clean writes, read from the notes themselves (the index holds no frontmatter
        lists). A note that is gone, unreadable or outside the vault has none."""
        out: dict[str, list[str]] = {}
        root = self.root.resolve()
        for path in dict.fromkeys(paths):
            file = (root / path).resolve()
            try:
                file.relative_to(root)
                frontmatter, _ = split_frontmatter(file.read_text(encoding="utf-8"), path)
            except (OSError, UnicodeDecodeError, ValueError, VaultError):
                continue
            value = frontmatter.get("related")
            values = value if isinstance(value, list) else [value] if value else []
            stems = [PurePosixPath(link_target(v)).stem for v in values if link_target(v)]
            if stems:
                out[path] = list(dict.fromkeys(stems))
        return out

    def rows_by_stem(self, stems, *, include_archived: bool = False) -> list[Row]:
        """Every chunk of the notes whose file name (without ``.md``) is one of ``stems``, in any
        vault folder, with vectors, sorted by chunk id: a topic hub's members, from its links."""
        paths = sorted({f"{folder}/{stem}.md" for stem in stems if stem for folder in FOLDERS})
        columns = self._columns()
        out = [
            r
            for batch in batches(paths)
            for r in _to_rows(
                *_lookup(self.table.search().where(_where(isin("path", batch), include_archived)), columns)
            )
        ]
        return sorted(out, key=lambda r: r.chunk_id)

    def unknown_words(self, words: Sequence[str]) -> list[str]:
        """Those of ``words`` that no chunk's text holds, archived notes included: one full-text
        lookup each, through the index's own tokenizer (stemmed, accents folded). A lookup that fails
        (no full-text index yet, a word the query parser refuses) counts the word as known, so a
        word is only called unknown when the index says so."""
        unknown = []
        for word in words:
            try:
                found = self._fts(word, True, _SLIM)(1).num_rows
            except Exception:  # no FTS index yet, a word the parser refuses: not known to be absent
                found = 1
            if not found:
                unknown.append(word)
        return unknown

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

    def _columns(self, *needed: str) -> list[str]:
        """The columns a read of rows selects, in table order: the reader's, the chunk id (a row's
        identity: takes are checked and rows sorted by it) and the ones the read ``needed``."""
        wanted = self.columns | {"chunk_id"} | (set(needed) & self.present)
        return [name for name in ROW_COLUMNS if name in wanted]

    def _full(self) -> tuple[str, ...]:
        """A one-phase page's columns: the rows' and the vector."""
        return (*self._columns(), VECTOR_COLUMN)

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


@dataclass
class LaneSearch:
    """Both lanes of several query texts, started by ``Index.start_search``: their full-text
    searches are running; ``finish`` takes the texts' vectors and returns both lanes' hits."""

    index: Index
    texts: list[str]
    k: int
    include_archived: bool
    with_vectors: bool
    pending: list[Future | None]

    def finish(self, vectors: np.ndarray) -> tuple[list[list[Row]], list[list[Row]]]:
        """(vector hits, full-text hits) per text: the vector lane runs now, then one ``take`` reads
        the columns of every list's top ``k`` at once."""
        index, k, archived = self.index, self.k, self.include_archived
        try:
            queries = [index._query_vector(v) for v in vectors]
            if len(queries) != len(self.texts):
                raise IndexStateError(f"{len(queries)} vectors for {len(self.texts)} texts")
            nearest = index._vector_ranked(queries, k, archived) if k > 0 and queries else [None] * len(queries)
        except BaseException:
            self.cancel()
            raise
        found = [None if p is None else p.result() for p in self.pending]
        tops = [(top, "vector") for top in nearest] + [(top, "text") for top in found]

        def fallback() -> list[list[Row]]:
            return [index._vector_full(q, k, archived, self.with_vectors) if k > 0 else [] for q in queries] + [
                index._text_full(text, k, archived, None, self.with_vectors) if top is not None else []
                for text, top in zip(self.texts, found)
            ]

        lists = index._complete(tops, self.with_vectors, fallback)
        return lists[: len(self.texts)], lists[len(self.texts) :]

    def cancel(self) -> None:
        """The searches still queued need not run; a running one ends on its own."""
        for future in self.pending:
            if future is not None:
                future.cancel()


def _where(expr, include_archived: bool):
    """``expr``, and only active rows unless archived ones are wanted."""
    if include_archived:
        return expr
    from lancedb.expr import col

    return expr & (col("active") == True)  # noqa: E712 (builds an expression; it compares nothing here)


def _superseded_links(rows: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str], str]:
    """(conversation, message) -> link, from the (conversation, source messages, ``superseded_by``)
    of superseded notes: per message the first link in (conversation, link) order."""
    out: dict[tuple[str, str], str] = {}
    for conversation, messages, link in sorted(rows, key=lambda r: (r[0], r[2])):
        for message in json.loads(messages or "[]"):
            out.setdefault((conversation, str(message)), link)
    return out


def _lookup(search, columns: Sequence[str]) -> tuple[pa.Table, np.ndarray, np.ndarray, str, bool]:
    """The arguments of ``_to_rows`` for a lookup (no lane score, no query): rows with their vectors."""
    rows = search.select([*columns, VECTOR_COLUMN]).limit(None).to_arrow()
    return rows, np.zeros(rows.num_rows), np.full(rows.num_rows, np.nan), "lookup", True


_SLIM = ("chunk_id",)  # a first phase: what ranking needs (LanceDB adds ``_rowid`` and the score)
_SLIM_VECTOR = ("chunk_id", VECTOR_COLUMN)  # ... and the vector, for the exact cosine


SEARCH_WORKERS = 5  # full-text searches at once in ``start_search`` (the prompt and up to four variants)


@cache
def _search_pool() -> ThreadPoolExecutor:
    """The search threads, started once per process (a new pool per query cost more than a search)."""
    return ThreadPoolExecutor(max_workers=SEARCH_WORKERS, thread_name_prefix="vault-index-search")


def _top(fetch, score, k: int, lane: str, with_vectors: bool) -> list[Row]:
    """``topk.ranked`` over pages that carry every column: the rows themselves."""
    if k <= 0:
        return []
    top = ranked(fetch, score, k)
    return _to_rows(top.rows, top.scores, top.sims, lane, with_vectors)


def _to_rows(rows: pa.Table, scores: np.ndarray, sims: np.ndarray, lane: str, with_vectors: bool) -> list[Row]:
    vectors = vectors_of(rows[VECTOR_COLUMN], rows.schema.field(VECTOR_COLUMN).type.list_size) if with_vectors else None
    return _build_rows(rows, scores, sims, lane, vectors)


def _build_rows(
    rows: pa.Table, scores: np.ndarray, sims: np.ndarray, lane: str, vectors: np.ndarray | None
) -> list[Row]:
    # Column by column into ``Row``'s fields in order (``ROW_COLUMNS``, then similarity, score, lane,
    # vector): about half the cost of a dict per row (``Table.to_pylist``).
    read = set(rows.column_names)
    columns = [rows[name].to_pylist() if name in read else [EMPTY_VALUES[name]] * rows.num_rows for name in ROW_COLUMNS]
    columns += [np.asarray(sims, np.float64).tolist(), np.asarray(scores, np.float64).tolist()]
    columns += [[lane] * rows.num_rows, [None] * rows.num_rows if vectors is None else list(vectors)]
    return [Row(*values) for values in zip(*columns)]


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    return {
        str(v["values"]): int(v["counts"])
        for v in sorted(pc.value_counts(column).to_pylist(), key=lambda v: str(v["values"]))
    }
