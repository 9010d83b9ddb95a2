"""Benchmark streaming a large ChatGPT export: peak memory stays far below the file size.

    python benchmarks/bench_stream.py                 # a 200 MB export
    python benchmarks/bench_stream.py --mb 50 --json

A seeded synthetic ``conversations.json`` (many conversations of 20 turns) is written one
conversation at a time, then read back with ``read_export`` in a fresh process, which prints
its peak RSS (``ru_maxrss``) beside its RSS after the imports, so the figure is the reader's own.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORDS = (
    "the paper review deadline moved to friday because the reviewers asked for another "
    "experiment on the staging server with port 8080 and a smaller batch size"
).split()
TURNS = 20


def conversation(index: int, rng: random.Random) -> dict:
    """One ChatGPT conversation record: a root and ``TURNS`` alternating user/assistant nodes."""
    mapping = {"root": {"id": "root", "parent": None, "children": ["n0"], "message": None}}
    for turn in range(TURNS):
        node = f"n{turn}"
        text = " ".join(rng.choice(WORDS) for _ in range(150)) + "."
        mapping[node] = {
            "id": node,
            "parent": "root" if turn == 0 else f"n{turn - 1}",
            "children": [f"n{turn + 1}"] if turn + 1 < TURNS else [],
            "message": {
                "id": f"m{index}-{turn}",
                "author": {"role": ("user", "assistant")[turn % 2]},
                "create_time": 1_700_000_000 + index * 60 + turn,
                "content": {"content_type": "text", "parts": [text]},
            },
        }
    return {
        "id": f"conv-{index:06d}",
        "title": f"Conversation {index}",
        "create_time": 1_700_000_000 + index * 60,
        "update_time": 1_700_000_000 + index * 60 + TURNS,
        "current_node": f"n{TURNS - 1}",
        "mapping": mapping,
    }


def write_export(path: Path, megabytes: float, seed: int) -> int:
    """Write conversations to ``path`` until it holds ``megabytes`` MB; return how many were written."""
    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    count = size = 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write("[")
        while size < target:
            chunk = ("," if count else "") + json.dumps(conversation(count, rng), ensure_ascii=False)
            size += fh.write(chunk)
            count += 1
        fh.write("]")
    return count


def parse_in_child(path: Path) -> dict:
    """Read ``path`` with ``read_export`` in a fresh interpreter; its own figures as a dict."""
    result = subprocess.run(
        [sys.executable, __file__, "--parse", str(path)], capture_output=True, text=True, cwd=REPO, check=True
    )
    return json.loads(result.stdout)


def _parse(path: Path) -> None:
    """Child side: iterate the export and print counts, time and RSS (KiB) as JSON."""
    sys.path.insert(0, str(REPO))
    from vault_pipeline.ingest.parse import Conversation, read_export

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    conversations = issues = messages = 0
    for item in read_export(path):
        if isinstance(item, Conversation):
            conversations += 1
            messages += len(item.messages)
        else:
            issues += 1
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "conversations": conversations,
                "messages": messages,
                "issues": issues,
                "seconds": round(seconds, 2),
                "baseline_kib": baseline,
                "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }
        )
    )


def run(megabytes: float, seed: int, folder: Path) -> dict:
    """Write the export into ``folder``, parse it in a child, return every figure."""
    path = folder / "conversations.json"
    written = write_export(path, megabytes, seed)
    figures = parse_in_child(path)
    return {
        "file_mb": round(path.stat().st_size / 1e6, 1),
        "written": written,
        **figures,
        "peak_above_baseline_mb": round((figures["peak_kib"] - figures["baseline_kib"]) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="export size in MB (default 200)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", type=Path, help="where to write the export (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--parse", type=Path, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.parse:
        _parse(args.parse)
        return
    if args.dir:
        args.dir.mkdir(parents=True, exist_ok=True)
        figures = run(args.mb, args.seed, args.dir)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            figures = run(args.mb, args.seed, Path(tmp))
    if args.json:
        print(json.dumps(figures))
        return
    print(f"export       {figures['file_mb']} MB, {figures['written']} conversations written")
    print(
        f"parsed       {figures['conversations']} conversations, {figures['messages']} messages, "
        f"{figures['issues']} issues in {figures['seconds']} s"
    )
    print(
        f"peak RSS     {figures['peak_kib'] / 1024:.1f} MiB (after imports {figures['baseline_kib'] / 1024:.1f} MiB, "
        f"+{figures['peak_above_baseline_mb']} MiB while reading)"
    )


if __name__ == "__main__":
    main()
