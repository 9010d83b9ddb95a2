"""keep.py: the Note Quality Gate and the user's keep (inbox/ -> engrams/, tier engram)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes import note_value
from vault_pipeline.errors import LockError
from vault_pipeline.ingest.keep import EngramIndex, keep, quality_problems, sentence_count
from vault_pipeline.ingest.notes import atomic_id
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.note import Note, safe_stem

REPO = Path(__file__).resolve().parent.parent
TODAY = date(2024, 5, 1)


def atomic(sentence: str, category: str = "decision", conv: str = "c-1", **extra) -> Note:
    """An inbox note as ingest writes it: id and stem from the sentence, no creation date."""
    nid = atomic_id("chatgpt", conv, category, sentence)
    source = {"kind": "chatgpt", "conversation": conv, "title": "t", "messages": ["m1"]}
    return note_value(
        nid,
        f"{sentence}\n\nSource: [[session-abcdef#^m-m1]]\n",
        stem=safe_stem(sentence, nid),
        category=category,
        created=None,
        source=source,
        session="[[session-abcdef]]",
        source_kind="chatgpt",
        source_conversation=conv,
        **extra,
    )


@pytest.fixture
def vault(make_vault) -> Vault:
    return make_vault()


def add(vault: Vault, *notes: Note) -> list[Note]:
    for note in notes:
        assert vault.write(note).outcome == "created"
    return list(notes)


# --------------------------------------------------------------------------- the gate


GOOD = {"category": "fact", "source": {"messages": ["m1"]}}


@pytest.mark.parametrize(
    "sentence, fragment",
    [
        ("We chose Postgres. It is fast.", "more than one sentence"),
        ("Should we choose Postgres?", "not a declarative sentence"),
        ("Postgres is great!", "not a declarative sentence"),
        (
            "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen.",
            "16 words",
        ),
    ],
)
def test_gate_sentence_rules(sentence, fragment):
    problems = quality_problems(GOOD, sentence + "\n", set())
    assert any(fragment in p for p in problems), problems


def test_gate_passes_a_good_note_and_knows_abbreviations():
    assert quality_problems(GOOD, "We store notes in Postgres, e.g. for search.\n\nSource: x\n", set()) == []
    assert sentence_count("Dr. Smith met J. Doe at 3 p.m. today.") == 1
    assert quality_problems({**GOOD, "category": "open-question"}, "Which index type fits best?\n", set()) == []


def test_gate_category_source_and_empty_body():
    problems = quality_problems({"category": "musing"}, "\n", set())
    assert any("category" in p for p in problems)
    assert any("no source" in p for p in problems)
    assert any("no sentence" in p for p in problems)
    assert quality_problems({"category": "fact", "source_conversation": "c-1"}, "A fact.\n", set()) == []


def test_gate_detects_engram_duplicates():
    engrams = {"We will use Postgres for storage.", "The annual budget is ten thousand euros this year."}
    assert any("duplicates" in p for p in quality_problems(GOOD, "we will use postgres for storage\n", engrams))
    near = "The annual budget is ten thousand euros this year, firmly."  # Jaccard 9/10
    assert any("duplicates" in p for p in quality_problems(GOOD, near + "\n", engrams))
    assert quality_problems(GOOD, "We will use SQLite for caching.\n", engrams) == []


words = st.lists(st.sampled_from("a b c d e f g h i j k l m n o p".split()), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(words, max_size=30), words)
def test_engram_index_matches_brute_force(corpus, query):
    index = EngramIndex(" ".join(w) for w in corpus)
    q = set(query)
    brute = any(len(q & set(w)) / len(q | set(w)) >= 0.9 for w in corpus)
    assert (index.duplicate_of(" ".join(query)) is not None) == brute


# --------------------------------------------------------------------------- keeping


def test_keep_a_named_note(vault):
    note, other = add(vault, atomic("We will use Postgres for storage."), atomic("We ship on Fridays."))
    before = (vault.root / note.relpath).read_text()
    report = keep(vault, targets=[note.stem], today=TODAY)
    assert report.kept == [f"engrams/{note.stem}.md"] and not report.refused
    assert not (vault.root / note.relpath).exists()
    frontmatter, _, _ = vault.read(report.kept[0])
    assert (frontmatter["status"], frontmatter["tier"], frontmatter["kept"]) == ("kept", "engram", "2024-05-01")
    after = (vault.root / report.kept[0]).read_text()
    assert after == before.replace("status: provisional", "status: kept").replace("tier: chat", "tier: engram").replace(
        "source_conversation: c-1\n", "source_conversation: c-1\nkept: 2024-05-01\n"
    )
    assert (vault.root / other.relpath).exists()
    # Re-ingesting the same note does not bring it back into the inbox.
    assert vault.write(note).outcome == "moved-elsewhere"
    assert not (vault.root / note.relpath).exists()


def test_targets_by_id_path_and_unknown(vault):
    a, b = add(vault, atomic("Alpha is the first letter."), atomic("Beta is the second letter."))
    report = keep(vault, targets=[a.id, b.relpath, "nope"], today=TODAY)
    assert report.kept == [f"engrams/{a.stem}.md", f"engrams/{b.stem}.md"]
    assert report.skipped == [("nope", "no such note in inbox/")]
    again = keep(vault, targets=[a.stem], today=TODAY)
    assert again.skipped == [(a.stem, f"already kept: engrams/{a.stem}.md")]


def test_keep_all_passing(vault):
    good, long_one = add(
        vault,
        atomic("Postgres stores the notes."),
        atomic("This sentence is far too long to pass the gate because it keeps going on and on."),
    )
    report = keep(vault, all_passing=True, today=TODAY)
    assert report.kept == [f"engrams/{good.stem}.md"]
    assert [p for p, _ in report.skipped] == [long_one.relpath]
    assert (vault.root / long_one.relpath).exists()


def test_a_user_flipped_note_is_kept_even_when_it_fails(vault):
    (note,) = add(vault, atomic("A flipped note that is much too long to ever pass the quality gate at all."))
    path = vault.root / note.relpath
    path.write_text(path.read_text().replace("status: provisional", "status: kept") + "\nMy own thought.\n")
    report = keep(vault, today=TODAY)
    assert report.kept == [f"engrams/{note.stem}.md"]
    assert report.flagged and "words" in report.flagged[0][1][0]
    text = (vault.root / report.kept[0]).read_text()
    assert text.endswith("\nMy own thought.\n") and "tier: engram" in text
    assert vault.write(note).outcome == "moved-elsewhere"


def test_a_failing_named_note_is_refused_unless_forced(vault):
    (note,) = add(vault, atomic("Is this a question?"))
    before = (vault.root / note.relpath).read_bytes()
    report = keep(vault, targets=[note.stem], today=TODAY)
    assert report.kept == [] and report.refused[0][0] == note.relpath
    assert "not a declarative sentence" in report.refused[0][1]
    assert (vault.root / note.relpath).read_bytes() == before
    forced = keep(vault, targets=[note.stem], force=True, today=TODAY)
    assert forced.kept == [f"engrams/{note.stem}.md"]


def test_engram_duplicates_are_refused_also_within_one_run(vault):
    (first,) = add(vault, atomic("We will use Postgres for storage."))
    keep(vault, targets=[first.stem], today=TODAY)
    (dup,) = add(vault, atomic("We will use Postgres for storage!", conv="c-2"))
    report = keep(vault, targets=[dup.stem], today=TODAY)
    assert any("duplicates an existing engram" in p for p in report.refused[0][1])
    add(vault, atomic("Cats sleep a lot.", conv="c-3"), atomic("Cats sleep a lot.", conv="c-4"))
    both = keep(vault, all_passing=True, today=TODAY)
    assert len(both.kept) == 1


def test_keep_holds_the_vault_lock(vault):
    add(vault, atomic("Locked notes wait."))
    holder = (
        "import sys, time\nfrom vault_pipeline.vault.files import Vault\n"
        "with Vault.open(sys.argv[1]).lock('ingest'):\n    print('held', flush=True)\n    time.sleep(30)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, str(vault.root)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(LockError, match="ingest"):
            keep(vault, all_passing=True, today=TODAY)
    finally:
        proc.kill()
        proc.wait()
    assert len(keep(vault, all_passing=True, today=TODAY).kept) == 1


def test_keep_is_deterministic(make_vault):
    results = []
    for run in range(2):
        vault = make_vault(f"v{run}")
        add(vault, *(atomic(f"Fact number {i} holds.") for i in (3, 1, 2)))
        results.append(keep(vault, all_passing=True, today=TODAY).kept)
    assert results[0] == results[1] == sorted(results[0])


def test_an_existing_engram_file_blocks_the_keep_before_any_edit(vault):
    (note,) = add(vault, atomic("Clashing names stay apart."))
    (vault.root / "engrams" / f"{note.stem}.md").write_text("the user's own file\n")
    before = (vault.root / note.relpath).read_bytes()
    report = keep(vault, targets=[note.id], today=TODAY)
    assert report.kept == [] and "already exists" in report.refused[0][1][0]
    assert (vault.root / note.relpath).read_bytes() == before
    assert (vault.root / "engrams" / f"{note.stem}.md").read_text() == "the user's own file\n"
