"""Obsidian properties: flat, one type per key, tags; older notes migrate on re-ingest unless the user edited them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from tests.support.fakes import EVERY_CANDIDATE
from tests.support.paths import REPO
from vault_pipeline import pipeline
from vault_pipeline.clean.notes import _sweep_note
from vault_pipeline.index.table import note_columns
from vault_pipeline.ingest.keep import quality_problems
from vault_pipeline.ingest.notes import created_stamp, obsidian_tag, topic_tag
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import render_note, source_messages, source_properties, split_frontmatter
from vault_pipeline.vault.state import sha256_bytes

EXPORTS = REPO / "vault_example" / "exports"
OURS = ("inbox", "sessions", "threads", "topics")
# Obsidian tags: letters, digits, "_", "-" and "/" for nesting; no spaces; at least one non-digit.
TAG = re.compile(r"^(?!\d+$)[\w-]+(?:/[\w-]+)*$")


def _notes(root: Path, folders=OURS) -> dict[str, tuple[dict, str]]:
    return {
        p.relative_to(root).as_posix(): split_frontmatter(p.read_text(encoding="utf-8"))
        for folder in folders
        for p in sorted((root / folder).glob("*.md"))
    }


def _aware(value: str) -> datetime:
    stamp = datetime.fromisoformat(value)
    assert stamp.tzinfo is not None and stamp.utcoffset() is not None, value
    return stamp


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Path:
    """A fresh vault holding an ingest of vault_example/exports, run through the CLI."""
    root = tmp_path_factory.mktemp("props") / "v"
    Vault.init(root).close()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, "-m", "vault_pipeline.cli", "ingest", str(EXPORTS), "--vault", str(root)]
    subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return root


# --------------------------------------------------------------------------- a fresh ingest


def test_every_property_is_a_flat_scalar_or_a_list_of_scalars(ingested):
    notes = _notes(ingested)
    types = {fm["type"] for fm, _ in notes.values()}
    assert types == {"atomic", "session", "thread", "topic"}
    scalar = (str, int, float, bool)
    kinds: dict[str, set[str]] = {}
    for relpath, (fm, _) in notes.items():
        assert "source" not in fm, relpath
        for key, value in fm.items():
            if isinstance(value, list):
                assert value and all(isinstance(v, scalar) for v in value), (relpath, key, value)
                kinds.setdefault(key, set()).add("list")
            else:
                assert isinstance(value, scalar), (relpath, key, value)
                kinds.setdefault(key, set()).add(type(value).__name__)
    # One type per key across the vault, as Obsidian's property types are vault-wide.
    assert all(len(k) == 1 for k in kinds.values()), kinds
    assert kinds["source_messages"] == kinds["tags"] == {"list"}
    for relpath, (fm, _) in notes.items():
        if fm["type"] in ("atomic", "session"):
            assert {"source_kind", "source_conversation", "source_messages"} <= set(fm), relpath
            assert all(isinstance(m, str) for m in fm["source_messages"]), relpath


def test_created_is_an_aware_datetime_in_every_note(ingested):
    notes = _notes(ingested)
    dated = {relpath: fm["created"] for relpath, (fm, _) in notes.items() if "created" in fm}
    for relpath, value in dated.items():
        assert isinstance(value, str) and "T" in value, (relpath, value)
        _aware(value)
    # Every atomic and session note from a source that has times (transcripts have none) is dated.
    timed = [r for r, (fm, _) in notes.items() if fm.get("source_kind") in ("chatgpt", "claude")]
    assert timed and all(r in dated for r in timed)


def test_tags_are_valid_and_name_category_subjects_and_session_kind(ingested):
    notes = _notes(ingested)
    hub_tags: list[tuple[str, str]] = []  # (linked stem, topic tag of a hub linking it)
    for relpath, (fm, body) in notes.items():
        assert fm.get("tags"), relpath
        assert all(TAG.match(t) for t in fm["tags"]), (relpath, fm["tags"])
        if fm["type"] == "topic":
            links = re.findall(r"\[\[([^\]#|]+)\]\]", body)
            assert links, relpath  # no empty hub
            hub_tags += [(stem, t) for stem in links for t in fm["tags"] if t.startswith("topic/")]
        elif fm["type"] == "session":
            assert fm["tags"][:2] == ["session", fm["source_kind"]]
            assert all(t.startswith("topic/") for t in fm["tags"][2:])
        elif fm["type"] == "atomic":
            assert fm["tags"][0] == fm["category"]
    tagged = {Path(r).stem: fm for r, (fm, _) in notes.items() if fm["type"] in ("atomic", "session")}
    assert hub_tags and {stem for stem, _ in hub_tags} <= set(tagged)
    for stem, topic in hub_tags:
        assert topic in tagged[stem]["tags"], (stem, topic)
    # A subject tag gathers several conversations: none is one conversation's title.
    sessions = Counter(t for fm in tagged.values() if fm["type"] == "session" for t in fm["tags"][2:])
    assert sessions and min(sessions.values()) >= 2


def test_tag_and_created_helpers():
    assert obsidian_tag("open-question") == "open-question"
    assert obsidian_tag("Data storage & back-ups") == "data-storage-back-ups"
    assert obsidian_tag("Café déjà vu's") == "café-déjà-vus"
    assert obsidian_tag("  ") == obsidian_tag("2024") == ""
    assert topic_tag("2024") == "topic/2024" and topic_tag("Django") == "topic/django"
    assert len(topic_tag("word " * 40)) <= len("topic/") + 60
    assert created_stamp("2023-05-08") == "2023-05-08T00:00:00+00:00"  # a date becomes midnight UTC
    assert created_stamp(date(2023, 5, 8)) == "2023-05-08T00:00:00+00:00"
    assert created_stamp(datetime(2023, 5, 8, 13, 56)) == "2023-05-08T13:56:00+00:00"  # naive: UTC
    assert created_stamp("2023-05-08T13:56:00Z") == "2023-05-08T13:56:00+00:00"
    assert created_stamp("2023-05-08T15:56:00.5+02:00") == "2023-05-08T15:56:00+02:00"
    assert created_stamp(datetime(2023, 5, 8, 13, 56, tzinfo=UTC)) == "2023-05-08T13:56:00+00:00"
    assert created_stamp(0) == "1970-01-01T00:00:00+00:00"
    assert created_stamp(None) == created_stamp("") == created_stamp("someday") == ""


# --------------------------------------------------------------------------- readers take both forms

NESTED = {"source": {"kind": "claude", "conversation": "c9", "title": "T", "messages": ["a", "b"]}}
CLAIM = "The staging server listens on port 8080.\n"
FLAT = {"source_kind": "claude", "source_conversation": "c9", "source_title": "T", "source_messages": ["a", "b"]}


def test_readers_take_the_flat_and_the_nested_source_alike():
    assert source_properties(NESTED) == source_properties(FLAT) == FLAT
    assert source_messages({"source_messages": "a"}) == ["a"] and source_messages({}) == []
    for fm in (NESTED, FLAT):
        cols = note_columns({"type": "atomic", **fm}, "inbox/x.md")
        assert (cols["source_kind"], cols["source_conversation"], cols["source_messages"]) == (
            "claude",
            "c9",
            '["a", "b"]',
        )
        assert not [p for p in quality_problems({"category": "fact", **fm}, CLAIM, set()) if "source" in p]
        swept = _sweep_note("a-1", "inbox/x.md", {"type": "atomic", **fm}, CLAIM, "sha")
        assert swept is not None and swept.messages == ("a", "b")
    assert any(p.startswith("no source") for p in quality_problems({"category": "fact"}, CLAIM, set()))


# --------------------------------------------------------------------------- migration on re-ingest


def _old_form(fm: dict) -> dict:
    """A note's frontmatter as vault_pipeline wrote it before flat properties: nested source, no tags."""
    old = {k: v for k, v in fm.items() if k not in ("source_title", "source_messages", "tags")}
    if "source_messages" in fm:
        old["source"] = {
            "kind": fm["source_kind"],
            "conversation": fm["source_conversation"],
            "title": fm.get("source_title"),
            "messages": fm["source_messages"],
        }
    if fm.get("created") and fm["type"] == "session":
        old["created"] = fm["created"][:10]  # some older notes had a date, others a datetime
    return old


def _write_as_ours(vault: Vault, relpath: str, text: str) -> None:
    """Write a file and record it in the state, as an older vault_pipeline would have."""
    path = vault.root / relpath
    path.write_text(text, encoding="utf-8")
    stat = path.stat()
    vault.state.record(
        relpath, split_frontmatter(text)[0]["id"], sha256_bytes(path.read_bytes()), stat.st_size, stat.st_mtime_ns
    )


def test_reingest_migrates_untouched_old_notes_and_leaves_edited_ones(tmp_path):
    exports = [EXPORTS / "chatgpt"]
    vault = Vault.init(tmp_path / "v")
    first = pipeline.ingest(vault, exports, OfflineBackend(), selector=EVERY_CANDIDATE)
    assert first.files_written and not first.refused
    current = {r: (vault.root / r).read_bytes() for r in _notes(vault.root)}
    for relpath, (fm, body) in _notes(vault.root).items():
        _write_as_ours(vault, relpath, render_note(_old_form(fm), body))
    old = _notes(vault.root)
    atomic = [r for r, (fm, _) in old.items() if fm["type"] == "atomic"]
    session = next(r for r, (fm, _) in old.items() if fm["type"] == "session")
    # Clean once merged a duplicate's message into this note and related it: both must survive.
    merged, (merged_fm, merged_body) = atomic[1], old[atomic[1]]
    merged_fm["source"]["messages"].append("m-from-a-duplicate")
    _write_as_ours(vault, merged, render_note({**merged_fm, "related": ["[[other-note]]"]}, merged_body))
    # The user edits one atomic note and one session note: never to be rewritten.
    edited = {}
    for relpath in (atomic[0], session):
        path = vault.root / relpath
        path.write_text(path.read_text(encoding="utf-8") + "\nMy own words.\n", encoding="utf-8")
        edited[relpath] = path.read_bytes()
    assert all("tags" not in fm for fm, _ in old.values())
    assert all("source" in fm for fm, _ in old.values() if fm["type"] in ("atomic", "session"))
    assert any(len(str(fm.get("created", ""))) == 10 for r, (fm, _) in old.items() if r not in edited)

    second = pipeline.ingest(vault, exports, OfflineBackend(), selector=EVERY_CANDIDATE)
    assert second.writes["updated"] == len(old) - len(edited) and second.writes["created"] == 0
    assert sorted(r.split(":")[0] for r in second.refused) == sorted(edited)
    for relpath, data in edited.items():
        assert (vault.root / relpath).read_bytes() == data
    now = _notes(vault.root)
    for relpath, (fm, _) in now.items():
        if relpath in edited:
            continue
        assert "source" not in fm and fm["tags"], relpath
        if "created" in fm:
            _aware(fm["created"])
        if relpath != merged:
            assert (vault.root / relpath).read_bytes() == current[relpath], relpath
    assert now[merged][0]["source_messages"][-1] == "m-from-a-duplicate"
    assert now[merged][0]["related"] == ["[[other-note]]"]

    third = pipeline.ingest(vault, exports, OfflineBackend(), selector=EVERY_CANDIDATE)
    assert third.files_written == 0 and third.writes["refused"] == len(edited)
    vault.close()


def test_a_topic_only_named_is_a_hub_not_a_note_nor_a_tag(tmp_path):
    """A topic note "The conversation is about Stores." is template filler (the Note Quality Gate refuses it): the
    title names the conversation's own hub, which links its notes; no tag is made of one title (a
    subject tag gathers several conversations: tests/ingest/test_topics.py)."""
    export = tmp_path / "chat.md"
    export.write_text(
        "# Stores\n\nUser: Which database do we use?\n\nAssistant: We use Postgres for the main store.\n",
        encoding="utf-8",
    )
    vault = Vault.init(tmp_path / "v")
    report = pipeline.ingest(vault, [export], OfflineBackend(), selector=EVERY_CANDIDATE)
    assert report.topics_named == 1 and "topic" not in report.notes_by_category
    notes = _notes(vault.root)
    atomic = {Path(r).stem: fm for r, (fm, body) in notes.items() if fm["type"] == "atomic"}
    assert atomic and not [r for r, (_, body) in notes.items() if "The conversation is about" in body]
    (hub,) = [(fm, body) for fm, body in notes.values() if fm["type"] == "topic"]
    assert hub[0]["tags"] == ["hub"] and set(re.findall(r"\[\[([^\]#|]+)\]\]", hub[1])) == set(atomic)
    assert not any(t.startswith("topic/") for fm in atomic.values() for t in fm["tags"])
