"""Load on `vault mcp --http`: many clients at once, reads and writes mixed, on loopback.

Starts the server on a copy of a vault (default: the example vault, indexed first), then runs
``--clients`` SDK clients for ``--seconds``, each in a bounded loop (at most ``--max-calls`` calls):
``query``, ``search``, ``status`` and, every ``--write-every``-th call, ``remember`` of a sentence of its
own. Prints per tool the calls, errors and p50/p95 latency; refused writes (a lock error) and how many
times each remembered sentence is found in ``inbox/`` (it must be exactly once); the server's RSS
sampled every second: bare, once every client is warm, at the timed run's quarters, its peak and end.

    python benchmarks/bench_mcp_load.py --clients 20 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import anyio
import psutil

REPO = Path(__file__).resolve().parents[1]
QUERIES = [
    "What does the empty space between the stones mean?",
    "peer review for the retrieval paper",
    "How should the garden be raked?",
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _vault(source: Path | None, work: Path) -> Path:
    root = work / "vault"
    shutil.copytree(source or REPO / "vault_example" / "vault", root)
    if source is None:
        subprocess.run([sys.executable, "-m", "vault_pipeline.cli", "index", "--vault", str(root)], check=True)
    return root


def _start(root: Path, port: int, log: Path) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "vault_pipeline.cli", "mcp", "--vault", str(root), "--http", str(port)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ},
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
        except OSError:
            time.sleep(0.3)
    server.kill()
    raise SystemExit(f"server did not start: {log.read_text()}")


class _Clock:
    """The timed run starts once every client is connected and warm."""

    def __init__(self, samples: list[float]) -> None:
        self.ready, self.stop_at, self.go = 0, 0.0, anyio.Event()
        self.samples, self.first = samples, 0  # RSS samples; the first of the timed run


async def _client(n: int, url: str, token: str, args, stats, remembered, clock: _Clock) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp_types import Implementation

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, client_info=Implementation(name=f"load-{n}", version="1")) as session,
    ):
        await session.initialize()
        # Warm: the server's models, its first sync and the first write's imports (the extraction and
        # selection stack) are one-off loads, not what is measured; the warm-up's sentence is not counted.
        await session.call_tool("status", {})
        await session.call_tool("query", {"prompt": QUERIES[n % len(QUERIES)]})
        await session.call_tool("remember", {"text": f"Warm-up client {n} files its first report in drawer {n}."})
        clock.ready += 1
        if clock.ready == args.clients:
            clock.stop_at = time.monotonic() + args.seconds
            clock.first = len(clock.samples)
            clock.go.set()
        await clock.go.wait()
        for i in range(args.max_calls):
            if time.monotonic() >= clock.stop_at:
                break
            if i % args.write_every == args.write_every - 1:
                text = f"Load client {n} keeps its nightly report number {i} in bucket {n * 1000 + i}."
                tool, arguments = "remember", {"text": text}
                remembered.append(text)
            else:
                tool = ("query", "search", "status")[i % 3]
                arguments = {"query": {"prompt": QUERIES[i % len(QUERIES)]}, "search": {"text": "garden stones"}}.get(
                    tool, {}
                )
            started = time.perf_counter()
            result = await session.call_tool(tool, arguments)
            elapsed = time.perf_counter() - started
            said = result.content[0].text if result.content else ""
            stats[tool].append((elapsed, bool(result.is_error), said if result.is_error else ""))


def _memory(server: subprocess.Popen, samples: list[float], stop: threading.Event) -> None:
    process = psutil.Process(server.pid)
    while not stop.is_set():
        try:
            samples.append(process.memory_info().rss / 2**20)
        except psutil.Error:
            return
        stop.wait(1.0)


def _rss_report(samples: list[float], first: int) -> dict[str, float | None]:
    """RSS (MB) bare, at the timed run's start (``first``), at its quarters, its peak and its end."""
    if not samples:
        return {"start": None}
    run = samples[first:] or samples[-1:]
    return {
        "start": round(samples[0], 1),
        "warm": round(run[0], 1),
        **{f"at_{q}%": round(run[min(len(run) - 1, len(run) * q // 100)], 1) for q in (25, 50, 75)},
        "peak": round(max(run), 1),
        "last": round(run[-1], 1),
    }


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, help="a vault to copy (default: the example vault)")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-calls", type=int, default=200, help="bound on each client's loop")
    parser.add_argument("--write-every", type=int, default=4, help="every n-th call of a client is a remember")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rss-out", type=Path, help="write the server's RSS samples (MB, one a second) here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = _vault(args.vault, work)
        port, log = _free_port(), work / "server.log"
        server = _start(root, port, log)
        try:
            token = (root / ".vault_pipeline" / "mcp-token").read_text(encoding="utf-8").strip()
            stats: dict[str, list] = defaultdict(list)
            remembered: list[str] = []
            samples: list[float] = []
            stop = threading.Event()
            sampler = threading.Thread(target=_memory, args=(server, samples, stop), daemon=True)
            sampler.start()
            clock = _Clock(samples)

            async def run() -> None:
                async with anyio.create_task_group() as group:
                    for n in range(args.clients):
                        group.start_soon(
                            _client, n, f"http://127.0.0.1:{port}/mcp", token, args, stats, remembered, clock
                        )

            anyio.run(run)
            wall = time.monotonic() - (clock.stop_at - args.seconds)
            stop.set()
            sampler.join(5)
        finally:
            server.terminate()
            server.wait(60)
        inbox = [p.read_text(encoding="utf-8") for p in (root / "inbox").glob("*.md")]
        counts = [sum(text in body for body in inbox) for text in remembered]
        refused = [said for elapsed, bad, said in stats["remember"] if bad and "locked" in said]
        report = {
            "clients": args.clients,
            "seconds": round(wall, 1),
            "tools": {
                tool: {
                    "calls": len(rows),
                    "errors": sum(bad for _, bad, _ in rows),
                    "p50_s": round(_pct([e for e, _, _ in rows], 0.5), 3),
                    "p95_s": round(_pct([e for e, _, _ in rows], 0.95), 3),
                }
                for tool, rows in sorted(stats.items())
            },
            "refused_writes": len(refused),
            "remembered": len(remembered),
            "notes_found_once": sum(c == 1 for c in counts),
            "notes_missing": sum(c == 0 for c in counts),
            "notes_twice_or_more": sum(c > 1 for c in counts),
            "sessions": len(list((root / "sessions").glob("mcp*.md")) + list((root / "sessions").glob("memories*.md"))),
            # Flat memory: the server bare, once every client is connected and warm (models loaded,
            # first sync done), then the timed run's quarters, its peak and its end.
            "rss_mb": _rss_report(samples, clock.first),
            "errors_seen": sorted({said[:160] for rows in stats.values() for _, bad, said in rows if bad})[:5],
        }
    if args.rss_out:
        args.rss_out.write_text(json.dumps({"first_timed": clock.first, "rss_mb": samples}), encoding="utf-8")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
