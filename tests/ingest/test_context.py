"""Self-contained atomic notes: speaker names and relative time resolved to absolute dates."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, date, datetime

import pytest

from vault_pipeline.ingest.context import merge_context, resolve_times, unit_context
from vault_pipeline.ingest.extract import AtomicUnit, extract_conversation
from vault_pipeline.ingest.notes import atomic_note, session_note
from vault_pipeline.ingest.parse import Conversation, Message
from vault_pipeline.ingest.parse.read import read_export
from vault_pipeline.ingest.parse.transcript import parse_transcript
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.models.offline.extraction import summarize

MONDAY = date(2023, 5, 8)  # a Monday


@pytest.mark.parametrize(
    ("text", "expected", "start", "end"),
    [
        ("I went to a support group yesterday.", "yesterday", "2023-05-07", None),
        ("We talked the day before yesterday.", "the day before yesterday", "2023-05-06", None),
        ("The launch is tomorrow.", "tomorrow", "2023-05-09", None),
        ("I am painting today.", "today", "2023-05-08", None),
        ("Last night was loud.", "Last night", "2023-05-07", None),
        ("I saw her last Tuesday.", "last Tuesday", "2023-05-02", None),
        ("I went to a reading last Fri.", "last Fri", "2023-05-05", None),
        ("I saw her last Monday.", "last Monday", "2023-05-01", None),  # on a Monday: a week back
        ("We meet next Monday.", "next Monday", "2023-05-15", None),
        ("I won the tournament on Friday.", "on Friday", "2023-05-05", None),
        ("I will call you on Friday.", "on Friday", "2023-05-12", None),
        ("I got a puppy two weeks ago.", "two weeks ago", "2023-04-24", None),
        ("She moved 3 days ago.", "3 days ago", "2023-05-05", None),
        ("I started a year ago.", "a year ago", "2022-05-08", None),
        ("I leave in 3 days.", "in 3 days", "2023-05-11", None),
        ("I graduated last week.", "last week", "2023-05-01", "2023-05-07"),
        ("The exam is next week.", "next week", "2023-05-15", "2023-05-21"),
        ("We went camping last weekend.", "last weekend", "2023-05-06", "2023-05-07"),
        ("I'm off to the lake this weekend.", "this weekend", "2023-05-13", "2023-05-14"),
        ("We camped two weekends ago.", "two weekends ago", "2023-04-29", "2023-04-30"),
        ("The festival is next month.", "next month", "2023-06-01", "2023-06-30"),
        ("I joined a gym last month.", "last month", "2023-04-01", "2023-04-30"),
        ("I read it last year.", "last year", "2022-01-01", "2022-12-31"),
        ("I hiked a lot last summer.", "last summer", "2022-06-01", "2022-08-31"),
        ("I told you about it last August.", "last August", "2022-08-01", "2022-08-31"),
        ("So much happened in the last month.", "in the last month", "2023-04-08", "2023-05-08"),
        ("I've been reading a lot in the past week.", "in the past week", "2023-05-01", "2023-05-08"),
        ("Ik was gisteren bij de groep.", "gisteren", "2023-05-07", None),
        ("Vorige week ben ik verhuisd.", "Vorige week", "2023-05-01", "2023-05-07"),
        ("Ik begon twee weken geleden.", "twee weken geleden", "2023-04-24", None),
        ("Volgende maand begint de cursus.", "Volgende maand", "2023-06-01", "2023-06-30"),
    ],
)
def test_each_expression_type_resolves_against_the_message_date(text, expected, start, end):
    refs = resolve_times(text, MONDAY)
    assert [(r.text, r.start.isoformat(), r.end.isoformat()) for r in refs] == [(expected, start, end or start)]


@pytest.mark.parametrize(
    "text",
    [
        "I may go to the concert.",
        "I prefer the second option.",
        "Wait a second, I need to check.",
        "We haven't talked in a few days.",
        "It feels like yesterday I put this dress on.",
        "The last week of the trip was rainy.",
        "I love soaking up the sun.",
        "I'm learning the violin now.",
        "Since we last talked, I started a new job.",
    ],
)
def test_false_positives_get_no_date(text):
    assert resolve_times(text, MONDAY) == []


def test_month_and_year_arithmetic_at_the_edges():
    [ref] = resolve_times("next month", date(2023, 1, 31))
    assert (ref.start, ref.end) == (date(2023, 2, 1), date(2023, 2, 28))
    [ref] = resolve_times("a month ago", date(2023, 3, 31))
    assert ref.start == date(2023, 2, 28)
    [ref] = resolve_times("last week", date(2023, 1, 1))  # a Sunday: the week before its Monday-Sunday week
    assert (ref.start, ref.end) == (date(2022, 12, 19), date(2022, 12, 25))
    [ref] = resolve_times("this winter", date(2023, 10, 2))
    assert (ref.start, ref.end, ref.describe()) == (
        date(2023, 12, 1),
        date(2024, 2, 29),
        "December 2023 to February 2024",
    )


# --------------------------------------------------------------------------- notes


def _sample() -> dict:
    """A LoCoMo-shaped sample, written for this test."""
    return {
        "sample_id": "t-1",
        "conversation": {
            "speaker_a": "Anouk",
            "speaker_b": "Bram",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Anouk", "dia_id": "D1:1", "text": "I went to a pottery class yesterday and loved it."},
                {"speaker": "Bram", "dia_id": "D1:2", "text": "I ran a half marathon two weeks ago."},
                {"speaker": "Anouk", "dia_id": "D1:3", "text": "My sister visits us next month."},
                {"speaker": "Bram", "dia_id": "D1:4", "text": "I may go hiking. I like the second trail best."},
            ],
            "session_2_date_time": "10:00 am on 20 June, 2023",
            "session_2": [
                {"speaker": "Bram", "dia_id": "D2:1", "text": "We adopted a dog last weekend."},
                {"speaker": "Anouk", "dia_id": "D2:2", "text": "I painted a sunset last Tuesday."},
            ],
        },
    }


def _notes(convs: list[Conversation]) -> tuple[list, list]:
    llm = OfflineBackend()
    atomic, sessions = [], []
    for conv in convs:
        extraction = extract_conversation(conv, llm)
        session = session_note(conv, extraction.summary)
        sessions.append(session)
        atomic += [atomic_note(u, conv, session.stem, "2023-05-08T13:56:00+00:00") for u in extraction.units]
    return atomic, sessions


def test_locomo_notes_name_the_speaker_and_date_relative_time(tmp_path):
    path = tmp_path / "sample.json"
    path.write_text(json.dumps([_sample()]), encoding="utf-8")
    convs = list(read_export(path))
    atomic, sessions = _notes(convs)
    by_text = {n.body.splitlines()[0]: n for n in atomic}

    pottery = by_text["I went to a pottery class yesterday and loved it."]
    assert pottery.frontmatter["speaker_name"] == "Anouk"
    assert (pottery.frontmatter["when"], pottery.frontmatter["when_text"]) == ("2023-05-07", "yesterday")
    assert "Context: Anouk, 8 May 2023; “yesterday” is 7 May 2023." in pottery.body

    marathon = by_text["I ran a half marathon two weeks ago."]
    assert (marathon.frontmatter["speaker_name"], marathon.frontmatter["when"]) == ("Bram", "2023-04-24")
    sister = by_text["My sister visits us next month."]
    assert (sister.frontmatter["when"], sister.frontmatter["when_end"]) == ("2023-06-01", "2023-06-30")
    dog = by_text["We adopted a dog last weekend."]  # session 2: its own date, 20 June 2023 (a Tuesday)
    assert (dog.frontmatter["when"], dog.frontmatter["when_end"]) == ("2023-06-17", "2023-06-18")
    assert "Context: Bram, 20 June 2023; “last weekend” is the weekend of 17 June 2023." in dog.body
    sunset = by_text["I painted a sunset last Tuesday."]
    assert sunset.frontmatter["when"] == "2023-06-13"

    for note in atomic:
        assert note.frontmatter.get("speaker_name") in ("Anouk", "Bram")
        if any(w in note.body for w in ("I may go", "second trail")):
            assert "when" not in note.frontmatter
    for session in sessions:
        summary = session.body.split("## Transcript")[0]
        assert "User" not in summary and "Assistant" not in summary
        assert "turns between " in summary and "Anouk: " in summary and "Bram: " in summary


def test_transcript_with_named_speakers_keeps_the_names(tmp_path):
    text = "# Garden plans\n\n**Caroline:** I planted tomatoes yesterday.\n\n**Melanie:** Nice!\n\nMelanie: I start mine next week.\n"
    conv = parse_transcript(text, "garden", "garden.md")
    assert [(m.role, m.speaker) for m in conv.messages] == [
        ("user", "Caroline"),
        ("user", "Melanie"),
        ("user", "Melanie"),
    ]
    dated = Conversation(
        **{**{f: getattr(conv, f) for f in conv.__slots__}, "created": datetime(2023, 5, 8, tzinfo=UTC)}
    )
    unit = AtomicUnit(text="I planted tomatoes yesterday.", category="fact", source_ids=["t1"], speaker="user")
    properties, context = unit_context(unit, dated)
    assert properties == {"speaker_name": "Caroline", "when": "2023-05-07", "when_text": "yesterday"}
    assert context == "Caroline, 8 May 2023; “yesterday” is 7 May 2023."
    summary = summarize(
        {
            "title": conv.title,
            "messages": [{"role": m.role, "speaker": m.speaker, "text": m.text} for m in conv.messages],
        }
    )
    assert "Caroline: " in summary["summary"] and "User" not in summary["summary"]


def test_a_single_word_label_is_not_a_speaker():
    text = "User: what is this?\n\nAssistant: Note: it is a test.\n"
    conv = parse_transcript(text, "t", "t.md")
    assert [m.speaker for m in conv.messages] == ["user", "assistant"]
    assert conv.messages[1].text == "Note: it is a test."


def test_role_only_exports_get_a_date_only_when_the_note_has_a_time_expression():
    created = datetime(2024, 3, 1, 9, 30, tzinfo=UTC)
    conv = Conversation(
        kind="chatgpt",
        id="c",
        title="t",
        created=created,
        updated=created,
        messages=(Message("m1", "user", "user", "I fixed the bug yesterday. It works.", created),),
        source="x.json",
    )
    plain = AtomicUnit(text="It works.", category="fact", source_ids=["m1"], speaker="user")
    assert unit_context(plain, conv) == ({}, None)
    dated = AtomicUnit(text="I fixed the bug yesterday.", category="fact", source_ids=["m1"], speaker="user")
    assert unit_context(dated, conv) == (
        {"when": "2024-02-29", "when_text": "yesterday"},
        "1 March 2024; “yesterday” is 29 February 2024.",
    )
    assert (
        merge_context("for the prototype.", "Caroline, 1 March 2024.") == "for the prototype. Caroline, 1 March 2024."
    )
    assert merge_context(None, None) is None


def test_a_title_the_parser_made_up_gives_no_topic_note(tmp_path):
    path = tmp_path / "sample.json"
    path.write_text(json.dumps([_sample()]), encoding="utf-8")
    convs = list(read_export(path))
    assert [c.titled for c in convs] == [False, False] and convs[0].title == "Anouk and Bram, session 1"
    atomic, _ = _notes(convs)
    assert not [n for n in atomic if n.frontmatter.get("category") == "topic"]
    # The same session under a title a person gave it says what it is about.
    titled = replace(convs[0], title="Pottery and marathons", titled=True)
    topics = [n.body.splitlines()[0] for n in _notes([titled])[0] if n.frontmatter.get("category") == "topic"]
    assert topics == ["The conversation is about Pottery and marathons."]
