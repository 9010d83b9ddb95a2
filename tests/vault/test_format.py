"""The vault's text formats: what is written reads back as it was (round trips), and the readers
every stage shares agree with the writers."""

from __future__ import annotations

import subprocess
import sys
from datetime import date

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault_pipeline.ingest.notes import render_transcript
from vault_pipeline.ingest.parse.types import Message
from vault_pipeline.vault.format import (
    MESSAGE_ID,
    AtomicBody,
    block_id,
    context_line,
    context_parts,
    embedding_text,
    long_date,
    merge_context,
    parse_atomic_body,
    render_atomic,
    short_day,
    transcript_turns,
)

# Generation slows with the machine's load: no health check on time (tests never depend on wall time).
_UNTIMED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

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


@_UNTIMED
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


@_UNTIMED
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


@_UNTIMED
@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=5, unique=True))
def test_block_ids_are_obsidian_block_ids_and_distinct(ids):
    blocks = [block_id(i) for i in ids]
    assert all(MESSAGE_ID.fullmatch(" ^" + b) for b in blocks)
    assert len(set(blocks)) == len(blocks)


_SAID = st.lists(st.from_regex(r"[A-Za-z][A-Za-z0-9,.!?']{0,10}", fullmatch=True), min_size=1, max_size=8).map(" ".join)


@_UNTIMED
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


# --------------------------------------------------------------------------- the text a row is embedded as


@_UNTIMED
@given(
    sentence=_LINE,
    context=st.one_of(st.just(""), _LINE),
    links=st.lists(_TARGET, min_size=1, max_size=3).map(tuple),
    extra=st.lists(_LINE, max_size=2).map(tuple),
)
def test_an_atomic_row_is_embedded_as_its_body_without_the_source_line(sentence, context, links, extra):
    written = render_atomic(AtomicBody(sentence, context, links, extra))
    embedded = embedding_text(written)
    # What is left is exactly the body written without links: every word a reader meets, no id.
    assert embedded == render_atomic(AtomicBody(sentence, context, (), extra)).replace("\n\nSource: ", "").strip()
    assert "^m-" not in embedded and "[[" not in embedded
    assert parse_atomic_body(embedded) == AtomicBody(sentence, context, (), extra)
    assert embedding_text(embedded) == embedded  # nothing left to take out


@_UNTIMED
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), _SAID), min_size=1, max_size=4))
def test_a_transcript_is_embedded_without_its_block_ids_and_links_back(turns):
    messages = [Message(f"id-{i}", role, "", text, None) for i, (role, text) in enumerate(turns)]
    body = "## Transcript\n\n" + render_transcript(messages, {"id-0": ["a-note-1f2e3d"]})
    embedded = embedding_text(body)
    assert not MESSAGE_ID.search(embedded) and "Notes:" not in embedded and "a-note" not in embedded
    # Every message's own words stay, in order.
    assert [t for _, t in transcript_turns(body).values() if t.strip()] and all(
        " ".join(text.split()) in " ".join(embedded.split()) for _, text in turns
    )


_PLAIN = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="^["), max_size=200)


@_UNTIMED
@given(_PLAIN)
def test_a_text_without_ids_is_embedded_as_it_is(text):
    assert embedding_text(text) is text  # the long-note chunk: not even copied


@_UNTIMED
@given(st.text(max_size=200))
def test_embedding_text_is_idempotent_and_never_empties_a_text(text):
    once = embedding_text(text)
    assert embedding_text(once) == once
    assert bool(once.strip()) == bool(text.strip()) or once == text


def test_what_embedding_text_takes_out_and_what_it_leaves():
    assert embedding_text("It works.\n\nContext: Ann, 8 May 2023.\n\nsource: [[s#^m-1]],\n[[s#^m-2|chat]]") == (
        "It works.\n\nContext: Ann, 8 May 2023."
    )
    assert embedding_text("**Ann:** We chose LanceDB. ^m-a-1") == "**Ann:** We chose LanceDB."
    assert embedding_text("A long piece of a message\n\n^m-a-1") == "A long piece of a message"  # the added anchor
    assert embedding_text("- said in a chat ([[ai-laws-4690ce#^m-1fe4]])") == "- said in a chat ([[ai-laws-4690ce]])"
    assert embedding_text("My own block ^quote-1") == "My own block"
    # A message's escaped look-alike, a user's own Source line of words and a plain link stay.
    for kept in ("The price \\^m-x", "Source: Wikipedia, 2020", "See [[Heat pumps]] for more.", "2^10 is 1024"):
        assert embedding_text(kept) == kept
    assert embedding_text("^m-a-1") == "^m-a-1"  # nothing but an id: the text itself, never an empty one
