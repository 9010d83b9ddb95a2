"""benchmarks/bench_absent.py and evidence_sets.py: what counts as absent, and how the table counts."""

from __future__ import annotations

import json
import sys

from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import bench_absent
import evidence_sets


def test_occurrences_count_word_starts_case_insensitively():
    text = "A Subsidieaanvraag and a subsidie; no presubsidie."
    assert bench_absent.occurrences(text, "subsidie") == 2
    assert bench_absent.occurrences(text, "black hole") == 0


def test_an_absent_question_whose_word_the_export_holds_is_left_out(tmp_path):
    export = tmp_path / "export.json"
    export.write_text(json.dumps([{"title": "Gardens", "text": "moss and raked gravel"}]), encoding="utf-8")
    rows = [{"query": "How do I tune a violin?", "absent": ["violin"]}, {"query": "Moss?", "absent": ["moss"]}]
    assert [r["query"] for r in evidence_sets.check_absent(rows, export)] == ["How do I tune a violin?"]


def test_cross_questions_name_a_speaker_the_other_conversation_never_mentions(tmp_path):
    def sample(sid, a, b, said, questions):
        conversation = {"speaker_a": a, "speaker_b": b, "session_1": [{"speaker": a, "dia_id": "D1:1", "text": said}]}
        qa = [{"question": q, "answer": "x", "evidence": ["D1:1"], "category": 4} for q in questions]
        return {"sample_id": sid, "conversation": conversation, "qa": qa}

    data = tmp_path / "locomo.json"
    data.write_text(
        json.dumps(
            [
                sample("s1", "Ada", "Ben", "Hello Ben.", ["When did Ada paint?", "What did Cleo say?"]),
                sample("s2", "Cleo", "Dan", "I met Ada once.", ["When did Cleo swim?", "Why did Dan go?"]),
            ]
        ),
        encoding="utf-8",
    )
    asked_of_s1 = evidence_sets.cross_questions(data, "s1")
    assert [q["query"] for q in asked_of_s1] == ["When did Cleo swim?", "Why did Dan go?"]
    assert all(q["answerable"] is False and q["asked_of"] == "s1" for q in asked_of_s1)
    assert evidence_sets.cross_questions(data, "s2") == []  # s2 mentions Ada; Ben is named in no s1 question


def test_the_table_counts_empty_packages_and_the_size_of_the_rest(capsys):
    rows = [
        {"where": "w", "query": "a", "answerable": False, "found": False, "blocks": 0, "tokens": 20, "evidence": None},
        {"where": "w", "query": "b", "answerable": False, "found": True, "blocks": 2, "tokens": 150, "evidence": None},
        {"where": "w", "query": "c", "answerable": False, "found": True, "blocks": 9, "tokens": 900, "evidence": None},
        {"where": "w", "query": "d", "answerable": True, "found": True, "blocks": 9, "tokens": 900, "evidence": True},
    ]
    bench_absent.table(rows)
    out = capsys.readouterr().out
    assert "| w, not in the vault | 3 | 1 (33.3%) | 1 of 2 |" in out
    assert "| all, not in the vault | 3 |" in out and "| w, answerable | 1 | 0 (0.0%) |" in out
    assert out.rstrip().endswith("| 100.0% of 1 |")
