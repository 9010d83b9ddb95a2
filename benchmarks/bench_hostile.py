"""Benchmark hostile inputs: peak memory and wall time of `vault ingest` on decompression bombs.

    python benchmarks/bench_hostile.py              # the full-scale bombs: 1 GB member, 1 GB string
    python benchmarks/bench_hostile.py --mb 64      # the same shapes, smaller
    python benchmarks/bench_hostile.py --json

Each input is a small zip that expands to a huge member, built by streaming (never held in
memory), and ingested by the real CLI (`python -m vault_pipeline.cli ingest`) in a fresh
process with the offline model. A wrapper process reports that child's peak RSS
(``ru_maxrss`` of its children), so the figure is the whole ingest's. A baseline row ingests
the good conversation alone: the difference is what the bomb cost. Target: <= 300 MB peak.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCK = b"a" * (1 << 20)
TARGET_MB = 300
_WRAPPER = """
import resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - started
peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"{peak_kb} {wall:.3f} {done.returncode}")
print(done.stdout)
"""


def good_record(conv_id: str) -> dict:
    """A two-turn ChatGPT conversation."""
    turns = [("user", "We decided to keep the bombs out of the vault."), ("assistant", "Skipping is safer.")]
    mapping: dict = {"root": {"id": "root", "parent": None, "children": ["m0"], "message": None}}
    for i, (role, text) in enumerate(turns):
        mapping[f"m{i}"] = {
            "id": f"m{i}",
            "parent": "root" if i == 0 else f"m{i - 1}",
            "children": [f"m{i + 1}"] if i + 1 < len(turns) else [],
            "message": {
                "id": f"m{i}",
                "author": {"role": role},
                "create_time": 1_700_000_000 + i,
                "content": {"content_type": "text", "parts": [text]},
            },
        }
    return {"title": "Good", "id": conv_id, "create_time": 1_700_000_000, "mapping": mapping, "current_node": "m1"}


def _stream(member, head: bytes, mb: int, tail: bytes) -> None:
    member.write(head)
    for _ in range(mb):
        member.write(BLOCK)
    member.write(tail)


def text_bomb(path: Path, mb: int) -> Path:
    """A zip holding an ``mb`` MB transcript member and, beside it, a good conversations.json."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("bomb.md", "w", force_zip64=True) as member:
            _stream(member, b"User: ", mb, b"\nAssistant: ok\n")
        zf.writestr("conversations.json", json.dumps([good_record("good")]))
    return path


def string_bomb(path: Path, mb: int) -> Path:
    """A zip whose conversations.json holds a record with an ``mb`` MB string between two good records."""
    bomb = good_record("bomb")
    bomb["mapping"]["m0"]["message"]["content"]["parts"] = ["@@"]
    head, tail = json.dumps([good_record("before"), bomb, good_record("after")]).split("@@")
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf,
        zf.open("conversations.json", "w", force_zip64=True) as member,
    ):
        _stream(member, head.encode(), mb, tail.encode())
    return path


def baseline(path: Path, _mb: int) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("conversations.json", json.dumps([good_record("good")]))
    return path


def run(export: Path, vault: Path) -> dict:
    """Ingest ``export`` into a fresh vault in a child process; its peak RSS, wall time and report."""
    subprocess.run([sys.executable, "-m", "vault_pipeline.cli", "init", str(vault)], check=True, capture_output=True)
    cli = [sys.executable, "-m", "vault_pipeline.cli", "ingest", str(export), "--vault", str(vault), "--json"]
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *cli], capture_output=True, text=True, check=True)
    first, _, rest = done.stdout.partition("\n")
    peak_kb, wall, code = first.split()
    report = _json_tail(rest)
    return {
        "peak_rss_mb": round(int(peak_kb) / 1024, 1),
        "wall_s": float(wall),
        "exit": int(code),
        "conversations": report.get("conversations"),
        "skipped": report.get("skipped", []),
        "largest_note_kb": round(max(p.stat().st_size for p in vault.rglob("*.md")) / 1024, 1),
        "calls_log_kb": round(sum(p.stat().st_size for p in vault.rglob("calls.jsonl")) / 1024, 1),
    }


def _json_tail(text: str) -> dict:
    start = text.find("{")
    try:
        return json.loads(text[start:]) if start >= 0 else {}
    except json.JSONDecodeError:
        return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the huge member and string, in MB")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        for name, build in (("baseline", baseline), ("text-member bomb", text_bomb), ("json-string bomb", string_bomb)):
            started = time.perf_counter()
            export = build(tmp / f"{name.split()[0]}.zip", args.mb)
            built = time.perf_counter() - started
            row = {"input": name, "zip_kb": round(export.stat().st_size / 1024, 1), "expands_mb": args.mb}
            row.update(run(export, tmp / f"vault-{name.split()[0]}"))
            row["build_s"] = round(built, 1)
            rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'input':18} {'zip':>9} {'expands':>8} {'peak RSS':>9} {'wall':>7} {'exit':>4} {'convs':>5}  skipped")
    for r in rows:
        expands = "-" if r["input"] == "baseline" else f"{r['expands_mb']} MB"
        print(
            f"{r['input']:18} {r['zip_kb']:>6} KB {expands:>8} {r['peak_rss_mb']:>6} MB {r['wall_s']:>6.1f}s "
            f"{r['exit']:>4} {r['conversations']!s:>5}  {len(r['skipped'])}"
        )
        for line in r["skipped"]:
            print(f"    skipped: {line[-160:]}")
        print(f"    largest note {r['largest_note_kb']} KB, calls.jsonl {r['calls_log_kb']} KB")
    worst = max(r["peak_rss_mb"] for r in rows)
    verdict = "within" if worst <= TARGET_MB else "OVER"
    print(f"worst peak RSS {worst} MB: {verdict} the {TARGET_MB} MB target")


if __name__ == "__main__":
    main()
