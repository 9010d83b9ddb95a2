"""Integrity checks of the ``chunks`` table against the manifest.

``layout_faults`` compares rows per path with what the manifest vouches for (vectorised: at
100k notes it must cost less than the rest of a no-op sync); ``content_faults`` recomputes
every row's check, so a row whose id was welded to another row's content cannot pass.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from vault_pipeline.index.manifest import ManifestEntry
from vault_pipeline.index.table import TEXT_COLUMN, VECTOR_COLUMN, row_check, vectors_of

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
        [
            ("ordinal", "count"),
            ("ordinal", "min"),
            ("ordinal", "max"),
            ("note_id", "min"),
            ("note_id", "max"),
            ("sha256", "min"),
            ("sha256", "max"),
        ]
    )
    entries = manifest.values()
    expected = pa.table(
        {
            "path": pa.array(list(manifest), pa.string()),
            "m_note": pa.array([e.note_id for e in entries], pa.string()),
            "m_sha": pa.array([e.sha256 for e in entries], pa.string()),
            "m_chunks": pa.array([e.chunks for e in entries], pa.int64()),
        }
    )
    joined = groups.join(expected, "path", join_type="full outer")
    for g in joined.filter(_mismatch(joined)).to_pylist():
        faults.setdefault(g["path"], _group_fault(g, manifest.get(g["path"])))
    return faults


def _mismatch(j: pa.Table) -> pa.ChunkedArray:
    """Rows of the path/manifest join where anything differs (nulls: one side is missing)."""
    n = j["ordinal_count"]
    checks = [
        pc.not_equal(n, j["m_chunks"]),
        pc.not_equal(j["ordinal_min"], 0),
        pc.not_equal(j["ordinal_max"], pc.subtract(n, 1)),
        pc.not_equal(j["note_id_min"], j["m_note"]),
        pc.not_equal(j["note_id_max"], j["m_note"]),
        pc.not_equal(j["sha256_min"], j["m_sha"]),
        pc.not_equal(j["sha256_max"], j["m_sha"]),
    ]
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
