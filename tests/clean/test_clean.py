"""The cleaning sweep: candidates, judgement, plan, apply, journal and undo."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.support.fakes import HashEmbedder, note_value, queued_completion, write_file
from vault_pipeline.clean import notes as sweep_notes
from vault_pipeline.clean import plan as clean
from vault_pipeline.clean.apply import apply
from vault_pipeline.clean.judge import (
    Contradiction,
    Duplicate,
    PairJudgement,
    PairJudgements,
    PairText,
    Related,
    judge_pairs,
    to_relation,
)
from vault_pipeline.clean.pairs import CandidateSettings, candidate_pairs, neighbours
from vault_pipeline.clean.types import Collapse, Plan, Relate, Supersede
from vault_pipeline.clean.undo import undo
from vault_pipeline.errors import LockError, ModelError
from vault_pipeline.index.search import Index
from vault_pipeline.index.sync import sync
from vault_pipeline.models.embed import Calibration
from vault_pipeline.models.litellm_backend import LiteLLMBackend
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.models.offline.judging import judge as offline_judge
from vault_pipeline.text import content_stems, stem, tokens
from vault_pipeline.vault.files import STATE_DIR, Vault

# --------------------------------------------------------------------------- builders


def _note(
    vault: Vault,
    relpath: str,
    note_id: str,
    sentence: str,
    created: str,
    *,
    status: str = "provisional",
    messages: tuple[str, ...] = ("m-1",),
    context: str = "",
    tags: tuple[str, ...] = ("t",),
) -> str:
    """An atomic note of its own conversation, its frontmatter hand-written (flow lists, a quoted date).

    Not tests.fakes.write_note on purpose: render_note's canonical YAML would make a sweep's merge
    into a canonical note with nothing new to add a byte-for-byte no-op, and these tests want the
    sweep's edits to change the files they touch. A kept note is an engram, any other a chat note.
    """
    tier = "engram" if status == "kept" else "chat"
    body = sentence + "\n\n" + (f"Context: {context}\n\n" if context else "") + "Source: [[s-chat#^m-1]]\n"
    text = (
        textwrap.dedent(f"""\
        ---
        id: {note_id}
        type: atomic
        category: fact
        status: {status}
        tier: {tier}
        speaker: user
        source:
          kind: chatgpt
          conversation: conv-{note_id}
          title: Planning
          messages: [{", ".join(messages)}]
        created: '{created}'
        tags: [{", ".join(tags)}]
        ---
        """)
        + body
    )
    write_file(vault, relpath, text)
    return relpath


@pytest.fixture()
def vault(make_vault) -> Vault:
    return make_vault()


def _index(vault: Vault) -> Index:
    with vault.lock("index"):
        sync(vault, HashEmbedder(dim=64))
    return Index.open(vault)


def _plan(vault: Vault, llm=None) -> Plan:
    return clean.plan(vault, _index(vault), llm or OfflineBackend())


def _snapshot(vault: Vault) -> dict[str, bytes]:
    return {p: (vault.root / p).read_bytes() for p in vault.iter_note_paths()}


def _fm(vault: Vault, relpath: str) -> dict:
    return vault.read(relpath)[0]


# --------------------------------------------------------------------------- candidates


def test_normalisation_folds_case_articles_numbers_and_suffixes():
    assert tokens("The deadline is May 3rd, twenty five people") == [
        "the",
        "deadline",
        "is",
        "may",
        "3",
        "25",
        "people",
    ]
    assert content_stems("The deadlines moved") == content_stems("the deadline MOVES")
    assert stem("uses") == stem("used") == stem("use")


def test_candidates_need_a_lexical_signal_not_just_a_high_cosine():
    texts = [
        "The staging server port is 8080.",
        "The staging server port is 8080 now.",
        "Pelicans migrate along the coast.",
    ]
    stems = [content_stems(t) for t in texts]
    # All three vectors are nearly identical: a bare cosine cut-off would pair everything.
    vectors = np.array([[1.0, 0.0], [0.999, 0.045], [0.998, 0.063]], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    pairs = {(c.a, c.b) for c in candidate_pairs(stems, vectors)}
    assert pairs == {(0, 1)}


def test_lexical_channel_finds_rewrites_the_vectors_missed():
    texts = [
        "The staging server port is 8080.",
        "Staging server port: 8080.",
        "Pelicans migrate south.",
        "Gardens use raked gravel.",
    ]
    stems = [content_stems(t) for t in texts]
    # Each rewrite's only vector neighbour (k=1) is a look-alike in embedding space with no shared word.
    vectors = np.array([[1, 0, 0], [0, 1, 0], [0.99, 0, 0.14], [0, 0.99, 0.14]], dtype=np.float32)
    found = candidate_pairs(stems, vectors, CandidateSettings(k=1))
    assert [(c.a, c.b, c.via) for c in found] == [(0, 1, "lexical")]


def test_candidates_come_once_each_in_a_total_order():
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    stems = [frozenset({f"w{i % 7}", f"v{i % 11}", "common"}) for i in range(300)]
    first = candidate_pairs(stems, vectors)
    assert first == candidate_pairs(stems, vectors)
    keys = [(c.a, c.b) for c in first]
    assert len(keys) == len(set(keys)) and all(a < b for a, b in keys)
    assert [c.score for c in first] == sorted((c.score for c in first), reverse=True)


def test_partitioned_search_agrees_with_exact_search():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(40, 32))
    vectors = (centres[rng.integers(0, 40, 4000)] + 0.3 * rng.normal(size=(4000, 32))).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    exact, _ = neighbours(vectors, 5, CandidateSettings(exact_below=10**9))
    approx, _ = neighbours(vectors, 5, CandidateSettings(exact_below=1000))
    recall = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(exact, approx)])
    assert recall >= 0.95


# --------------------------------------------------------------------------- judgement


def _offline(a: str, b: str) -> str:
    answer = offline_judge({"pairs": [{"key": "p0", "a": a, "b": b, "a_created": "", "b_created": ""}]})
    return answer["judgements"][0]["relation"]


@pytest.mark.parametrize(
    "a, b, relation",
    [
        ("The deadline is May 3.", "The deadline moved to May 10.", "contradiction"),
        ("The deadline is May 3.", "The deadline is on May 3rd.", "duplicate"),
        ("We agreed that the team has five engineers.", "The team has 5 engineers.", "duplicate"),
        ("The API is documented.", "The API is not documented.", "contradiction"),
        ("The default branch is main.", "The default branch changed to trunk.", "contradiction"),
        ("The deadline is May 3.", "The deadline needs approval from Alice.", "related"),
        ("The team has 5 engineers.", "The team has 3 designers.", "related"),
        ("The staging server runs on port 8080.", "The production server runs on port 8080.", "unrelated"),
        ("Pelicans migrate along the coast.", "The deadline is May 3.", "unrelated"),
    ],
)
def test_offline_judge(a, b, relation):
    assert _offline(a, b) == relation


def test_offline_judge_fills_in_reasoning_and_subject():
    answer = offline_judge(
        {
            "pairs": [
                {
                    "key": "k",
                    "a": "The deadline is May 3.",
                    "b": "The deadline moved to May 10.",
                    "a_created": "",
                    "b_created": "",
                }
            ]
        }
    )["judgements"][0]
    assert answer["subject"] == "deadline"
    assert "3" in answer["reasoning"] and "10" in answer["reasoning"]


def test_a_model_contradiction_across_subjects_is_downgraded_to_related():
    pair = PairText("p0", "The staging server port is 8080.", "The production server port is 9090.", "", "")
    judged = to_relation(
        PairJudgement(key="p0", reasoning="ports differ", subject="server port", relation="contradiction"), pair
    )
    assert isinstance(judged, Related) and "subjects differ" in judged.downgraded
    same = PairText("p1", "The deadline is May 3.", "The deadline moved to May 10.", "", "")
    assert isinstance(
        to_relation(
            PairJudgement(key="p1", reasoning="r", subject="deadline", attribute="deadline", relation="contradiction"),
            same,
        ),
        Contradiction,
    )


def test_judgements_need_exactly_one_per_key():
    data = {"judgements": [{"key": "p0", "reasoning": "r", "subject": "s", "relation": "related"}]}
    assert PairJudgements.model_validate(data, context={"keys": ["p0"]}).judgements[0].relation == "related"
    with pytest.raises(ValueError, match="missing"):
        PairJudgements.model_validate(data, context={"keys": ["p0", "p1"]})
    extra = {"judgements": data["judgements"] * 2}
    with pytest.raises(ValueError, match="repeated"):
        PairJudgements.model_validate(extra, context={"keys": ["p0"]})


def test_judge_batches_pairs_and_skips_a_failed_batch():
    calls: list[int] = []

    def handler(variables):
        calls.append(len(variables["pairs"]))
        if len(calls) == 2:
            return {"judgements": []}  # invalid: every key missing
        return offline_judge(variables)

    pairs = [PairText(f"p{i}", "The deadline is May 3.", "The deadline is May 3rd.", "", "") for i in range(45)]
    verdicts = judge_pairs(OfflineBackend(handlers={"judge": handler}), pairs, batch_size=20)
    assert calls == [20, 20, 5]
    assert len(verdicts.relations) == 25 and len(verdicts.failed) == 20
    assert all(isinstance(r, Duplicate) for r in verdicts.relations.values())


def test_the_real_instructor_path_reasks_a_bad_relation_value():
    bad = {
        "judgements": [
            {"key": "p0", "reasoning": "same slot, new value", "subject": "deadline", "relation": "superseded"}
        ]
    }
    good = {
        "judgements": [
            {
                "key": "p0",
                "reasoning": "same slot, new value",
                "subject": "deadline",
                "attribute": "deadline",
                "relation": "contradiction",
            }
        ]
    }
    completion, calls = queued_completion([json.dumps(bad), json.dumps(good)])
    llm = LiteLLMBackend("openai/gpt-4o-mini", completion=completion)
    pairs = [PairText("p0", "The deadline is May 3.", "The deadline moved to May 10.", "2024-01-01", "2024-02-01")]
    verdicts = judge_pairs(llm, pairs)
    assert len(calls) == 2  # the invalid answer was re-asked, not dropped
    assert "superseded" in json.dumps(calls[1]["messages"])  # the re-ask shows the model its error
    assert isinstance(verdicts.relations["p0"], Contradiction)


def test_the_real_instructor_path_reasks_a_missing_key_then_gives_up():
    answer = json.dumps({"judgements": [{"key": "p0", "reasoning": "r", "subject": "s", "relation": "unrelated"}]})
    completion, calls = queued_completion([answer] * 3)
    llm = LiteLLMBackend("openai/gpt-4o-mini", completion=completion, max_reasks=2)
    pairs = [PairText(k, "A cat sat.", "A dog ran.", "", "") for k in ("p0", "p1")]
    verdicts = judge_pairs(llm, pairs)
    assert len(calls) == 3 and verdicts.relations == {}
    assert set(verdicts.failed) == {"p0", "p1"} and "never validated" in verdicts.failed["p0"]


# --------------------------------------------------------------------------- plan and apply


def test_duplicates_collapse_into_the_kept_engram_with_sources_merged(vault):
    _note(
        vault,
        "inbox/port-a.md",
        "a-1",
        "The staging server runs on port 8080.",
        "2024-03-01T10:00:00",
        messages=("m-1", "m-2", "m-3"),
        context="From the infra call.",
        tags=("infra",),
    )
    _note(
        vault,
        "inbox/port-b.md",
        "a-2",
        "Port 8080 is where the staging server runs.",
        "2024-03-05T10:00:00",
        messages=("m-9",),
        tags=("ops",),
    )
    _note(
        vault,
        "engrams/port-kept.md",
        "a-3",
        "The staging server runs on port 8080.",
        "2023-01-01T10:00:00",
        status="kept",
        messages=("m-5",),
    )
    plan = _plan(vault)
    assert [(a["action"], a["notes"], a.get("canonical")) for a in plan.to_json()] == [
        ("duplicate", ["a-3", "a-1", "a-2"], "a-3")
    ]  # provenance beats richness and newness
    report = apply(vault, plan)
    assert report.counts == {"duplicate": 1} and not report.skipped
    canon = _fm(vault, "engrams/port-kept.md")
    assert canon["source_messages"] == ["m-5", "m-1", "m-2", "m-3", "m-9"] and "source" not in canon
    assert canon["tags"] == ["infra", "ops", "t"] and canon["status"] == "kept"
    for name in ("port-a", "port-b"):
        archived = _fm(vault, f"archive/{name}.md")
        assert archived["duplicate_of"] == "[[port-kept]]" and archived["status"] == "archived"
        assert not (vault.root / f"inbox/{name}.md").exists()


def test_among_chat_notes_the_richer_then_the_newer_note_is_canonical(vault):
    _note(vault, "inbox/a.md", "a-1", "The deadline is May 3.", "2024-03-01T10:00:00", messages=("m-1", "m-2"))
    _note(vault, "inbox/b.md", "a-2", "The deadline is on May 3rd.", "2024-04-01T10:00:00")
    _note(vault, "inbox/c.md", "b-1", "The launch city is Lisbon.", "2024-03-01T10:00:00")
    _note(vault, "inbox/d.md", "b-2", "The launch city is Lisbon!", "2024-04-01T10:00:00")
    actions = {a["canonical"]: a["notes"] for a in _plan(vault).to_json()}
    assert actions == {"a-1": ["a-1", "a-2"], "b-2": ["b-2", "b-1"]}


def test_transitive_duplicates_collapse_once_and_each_note_is_archived_once(vault):
    for n, sentence in enumerate(
        ["The launch city is Lisbon.", "The launch city is Lisbon!", "We agreed that the launch city is Lisbon."]
    ):
        _note(vault, f"inbox/n{n}.md", f"a-{n}", sentence, f"2024-03-0{n + 1}T10:00:00")
    plan = _plan(vault)
    assert [a["action"] for a in plan.to_json()] == ["duplicate"]
    apply(vault, plan)
    assert sorted(p for p in vault.iter_note_paths() if p.startswith("archive/")) == ["archive/n0.md", "archive/n1.md"]


def test_a_contradiction_is_resolved_by_supersession_both_ways(vault):
    _note(vault, "inbox/deadline-may-3.md", "a-old", "The deadline is May 3.", "2024-03-01T10:00:00")
    _note(vault, "inbox/deadline-may-10.md", "a-new", "The deadline moved to May 10.", "2024-04-01T10:00:00")
    plan = _plan(vault)
    assert [(a["action"], a["notes"]) for a in plan.to_json()] == [("supersede", ["a-new", "a-old"])]
    apply(vault, plan)
    assert _fm(vault, "inbox/deadline-may-10.md")["supersedes"] == ["[[deadline-may-3]]"]
    old = _fm(vault, "archive/deadline-may-3.md")
    assert old["superseded_by"] == "[[deadline-may-10]]" and old["status"] == "archived"


def test_a_chain_of_changes_supersedes_step_by_step(vault):
    for n, (sentence, month) in enumerate(
        [
            ("The deadline is May 3.", "01"),
            ("The deadline moved to May 10.", "02"),
            ("The deadline moved to May 17.", "03"),
        ]
    ):
        _note(vault, f"inbox/d{n}.md", f"a-{n}", sentence, f"2024-{month}-01T10:00:00")
    pairs = [a["notes"] for a in _plan(vault).to_json() if a["action"] == "supersede"]
    assert pairs == [["a-1", "a-0"], ["a-2", "a-1"]]


def test_related_notes_get_links_both_ways(vault):
    _note(vault, "inbox/deadline.md", "a-1", "The paper deadline is May 3.", "2024-03-01T10:00:00")
    _note(vault, "inbox/approval.md", "a-2", "The paper deadline needs approval from Alice.", "2024-03-02T10:00:00")
    plan = _plan(vault)
    assert [(a["action"], a["notes"]) for a in plan.to_json()] == [("relate", ["a-1", "a-2"])]
    apply(vault, plan)
    assert _fm(vault, "inbox/deadline.md")["related"] == ["[[approval]]"]
    assert _fm(vault, "inbox/approval.md")["related"] == ["[[deadline]]"]


def test_a_contradiction_between_different_subjects_is_never_a_supersession(vault):
    _note(vault, "inbox/staging.md", "a-1", "The staging server port is 8080.", "2024-03-01T10:00:00")
    _note(vault, "inbox/production.md", "a-2", "The production server port is 9090.", "2024-04-01T10:00:00")

    def says_contradiction(variables):
        return {
            "judgements": [
                {
                    "key": p["key"],
                    "reasoning": "the port changed",
                    "subject": "server port",
                    "relation": "contradiction",
                }
                for p in variables["pairs"]
            ]
        }

    plan = _plan(vault, OfflineBackend(handlers={"judge": says_contradiction}))
    assert [a["action"] for a in plan.to_json()] == ["relate"]
    assert "downgraded" in plan.actions[0].reason and "subjects differ" in plan.actions[0].reason


def test_a_kept_engram_is_never_archived_by_a_newer_chat_note(vault):
    _note(vault, "engrams/deadline.md", "a-kept", "The deadline is May 3.", "2024-03-01T10:00:00", status="kept")
    _note(vault, "inbox/deadline-chat.md", "a-chat", "The deadline moved to May 10.", "2024-04-01T10:00:00")
    plan = _plan(vault)
    assert [(a["action"], a["notes"]) for a in plan.to_json()] == [("relate", ["a-chat", "a-kept"])]
    assert "provenance" in plan.actions[0].reason
    apply(vault, plan)
    assert _fm(vault, "engrams/deadline.md")["status"] == "kept"


def test_the_json_plan_has_the_documented_shape(vault):
    _note(vault, "inbox/a.md", "a-1", "The deadline is May 3.", "2024-03-01T10:00:00")
    _note(vault, "inbox/b.md", "a-2", "The deadline moved to May 10.", "2024-04-01T10:00:00")
    plan = _plan(vault)
    [entry] = json.loads(json.dumps(plan.to_json()))
    assert list(entry)[:3] == ["action", "notes", "reason"]
    assert entry["paths"] == {"a-2": "inbox/b.md", "a-1": "inbox/a.md"}
    assert entry["expected_sha256"]["a-1"] == vault.read("inbox/a.md")[2]


def _mixed_vault(vault: Vault) -> None:
    _note(vault, "inbox/port-a.md", "a-1", "The staging server runs on port 8080.", "2024-03-01T10:00:00")
    _note(vault, "inbox/port-b.md", "a-2", "The staging server runs on port 8080!", "2024-03-02T10:00:00")
    _note(vault, "inbox/deadline-may-3.md", "a-3", "The deadline is May 3.", "2024-03-01T10:00:00")
    _note(vault, "inbox/deadline-may-10.md", "a-4", "The deadline moved to May 10.", "2024-04-01T10:00:00")
    _note(vault, "inbox/approval.md", "a-5", "The May 10 deadline needs approval from Alice.", "2024-04-02T10:00:00")
    _note(vault, "inbox/pelicans.md", "a-6", "Pelicans migrate along the coast.", "2024-04-02T10:00:00")


def test_a_second_plan_on_the_cleaned_vault_has_no_actions(vault):
    _mixed_vault(vault)
    first = _plan(vault)
    assert {type(a) for a in first.actions} == {Collapse, Supersede, Relate}
    apply(vault, first)
    assert _plan(vault).actions == []


def test_undo_restores_every_file_byte_for_byte(vault):
    _mixed_vault(vault)
    before = _snapshot(vault)
    report = apply(vault, _plan(vault))
    assert _snapshot(vault) != before
    journal = json.loads(Path(report.journal).read_text())
    assert journal["run_id"] == report.run_id and len({f["note_id"] for f in journal["files"]}) == report.files
    assert {"path_before", "path_after", "sha256_before", "sha256_after", "copy"} <= set(journal["files"][0])
    undone = undo(vault, report.run_id)
    assert undone.restored == report.files and not undone.skipped
    assert _snapshot(vault) == before
    # Undo is journaled too, and nothing was deleted: the run's copies are still there.
    runs = sorted(p.name for p in (vault.root / STATE_DIR / "journal").glob("*.json"))
    assert runs == sorted([f"{report.run_id}.json", f"{undone.run_id}.json"])
    assert (vault.root / STATE_DIR / "journal" / report.run_id / "00000.md").is_file()


def test_undo_leaves_a_file_changed_after_the_run_alone(vault):
    _note(vault, "inbox/a.md", "a-1", "The deadline is May 3.", "2024-03-01T10:00:00")
    _note(vault, "inbox/b.md", "a-2", "The deadline moved to May 10.", "2024-04-01T10:00:00")
    report = apply(vault, _plan(vault))
    edited = vault.root / "inbox/b.md"
    edited.write_text(edited.read_text() + "\nMy own note.\n")
    mine = edited.read_bytes()
    undone = undo(vault, report.run_id)
    assert undone.restored == 1 and len(undone.skipped) == 1 and "changed after the run" in undone.skipped[0]
    assert edited.read_bytes() == mine
    assert (vault.root / "inbox/a.md").is_file() and not (vault.root / "archive/a.md").exists()


def test_a_note_edited_after_planning_is_skipped_never_overwritten(vault):
    _mixed_vault(vault)
    plan = _plan(vault)
    edited = vault.root / "inbox/deadline-may-3.md"
    edited.write_text(edited.read_text().replace("May 3.", "May 3, per Alice."))
    mine = edited.read_bytes()
    report = apply(vault, plan)
    assert report.counts["supersede"] == 0 and report.counts["duplicate"] == 1
    assert any("edited since the plan was made" in s for s in report.skipped)
    assert edited.read_bytes() == mine


def test_apply_waits_for_no_one_when_the_vault_is_locked(vault):
    _mixed_vault(vault)
    plan = _plan(vault)
    before = _snapshot(vault)
    with vault.lock("ingest"):
        with pytest.raises(LockError, match="ingest"):
            apply(vault, plan)
        with pytest.raises(LockError):
            undo(vault, "no-such-run")
    assert _snapshot(vault) == before


def test_notes_missing_from_the_index_or_gone_are_reported_not_fatal(vault):
    _mixed_vault(vault)
    index = _index(vault)
    os.rename(vault.root / "inbox/pelicans.md", vault.root / "pelicans-moved.md")
    plan = clean.plan(vault, index, OfflineBackend())
    assert any("inbox/pelicans.md" in s for s in plan.skipped)
    assert {type(a) for a in plan.actions} == {Collapse, Supersede, Relate}


def test_a_judge_failure_leaves_the_notes_alone(vault, raising_llm):
    _mixed_vault(vault)
    broken = raising_llm(ModelError("judge", "offline", "boom"))
    plan = _plan(vault, broken)
    assert plan.actions == [] and any("judge failed" in s for s in plan.skipped)
    assert broken.calls and {name for name, _ in broken.calls} == {"judge"}


# --------------------------------------------------------------------------- supersession, then query


def test_after_supersession_a_query_sees_only_the_newer_note(vault):
    query = pytest.importorskip("vault_pipeline.retrieve.funnel")
    _note(vault, "inbox/deadline-may-3.md", "a-old", "The deadline is May 3.", "2024-03-01T10:00:00")
    _note(vault, "inbox/deadline-may-10.md", "a-new", "The deadline moved to May 10.", "2024-04-01T10:00:00")
    embedder = HashEmbedder(dim=64)
    apply(vault, clean.plan(vault, _index(vault), OfflineBackend()))
    with vault.lock("index"):
        sync(vault, embedder)
    package = query.run_query(
        "when is the deadline",
        retriever=Index.open(vault),
        embedder=embedder,
        llm_plan=OfflineBackend(),
        llm_gate=OfflineBackend(),
    )
    ids = [block.item.note_id for block in package.blocks]
    assert ids == ["a-new"]


def test_large_vaults_are_read_in_worker_processes_with_the_same_result(vault, monkeypatch):
    _mixed_vault(vault)
    index = _index(vault)
    ids, paths, _ = index.all_vectors()
    serial = sweep_notes.load_notes(vault, ids, paths)
    monkeypatch.setattr(sweep_notes, "PARALLEL_READ_FROM", 1)
    assert sweep_notes.load_notes(vault, ids, paths) == serial


def test_a_related_pair_below_the_embedders_floor_is_not_linked(vault, monkeypatch):
    _note(vault, "inbox/deadline.md", "a-1", "The paper deadline is May 3.", "2024-03-01T10:00:00")
    _note(vault, "inbox/approval.md", "a-2", "The paper deadline needs approval from Alice.", "2024-03-02T10:00:00")
    monkeypatch.setattr(clean, "calibration_named", lambda name: Calibration(floor=0.2, related_floor=0.99))
    plan = _plan(vault)
    assert plan.actions == [] and any("below the related floor" in s for s in plan.skipped)


def test_a_run_that_crashed_before_its_summary_can_still_be_undone(vault, tmp_path):
    _mixed_vault(vault)
    before = _snapshot(vault)
    report = apply(vault, _plan(vault))
    Path(report.journal).rename(tmp_path / "summary-lost.json")  # as if the run died before writing it
    assert undo(vault, report.run_id).restored == report.files
    assert _snapshot(vault) == before


def test_an_undo_can_itself_be_undone(vault):
    _mixed_vault(vault)
    report = apply(vault, _plan(vault))
    cleaned = _snapshot(vault)
    undone = undo(vault, report.run_id)
    redone = undo(vault, undone.run_id)
    assert redone.restored == report.files and _snapshot(vault) == cleaned
    again = undo(vault, undone.run_id)
    assert again.restored == 0 and all("already as it was" in s for s in again.skipped)


def test_after_undo_ingest_still_owns_the_notes_it_wrote(vault):
    def atomic(note_id: str, stem: str, sentence: str, created: str):
        return note_value(
            note_id,
            sentence + "\n\nSource: [[s#^m-m]]\n",
            stem=stem,
            created=created,
            source={"kind": "chatgpt", "conversation": "c", "messages": ["m"]},
        )

    old = atomic("a-old", "deadline-may-3", "The deadline is May 3.", "2024-03-01T10:00:00")
    new = atomic("a-new", "deadline-may-10", "The deadline moved to May 10.", "2024-04-01T10:00:00")
    assert [vault.write(n).outcome for n in (old, new)] == ["created", "created"]
    report = apply(vault, _plan(vault))
    assert report.counts == {"supersede": 1}
    undo(vault, report.run_id)
    assert [vault.write(n).outcome for n in (old, new)] == ["unchanged", "unchanged"]
    changed = atomic("a-new", "deadline-may-10", "The deadline moved to May 10, per Alice.", "2024-04-01T10:00:00")
    assert vault.write(changed).outcome == "updated"  # still ours: not refused as a user edit


def test_planning_is_deterministic_and_writes_nothing(vault):
    _mixed_vault(vault)
    index = _index(vault)
    files = {p: p.read_bytes() for p in vault.root.rglob("*") if p.is_file() and "index" not in p.parts}
    first = clean.plan(vault, index, OfflineBackend()).to_json()
    assert clean.plan(vault, index, OfflineBackend()).to_json() == first
    after = {p: p.read_bytes() for p in vault.root.rglob("*") if p.is_file() and "index" not in p.parts}
    assert after == files and not (vault.root / STATE_DIR / "journal").exists()


def test_an_empty_vault_plans_nothing_and_applies_nothing(vault):
    plan = _plan(vault)
    assert plan.actions == [] and plan.notes == 0 and plan.candidates == 0
    report = apply(vault, plan)
    assert report.run_id == "" and not (vault.root / STATE_DIR / "journal").exists()


def test_a_name_taken_in_archive_is_never_overwritten(vault):
    _note(vault, "inbox/deadline-may-3.md", "a-old", "The deadline is May 3.", "2024-03-01T10:00:00")
    _note(vault, "inbox/deadline-may-10.md", "a-new", "The deadline moved to May 10.", "2024-04-01T10:00:00")
    plan = _plan(vault)
    taken = vault.root / "archive/deadline-may-3.md"
    taken.write_text("an older file with the same name\n")
    report = apply(vault, plan)
    assert taken.read_text() == "an older file with the same name\n"
    assert report.counts["supersede"] == 0 and "already exists" in report.skipped[0]
    assert "partly applied" in report.skipped[0]
    assert undo(vault, report.run_id).restored == 2  # the partial change is undoable
    assert _fm(vault, "inbox/deadline-may-3.md")["status"] == "provisional"
