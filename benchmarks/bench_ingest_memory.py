"""Ingest memory is bounded by the largest conversation, not by the export: peak RSS at two sizes.

Writes a synthetic ChatGPT export of N conversations (each the same shape: a few turns of a few
hundred words, titles of a few lines of work so thread maps form), ingests it into a fresh vault in a
child process with the offline defaults, and prints the child's peak RSS (``ru_maxrss``) per size and
the ratio of the largest to the smallest.

    python benchmarks/bench_ingest_memory.py --sizes 500 5000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBJECTS = ["heat pump", "garden design", "billing service", "retrieval paper", "photo archive"]


def _conversation(i: int) -> dict:
    subject = SUBJECTS[i % len(SUBJECTS)]
    turns = [
        ("user", f"We decided to review the {subject} plan number {i} before the end of the month."),
        ("assistant", f"The {subject} plan {i} has three parts. " + "Each part names its owner and its date. " * 40),
        ("user", f"The budget for the {subject} work {i} is fixed at {1000 + i} euros."),
        ("assistant", f"Noted: the {subject} budget {i} stays at {1000 + i} euros. " + "The schedule holds. " * 40),
    ]
    mapping = {"r": {"id": "r", "parent": None, "children": ["m0"], "message": None}}
    for n, (role, text) in enumerate(turns):
        node = f"m{n}"
        mapping[node] = {
            "id": node,
            "parent": "r" if n == 0 else f"m{n - 1}",
            "children": [f"m{n + 1}"] if n + 1 < len(turns) else [],
            "message": {
                "id": f"c{i}-{node}",
                "author": {"role": role},
                "create_time": 1_700_000_000 + i * 100 + n,
                "content": {"content_type": "text", "parts": [text]},
            },
        }
    return {
        "id": f"conv-{i}",
        "title": f"{subject.title()} plan {i}",
        "create_time": 1_700_000_000 + i * 100,
        "update_time": 1_700_000_000 + i * 100 + 10,
        "current_node": f"m{len(turns) - 1}",
        "mapping": mapping,
    }


def _peak(size: int, work: Path) -> tuple[float, float]:
    export = work / f"export-{size}.json"
    with export.open("w", encoding="utf-8") as out:
        out.write("[")
        for i in range(size):
            out.write(("," if i else "") + json.dumps(_conversation(i)))
        out.write("]")
    root = work / f"vault-{size}"
    cli = [sys.executable, "-m", "vault_pipeline.cli"]
    subprocess.run([*cli, "init", str(root)], check=True, capture_output=True)
    script = (
        "import resource, subprocess, sys; "
        "done = subprocess.run(sys.argv[1:], capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script, *cli, "ingest", str(export), "--vault", str(root)],
        capture_output=True,
        text=True,
        check=True,
    )
    peak_kb, code = done.stdout.split()
    if code not in ("0", "1"):
        raise SystemExit(f"ingest of {size} failed with exit {code}")
    return int(peak_kb) / 1024, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 5000])
    args = parser.parse_args()
    assert resource  # the child's peak is read in a grandchild-free wrapper (RUSAGE_CHILDREN)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            peak, seconds = _peak(size, Path(tmp))
            results[size] = peak
            print(f"{size:>6} conversations: peak RSS {peak:7.1f} MB, {seconds:6.1f} s", flush=True)
    small, large = results[min(results)], results[max(results)]
    print(f"ratio {max(results)} / {min(results)}: {large / small:.2f}x (target: within 2x)")


if __name__ == "__main__":
    main()
