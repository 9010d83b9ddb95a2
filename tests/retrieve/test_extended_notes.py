"""A note the user extended: the package carries what they added that matches the question."""

from __future__ import annotations

import shutil

from vault_pipeline import pipeline
from vault_pipeline.config import load_settings
from vault_pipeline.models.embed import build_embedder
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.blocks import ADDED_WHOLE_TOKENS, added_text, atomic_text
from vault_pipeline.retrieve.types import FunnelConfig
from vault_pipeline.text import estimate_tokens
from vault_pipeline.vault.files import Vault

HEAT_PUMP = """---
id: e-heatpump0001
type: atomic
category: fact
status: kept
tier: engram
speaker: user
created: 2024-02-10T00:00:00+00:00
tags: [homelab]
---

Our air-source heat pump heats the house down to minus fifteen degrees.

Source: [[heating-chat-0001#^m-7]]
"""
ADDED = "The defrost cycle runs every 45 minutes."
QUESTION = "How often does the heat pump defrost cycle run?"


def _package(indexed_example, tmp_path, note: str):
    root = tmp_path / "vault"
    shutil.copytree(indexed_example, root)
    (root / "engrams" / "heat-pump.md").write_text(note, encoding="utf-8")
    embedder = build_embedder("minilm")
    vault = Vault.open(root)
    try:
        pipeline.index(vault, embedder)
        config = FunnelConfig.from_settings(load_settings(root))
        (package,) = pipeline.query(
            vault,
            [(QUESTION, None)],
            embedder=embedder,
            llm_plan=OfflineBackend(),
            llm_gate=OfflineBackend(),
            config=config,
        )
    finally:
        vault.close()
    return package.to_dict()


def test_a_line_the_user_appends_to_a_note_is_in_its_block(indexed_example, tmp_path):
    blocks = _package(indexed_example, tmp_path, HEAT_PUMP + ADDED + "\n")["blocks"]
    (block,) = [b for b in blocks if b["path"] == "engrams/heat-pump.md"]
    assert "minus fifteen degrees" in block["text"] and ADDED in block["text"]


def test_a_note_nobody_extended_keeps_its_one_line_block():
    text, links = atomic_text(HEAT_PUMP.split("---\n")[-1], "2024-02-10", "user", QUESTION)
    assert text == "[user, 10 Feb 2024] Our air-source heat pump heats the house down to minus fifteen degrees."
    assert links == ("heating-chat-0001#^m-7",)


def test_a_long_addition_gives_the_block_the_sentences_that_match_the_question():
    filler = " ".join(f"The outdoor unit stands on rubber feet number {n}." for n in range(40))
    assert estimate_tokens(filler) > ADDED_WHOLE_TOKENS
    shown = added_text((filler, ADDED), QUESTION)
    assert shown == ADDED
    assert added_text(("A short remark.",), QUESTION) == "A short remark."  # short: shown whole
