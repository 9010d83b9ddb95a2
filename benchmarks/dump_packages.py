"""Dump the packages of the benchmark query sets, to compare two builds byte for byte.

Builds the demo vault (``vault demo``: the example vault with its exports ingested, cleaned and
indexed), then writes ``vault query --json --explain --batch`` for ``vault_example/queries.jsonl`` and
``benchmarks/data/export_questions.jsonl`` against it; with ``--export`` also a fresh vault of a
real export (init, ingest, keep --all-passing, index) and the export questions against that.
Everything runs through ``python -m vault_pipeline.cli`` of the tree the script lives in.

    python benchmarks/dump_packages.py --out /tmp/dumps_after [--export ../shared/data/exports/chatgpt-pkuppens-2023.json]
    diff -r /tmp/dumps_before/packages /tmp/dumps_after/packages

Timings are measured, not computed: the keys named in ``TIMED`` are blanked before writing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TREE = Path(__file__).resolve().parent.parent
QUERY_SETS = {
    "example": TREE / "vault_example" / "queries.jsonl",
    "export_questions": TREE / "benchmarks" / "data" / "export_questions.jsonl",
}
TIMED = {"ms", "seconds", "latency_ms", "elapsed_ms", "timings", "stage_ms"}


def vault(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """One ``vault`` command of this tree (its exit code is the caller's to judge when ``check`` is off)."""
    env = {**os.environ, "PYTHONPATH": str(TREE)}
    done = subprocess.run(
        [sys.executable, "-m", "vault_pipeline.cli", *args], env=env, capture_output=True, text=True, check=False
    )
    if check and done.returncode not in (0, 1):
        raise SystemExit(f"vault {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return done


def untimed(value: Any) -> Any:
    """``value`` with every timing key blanked, at any depth."""
    if isinstance(value, dict):
        return {k: (None if k in TIMED else untimed(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def dump(vault_dir: Path, name: str, queries: Path, out: Path) -> int:
    """Write one query set's packages (one JSON object a line, timings blanked); how many."""
    done = vault("query", "--vault", str(vault_dir), "--json", "--explain", "--batch", str(queries))
    lines = [json.dumps(untimed(json.loads(line)), sort_keys=True) for line in done.stdout.splitlines() if line.strip()]
    (out / f"{name}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--export", type=Path, help="a real export to build a second vault from")
    args = parser.parse_args()
    packages = args.out / "packages"
    packages.mkdir(parents=True, exist_ok=True)
    demo = args.out / "demo"
    vault("demo", "--out", str(demo), "--json")
    for name, queries in QUERY_SETS.items():
        print(f"demo/{name}: {dump(demo, 'demo_' + name, queries, packages)} packages")
    if args.export:
        export = args.out / "export"
        vault("init", str(export))
        vault("ingest", str(args.export), "--vault", str(export))
        vault("keep", "--all-passing", "--vault", str(export))
        vault("index", "--vault", str(export))
        print(f"export/export_questions: {dump(export, 'export', QUERY_SETS['export_questions'], packages)} packages")


if __name__ == "__main__":
    main()
