"""What ``vault status`` reads from the index stage: freshness, statistics, and level lint.

Freshness is how far the index lags the files: notes it has never seen, notes whose size or
mtime moved since they were indexed, and indexed files gone from the vault. It compares the
manifest with file stats only: no file is read or hashed.
"""

from __future__ import annotations

from typing import Any

from vault_pipeline.errors import FrontmatterError, IndexStateError
from vault_pipeline.index.broken import broken_notes
from vault_pipeline.index.chunk import lint_levels
from vault_pipeline.index.damage import IndexDamagedError, describe, is_damage
from vault_pipeline.index.manifest import MANIFEST_FILE, ManifestEntry, opened_manifest
from vault_pipeline.index.search import Index
from vault_pipeline.vault.files import STATE_DIR, Vault

__all__ = ["broken_notes", "index_status", "lint", "pending"]


def index_status(vault: Vault, paths: list[str]) -> tuple[dict[str, int], dict[str, Any] | None]:
    """(pending counts, index statistics) for the vault's note ``paths``; ({}, None) with no index.

    IndexDamagedError when the index's files cannot be read."""
    manifest_path = vault.root / STATE_DIR / MANIFEST_FILE
    if not manifest_path.exists():
        return {}, None
    with opened_manifest(manifest_path, read_only=True) as manifest:
        lag = pending(vault, paths, manifest.entries())
    try:
        return lag, Index.open(vault).stats()
    except IndexDamagedError:
        raise
    except IndexStateError:
        return lag, None
    except Exception as exc:
        if is_damage(exc):
            raise IndexDamagedError(describe(exc)) from None
        raise


def pending(vault: Vault, paths: list[str], entries: dict[str, ManifestEntry]) -> dict[str, int]:
    """Files waiting to be indexed: new, changed (by size or mtime), and removed."""
    new = changed = 0
    for relpath in paths:
        entry = entries.get(relpath)
        if entry is None:
            new += 1
            continue
        stat = (vault.root / relpath).stat()
        if (stat.st_size, stat.st_mtime_ns) != (entry.size, entry.mtime_ns):
            changed += 1
    removed = len(set(entries) - set(paths))
    return {"new": new, "changed": changed, "removed": removed}


def lint(vault: Vault, paths: list[str]) -> list[tuple[str, str, int]]:
    """(path, heading, bullets) of every heading level with more bullets than one idea holds."""
    findings = []
    for relpath in paths:
        if relpath.startswith(("inbox/", "engrams/", "archive/")):
            continue  # atomic notes are one sentence: no levels to lint
        try:
            _, body, _ = vault.read(relpath)
        except FrontmatterError:
            continue
        findings += [(relpath, " > ".join(f.heading_path) or "(top)", f.bullets) for f in lint_levels(body)]
    return findings
