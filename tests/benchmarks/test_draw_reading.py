"""benchmarks/draw_reading.py: the protocol's draw, repeatable, with each note's source to read it against."""

from __future__ import annotations

import sys

from tests.support.fakes import EVERY_CANDIDATE
from tests.support.paths import REPO
from vault_pipeline import pipeline
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.vault.files import Vault

sys.path.insert(0, str(REPO / "benchmarks"))

import draw_reading


def test_the_draw_is_the_protocols_and_carries_each_notes_source(tmp_path):
    vault = Vault.init(tmp_path / "v")
    pipeline.ingest(vault, sorted((REPO / "vault_example" / "exports").iterdir()), OfflineBackend())
    pipeline.keep(vault, all_passing=True, selector=EVERY_CANDIDATE)
    notes, engrams = draw_reading.atomic_paths(vault)
    assert engrams and set(engrams) <= set(notes) and notes == sorted(notes)
    rows = draw_reading.draw(vault, 7, size=4)
    assert rows == draw_reading.draw(vault, 7, size=4)  # the same seed, the same sample
    assert [r["sample"] for r in rows] == ["written"] * 4 + ["engram"] * 4
    assert all(r["path"].startswith("engrams/") for r in rows[4:])
    for r in rows:
        assert r["source"] and not r["missing"], r
        assert r["text"].rstrip(".!?") in " ".join(r["source"].split()), r  # the note is its source's words
    every = draw_reading.draw(vault, 7, size=10_000)
    assert len(every) == len(notes) + len(engrams)
    assert any(r["question"] for r in every if r["speaker"] == "assistant")
