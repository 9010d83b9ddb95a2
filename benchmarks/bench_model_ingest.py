"""Model ingest at scale: the real export through a model that takes 200 ms a call.

    python benchmarks/bench_model_ingest.py                 # concurrency 1 vs 8, then kill and resume
    python benchmarks/bench_model_ingest.py --delay 0.2 --concurrency 8 --skip-serial

The model is the scripted OpenAI-compatible server of the tests (tests/support/openai_server.py) on
127.0.0.1, answering every call with a valid answer after ``--delay`` seconds, through the real
LiteLLM backend and instructor over HTTP; the export is ../shared/data/exports/chatgpt-pkuppens-2023.json.

1. Speed: the export ingested into a fresh vault one call at a time, then with ``--concurrency``
   calls in flight; wall time, calls, and the speed-up (the vaults are compared file by file).
2. Resume: `vault ingest` (a separate process, as a user runs it) killed with SIGKILL once half the
   calls are made, then run again to the end. Printed: the calls the first run made, the answers it
   had stored, the calls the second run made, and the calls made in both runs (the same request:
   those in flight at the kill, whose answers never arrived; at most the concurrency).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.openai_server import ScriptedServer  # noqa: E402
from vault_pipeline import pipeline  # noqa: E402
from vault_pipeline.models.answers import ANSWERS_FILE, AnswerCache, CachedLLM  # noqa: E402
from vault_pipeline.models.calllog import CallLog  # noqa: E402
from vault_pipeline.models.litellm_backend import LiteLLMBackend  # noqa: E402
from vault_pipeline.vault.files import STATE_DIR, Vault  # noqa: E402

EXPORT = REPO.parent / "shared" / "data" / "exports" / "chatgpt-pkuppens-2023.json"
MODEL = "openai/scripted-200ms"


def ingest_in_process(server: ScriptedServer, root: Path, concurrency: int) -> dict:
    """One ingest of the export into a fresh vault at ``root``; its wall time and calls."""
    Vault.init(root).close()
    vault = Vault.open(root)
    log = CallLog(None)
    llm = CachedLLM(
        LiteLLMBackend(MODEL, api_base=server.url, log=log), AnswerCache(root / STATE_DIR / ANSWERS_FILE), log=log
    )
    before = len(server.requests)
    started = time.perf_counter()
    try:
        report = pipeline.ingest(vault, [EXPORT], llm, concurrency=concurrency)
    finally:
        vault.close()
    seconds = time.perf_counter() - started
    return {
        "concurrency": concurrency,
        "seconds": round(seconds, 1),
        "calls": len(server.requests) - before,
        "peak_in_flight": server.peak,
        "conversations": report.conversations,
        "notes": report.notes,
        "failed": len(report.errors),
    }


def files_of(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and STATE_DIR not in p.parts
    }


def run_cli(server: ScriptedServer, root: Path, concurrency: int, kill_after: int | None) -> dict:
    """`vault ingest` in its own process; SIGKILLed once the server has seen ``kill_after`` calls."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_") and k != "OPENAI_API_KEY"}
    env |= {
        "VAULT_EXTRACT_MODEL": MODEL,
        "VAULT_API_BASE": server.url,
        "VAULT_MODEL_CONCURRENCY": str(concurrency),
        "PYTHONPATH": str(REPO),
    }
    command = [sys.executable, "-m", "vault_pipeline.cli", "ingest", str(EXPORT), "--vault", str(root), "--json"]
    before = len(server.requests)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    killed = False
    while process.poll() is None:
        if kill_after is not None and len(server.requests) - before >= kill_after:
            process.send_signal(signal.SIGKILL)
            killed = True
            break
        time.sleep(0.02)
    process.communicate()
    return {"calls": len(server.requests) - before, "killed": killed, "exit": process.returncode}


def stored_answers(root: Path) -> int:
    path = root / STATE_DIR / ANSWERS_FILE
    if not path.is_file():
        return 0
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])


def resume(server: ScriptedServer, work: Path, concurrency: int, total: int) -> dict:
    """Kill a CLI ingest halfway, run it again; count what each run asked and what was asked twice."""
    root = work / "resumed"
    Vault.init(root).close()
    start = len(server.requests)
    first = run_cli(server, root, concurrency, kill_after=total // 2)
    first_bodies = {json.dumps(r.body, sort_keys=True) for r in server.requests[start:]}
    stored = stored_answers(root)
    second = run_cli(server, root, concurrency, kill_after=None)
    second_bodies = {json.dumps(r.body, sort_keys=True) for r in server.requests[start + first["calls"] :]}
    return {
        "calls_in_a_whole_ingest": total,
        "first_run_calls_before_the_kill": first["calls"],
        "answers_the_first_run_stored": stored,
        "second_run_calls": second["calls"],
        "second_run_exit_code": second["exit"],
        # In flight at the kill: made, never answered, so asked again (at most the concurrency).
        "calls_made_in_both_runs": len(first_bodies & second_bodies),
        "answers_in_the_cache_after": stored_answers(root),
        "answer_cache_kib": round(sum(f.stat().st_size for f in (root / STATE_DIR).glob(ANSWERS_FILE + "*")) / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the model takes per call")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--skip-serial", action="store_true", help="only the concurrent ingest and the resume")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not EXPORT.is_file():
        sys.exit(f"{EXPORT}: not found (the real export lives in ../shared/data; see docs/benchmarks.md)")
    os.environ.pop("OPENAI_API_KEY", None)
    server = ScriptedServer(delay=args.delay).start()
    results: dict = {"delay": args.delay}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            runs = []
            if not args.skip_serial:
                runs.append(ingest_in_process(server, work / "serial", 1))
                server.peak = 0
            runs.append(ingest_in_process(server, work / "concurrent", args.concurrency))
            results["runs"] = runs
            if not args.skip_serial:
                results["speedup"] = round(runs[0]["seconds"] / runs[1]["seconds"], 2)
                results["same_vault"] = files_of(work / "serial") == files_of(work / "concurrent")
            results["resume"] = resume(server, work, args.concurrency, total=runs[-1]["calls"])
    finally:
        server.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for run in results["runs"]:
        print(
            f"concurrency {run['concurrency']}: {run['seconds']} s, {run['calls']} calls "
            f"(peak {run['peak_in_flight']} in flight), {run['conversations']} conversations, "
            f"{run['notes']} notes, {run['failed']} failed"
        )
    if "speedup" in results:
        print(f"speed-up: {results['speedup']}x; the same vault files: {results['same_vault']}")
    for key, value in results["resume"].items():
        print(f"resume: {key.replace('_', ' ')}: {value}")


if __name__ == "__main__":
    main()
