"""benchmarks/bench_absent.py: a question whose subject the export holds is never reported as absent,
and an absent one is asked through the real `vault query --batch --json --explain`."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import bench_absent


def test_occurrences_count_word_starts_case_insensitively():
    text = "A Subsidieaanvraag and a subsidie; no presubsidie."
    assert bench_absent.occurrences(text, "subsidie") == 2
    assert bench_absent.occurrences(text, "black hole") == 0


@pytest.mark.slow
def test_absent_and_present_subjects_are_told_apart(indexed_example, tmp_path, capsys):
    root = tmp_path / "vault"
    shutil.copytree(indexed_example, root)
    export = tmp_path / "export.json"
    export.write_text(json.dumps([{"title": "Gardens", "text": "moss and raked gravel"}]), encoding="utf-8")
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        json.dumps({"query": "How do I tune a violin?", "absent": ["violin"]})
        + "\n"
        + json.dumps({"query": "Where does moss grow?", "absent": ["moss"]})
        + "\n",
        encoding="utf-8",
    )

    assert bench_absent.main(["--vault", str(root), "--export", str(export), "--questions", str(questions)]) == 0

    out = capsys.readouterr().out.splitlines()
    violin = next(line for line in out if "violin" in line)
    moss = next(line for line in out if "moss" in line)
    assert violin.endswith("(violin: 0) -> tune, violin") and "NOT ABSENT" not in violin  # the package names the word
    assert "(moss: 1)" in moss and moss.endswith("NOT ABSENT")
    assert out[-1].startswith("absent subjects: 1 questions;")
    assert "packages naming a word no note holds 1;" in out[-1]
