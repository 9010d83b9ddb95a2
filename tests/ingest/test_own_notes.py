"""Notes that are the user's own (issue 47): the user's statements with their subject, the assistant's
specific answers, not its generic tip lists (which retrieval still finds through the transcript),
list items under their heading's subject, no engram twice, and a Claude export's attachments read."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.fakes import EVERY_CANDIDATE, HashEmbedder
from vault_pipeline import pipeline
from vault_pipeline.config import load_settings
from vault_pipeline.ingest.keep import note_context, note_sentence
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.types import FunnelConfig
from vault_pipeline.vault.files import Vault

REQUIREMENT = "The booking portal must send a confirmation email within 5 minutes of a reservation."
TIPS = (
    "Here are some general tips for staying productive:\n\n"
    "1. Set clear goals: Decide what you want to achieve each day.\n"
    "2. Take regular breaks: Short breaks help you stay focused.\n"
    "3. Stay organized: Keep your workspace tidy and your tasks listed.\n"
    "4. Get enough sleep: Rest is important for your concentration.\n"
)
UNITY = (
    "## Unity\n\n"
    "- Unity offers a free version (Personal) for teams with revenue less than $100,000 per year.\n"
    "- Its asset store holds more than 70,000 packages.\n\n"
    "## Godot\n\n"
    "- Godot is released under the MIT licence and costs nothing.\n"
)


def chatgpt_export(path: Path, turns: list[tuple[str, str]], conv_id: str = "c-47", title: str = "Booking portal"):
    """A ChatGPT conversations.json with one conversation of these (role, text) turns."""
    mapping: dict[str, dict] = {"root": {"id": "root", "parent": None, "children": ["m0"], "message": None}}
    for i, (role, text) in enumerate(turns):
        mapping[f"m{i}"] = {
            "id": f"m{i}",
            "parent": "root" if i == 0 else f"m{i - 1}",
            "children": [f"m{i + 1}"] if i + 1 < len(turns) else [],
            "message": {
                "id": f"{conv_id}-m{i}",
                "author": {"role": role},
                "create_time": 1_700_000_000 + i,
                "content": {"content_type": "text", "parts": [text]},
            },
        }
    record = {"id": conv_id, "title": title, "create_time": 1_700_000_000, "mapping": mapping}
    record["current_node"] = f"m{len(turns) - 1}"
    path.write_text(json.dumps([record]), encoding="utf-8")
    return path


def atomic_notes(vault: Vault) -> list[tuple[str, dict, str]]:
    """(relpath, frontmatter, body) of every atomic note, inbox and engrams."""
    found = []
    for relpath in vault.iter_note_paths():
        if relpath.startswith(("inbox/", "engrams/")):
            frontmatter, body, _ = vault.read(relpath)
            found.append((relpath, frontmatter, body))
    return found


def ingest(tmp_path: Path, turns: list[tuple[str, str]], name: str = "v") -> Vault:
    vault = Vault.init(tmp_path / name)
    pipeline.ingest(vault, [chatgpt_export(tmp_path / f"{name}.json", turns)], OfflineBackend())
    return vault


def test_a_users_requirement_becomes_a_constraint_note_with_its_subject(tmp_path: Path):
    vault = ingest(tmp_path, [("user", REQUIREMENT), ("assistant", "Understood.")])
    notes = {note_sentence(body): fm for _, fm, body in atomic_notes(vault)}
    assert notes[REQUIREMENT]["category"] == "constraint"
    assert notes[REQUIREMENT]["speaker"] == "user"


def test_a_request_to_the_assistant_is_no_note(tmp_path: Path):
    ask = "Can you please explain to me step by step how I can use GitHub Actions for my project?"
    vault = ingest(tmp_path, [("user", ask), ("assistant", "Sure.")])
    assert ask not in {note_sentence(body) for _, _, body in atomic_notes(vault)}


def test_a_generic_tip_list_writes_no_note_but_a_query_finds_it_in_the_transcript(tmp_path: Path):
    vault = ingest(tmp_path, [("user", "How do I stay productive when working from home?"), ("assistant", TIPS)])
    written = [note_sentence(body) for _, _, body in atomic_notes(vault)]
    assert not [s for s in written if "breaks" in s or "sleep" in s or "goals" in s], written
    embedder = HashEmbedder(dim=64)
    pipeline.index(vault, embedder)
    config = FunnelConfig.from_settings(load_settings(vault.root))
    (package,) = pipeline.query(
        vault,
        [("Short breaks help you stay focused", None)],
        embedder=embedder,
        llm_plan=OfflineBackend(),
        llm_gate=OfflineBackend(),
        config=config,
    )
    blocks = package.to_dict()["blocks"]
    assert any("Short breaks help you stay focused" in json.dumps(b) for b in blocks), blocks
    assert all(b["path"].startswith("sessions/") for b in blocks if "Short breaks" in json.dumps(b))


def test_a_list_items_note_names_the_headings_subject(tmp_path: Path):
    vault = ingest(tmp_path, [("user", "Is Unity or Godot cheaper for a small team?"), ("assistant", UNITY)])
    contexts = {note_sentence(body): note_context(body) for _, _, body in atomic_notes(vault)}
    assert contexts.get("Its asset store holds more than 70,000 packages.", "Unity") == "Unity"
    assert contexts["Godot is released under the MIT licence and costs nothing."] == "Godot"
    unity = "Unity offers a free version (Personal) for teams with revenue less than $100,000 per year."
    assert contexts[unity] == "Unity"


def test_the_same_sentence_is_never_an_engram_twice(tmp_path: Path):
    vault = Vault.init(tmp_path / "v")
    exports = [
        chatgpt_export(tmp_path / f"e{i}.json", [("user", REQUIREMENT), ("assistant", "Noted.")], f"c-{i}", f"T{i}")
        for i in range(2)
    ]
    pipeline.ingest(vault, exports, OfflineBackend())
    assert sum(note_sentence(b) == REQUIREMENT for _, _, b in atomic_notes(vault)) == 2  # one per conversation
    pipeline.keep(vault, all_passing=True, selector=EVERY_CANDIDATE)  # a gate that passes every note but a duplicate
    engrams = [note_sentence(b) for p, _, b in atomic_notes(vault) if p.startswith("engrams/")]
    assert engrams.count(REQUIREMENT) == 1


def test_a_claude_exports_facts_in_its_turns_and_attachments_are_written(tmp_path: Path):
    export = tmp_path / "claude"
    export.mkdir()
    human = {
        "uuid": "h1",
        "sender": "human",
        "text": "Caroline from finance approved 12,000 euro for the pilot. Can you draft the plan?",
        "content": [
            {
                "type": "text",
                "text": "Caroline from finance approved 12,000 euro for the pilot. Can you draft the plan?",
            }
        ],
        "created_at": "2024-05-01T10:00:00Z",
        "attachments": [
            {
                "file_name": "pilot-brief.txt",
                "file_type": "txt",
                "file_size": 120,
                "extracted_content": "The pilot runs in the Utrecht office from June to August with 40 users.",
            }
        ],
    }
    answer = {
        "uuid": "a1",
        "sender": "assistant",
        "text": "Here is a draft plan.",
        "content": [{"type": "text", "text": "Here is a draft plan."}],
        "created_at": "2024-05-01T10:00:05Z",
    }
    conv = {"uuid": "k47", "name": "Pilot plan", "created_at": "2024-05-01T10:00:00Z", "chat_messages": [human, answer]}
    (export / "conversations.json").write_text(json.dumps([conv]), encoding="utf-8")
    (export / "projects.json").write_text(json.dumps([{"uuid": "p", "docs": [{"content": "x"}]}]), encoding="utf-8")
    vault = Vault.init(tmp_path / "v")
    report = pipeline.ingest(vault, [export], OfflineBackend())
    written = {note_sentence(body) for _, _, body in atomic_notes(vault)}
    assert "Caroline from finance approved 12,000 euro for the pilot." in written
    assert "The pilot runs in the Utrecht office from June to August with 40 users." in written
    assert any("projects.json" in w and "not ingested" in w for w in report.warnings)
