"""`vault ingest` with a model (the scripted server): `--estimate` before anything is spent, the
calls and cost in the report, and a second run answered from the cache."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.support.paths import REPO
from vault_pipeline.cli.app import app

EXPORTS = [str(p) for p in sorted((REPO / "vault_example" / "exports").iterdir())]


@pytest.fixture
def model_env(monkeypatch, openai_server):
    for name in ("OPENAI_API_KEY", "VAULT_DIR", "VAULT_GATE_MODEL", "VAULT_EXTRACT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VAULT_EXTRACT_MODEL", "openai/scripted-local")
    monkeypatch.setenv("VAULT_API_BASE", openai_server.url)
    monkeypatch.setenv("VAULT_MODEL_CONCURRENCY", "3")
    return openai_server


def vault(*args: str):
    return CliRunner().invoke(app, list(args), prog_name="vault")


def test_estimate_prints_calls_tokens_and_cost_and_spends_nothing(model_env, tmp_path):
    root = tmp_path / "v"
    assert vault("init", str(root)).exit_code == 0
    shown = vault("ingest", *EXPORTS, "--vault", str(root), "--estimate")
    assert shown.exit_code == 0, shown.output
    assert "calls to make" in shown.output and "prompt tokens" in shown.output and "cost (USD)" in shown.output
    as_json = json.loads(vault("ingest", *EXPORTS, "--vault", str(root), "--estimate", "--json").stdout)
    assert as_json["calls"] == sum(as_json["calls_by_prompt"].values()) > 0 and as_json["cost_usd"] == 0
    assert model_env.requests == []  # nothing asked
    assert not list((root / "inbox").glob("*.md"))  # nothing written


def test_a_model_ingest_reports_its_calls_and_a_second_run_pays_nothing(model_env, tmp_path):
    root = tmp_path / "v"
    assert vault("init", str(root)).exit_code == 0
    first = vault("ingest", *EXPORTS, "--vault", str(root), "--json")
    assert first.exit_code == 0, first.output
    usage = json.loads(first.stdout)["model_usage"]
    assert usage["calls"] == len(model_env.requests) > 0 and usage["cached"] == 0 and usage["cost_usd"] == 0
    again = vault("ingest", *EXPORTS, "--vault", str(root))
    assert again.exit_code == 0, again.output
    assert len(model_env.requests) == usage["calls"]  # every answer came from the cache
    assert "answers from the cache (not paid again)" in again.output


def test_progress_lines_carry_the_calls_and_cost_so_far():
    from io import StringIO

    from rich.console import Console

    from vault_pipeline.cli.progress import PlainProgress
    from vault_pipeline.models.calllog import Usage

    usage = Usage().add({"outcome": "ok", "tokens": {"prompt": 1000, "completion": 200}, "cost": 0.0012})
    console = Console(file=StringIO(), width=200)
    now = [0.0]
    tick = PlainProgress(console, "ingest", "conversations", 10, every=0, clock=lambda: now[0], status=usage.line)
    now[0] = 1.0
    tick(1, None)
    assert console.file.getvalue().strip().endswith("1 calls, 1,200 tokens, $0.0012")
