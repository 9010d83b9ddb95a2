"""Notes indexed from their body because their frontmatter is broken: what ``vault status`` warns of.

A note a person broke by hand (a stray colon, a tab in its YAML) is indexed all the same, from
its body and whatever frontmatter lines still read (``vault.frontmatter.salvage_frontmatter``),
so it stays findable. The index run names it; this record keeps naming it in ``vault status``
until the file changes: each entry holds the file's size and mtime when it was read, and an
entry whose file has changed since says nothing (the next index reads the file again).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from vault_pipeline.vault.files import STATE_DIR, Vault

BROKEN_FILE = "broken-frontmatter.json"


def _stamp(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _load(vault: Vault) -> dict[str, dict]:
    try:
        data = json.loads((Path(vault.root) / STATE_DIR / BROKEN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def broken_notes(vault: Vault) -> list[tuple[str, str]]:
    """(path, what is broken) of every note indexed from its body that is still as it was read."""
    return [
        (path, str(entry.get("reason", "")))
        for path, entry in sorted(_load(vault).items())
        if isinstance(entry, dict) and _stamp(Path(vault.root) / path) == entry.get("stamp")
    ]


def record_broken(vault: Vault, found: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Record the notes this index run read from their body, and keep the earlier ones whose file is
    unchanged (the run did not read them again); written only when it changes. Returns them all."""
    root = Path(vault.root)
    entries = {p: e for p, e in _load(vault).items() if isinstance(e, dict) and _stamp(root / p) == e.get("stamp")}
    for path, reason in found:
        entries[path] = {"reason": reason, "stamp": _stamp(root / path)}
    target = root / STATE_DIR / BROKEN_FILE
    if entries != _load(vault):
        if entries:
            temp = target.with_suffix(".tmp")
            temp.write_text(json.dumps(entries, ensure_ascii=False, indent=1), encoding="utf-8")
            os.replace(temp, target)
        else:
            target.unlink(missing_ok=True)
    return [(path, str(entry["reason"])) for path, entry in sorted(entries.items())]
