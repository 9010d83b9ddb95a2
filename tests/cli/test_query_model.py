"""`vault query` with its gate model out of reach, as a user meets it: a closed port, a refused key,
a server that never answers. The package is printed, one line says why, the exit code is 1, and the
process is gone soon after the gate's deadline (a generous bound: the old gate held it for minutes)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

PROMPT = "What does the empty space between the stones mean?"
GATE_TIMEOUT = 3
EXIT_BOUND = 120  # seconds for the whole command on a loaded machine; a hung gate thread held it for 400+


def run_query(root, api_base: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_") and k != "OPENAI_API_KEY"}
    env |= {
        "VAULT_GATE_MODEL": "openai/local-model",
        "VAULT_API_BASE": api_base,
        "VAULT_GATE_TIMEOUT": str(GATE_TIMEOUT),
    }
    # -X faulthandler: a process still alive at the bound is aborted and prints every thread's stack.
    command = [sys.executable, "-X", "faulthandler", "-m", "vault_pipeline.cli", "query", PROMPT, "--vault", str(root)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = process.communicate(timeout=EXIT_BOUND)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        out, err = process.communicate()
        raise AssertionError(f"vault query still running after {EXIT_BOUND}s; its threads:\n{err[-6000:]}") from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("server", "cause"),
    [
        ("closed", "cannot connect to http://127.0.0.1:"),
        ("401", "authentication failed (HTTP 401: Incorrect API key provided.)"),
        ("slow", "no answer"),
    ],
)
def test_a_gate_out_of_reach_prints_the_package_says_why_and_exits_1(
    server, cause, indexed_example, tmp_path, openai_server, closed_api_base
):
    root = tmp_path / "vault"
    shutil.copytree(indexed_example, root)
    openai_server.default = "valid" if server == "closed" else server
    openai_server.slow_seconds = 600
    result = run_query(root, closed_api_base if server == "closed" else openai_server.url)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(f"# Context: {PROMPT}")  # the package, unchecked, all the same
    assert "> Degraded package: the fit-gate failed open" in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("degraded package: the fit-gate failed open") and cause in lines[0]
    assert "Traceback" not in result.stderr
