"""`vault query` with its gate model out of reach, as a user meets it: a closed port, a refused key,
a server that never answers. The package is printed, one line says why, the exit code is 1, and the
process ends (a bound far above any machine's speed, below the minutes the old gate held it).

No outcome depends on the machine's speed: the server that never answers meets a deadline of
seconds against its ten minutes, and the closed port and the refused key meet a deadline of
minutes, so their own error always comes first (at load ~10 a 3 s deadline passed before the
closed port's connection error did)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

PROMPT = "What does the empty space between the stones mean?"
SHORT_DEADLINE = 3  # seconds, against a server that answers after 600
LONG_DEADLINE = 600  # seconds: a closed port or a 401 answers long before it
EXIT_BOUND = 300  # seconds for the whole command; a hung gate thread held it for 400+


def run_query(root, api_base: str, gate_timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_") and k != "OPENAI_API_KEY"}
    env |= {
        "VAULT_GATE_MODEL": "openai/local-model",
        "VAULT_API_BASE": api_base,
        "VAULT_GATE_TIMEOUT": str(gate_timeout),
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
    deadline = SHORT_DEADLINE if server == "slow" else LONG_DEADLINE
    result = run_query(root, closed_api_base if server == "closed" else openai_server.url, deadline)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(f"# Context: {PROMPT}")  # the package, unchecked, all the same
    assert "> Degraded package: the fit-gate failed open" in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("degraded package: the fit-gate failed open") and cause in lines[0]
    assert "Traceback" not in result.stderr
