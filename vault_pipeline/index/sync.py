"""The derived index: an incremental, self-checking sync from the vault into LanceDB.

``sync`` walks the vault, skips files whose size and mtime match the manifest, hashes the
rest, and re-chunks and re-embeds only what changed (a chunk whose text did not change keeps
its vector, so a status flip or a move to archive/ costs no embedding). Rows are replaced per
batch with one delete predicate and one add. Every run first checks the table against the
manifest (integrity belongs in the ingestion path: an index whose ids were welded to other rows'
content would answer wrongly and silently): a table moved on since the last finished sync, or
whose row count disagrees with the manifest, is checked path by path and row by row; a path that
disagrees is re-embedded and reported as repaired. ``--verify`` forces the full check. An index
whose files cannot be read (``damage``) is moved aside for the user and rebuilt from the vault.

The storage lives beside it: ``manifest`` (sqlite), ``table`` (LanceDB), ``integrity`` (the
checks); the reading side, ``Index`` and ``Row``, in ``search``.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vault_pipeline.errors import FrontmatterError, ModelError
from vault_pipeline.index.broken import record_broken
from vault_pipeline.index.chunk import CHUNKING_VERSION, Chunk, chunks_for_note
from vault_pipeline.index.damage import describe, is_damage, probe, set_aside
from vault_pipeline.index.integrity import CONTENT_COLUMNS, LAYOUT_COLUMNS, content_faults, layout_faults
from vault_pipeline.index.manifest import MANIFEST_FILE, Manifest, ManifestEntry, opened_manifest, read_meta
from vault_pipeline.index.statements import statement_chunks
from vault_pipeline.index.table import (
    EMBEDDING_TEXT_KEY,
    INDEX_DIR,
    SCHEMA_VERSION,
    TABLE,
    ChunkTable,
    connect,
    note_columns,
    outdated_embedding,
    rows_table,
    table_exists,
    text_key,
    vectors_of,
)
from vault_pipeline.index.vector_cache import CACHE_FILE, VectorCache
from vault_pipeline.models.embed import Embedder, l2_normalise
from vault_pipeline.models.offline.crossencoder import relevance_identity
from vault_pipeline.vault.files import STATE_DIR, Vault
from vault_pipeline.vault.format import EMBEDDING_TEXT_VERSION, embedding_text
from vault_pipeline.vault.frontmatter import salvage_frontmatter, split_frontmatter

__all__ = ["IndexReport", "Preloadable", "repair", "sync", "user_note_id"]

Progress = Callable[[int, int], None]

EMBED_CALL = 256  # texts per embed call: large enough to keep the model busy, small for progress
BATCH_CHUNKS = 2048  # chunks per write batch: one delete predicate and one add per batch
BATCH_NOTES = 4096  # notes per batch, so notes without chunks still flush


@runtime_checkable
class Preloadable(Protocol):
    """An embedder that can start loading its model in the background (``preload`` returns the thread)."""

    def preload(self) -> Any:
        """Start loading; the caller may ``join()`` what this returns."""


@dataclass
class IndexReport:
    """What a sync looked at, embedded, removed and repaired, and how long it took."""

    embedder: str = ""
    scanned: int = 0  # note files in the vault
    unchanged: int = 0  # files left as they were (stat or content hash matched)
    added: int = 0
    changed: int = 0
    moved: int = 0  # same note id at a new path
    removed: int = 0  # files whose rows were dropped (gone from the vault, or now unreadable)
    repaired: int = 0  # paths whose rows disagreed with the manifest, rewritten or dropped
    embedded_notes: int = 0  # notes with at least one chunk sent to the embedder
    embedded_chunks: int = 0  # texts sent to the embedder
    reused_chunks: int = 0  # rewritten chunks whose text was unchanged, so their vector was kept
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    repairs: list[tuple[str, str]] = field(default_factory=list)  # (path, fault found)
    rebuilt: bool = False
    rebuild_reason: str = ""
    damaged_copy: str = ""  # where an unreadable index was moved before the rebuild (vault-relative), or ''
    # Every note re-chunked (the chunking changed since the last sync); unchanged texts keep their vectors.
    rechunked: str = ""
    # "version": the table is as the last sync left it; "layout": rows per path checked against the
    # manifest; "layout+content": every row's check recomputed too.
    integrity: str = "layout"
    optimized: bool = False  # compaction and index refresh ran (after large or many writes)
    ann_index_built: bool = False
    rows: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0  # inside the embedder; the rest of ``seconds`` is the pipeline's own cost
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (path, what): indexed from the body
    # Added by issue 48, after the keys scripts read already (``--json`` keeps its order).
    cached_chunks: int = 0  # chunks whose vector came from the embedding store (embedded by an earlier run)
    shared_chunks: int = 0  # chunks whose text another chunk of the run holds: embedded once for both
    store_error: str = ""  # why the embedding store was not used (it could not be read or written), or ''

    def to_dict(self) -> dict[str, Any]:
        """The report as ``vault index --json`` prints it (the CLI adds ``exit_code``)."""
        return asdict(self)


# Where a written row's vector came from (``_Pending.source``).
_EMBEDDED, _SHARED, _CACHED, _REUSED = 0, 1, 2, 3


@dataclass
class _Note:
    """A parsed file ready to be written: its rows' shared columns, chunks, and what it replaces."""

    entry: ManifestEntry
    columns: dict[str, Any]
    chunks: list[Chunk]
    kind: str  # added | changed | moved | repaired
    replaces: tuple[str, ...]  # paths whose rows this write deletes
    reuse_from: tuple[str, ...]  # paths whose rows may lend vectors for unchanged texts


@dataclass
class _Pending:
    """A batch whose distinct new texts (``need``) are on the embedding thread (``future``);
    ``slots`` maps each such text to its rows in ``out``."""

    batch: list[_Note]
    texts: list[str]
    out: np.ndarray
    source: np.ndarray
    slots: dict[str, list[int]]
    need: list[str]
    future: Future
    # Rows whose text the batch before this one embeds (not in the store yet when this one was
    # prepared): (row here, row there) and that batch, until this one is written.
    borrowed: list[tuple[int, int]] = field(default_factory=list)
    lender: _Pending | None = None


def sync(
    vault: Vault,
    embedder: Embedder,
    *,
    progress: Progress | None = None,
    rebuild: bool = False,
    verify: bool = False,
    damaged: str = "",
) -> IndexReport:
    """Bring the index in line with the vault (the caller holds ``vault.lock("index")``).

    An index that cannot be read (``damaged`` says a reader found so, else a quick probe or a
    failing read here does) is moved aside and rebuilt from the vault."""
    started = time.perf_counter()
    state = Path(vault.root) / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    loading = embedder.preload() if isinstance(embedder, Preloadable) else None  # overlaps LanceDB's import
    try:
        report = _sync_or_rebuild(
            vault, embedder, state, progress, rebuild, verify, damaged or probe(state / INDEX_DIR)
        )
    finally:
        if loading is not None:
            loading.join()
    # Every note read from its body, this run's and those unchanged since: ``vault status`` reads them too.
    report.warnings = record_broken(vault, report.warnings)
    report.seconds = time.perf_counter() - started
    return report


def repair(vault: Vault, embedder: Embedder, what: str, *, wait: float = 0) -> IndexReport:
    """Set aside and rebuild an index a reader found unreadable (``what``: how), under the vault lock.

    An index a reader refused only because its vectors are of an older embedded text is no damage:
    the sync embeds it again in place (nothing set aside), saying why."""
    with vault.lock("index (repair)", wait=wait):
        try:
            stale = outdated_embedding(read_meta(Path(vault.root) / STATE_DIR / MANIFEST_FILE), embedder.name)
        except sqlite3.Error:  # a manifest that cannot be read: the damage path decides
            stale = ""
        return sync(vault, embedder, damaged="" if stale else what)


def _sync_or_rebuild(
    vault: Vault,
    embedder: Embedder,
    state: Path,
    progress: Progress | None,
    rebuild: bool,
    verify: bool,
    damaged: str,
) -> IndexReport:
    """One sync; when the index turns out unreadable (before or during it), set it aside and rebuild."""
    if not damaged:
        report = IndexReport(embedder=embedder.name)
        try:
            _sync(vault, embedder, state, report, progress, rebuild, verify)
            return report
        except Exception as exc:
            if not is_damage(exc):
                raise
            damaged = describe(exc)
    aside = set_aside(state)
    report = IndexReport(embedder=embedder.name)
    _sync(vault, embedder, state, report, progress, True, verify)
    report.damaged_copy = aside.relative_to(vault.root).as_posix() if aside is not None else ""
    where = f"; the broken copy is in {report.damaged_copy}" if aside is not None else ""
    report.rebuilt, report.rebuild_reason = True, f"the index could not be read ({damaged}){where}"
    return report


def _sync(
    vault: Vault,
    embedder: Embedder,
    state: Path,
    report: IndexReport,
    progress: Progress | None,
    rebuild: bool,
    verify: bool,
) -> None:
    with opened_manifest(state / MANIFEST_FILE) as manifest:
        identity = {
            "embedder": embedder.name,
            "dim": str(int(embedder.dim)),
            "schema_version": str(SCHEMA_VERSION),
            EMBEDDING_TEXT_KEY: str(EMBEDDING_TEXT_VERSION),
        }
        db = connect(state / INDEX_DIR)
        reason = _rebuild_reason(manifest.meta(), identity, db, rebuild)
        if reason:
            _reset(db, manifest)
            report.rebuilt, report.rebuild_reason = True, reason
        manifest.set_meta(**identity, **relevance_identity())
        table = ChunkTable(db, int(embedder.dim), identity)
        meta = manifest.meta()
        chunking, was = str(CHUNKING_VERSION), meta.get("chunking", "1")
        if was != chunking and manifest.entries():
            report.rechunked = f"chunking changed: {was} -> {chunking}"
        _Run(vault, embedder, table, manifest, report, progress).execute(meta, verify, bool(report.rechunked))
        updates = table.finish(meta, force=report.rebuilt or verify or not meta.get("table_version"))
        updates["chunking"] = chunking  # recorded only once every note was chunked the new way
        report.optimized, report.ann_index_built = table.optimized, "ann_rows" in updates
        report.rows = table.count()
        manifest.set_meta(
            **updates, table_version=table.version, last_sync=datetime.now(UTC).isoformat(timespec="seconds")
        )


def _rebuild_reason(meta: dict[str, str], identity: dict[str, str], db, requested: bool) -> str:
    """Why the index must be rebuilt from scratch, or '' (vectors of two embedders never mix)."""
    exists = table_exists(db)
    if requested:
        return "requested"
    if not meta.get("embedder"):
        return "index has no recorded embedder (manifest missing)" if exists else ""
    if outdated := outdated_embedding(meta, identity["embedder"]):
        return outdated
    for key, label in (("schema_version", "index schema version"), ("embedder", "embedder"), ("dim", "dimension")):
        if meta.get(key) != identity[key]:
            return f"{label} changed: {meta.get(key)} -> {identity[key]}"
    if not exists:
        return "index table missing"
    stored = db.open_table(TABLE).schema.field("vector").type.list_size
    return "" if str(stored) == identity["dim"] else f"table holds {stored}-d vectors, embedder gives {identity['dim']}"


def _reset(db, manifest: Manifest) -> None:
    """Drop the table and forget every indexed file."""
    if table_exists(db):
        db.drop_table(TABLE)
    manifest.clear()


def user_note_id(relpath: str) -> str:
    """The id of a note without one in its frontmatter: stable for its path."""
    return "u-" + hashlib.sha256(relpath.encode("utf-8")).hexdigest()[:12]


def _place(
    texts: list[str],
    out: np.ndarray,
    source: np.ndarray,
    pool: dict[str, np.ndarray],
    trusted: list[bool],
    stored: dict[str, np.ndarray],
    lender: _Pending | None,
) -> tuple[dict[str, list[int]], list[tuple[int, int]]]:
    """Fill ``out`` and ``source`` for each text with a vector at hand (an old row's, the store's);
    return the texts still to embed (text -> rows) and the rows the batch on the embedding thread
    lends (row here, row there)."""
    slots: dict[str, list[int]] = {}
    borrowed: list[tuple[int, int]] = []
    for i, text in enumerate(texts):
        vector = pool.get(text_key(text)) if pool else None
        if vector is not None:
            out[i], source[i] = vector, _REUSED
        elif trusted[i] and (vector := stored.get(text)) is not None:
            out[i], source[i] = vector, _CACHED
        elif lender is not None and (there := lender.slots.get(text)) is not None:
            borrowed.append((i, there[0]))
            source[i] = _SHARED
        else:
            slots.setdefault(text, []).append(i)
    return slots, borrowed


class _Run:
    """One sync: plan from stats, then read, parse, chunk, embed and write in batches."""

    def __init__(
        self,
        vault: Vault,
        embedder: Embedder,
        table: ChunkTable,
        manifest: Manifest,
        report: IndexReport,
        progress: Progress | None,
    ):
        self.root = Path(vault.root)
        self.vault, self.embedder, self.table, self.manifest = vault, embedder, table, manifest
        self.report, self.progress = report, progress
        self.entries: dict[str, ManifestEntry] = {}
        self.faults: dict[str, str] = {}
        self.owners: dict[str, str] = {}  # note id -> the path that holds it
        self.gone_by_id: dict[str, str] = {}  # note id -> a path that left the vault
        self.gone_by_sha: dict[str, str] = {}  # content hash -> a path that left the vault (notes without an id)
        self.batch: list[_Note] = []
        self.batch_chunks = 0
        self.moved_from: set[str] = set()
        self.drop: set[str] = set()  # indexed paths now unreadable: rows and entries go
        self.touch: list[ManifestEntry] = []  # same content, new stat
        self.done = self.total = 0  # candidate files: done without rows, of all
        self.parsed = self.rows_known = self.rows_ready = 0
        self.progress_lock = threading.Lock()
        self.rechunk = False
        self.pending: _Pending | None = None
        self.cache = VectorCache(self.root / STATE_DIR / CACHE_FILE, embedder.name, table.dim)
        self.embedding: ThreadPoolExecutor  # set by ``execute``

    def execute(self, meta: dict[str, str], verify: bool, rechunk: bool = False) -> None:
        """Check integrity, plan, process every candidate file (all of them, unchanged ones too, when
        ``rechunk``), then drop what left the vault."""
        self.rechunk = rechunk
        self.entries = self.manifest.entries()
        self.faults = self._integrity(meta, verify)
        paths = self.vault.iter_note_paths()
        present = set(paths)
        self.report.scanned = len(paths)
        gone = {p for p in self.entries if p not in present}
        self.gone_by_id = {self.entries[p].note_id: p for p in sorted(gone) if p not in self.faults}
        self.gone_by_sha = {self.entries[p].sha256: p for p in sorted(gone) if p not in self.faults}
        self.owners = {e.note_id: p for p, e in self.entries.items() if p in present and p not in self.faults}
        candidates = self._candidates(paths, verify or rechunk)
        self.total = len(candidates)
        # One embedding thread: the model runs there while this thread reads, parses and writes.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="vault-index-embed") as self.embedding:
            try:
                for relpath, st, kind in candidates:
                    self._consider(relpath, st, kind)
                    if len(self.batch) >= BATCH_NOTES or self.batch_chunks >= BATCH_CHUNKS:
                        self._flush()
                self._flush()
                self._drain()
            finally:
                self.embedding.shutdown(cancel_futures=True)
        self._finish(gone, present)
        rows = self.table.count()
        self.cache.prune(lambda: map(embedding_text, self.table.scan(("text",))["text"].to_pylist()), rows)
        self.cache.close()
        self.report.store_error = self.cache.broken

    def _integrity(self, meta: dict[str, str], verify: bool) -> dict[str, str]:
        """Faulty paths. A table at the version the last finished sync recorded, holding as many
        rows as the manifest vouches for, is as that sync left it: nothing to scan. Otherwise the
        layout (rows per path against the manifest), plus every row's content check when asked or
        when the table changed behind the manifest's back (another writer, or a crash mid-sync)."""
        full = verify or meta.get("table_version") != str(self.table.version)
        if not full and self.table.count() == sum(e.chunks for e in self.entries.values()):
            self.report.integrity = "version"
            return {}
        faults = layout_faults(self.table.scan(LAYOUT_COLUMNS), self.entries)
        if full:
            self.report.integrity = "layout+content"
            for path, reason in content_faults(self.table.scan(CONTENT_COLUMNS)).items():
                faults.setdefault(path, reason)
        return faults

    def _candidates(self, paths: list[str], verify: bool) -> list[tuple[str, os.stat_result, str]]:
        """Files to read: new, faulty, or with a changed stat (all of them when verifying)."""
        out = []
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)  # stat by relative path: no joins
        try:
            for relpath in paths:
                try:
                    st = os.stat(relpath, dir_fd=root)
                except OSError as exc:
                    self._skip(relpath, f"cannot stat: {exc.strerror or exc}")
                    continue
                entry = self.entries.get(relpath)
                if relpath in self.faults:
                    out.append((relpath, st, "repaired"))
                elif entry is None:
                    out.append((relpath, st, "added"))
                elif verify or (entry.size, entry.mtime_ns) != (st.st_size, st.st_mtime_ns):
                    out.append((relpath, st, "changed"))
                else:
                    self.report.unchanged += 1
        finally:
            os.close(root)
        return out

    def _consider(self, relpath: str, st: os.stat_result, kind: str) -> None:
        """Read and hash one candidate; queue it for writing unless its content is unchanged."""
        try:
            data = (self.root / relpath).read_bytes()
        except OSError as exc:
            self._skip(relpath, f"cannot read: {exc.strerror or exc}")
            return self._advance(1)
        sha = hashlib.sha256(data).hexdigest()
        entry = self.entries.get(relpath)
        if kind == "changed" and entry is not None and entry.sha256 == sha and not self.rechunk:
            self.report.unchanged += 1
            if (entry.size, entry.mtime_ns) != (st.st_size, st.st_mtime_ns):
                self.touch.append(ManifestEntry(relpath, entry.note_id, sha, st.st_size, st.st_mtime_ns, entry.chunks))
            return self._advance(1)
        note = self._parse(relpath, data, sha, st, kind)
        if note is None:
            return self._advance(1)
        self.batch.append(note)
        self.batch_chunks += len(note.chunks)

    def _parse(self, relpath: str, data: bytes, sha: str, st: os.stat_result, kind: str) -> _Note | None:
        """Frontmatter, id, chunks and row columns of one file (None, reported, if unreadable)."""
        split = self._split(relpath, data)
        if split is None:
            return None
        frontmatter, body = split
        note_id = str(frontmatter.get("id") or "").strip() or user_note_id(relpath)
        owner = self.owners.get(note_id)
        if owner is not None and owner != relpath:
            self._skip(relpath, f"id {note_id} is already used by {owner}")
            return None
        self._claim(relpath, note_id)
        kind, replaces, reuse = self._replaced(relpath, note_id, kind, "" if frontmatter.get("id") else sha)
        chunks = chunks_for_note(note_id, body)
        chunks += statement_chunks(note_id, relpath, frontmatter, body, len(chunks))
        entry = ManifestEntry(relpath, note_id, sha, st.st_size, st.st_mtime_ns, len(chunks))
        return _Note(entry, note_columns(frontmatter, relpath), chunks, kind, replaces, reuse)

    def _split(self, relpath: str, data: bytes) -> tuple[dict, str] | None:
        """A file's (frontmatter, body); None, reported, if it is not UTF-8. A broken frontmatter
        (hand-edited) is read as far as it goes and the note indexed from its body, with a warning."""
        try:
            text = data.decode("utf-8")
            return split_frontmatter(text, relpath)
        except UnicodeDecodeError:
            self._skip(relpath, "not UTF-8 text")
        except FrontmatterError as exc:
            # One line per file: YAML errors span several lines with their context marks.
            self.report.warnings.append((relpath, " ".join(exc.reason.split()) + "; indexed from its body"))
            return salvage_frontmatter(text)
        return None

    def _replaced(
        self, relpath: str, note_id: str, kind: str, sha: str = ""
    ) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """(kind, the paths whose rows the file's new rows replace, those whose vectors may be reused).

        A new file holding the id of a file gone since the last sync is that note, moved; so is a
        new file without an id (``sha`` given) holding the very bytes of a gone one: a rename."""
        moved_from = self.gone_by_id.pop(note_id, None) if relpath not in self.entries else None
        if moved_from is None and sha and relpath not in self.entries:
            moved_from = self.gone_by_sha.pop(sha, None)
            if moved_from is not None:
                self.gone_by_id.pop(self.entries[moved_from].note_id, None)
        if moved_from is not None:
            self.moved_from.add(moved_from)
            kind = "moved" if kind == "added" else kind
        had_rows = relpath in self.entries or relpath in self.faults
        replaces = tuple(p for p in (relpath if had_rows else None, moved_from) if p)
        # A repair never trusts the old rows, not even for vectors.
        reuse = () if kind == "repaired" else tuple(p for p in replaces if p not in self.faults)
        return kind, replaces, reuse

    def _claim(self, relpath: str, note_id: str) -> None:
        """Make ``relpath`` the owner of ``note_id``, releasing the id it had before."""
        old = self.entries.get(relpath)
        if old is not None and self.owners.get(old.note_id) == relpath:
            del self.owners[old.note_id]
        self.owners[note_id] = relpath

    def _skip(self, relpath: str, reason: str) -> None:
        """Report a file we cannot index; rows it had before are dropped with it."""
        self.report.skipped.append((relpath, reason))
        if relpath in self.entries or relpath in self.faults:
            self.drop.add(relpath)

    def _advance(self, n: int) -> None:
        """``n`` candidate files done without rows to write (unchanged content, unreadable)."""
        with self.progress_lock:
            self.done += n
        self._ready(0)

    def _flush(self) -> None:
        """Find the batch's vectors (kept, stored or to embed), start embedding the rest on the
        embedding thread, then write the previous batch: the next batch is read and parsed while
        this one is embedded."""
        batch, self.batch, self.batch_chunks = self.batch, [], 0
        if not batch:
            return
        pending = self._prepare(batch)
        previous, self.pending = self.pending, pending
        if previous is not None:
            self._write(previous)

    def _drain(self) -> None:
        """Write the batch still being embedded, if any."""
        previous, self.pending = self.pending, None
        if previous is not None:
            self._write(previous)

    def _prepare(self, batch: list[_Note]) -> _Pending:
        """The batch's vectors: an unchanged text's from its old row, a stored one's from the store,
        one the batch still being embedded holds from that batch, every other distinct text once,
        embedded on the embedding thread (shortest first)."""
        texts = [c.embedded_text for n in batch for c in n.chunks]  # the vector is of the text without ids
        out = np.zeros((len(texts), self.table.dim), dtype=np.float32)
        source = np.full(len(texts), _EMBEDDED, dtype=np.int8)
        pool = self._old_vectors(batch)
        trusted = [n.kind != "repaired" for n in batch for _ in n.chunks]  # a repair trusts no stored vector
        stored = self.cache.get([t for t, ok in zip(texts, trusted) if ok and text_key(t) not in pool])
        # The batch on the embedding thread now: its new texts reach the store only when it is
        # written, after this one is prepared, so a text it embeds is taken from it, not again.
        lender = self.pending
        slots, borrowed = _place(texts, out, source, pool, trusted, stored, lender)
        need = sorted(slots, key=len)  # length-sorted calls keep padding small for transformer embedders
        for rows in slots.values():
            source[rows[1:]] = _SHARED  # one embedding, several rows with the same text
        self._ready(len(texts) - sum(map(len, slots.values())), len(texts), len(batch))
        future = self.embedding.submit(self._embed_all, need, [len(slots[t]) for t in need])
        return _Pending(batch, texts, out, source, slots, need, future, borrowed, lender if borrowed else None)

    def _old_vectors(self, batch: list[_Note]) -> dict[str, np.ndarray]:
        """Text key -> vector of the rows the batch replaces (a status flip or move re-embeds nothing)."""
        sources = [p for n in batch for p in n.reuse_from]
        if not sources:
            return {}
        old = self.table.scan(("text", "vector"), sources)
        keys = (text_key(embedding_text(text)) for text in old["text"].to_pylist())
        return dict(zip(keys, vectors_of(old["vector"], self.table.dim)))

    def _write(self, pending: _Pending) -> None:
        """Wait for a batch's embeddings, store them, replace its rows (one delete, one add), record it."""
        batch, out = pending.batch, pending.out
        if pending.need:
            vectors = pending.future.result()
            for text, vector in zip(pending.need, vectors):
                out[pending.slots[text]] = vector
            self.cache.put(pending.need, vectors)
        else:
            pending.future.result()
        if pending.lender is not None:  # written before this batch: its vectors are in place
            here, there = zip(*pending.borrowed)
            out[list(here)] = pending.lender.out[list(there)]
            pending.lender = None
        self.table.delete_paths(p for n in batch for p in n.replaces)
        self.table.add(rows_table([(n.entry, n.columns, n.chunks) for n in batch], out, self.table.dim))
        # The manifest moves only after the rows are written: a crash in between leaves rows
        # the manifest does not vouch for, which the next run's integrity check repairs.
        self.manifest.apply(
            upserts=[n.entry for n in batch], deletes=[p for n in batch for p in n.replaces if p != n.entry.relpath]
        )
        self._count(batch, pending.source)

    def _embed_all(self, texts: list[str], rows: list[int]) -> np.ndarray:
        """Embed ``texts`` (on the embedding thread) in calls of ``EMBED_CALL``; ``rows[i]`` rows
        wait for text ``i``, counted as done when its call returns."""
        out = np.zeros((len(texts), self.table.dim), dtype=np.float32)
        for start in range(0, len(texts), EMBED_CALL):
            out[start : start + EMBED_CALL] = self._embed(texts[start : start + EMBED_CALL])
            self._ready(sum(rows[start : start + EMBED_CALL]))
        return out

    def _embed(self, texts: list[str]) -> np.ndarray:
        """One embed call, validated at the boundary."""
        started = time.perf_counter()
        vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        self.report.embed_seconds += time.perf_counter() - started
        if vectors.shape != (len(texts), self.table.dim) or not np.isfinite(vectors).all():
            raise ModelError(
                "embed",
                self.embedder.name,
                f"expected {len(texts)} finite vectors of {self.table.dim} dims, got {vectors.shape}",
            )
        return l2_normalise(vectors)

    def _ready(self, rows: int, parsed_rows: int = 0, files: int = 0) -> None:
        """Count rows whose vectors are ready, rows and files parsed; report progress in rows.

        The total is an estimate until every file is read: the rows parsed so far plus the unread
        files' share at the rate seen so far. Called from both threads, hence the lock."""
        with self.progress_lock:
            self.rows_ready += rows
            self.rows_known += parsed_rows
            self.parsed += files
            if self.progress is not None:
                rest = max(0, self.total - self.done - self.parsed)
                per_file = self.rows_known / self.parsed if self.parsed else 1.0
                self.progress(self.rows_ready, self.rows_known + round(rest * per_file))

    def _count(self, batch: list[_Note], source: np.ndarray) -> None:
        start = 0
        for note in batch:
            mine = source[start : start + len(note.chunks)]
            start += len(note.chunks)
            hits = int(np.count_nonzero(mine == _EMBEDDED))
            self.report.embedded_notes += 1 if hits else 0
            self.report.embedded_chunks += hits
            self.report.reused_chunks += int(np.count_nonzero(mine == _REUSED))
            self.report.cached_chunks += int(np.count_nonzero(mine == _CACHED))
            self.report.shared_chunks += int(np.count_nonzero(mine == _SHARED))
            if note.kind == "repaired":
                self.report.repairs.append((note.entry.relpath, self.faults[note.entry.relpath]))
            else:
                setattr(self.report, note.kind, getattr(self.report, note.kind) + 1)

    def _finish(self, gone: set[str], present: set[str]) -> None:
        """Drop rows of files gone or unreadable, and of paths only the table knew."""
        left = (gone - self.moved_from) | self.drop
        orphans = {p for p in self.faults if p not in present and p not in self.entries}
        self.table.delete_paths(left | orphans)
        self.manifest.apply(upserts=self.touch, deletes=left)
        self.report.removed += len(left)
        self.report.repairs.extend((p, self.faults[p]) for p in orphans)
        self.report.repairs.sort()
        self.report.repaired = len(self.report.repairs)
