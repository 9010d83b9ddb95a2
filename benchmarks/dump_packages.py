"""Dump the packages a build gives for a query set, timings removed, to compare two builds.

    PYTHONPATH=/tmp/base python benchmarks/dump_packages.py --vault V --queries Q --out before.jsonl
    PYTHONPATH=$PWD      python benchmarks/dump_packages.py --vault V --queries Q --out after.jsonl
    cmp before.jsonl after.jsonl

Each line is one package as ``vault query --batch --json --explain`` prints it (``--explain``: the
trace too, so a change in what the funnel considered shows, not only in what it kept), with every
key naming a time (``seconds``, ``*_ms``, ``elapsed``) dropped: those differ between any two runs.
The vault is only read, and run as a fresh process so the build under ``PYTHONPATH`` answers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

TIME_KEYS = ("seconds", "elapsed", "latency")


def timeless(value):
    """``value`` without the keys that name a time."""
    if isinstance(value, dict):
        return {
            k: timeless(v)
            for k, v in value.items()
            if not (k in TIME_KEYS or k.endswith("_ms") or k.endswith("_seconds") or k == "ms")
        }
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vault", type=Path, required=True)
    p.add_argument("--queries", type=Path, required=True, help='JSONL of {"query", "intent"?}')
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    command = [sys.executable, "-m", "vault_pipeline.cli", "query", "--batch", str(args.queries)]
    done = subprocess.run([*command, "--json", "--explain", "--vault", str(args.vault)], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"vault query failed ({done.returncode}): {done.stderr[-2000:]}")
    lines = [
        json.dumps(timeless(json.loads(line)), sort_keys=True) for line in done.stdout.splitlines() if line.strip()
    ]
    args.out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(f"{len(lines)} packages -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
