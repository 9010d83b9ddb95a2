"""Ways to damage a vault's LanceDB index, as a disk, a crash or a stray tool leaves it."""

from __future__ import annotations

import random
from pathlib import Path

from vault_pipeline.index.table import INDEX_DIR, TABLE
from vault_pipeline.vault.files import STATE_DIR

KINDS = ("truncated data", "random bytes", "empty index files", "truncated manifests")


def table_dir(root: Path) -> Path:
    """The ``chunks`` table's folder inside the vault at ``root``."""
    return Path(root) / STATE_DIR / INDEX_DIR / f"{TABLE}.lance"


def damage_index(root: Path, kind: str) -> list[Path]:
    """Damage the index of the vault at ``root`` one way of ``KINDS``; the files touched."""
    table = table_dir(root)
    if kind == "truncated data":
        files = sorted((table / "data").glob("*.lance"))
        for path in files:
            _truncate(path, path.stat().st_size // 2)
    elif kind == "random bytes":
        files = sorted((table / "data").glob("*.lance"))
        rng = random.Random(42)
        for path in files:
            data = bytearray(path.read_bytes())
            start = len(data) - min(len(data) // 4, 4096)  # the tail: page and column metadata
            data[start:] = rng.randbytes(len(data) - start)
            path.write_bytes(bytes(data))
    elif kind == "empty index files":
        files = sorted((table / "_indices").rglob("*.lance"))
        for path in files:
            _truncate(path, 0)
    elif kind == "truncated manifests":
        files = sorted((table / "_versions").glob("*.manifest"))
        for path in files:
            _truncate(path, path.stat().st_size // 2)
    else:
        raise ValueError(f"no such damage: {kind}")
    assert files, f"nothing to damage for {kind!r} in {table}"
    return files


def _truncate(path: Path, size: int) -> None:
    with path.open("r+b") as fh:
        fh.truncate(size)
