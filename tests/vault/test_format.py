"""The vault's text formats: what is written reads back as it was (round trips), and the readers
every stage shares agree with the writers."""

from __future__ import annotations

import subprocess
import sys
from datetime import date

from hypothesis import given
from hypothesis import strategies as st

from vault_pipeline.ingest.notes import render_transcript
from vault_pipeline.ingest.parse.types import Message
from vault_pipeline.vault.format import (
    MESSAGE_ID,
    AtomicBody,
    block_id,
    context_line,
    context_parts,
    long_date,
    merge_context,
    parse_atomic_body,
    render_atomic,
    short_day,
    transcript_turns,
)

# One line of note text as the writers leave it: words separated by single spaces, no line break,
# neither a label nor a heading nor a link (which the Source line would take).
_WORD = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S"), exclude_characters="#[]|"),
    min_size=1,
    max_size=12,
)
_LINE = (
    st.lists(_WORD, min_size=1, max_size=8)
    .map(" ".join)
    .filter(lambda s: not s.lower().startswith(("context:", "source:")))
)
_TARGET = st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}#\^m-[A-Za-z0-9-]{1,12}", fullmatch=True)


@given(
    sentence=_LINE,
    context=st.one_of(st.just(""), _LINE),
    links=st.lists(_TARGET, max_size=3).map(tuple),
    extra=st.lists(_LINE, max_size=3).map(tuple),
)
def test_an_atomic_body_reads_back_as_it_was_written(sentence, context, links, extra):
    body = AtomicBody(sentence, context, links, extra)
    assert parse_atomic_body(render_atomic(body)) == body
    assert parse_atomic_body(render_atomic(body) + "\n") == body  # as a note file ends


def test_the_atomic_body_is_the_format_notes_have_always_had():
    body = AtomicBody("The shipment leaves on Friday.", "Caroline, 8 May 2023.", ("s-1#^m-42", "s-1#^m-43"))
    assert render_atomic(body) == (
        "The shipment leaves on Friday.\n\nContext: Caroline, 8 May 2023.\n\nSource: [[s-1#^m-42]], [[s-1#^m-43]]"
    )


def test_a_line_a_user_appends_to_a_note_is_read_as_theirs_wherever_it_goes():
    written = render_atomic(AtomicBody("Heat pumps move heat.", "", ("s#^m-1",))) + "\n"
    for added in (
        written + "The defrost cycle runs every 45 minutes.\n",  # right under the Source line
        written + "\nThe defrost cycle runs every 45 minutes.\n",  # as a paragraph of its own
    ):
        parsed = parse_atomic_body(added)
        assert parsed.sentence == "Heat pumps move heat."
        assert parsed.links == ("s#^m-1",)
        assert parsed.extra == ("The defrost cycle runs every 45 minutes.",)


def test_labels_read_in_any_case_and_headings_are_not_the_sentence():
    parsed = parse_atomic_body("# A title\n\nIt works.\ncontext: on Linux\nSOURCE: [[x#^m-1|the chat]]\n")
    assert parsed == AtomicBody("It works.", "on Linux", ("x#^m-1",))


_WHO = st.from_regex(r"[A-Z][a-z]{1,8}( and [A-Z][a-z]{1,8})?", fullmatch=True)
_DAY = st.dates(min_value=date(1900, 1, 1), max_value=date(2100, 12, 31))
_TIMES = st.lists(
    st.tuples(st.sampled_from(["yesterday", "last week", "two days ago"]), _DAY.map(long_date)),
    max_size=2,
    unique_by=lambda t: t[0],
)


@given(who=st.one_of(st.just(""), _WHO), day=_DAY, times=_TIMES, own=st.one_of(st.just(""), _LINE))
def test_a_context_line_reads_back_as_it_was_written(who, day, times, own):
    own = own.rstrip(". ").replace("; ", " ").replace(". ", " ")
    line = merge_context(own, context_line(who, day, times))
    if line is None:
        assert not (own or who or times)
        return
    assert context_parts(line) == (who, own, tuple(times))


def test_days_are_written_one_way():
    assert long_date(date(2023, 5, 8)) == "8 May 2023"
    assert short_day("2023-08-16T10:00:00+00:00") == "16 Aug 2023"
    assert short_day("not a date") == ""


@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=5, unique=True))
def test_block_ids_are_obsidian_block_ids_and_distinct(ids):
    blocks = [block_id(i) for i in ids]
    assert all(MESSAGE_ID.fullmatch(" ^" + b) for b in blocks)
    assert len(set(blocks)) == len(blocks)


_SAID = st.lists(st.from_regex(r"[A-Za-z][A-Za-z0-9,.!?']{0,10}", fullmatch=True), min_size=1, max_size=8).map(" ".join)


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), _SAID), min_size=1, max_size=5))
def test_transcript_turns_read_back_what_render_transcript_wrote(turns):
    messages = [Message(f"id {i}", role, "", text, None) for i, (role, text) in enumerate(turns)]
    body = "# T\n\n## Transcript\n\n" + render_transcript(messages, {"id 0": ["a-note"]})
    read = transcript_turns(body)
    assert list(read) == [block_id(m.id) for m in messages]
    assert list(read.values()) == [(m.role.capitalize(), m.text) for m in messages]


def test_importing_the_funnel_loads_no_ingest_module():
    """Retrieval reads the vault's formats from vault/format.py, never from the ingest stage
    (which would load every export parser with it)."""
    code = (
        "import sys, vault_pipeline.retrieve.funnel\n"
        "print(sorted(m for m in sys.modules if m.startswith('vault_pipeline.ingest')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
