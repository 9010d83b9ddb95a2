"""End to end: ingest the example exports, idempotence, provenance, user edits, the CLI, the funnel."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fakes import EVERY_CANDIDATE
from tests.support.paths import REPO, shared_data
from vault_pipeline import pipeline
from vault_pipeline.config import load_settings
from vault_pipeline.ingest.extract import MAX_VERBATIM_WORDS
from vault_pipeline.models.embed import build_embedder
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.types import FunnelConfig
from vault_pipeline.text import word_count as count_words
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import split_frontmatter

EXAMPLE = REPO / "vault_example"
EXPORTS = sorted((EXAMPLE / "exports").iterdir())


def fresh_vault(tmp_path: Path) -> Vault:
    shutil.copytree(EXAMPLE / "vault", tmp_path / "v")
    return Vault.open(tmp_path / "v")


@pytest.fixture(scope="module")
def demo_vault(tmp_path_factory):
    """The example vault, ingested and indexed with the offline MiniLM embedder (built once)."""
    vault = fresh_vault(tmp_path_factory.mktemp("demo"))
    report = pipeline.ingest(vault, EXPORTS, OfflineBackend(), selector=EVERY_CANDIDATE)
    embedder = build_embedder("minilm")
    pipeline.index(vault, embedder)
    return vault, report, embedder


def notes_in(vault: Vault, folder: str):
    for path in sorted((vault.root / folder).glob("*.md")):
        yield path, *split_frontmatter(path.read_text(encoding="utf-8"))


def test_ingest_report_counts_and_second_run_writes_nothing(demo_vault):
    vault, report, _ = demo_vault
    assert report.conversations == 10 and report.messages > 40 and report.alternates == 4
    assert report.notes > 50 and report.notes_by_category["decision"] > 0
    assert report.files_written == report.writes["created"] > report.notes
    assert not report.skipped and not report.errors and report.threads >= 1
    again = pipeline.ingest(vault, EXPORTS, OfflineBackend(), selector=EVERY_CANDIDATE)
    assert again.files_written == 0 and again.notes == report.notes


def test_every_note_is_short_sourced_and_links_to_its_message(demo_vault):
    vault, _, _ = demo_vault
    exported = json.dumps([json.loads(p.read_text()) for p in (EXAMPLE / "exports").rglob("*.json")])
    checked = 0
    for path, fm, body in notes_in(vault, "inbox"):
        sentence = body.strip().splitlines()[0]
        assert count_words(sentence) <= MAX_VERBATIM_WORDS, path
        assert fm["category"] in {
            "decision",
            "open-question",
            "constraint",
            "fact",
            "idea",
            "action-item",
            "topic",
            "provisional",
        }
        for message_id in fm["source_messages"]:
            assert message_id in exported or message_id.startswith("t"), message_id
        for stem, block in re.findall(r"\[\[([^\]#]+)#\^([^\]]+)\]\]", body):
            session = vault.root / "sessions" / f"{stem}.md"
            assert session.is_file() and f"^{block}" in session.read_text(encoding="utf-8")
            checked += 1
    assert checked > 50


def test_the_shipped_selector_writes_fewer_notes_and_says_why_not_the_rest(tmp_path):
    vault = fresh_vault(tmp_path)
    every = pipeline.ingest(vault, EXPORTS, OfflineBackend(), selector=EVERY_CANDIDATE)
    selective = pipeline.ingest(fresh_vault(tmp_path / "second"), EXPORTS, OfflineBackend())
    assert 0 < selective.notes < every.notes
    assert sum(selective.not_written.values()) == every.notes - selective.notes
    assert all(isinstance(reason, str) and reason for reason in selective.not_written)
    assert selective.to_dict()["not_written"] == every.notes - selective.notes


def test_decisions_come_from_user_turns_only(demo_vault):
    vault, _, _ = demo_vault
    decisions = [fm for _, fm, _ in notes_in(vault, "inbox") if fm["category"] == "decision"]
    assert decisions and all(fm["speaker"] == "user" for fm in decisions)


def test_a_user_edit_survives_reingest(tmp_path):
    vault = fresh_vault(tmp_path)
    pipeline.ingest(vault, EXPORTS[:1], OfflineBackend(), selector=EVERY_CANDIDATE)
    target = next((vault.root / "inbox").glob("*.md"))
    edited = target.read_text(encoding="utf-8").replace("\n\n", "\n\nMy own words here.\n\n", 1)
    target.write_text(edited, encoding="utf-8")
    report = pipeline.ingest(vault, EXPORTS[:1], OfflineBackend(), selector=EVERY_CANDIDATE)
    assert target.read_text(encoding="utf-8") == edited
    assert report.files_written == 0 and report.writes["refused"] == 1
    assert report.refused == [f"inbox/{target.name}: edited since vault_pipeline wrote it; left untouched"]


def test_broken_records_are_skipped_and_the_rest_ingested(tmp_path):
    vault = fresh_vault(tmp_path)
    export = json.loads((EXAMPLE / "exports" / "chatgpt" / "conversations.json").read_text())
    broken = [export[0], {"id": "broken", "mapping": []}, export[1]]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(broken), encoding="utf-8")
    report = pipeline.ingest(vault, [path], OfflineBackend(), selector=EVERY_CANDIDATE)
    assert report.conversations == 2
    assert report.skipped == [f"{path} [record 1 (id broken)]: 'mapping' is a list, expected an object"]


def test_locomo_keeps_dia_ids_as_message_ids(tmp_path):
    vault = fresh_vault(tmp_path)
    sample = {
        "sample_id": "conv-x",
        "qa": [],
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog named Pixel last week."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "I decided to run a marathon in October."},
            ],
        },
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    pipeline.ingest(vault, [path], OfflineBackend(), selector=EVERY_CANDIDATE)
    ids = {i for _, fm, _ in notes_in(vault, "inbox") for i in fm["source_messages"]}
    assert ids == {"D1:1", "D1:2"}
    session = next((vault.root / "sessions").glob("*.md")).read_text(encoding="utf-8")
    assert "^m-D1-1" in session and "^m-D1-2" in session


@pytest.mark.slow
def test_real_export_ingests_idempotently(tmp_path):
    path = shared_data() / "exports" / "chatgpt-pkuppens-2023.json"
    if not path.exists():
        pytest.skip(f"real export not found at {path}")
    vault = Vault.init(tmp_path / "real")
    first = pipeline.ingest(vault, [path], OfflineBackend(), selector=EVERY_CANDIDATE)
    print(
        f"\nreal export: {first.conversations} conversations, {first.messages} messages, {first.notes} notes, "
        f"{first.seconds:.1f}s ({first.notes / first.seconds * 60:,.0f} notes/min), skipped {len(first.skipped)}; "
        f"{dict(sorted(first.notes_by_category.items()))}"
    )
    assert first.conversations == 192 and not first.errors
    assert pipeline.ingest(vault, [path], OfflineBackend(), selector=EVERY_CANDIDATE).files_written == 0
    message_ids = {
        node["message"]["id"]
        for conv in json.loads(path.read_text(encoding="utf-8"))
        for node in conv["mapping"].values()
        if node.get("message")
    }
    sessions = {p.stem: p.read_text(encoding="utf-8") for p in (vault.root / "sessions").glob("*.md")}
    for note_path, fm, body in notes_in(vault, "inbox"):
        assert count_words(body.strip().splitlines()[0]) <= MAX_VERBATIM_WORDS, note_path
        assert set(fm["source_messages"]) <= message_ids, note_path
        for stem, block in re.findall(r"\[\[([^\]#]+)#\^([^\]]+)\]\]", body):
            assert f"^{block}" in sessions[stem], (note_path, block)


def run_query(vault, embedder, text, intent=None, **overrides):
    config = FunnelConfig.from_settings(load_settings(vault.root), **overrides)
    (package,) = pipeline.query(
        vault, [(text, intent)], embedder=embedder, llm_plan=OfflineBackend(), llm_gate=OfflineBackend(), config=config
    )
    return package


def test_gate_removes_the_cosmology_contaminant(demo_vault):
    vault, _, embedder = demo_vault
    question, intent = "What does the empty space between the stones mean?", "an essay on Japanese garden aesthetics"
    gated = run_query(vault, embedder, question, intent)
    ungated = run_query(vault, embedder, question, intent, gate_enabled=False)
    paths = lambda package: {b["path"] for b in package.to_dict()["blocks"]}  # noqa: E731
    assert "engrams/hubbles-law-empty-space.md" in paths(ungated)
    assert "engrams/hubbles-law-empty-space.md" not in paths(gated)
    assert "engrams/garden-essay-viewer.md" in paths(gated) and len(gated.blocks) >= 5
    trace = {t["path"]: t for t in gated.to_dict(trace=True)["trace"]}
    assert trace["engrams/hubbles-law-empty-space.md"]["gate"] == "drop"


def test_packages_are_byte_identical_across_runs(demo_vault):
    vault, _, embedder = demo_vault
    prompt = "Can we talk about peer review for our paper?"
    outputs = {run_query(vault, embedder, prompt).to_json(trace=True) for _ in range(10)}
    assert len(outputs) == 1
    package = json.loads(outputs.pop())
    assert set(package) >= {"query", "intent", "blocks", "tokens", "stats", "trace"}
    block = package["blocks"][0]
    assert set(block) >= {"id", "path", "tier", "level", "score", "text", "source"}


@pytest.mark.slow
def test_cli_batch_query_and_status(demo_vault):
    vault, _, _ = demo_vault
    batch = vault.root.parent / "queries.jsonl"
    batch.write_text('{"query": "peer review"}\n{"query": "home server backups", "intent": "home server"}\n')
    cli = [sys.executable, "-m", "vault_pipeline.cli"]
    result = subprocess.run(
        [*cli, "query", "--batch", str(batch), "--json", "--vault", str(vault.root)],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = result.stdout.strip().splitlines()
    assert [json.loads(line)["query"] for line in lines] == ["peer review", "home server backups"]
    status = subprocess.run(
        [*cli, "status", "--vault", str(vault.root), "--lint"], capture_output=True, text=True, check=True
    ).stdout
    assert "inbox" in status and "minilm" in status and "lint: resources/retrieval-evaluation-notes.md" in status


def test_cli_errors_are_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "vault_pipeline.cli", "ingest", str(tmp_path / "missing.zip"), "--vault", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2  # a usage error: nothing was done
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("error: ")


@pytest.mark.slow
def test_vault_demo_runs_offline_and_twice_writes_nothing(tmp_path):
    import hashlib

    from vault_pipeline.vault.files import STATE_DIR

    def files(root: Path) -> dict[str, str]:  # what a user sees of a vault: path -> sha256
        found = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
        return {k: hashlib.sha256(p.read_bytes()).hexdigest() for k, p in found.items() if k.split("/")[0] != STATE_DIR}

    command = [sys.executable, "-m", "vault_pipeline.cli", "demo", "--out", str(tmp_path / "demo")]
    first = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "# Context: When is the submission deadline?" in first
    deadline = first.split("# Context: When is the submission deadline?")[1].split("# Context:")[0]
    assert "May 10" in deadline and "May 3." not in deadline  # superseded by the nightly clean
    source, demo = files(REPO / "vault_example" / "vault"), files(tmp_path / "demo")
    written = sum(1 for path, sha in demo.items() if source.get(path) != sha)  # created or changed
    assert written > 50 and f"; {written} files written" in first  # the count is measured, not a fixed string
    second = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert re.search(r"files created\s*│\s*0\s", second) and re.search(r"files updated\s*│\s*0\s", second)
    assert "; 0 files written" in second and "clean: nothing to do" in second
    assert files(tmp_path / "demo") == demo  # the clean reached its fixed point in the first run
    assert (tmp_path / "demo" / "archive" / "the-submission-deadline-is-may-3-d1a843.md").is_file()  # a fact since 0121
