"""Whether the LanceDB index can be read, and what to do when it cannot.

The index is derived from the notes, so it must never be the reason the vault cannot be read: a
truncated data file, garbled bytes, an empty index file or a broken version manifest is found by
``probe``, the broken folder is moved aside for the user (``set_aside``) and the index is rebuilt
from the vault. Commands that only read (query, status, the MCP tools) find the damage when a read
fails (``is_damage``) and ``repair`` it, so the intact path pays nothing. Why: decision 0090.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from vault_pipeline.errors import IndexDamagedError, storage_fault
from vault_pipeline.index.integrity import CONTENT_COLUMNS, content_faults
from vault_pipeline.index.table import INDEX_DIR, TABLE, TEXT_COLUMN, VECTOR_COLUMN, connect, isin, table_exists

DAMAGED_PREFIX = "index.damaged-"  # beside the index under .vault_pipeline/: the broken copy, for the user
SCAN_BATCH = 4096  # rows per batch of a full read-back: memory stays at one batch
_LANCE = re.compile(r"LanceError\((\w+)\):\s*(?:Generic \w+ error:\s*)?([^,\n]*)")


def is_damage(exc: BaseException) -> bool:
    """True for an error that says the index's files cannot be read (LanceDB's IO and decode errors)."""
    if isinstance(exc, IndexDamagedError):
        return True
    if storage_fault(exc) is not None:
        return False  # a full disk or a permission is no damage: the index is healthy, the write failed
    # LanceDB raises RuntimeError("lance error: LanceError(IO): ..."), or ValueError for a file that
    # is no Lance file at all ("invalid magic"); pyarrow's own errors carry no such word.
    return isinstance(exc, (RuntimeError, OSError, ValueError, pa.ArrowException)) and "lance" in str(exc).lower()


T = TypeVar("T")


def read_repairing(read: Callable[[], T], rebuild: Callable[[str], object]) -> T:
    """``read()``; when it finds the index unreadable, ``rebuild(how)`` once (``describe``) and read again."""
    try:
        return read()
    except Exception as exc:
        if not is_damage(exc):
            raise
        rebuild(describe(exc))
    return read()


def describe(exc: BaseException) -> str:
    """One short line for a read failure: LanceDB's kind and first clause, without its source paths."""
    if isinstance(exc, IndexDamagedError):
        return exc.what
    found = _LANCE.search(str(exc))
    if found:
        return f"{found.group(1)} error: {found.group(2).strip()}"
    first = " ".join(str(exc).split())[:160]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def probe(index_dir: Path, *, full: bool = False) -> str:
    """'' when the index reads back, else one line saying what failed.

    Always: open the table, count its rows, a sample search through each index (vector, full
    text, the scalar filters). Quick (the sync's): a small column of every row (every data file's
    footer), then every column of each data file's first row. ``full`` (``vault check``): every
    index loaded whole and every row read back against its stored check."""
    if not index_dir.is_dir():
        return ""
    try:
        db = connect(index_dir, strong=True)
        if not table_exists(db):
            return ""
        table = db.open_table(TABLE)
        table.count_rows()
        _sample_searches(table)
        if not full:
            _first_rows(table)
            return ""
        for index in table.list_indices():
            table.prewarm_index(index.name)
        return _read_back(table)
    except Exception as exc:  # the probe's one question is whether it reads: any failure is the answer
        fault = storage_fault(exc, index_dir)
        if fault is not None:
            raise fault from None  # it cannot be read for a reason outside it: never set aside
        return describe(exc)


def _sample_searches(table) -> None:
    """One small search through each kind of index the funnel uses."""
    dim = table.schema.field(VECTOR_COLUMN).type.list_size
    zero = [0.0] * dim
    table.search(zero).where("active = true").select(["chunk_id"]).limit(1).to_arrow()
    table.search("note", query_type="fts", fts_columns=TEXT_COLUMN).select(["chunk_id"]).limit(1).to_arrow()
    table.search().where(isin("source_conversation", [""])).select(["chunk_id"]).limit(1).to_arrow()


def _first_rows(table) -> None:
    """Read a small column of every row, then every column of the first row of each data file."""
    starts: list[int] = []
    offset, last = 0, None
    for batch in table.search().select(["ordinal"]).with_row_id(True).limit(None).to_batches(SCAN_BATCH):
        # A row id is (fragment << 32 | offset) unless the table keeps stable ids; then only row 0 is taken.
        for i, fragment in enumerate(pc.shift_right(batch.column("_rowid"), 32).to_pylist()):
            if fragment != last:
                starts.append(offset + i)
                last = fragment
        offset += batch.num_rows
    if starts:
        table.take_offsets(starts).to_arrow()


def _read_back(table) -> str:
    """Read every row back: '' when each matches its stored check, else how many do not."""
    bad: dict[str, str] = {}
    for batch in table.search().select(list(CONTENT_COLUMNS)).limit(None).to_batches(SCAN_BATCH):
        bad.update(content_faults(pa.Table.from_batches([batch])))
    if not bad:
        return ""
    first = min(bad)
    return f"{len(bad)} note(s) with rows that do not match their check, first {first}"


def set_aside(state: Path) -> Path | None:
    """Move the broken index folder to ``index.damaged-<UTC time>`` beside it; None when there is none."""
    source = state / INDEX_DIR
    if not source.exists():
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target, n = state / f"{DAMAGED_PREFIX}{stamp}", 1
    while target.exists():
        target, n = state / f"{DAMAGED_PREFIX}{stamp}-{n}", n + 1
    os.replace(source, target)
    return target
