"""Gate calibration: the labels loader, the metrics, the CLI command and both notebooks."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from tests.support.fakes import HashEmbedder, run_vault
from tests.support.paths import REPO
from vault_pipeline.errors import ModelError, VaultError
from vault_pipeline.models.build import build_llm
from vault_pipeline.models.calllog import CallLog
from vault_pipeline.models.embed import DEFAULT_CALIBRATION, MINILM_CALIBRATION
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.calibrate import DEFAULT_FLOORS, calibrate, load_labels, suggest_floor

LABELS = REPO / "vault_example" / "calibration" / "labels.jsonl"
NOTEBOOKS = REPO / "notebooks"


def _small_labels(tmp_path: Path, queries: int = 3) -> Path:
    """The first few queries of the shipped labels, for the slower end-to-end tests."""
    lines = LABELS.read_text(encoding="utf-8").splitlines()
    keep = list(dict.fromkeys(json.loads(line)["query"] for line in lines))[:queries]
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(line for line in lines if json.loads(line)["query"] in keep) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def report():
    return calibrate(load_labels(LABELS), llm=build_llm("offline"), embedder=HashEmbedder())


# --------------------------------------------------------------------------- loader


def test_shipped_labels_meet_the_brief():
    labels = load_labels(LABELS)
    by_query: dict[str, list] = {}
    for item in labels:
        by_query.setdefault(item.query, []).append(item)
    assert len(by_query) >= 8 and len(labels) >= 60
    assert len({item.candidate_id for item in labels}) == len(labels)
    for query, items in by_query.items():
        relevant = sum(item.relevant for item in items)
        assert 4 <= relevant <= 6 and 3 <= len(items) - relevant <= 5, query
        assert any(item.contaminant for item in items), query
        assert all(item.intent_narrow for item in items), query


def test_the_real_archive_set_is_a_fresh_ingests_candidates_with_their_attribution():
    """export.jsonl: real questions, the chunks a fresh ingest of the export retrieves for them."""
    items = load_labels(LABELS.with_name("export.jsonl"))
    queries = {item.query for item in items}
    assert len(queries) == 14 and len(items) == 168
    assert len({item.candidate_id for item in items}) == len(items)
    assert sum(item.relevant for item in items) == 126 and sum(item.contaminant for item in items) == 13
    assert not any(item.relevant and item.contaminant for item in items)
    # The chat each came from (the gate's session signals); the three thread chunks span chats.
    assert sum(bool(item.conversation) for item in items) == 165
    # Chunk ids of the vault it was drawn from: a note id, then the chunk's ordinal.
    assert all(re.fullmatch(r"[a-z]+-[0-9a-f]{12}:\d+", item.candidate_id) for item in items)
    readme = LABELS.with_name("README.md").read_text(encoding="utf-8")
    assert "export.jsonl" in readme and "MIT License" in readme and "pkuppens/my_chat_gpt" in readme


def test_a_bad_line_names_file_and_line(tmp_path):
    good = LABELS.read_text(encoding="utf-8").splitlines()[0]
    path = tmp_path / "labels.jsonl"
    path.write_text(good + "\n\n{not json\n", encoding="utf-8")
    with pytest.raises(VaultError, match=rf"{path}:3: not a JSON object"):
        load_labels(path)
    path.write_text(good + "\n" + good.replace('"relevant"', '"maybe"') + "\n", encoding="utf-8")
    with pytest.raises(VaultError, match=rf"{path}:2: field 'label' must be"):
        load_labels(path)
    path.write_text(good + "\n" + good + "\n", encoding="utf-8")
    with pytest.raises(VaultError, match=rf"{path}:2: candidate_id .* already used on line 1"):
        load_labels(path)


def test_a_users_own_file_may_omit_the_narrow_angle_and_contaminant(tmp_path):
    path = tmp_path / "mine.jsonl"
    rows = [
        {
            "query": "git branches?",
            "intent_domain": "git workflow",
            "candidate": "Merge feature branches daily.",
            "candidate_id": "a",
            "label": "relevant",
        },
        {
            "query": "git branches?",
            "intent_domain": "git workflow",
            "candidate": "Prune apple branches in winter.",
            "candidate_id": "b",
            "label": "off-topic",
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    labels = load_labels(path)
    assert [(label.intent_narrow, label.contaminant) for label in labels] == [(None, False), (None, False)]
    result = calibrate(labels, llm=build_llm("offline"), embedder=HashEmbedder())
    assert [a.altitude for a in result.altitudes] == ["domain"]
    assert result.sweep[0].contaminant_pass is None


# --------------------------------------------------------------------------- metrics


def test_calibrate_on_the_shipped_labels(report):
    domain, narrow = report.altitude("domain"), report.altitude("narrow")
    assert domain.candidates == narrow.candidates == len(report.candidates) >= 60
    # The gate's quality depends on the embedder (its signals are cosines): with MiniLM it is
    # measured in test_gate_fit.py; the hashing fake only checks the bookkeeping.
    for stats in (domain, narrow):
        assert 0.0 <= stats.precision <= 1.0 and 0.0 <= stats.recall <= 1.0 and 0.0 <= stats.keep_rate <= 1.0
        assert stats.fail_open == 0 and stats.tokens == 0  # the offline backend neither fails nor counts tokens
        assert stats.calls == 0  # the offline gate is the relevance model, run in-process: no model call
        assert stats.contaminants_kept < stats.contaminants
    assert report.offline and report.model == "offline" and report.embedder == HashEmbedder().name
    assert report.current_floor == DEFAULT_CALIBRATION.floor  # the fake embedder carries no calibration
    assert report.summary()["current_floor"] == DEFAULT_CALIBRATION.floor


def test_the_floor_sweep_is_monotonic_and_the_rule_holds(report):
    floors = [p.floor for p in report.sweep]
    assert floors == sorted(DEFAULT_FLOORS) and floors[0] == 0.2 and floors[-1] == 0.7
    for before, after in zip(report.sweep, report.sweep[1:]):
        assert after.recall <= before.recall and after.off_topic_pass <= before.off_topic_pass
    meeting = [p.floor for p in report.sweep if p.recall >= report.target_recall]
    assert report.suggested_floor == (max(meeting) if meeting else 0.2)
    assert report.floor_meets_target == bool(meeting)


def test_suggest_floor_picks_the_highest_floor_keeping_the_target():
    from vault_pipeline.retrieve.calibrate import FloorPoint

    sweep = [FloorPoint(f, r, 0.0, None) for f, r in ((0.2, 1.0), (0.3, 0.96), (0.4, 0.9))]
    assert suggest_floor(sweep) == (0.3, True)
    assert suggest_floor(sweep, 0.99) == (0.2, True)
    assert suggest_floor([FloorPoint(0.2, 0.5, 0.0, None)]) == (0.2, False)


def test_calibrate_is_deterministic(report):
    again = calibrate(load_labels(LABELS), llm=build_llm("offline"), embedder=HashEmbedder())
    strip = lambda s: {k: v for k, v in s.items() if k not in ("domain", "narrow")}  # noqa: E731
    assert strip(again.summary()) == strip(report.summary())
    for name in ("domain", "narrow"):
        a, b = again.altitude(name).to_dict(), report.altitude(name).to_dict()
        for key in ("seconds", "seconds_per_query"):
            a.pop(key), b.pop(key)
        assert a == b


def test_a_failing_gate_fails_open_and_is_counted(tmp_path, raising_llm):
    labels = load_labels(_small_labels(tmp_path, queries=2))
    broken = raising_llm(ModelError("gate", "fake/broken", "upstream 503"), model="fake/broken")
    result = calibrate(labels, llm=broken, embedder=HashEmbedder())
    domain = result.altitude("domain")
    assert domain.fail_open == domain.candidates == domain.kept and domain.recall == 1.0
    assert domain.tokens is None  # no call log, so no token counts
    assert {c.outcomes["domain"] for c in result.candidates} == {"fail-open"}
    assert broken.calls  # the gate was asked, and failed


class _TokenCountingGate(OfflineBackend):
    model = "fake/counting"

    def call(self, prompt, variables, response_model, *, context=None):
        self.log.record({"prompt": prompt.name, "tokens": {"prompt": 100, "completion": 20}})
        return super().call(prompt, variables, response_model, context=context)


def test_tokens_come_from_the_backends_call_log(tmp_path):
    log = CallLog(tmp_path / "calls.jsonl")
    gate = _TokenCountingGate(log=log)
    result = calibrate(load_labels(_small_labels(tmp_path, queries=2)), llm=gate, embedder=HashEmbedder())
    assert result.altitude("domain").tokens == 2 * 120  # 2 queries, one call each, 120 tokens per call
    assert gate.log is log  # the tap is removed again
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 2 * 2 * 2  # still logged


# --------------------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_gate_calibrate(tmp_path):
    small = _small_labels(tmp_path)
    done = run_vault("gate-calibrate", str(small), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("offline gate: the fitted relevance model")
    assert "fit-gate (offline)" in done.stdout and "suggested floor for minilm-l6-v2-int8-128" in done.stdout
    assert "floor in use: 0.20 (the embedder's calibration)" in done.stdout
    assert "held out: leave-one-query-out" in done.stdout and "fitted weights: cos_query" in done.stdout
    assert "stored the fitted gate" not in done.stdout  # no --fit, no --vault: nothing written

    bad = tmp_path / "bad.jsonl"
    bad.write_text(small.read_text().splitlines()[0] + "\n[1, 2]\n")
    done = run_vault("gate-calibrate", str(bad), cwd=tmp_path)
    assert done.returncode == 1 and f"{bad}:2: expected a JSON object" in done.stderr


@pytest.mark.slow
def test_cli_gate_calibrate_with_a_vault_prints_json(tmp_path):
    from vault_pipeline.vault.files import Vault

    vault = Vault.init(tmp_path / "v")
    done = run_vault("gate-calibrate", str(_small_labels(tmp_path)), "--vault", str(vault.root), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["model"] == "offline" and summary["queries"] == 3
    assert summary["domain"]["recall"] >= summary["narrow"]["recall"]
    assert summary["current_floor"] == MINILM_CALIBRATION.floor  # `vault init` leaves the floor to the embedder
    assert summary["fitted_gate"]["held_out"]["queries"] == 3 and summary["stored"] is None


# --------------------------------------------------------------------------- notebooks


def _kernel_or_skip() -> None:
    try:
        from jupyter_client.kernelspec import KernelSpecManager
    except ImportError:
        pytest.skip("jupyter_client is not installed")
    if "python3" not in KernelSpecManager().find_kernel_specs():
        pytest.skip("no python3 kernel spec (run: python -m ipykernel install --sys-prefix)")


def _run_notebook(name: str, tmp_path: Path, monkeypatch) -> list[str]:
    """Execute a notebook headless on small inputs; return the text of its last code cell's output."""
    import nbformat
    from nbclient import NotebookClient

    _kernel_or_skip()
    for key in ("VAULT_GATE_MODEL", "VAULT_EMBED_MODEL", "VAULT_API_BASE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VAULT_CALIBRATION_LABELS", str(_small_labels(tmp_path)))
    monkeypatch.setenv("VAULT_CALIBRATION_PLOT", str(tmp_path / "calibration.png"))
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    # A failing cell raises CellExecutionError here, so the test fails.
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    last = [c for c in notebook.cells if c.cell_type == "code"][-1]
    return "".join(o.get("text", "") for o in last.outputs if o.output_type == "stream").splitlines()


def _json_line(lines: list[str], prefix: str) -> dict:
    found = [line[len(prefix) :] for line in lines if line.startswith(prefix)]
    assert found, f"no {prefix!r} line in the notebook's last cell"
    return json.loads(found[-1])


def test_notebooks_are_committed_without_outputs():
    import nbformat

    for name in ("fit_gate_calibration.ipynb", "floor_sweep.ipynb"):
        notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert code, name
        for cell in code:
            assert cell.outputs == [] and cell.execution_count is None, name


@pytest.mark.slow
def test_fit_gate_calibration_notebook(tmp_path, monkeypatch):
    lines = _run_notebook("fit_gate_calibration.ipynb", tmp_path, monkeypatch)
    summary = _json_line(lines, "CALIBRATION_SUMMARY ")
    from vault_pipeline.models.embed import build_embedder

    expected = calibrate(
        load_labels(tmp_path / "small.jsonl"), llm=build_llm("offline"), embedder=build_embedder("minilm")
    ).summary()
    assert summary["model"] == "offline" and summary["offline"] is True and summary["queries"] == 3
    for altitude in ("domain", "narrow"):  # the notebook runs the same gate on the same embedder
        for key in ("precision", "recall", "keep_rate", "contaminants_kept", "fail_open", "calls", "tokens"):
            assert summary[altitude][key] == expected[altitude][key], (altitude, key)
    assert summary["domain"]["recall"] >= summary["narrow"]["recall"]
    assert summary["suggested_floor"] in DEFAULT_FLOORS
    assert (tmp_path / "calibration.png").stat().st_size > 10_000
    fitted = _json_line(lines, "FITTED_GATE ")
    assert fitted["held_out"]["queries"] == 3 and 0.0 < fitted["model"]["threshold"] < 1.0
    assert fitted["validation"].startswith("leave-one-query-out")
    assert (tmp_path / "calibration_gate_curve.png").stat().st_size > 10_000


@pytest.mark.slow
def test_floor_sweep_notebook(tmp_path, monkeypatch):
    result = _json_line(_run_notebook("floor_sweep.ipynb", tmp_path, monkeypatch), "FLOOR_SWEEP ")
    sweep = result["sweep"]
    assert result["embedder"] == "minilm-l6-v2-int8-128" and result["model"] == "offline"
    assert [p["floor"] for p in sweep] == list(DEFAULT_FLOORS)
    assert all(b["recall"] <= a["recall"] for a, b in itertools.pairwise(sweep))
    meeting = [p["floor"] for p in sweep if p["recall"] >= 0.95]
    assert result["suggested_floor"] == (max(meeting) if meeting else 0.2)
