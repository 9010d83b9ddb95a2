"""The index's size after many small edits against its fresh size (issue 50, item 7).

    python benchmarks/bench_index_growth.py                                  # the example vault
    python benchmarks/bench_index_growth.py --vault V --edits 40 --gap 8     # a vault of your own

The vault's notes are copied into a fresh folder (its index state left behind) and indexed once:
the fresh size. Then ``--edits`` times: a line appended to one note (round the notes in a seeded
order), ``--gap`` seconds of waiting (a user's edits come minutes apart; old table versions are
kept five minutes for queries in flight), and a fresh `vault index` process. Printed: the index
folder's size fresh, after each tenth edit and at the end, the table versions LanceDB keeps, and
the ratio of the last size to the fresh one against the target (1.5).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_scale import VAULT_CMD, run  # noqa: E402

TARGET_RATIO = 1.5
INDEX_DIR = ".vault_pipeline/index"


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def versions(folder: Path) -> int:
    """Table versions LanceDB keeps: one manifest file each under ``_versions``."""
    return sum(1 for p in folder.rglob("_versions/*.manifest"))


def copy_notes(source: Path, dest: Path) -> list[str]:
    """The vault's files without its index state; the notes' vault-relative paths."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".vault_pipeline"))  # vault.toml comes along
    (dest / ".vault_pipeline").mkdir()
    return sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.md") if ".obsidian" not in p.parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-growth-"))
    root = work / "vault"
    notes = copy_notes(args.vault, root)
    random.Random(args.seed).shuffle(notes)
    fresh = run([*VAULT_CMD, "index", "--vault", str(root), "--json"])
    rows = json.loads(fresh["stdout"]).get("rows")
    index = root / INDEX_DIR
    sizes = [(0, folder_bytes(index), versions(index))]
    print(f"vault {args.vault}: {len(notes)} notes, {rows} rows; fresh index {sizes[0][1] / 1e6:.2f} MB")
    for i in range(1, args.edits + 1):
        path = notes[(i - 1) % len(notes)]
        with (root / path).open("a", encoding="utf-8") as fh:
            fh.write(f"\nA line added by hand, edit {i}.\n")
        time.sleep(args.gap)
        run([*VAULT_CMD, "index", "--vault", str(root), "--json"])
        if i % 10 == 0 or i == args.edits:
            sizes.append((i, folder_bytes(index), versions(index)))
            print(f"after {i:3d} edits: {sizes[-1][1] / 1e6:.2f} MB, {sizes[-1][2]} versions kept")
    ratio = sizes[-1][1] / sizes[0][1]
    verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
    print(f"size after {args.edits} edits / fresh: {ratio:.2f} (target <= {TARGET_RATIO}: {verdict})")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "sizes": sizes, "ratio": ratio}, indent=2))
    shutil.rmtree(work)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vault", type=Path, default=REPO / "vault_example" / "vault", help="a vault to copy")
    p.add_argument("--edits", type=int, default=40)
    p.add_argument("--gap", type=float, default=8.0, help="seconds between an edit and its `vault index`")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    return p.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
