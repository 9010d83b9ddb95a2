"""Heading-structured chunking, the bullet lint, and engram-go's synopsis tier."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault_pipeline.index.chunk import (
    Chunk,
    chunk_markdown,
    chunks_for_note,
    lint_levels,
    synopsis,
)

SESSION = """Preamble line before any heading.

# Project
Project intro: what this is for.

## Risks
- the index drifts from the vault
- a model call fails

### Mitigations
Rebuild the index from the vault.

##### A fifth-level heading stays inside its section
still Mitigations

## Decisions
We keep the vault as the source of truth.

```python
# a comment, not a heading
x = 1
```

# Appendix
Appendix text.

Setext Heading
--------------
under the setext heading
"""


def _ns(text: str) -> str:
    """Every non-whitespace character, in order."""
    return "".join(text.split())


def test_splits_on_h1_to_h4_with_paths_and_levels():
    chunks = chunk_markdown("n1", SESSION)
    got = [(c.heading_path, c.level) for c in chunks]
    assert got == [
        ((), 0),
        (("Project",), 1),
        (("Project", "Risks"), 2),
        (("Project", "Risks", "Mitigations"), 3),
        (("Project", "Decisions"), 2),
        (("Appendix",), 1),
        (("Appendix", "Setext Heading"), 2),
    ]
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert all(c.note_id == "n1" for c in chunks)


def test_intro_text_is_its_own_chunk_and_children_are_separate():
    project, risks = chunk_markdown("n1", SESSION)[1:3]
    assert project.text == "# Project\nProject intro: what this is for."
    assert "Risks" not in project.text
    assert "- a model call fails" in risks.text and "Mitigations" not in risks.text


def test_heading_path_prefix_makes_chunks_read_alone():
    chunks = {c.heading_path: c for c in chunk_markdown("n1", SESSION)}
    mitigations = chunks[("Project", "Risks", "Mitigations")]
    assert mitigations.text.startswith("Project > Risks > Mitigations\n\n### Mitigations\n")
    assert mitigations.source_text.startswith("### Mitigations")
    assert "fifth-level heading" in mitigations.text  # H5 does not split
    assert chunks[("Project",)].prefix_chars == 0  # "# Project" already opens the chunk


def test_fenced_hash_lines_are_not_headings():
    decisions = [c for c in chunk_markdown("n1", SESSION) if c.heading_path[-1:] == ("Decisions",)]
    assert len(decisions) == 1 and "# a comment, not a heading" in decisions[0].text


def test_atomic_note_is_exactly_one_chunk():
    body = "We chose LanceDB for the index.\n\nContext: local-first.\n\n[[session-1#^m-4]]"
    (only,) = chunk_markdown("a1", body)
    assert only == Chunk("a1", 0, (), 0, body, math.ceil(len(body.encode()) / 4))


def test_empty_body_has_no_chunks():
    assert chunk_markdown("e", " \n\n\t") == []


def test_heading_without_own_text_folds_into_first_child():
    chunks = chunk_markdown("n", "# Outer\n\n## Inner\nbody text\n\n## Sibling\nmore\n")
    assert [c.heading_path for c in chunks] == [("Outer", "Inner"), ("Outer", "Sibling")]
    assert "# Outer" in chunks[0].source_text


def test_tokens_counted_after_split_as_utf8_bytes_over_four():
    chunks = chunk_markdown("n1", SESSION + "\n日本語のテキスト 🙂\n")
    assert len(chunks) > 1 and any("🙂" in c.text for c in chunks)
    for c in chunks:
        assert c.tokens == math.ceil(len(c.text.encode("utf-8")) / 4)


def _long_section(paragraphs: int) -> str:
    para = " ".join(f"Sentence {i} says one thing about the vault." for i in range(12))
    return "# Long\n\n" + "\n\n".join(f"P{n}. {para}" for n in range(paragraphs))


def test_long_section_splits_on_paragraphs_under_the_cap():
    body = _long_section(60)
    chunks = chunk_markdown("n", body, cap_tokens=500)
    assert len(chunks) > 1
    assert all(c.tokens <= 500 for c in chunks)
    assert all(c.heading_path == ("Long",) for c in chunks)
    for c in chunks[1:]:
        assert c.text.startswith("Long\n\nP")  # continuation keeps its heading, starts a paragraph
    assert all(c.source_text.rstrip().endswith("vault.") for c in chunks)
    assert _ns("".join(c.source_text for c in chunks)) == _ns(body)


def test_section_under_the_cap_is_not_split():
    body = _long_section(10)
    assert len(chunk_markdown("n", body, cap_tokens=1500)) == 1


def test_giant_paragraph_splits_only_at_sentence_ends():
    body = " ".join(f"Claim number {i} is stated here in full." for i in range(600))
    chunks = chunk_markdown("n", body, cap_tokens=300)
    assert len(chunks) > 1 and all(c.tokens <= 300 for c in chunks)
    assert all(c.text.endswith("in full.") for c in chunks)


def test_sentence_longer_than_cap_is_kept_whole():
    body = "word " * 4000  # no sentence end anywhere: never cut mid-sentence
    assert len(chunk_markdown("n", body, cap_tokens=200)) == 1


def test_lint_flags_more_than_four_bullets_per_level():
    body = "# Plan\n## Steps\n" + "".join(f"- step {i}\n" for i in range(6)) + "\n## Fine\n- a\n- b\n- c\n"
    (finding,) = lint_levels(body)
    assert finding.heading_path == ("Plan", "Steps") and finding.bullets == 6 and finding.line == 2
    assert "Plan > Steps" in finding.message


def test_lint_counts_only_direct_bullets_and_skips_ordered_lists():
    body = (
        "# Ok\n- a\n  - n1\n  - n2\n  - n3\n  - n4\n  - n5\n- b\n\n"
        "# Ordered\n1. one\n2. two\n3. three\n4. four\n5. five\n"
    )
    assert lint_levels(body) == []
    assert lint_levels("- 1\n- 2\n- 3\n- 4\n- 5\n")[0].heading_path == ()


def _resource(sections: int) -> str:
    parts = []
    for i in range(sections):
        parts.append(f"# Part {i}\n\nIntro of part {i}. It has two sentences.\n")
        parts.append(f"## Detail {i}\n\n" + "Body text that fills space. " * 20 + "\n")
    return "\n".join(parts)


def test_synopsis_head_is_capped_and_outline_lists_headings():
    body = _resource(200)
    syn = synopsis(body, head_chars=8192, outline_chars=2048)
    head, outline = syn.split("\n\n# Outline\n\n")
    assert len(head.encode("utf-8")) <= 8192 and body.startswith(head)
    assert head.endswith((".", "space."))  # cut at a clean boundary
    assert outline.startswith("- Part 0\n  - Detail 0\n")
    assert len(("# Outline\n\n" + outline).encode("utf-8")) <= 2048
    assert "more headings not listed" in outline


def test_synopsis_of_a_short_body_is_the_body():
    assert synopsis("# A\nshort\n") == "# A\nshort\n"


@pytest.mark.parametrize("unit", ["😀", "漢", "👨\u200d👩\u200d👧", "🇫🇷", "e\u0301", "é"])
def test_synopsis_cut_is_utf8_and_grapheme_safe(unit):
    body = "a" * 97 + unit * 400
    head = synopsis(body, head_chars=128, outline_chars=64).split("\n\n# Outline")[0]
    assert len(head.encode("utf-8")) <= 128
    assert head.startswith("a" * 97) and head[97:] == unit * ((len(head) - 97) // len(unit))


def test_synopsis_closes_a_fence_it_cuts_into():
    body = "````text\n" + "code line\n" * 2000 + "````\n# After\n"
    syn = synopsis(body, head_chars=512, outline_chars=256)
    head = syn.split("\n\n# Outline")[0]
    assert head.endswith("\n````")
    assert "- After" in syn


def test_chunks_for_note_uses_synopsis_above_threshold():
    body = _resource(400)
    big = chunks_for_note("r1", body, large_threshold_chars=len(body) - 1)
    assert big and all(c.synopsis for c in big)
    assert big[-1].heading_path == ("Outline",)
    assert sum(len(c.text) for c in big) < 12_000
    small = chunks_for_note("r1", body)
    assert small and not any(c.synopsis for c in small)


def test_deep_and_odd_markdown_is_bounded():
    for body in [
        "> " * 5000 + "x",
        "- " * 5000 + "x",
        "[" * 20000,
        "#" * 5000,
        "`" * 9000,
        "\n".join("#" * (i % 7) + f" h{i}" for i in range(3000)),
    ]:
        chunks = chunk_markdown("odd", body)
        assert _ns("".join(c.source_text for c in chunks)) == _ns(body)
        lint_levels(body)
        synopsis(body, head_chars=256, outline_chars=128)


def test_deterministic():
    assert chunk_markdown("n", SESSION) == chunk_markdown("n", SESSION)
    assert synopsis(_resource(200)) == synopsis(_resource(200))


_FRAGMENTS = st.sampled_from(
    [
        "# Title",
        "## Sub",
        "### Deeper",
        "#### Four",
        "##### Five",
        "#",
        "#no-space",
        "- bullet",
        "  - nested",
        "1. item",
        "> quote",
        "> # quoted",
        "```",
        "~~~",
        "```py",
        "---",
        "===",
        "***",
        "| a | b |",
        "    indented code",
        "<div>",
        "</div>",
        "Plain sentence. Another one!",
        "漢字のテキスト。",
        "emoji 😀👨\u200d👩\u200d👧 🇫🇷",
        "",
        "[[wikilink#^m-1]]",
        "**bold** _it_",
        "\t",
        "trailing spaces   ",
        "word\r",
        "\\# escaped",
    ]
)
_LINES = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=30)), max_size=60)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_LINES, newline=st.sampled_from(["\n", "\r\n"]), cap=st.sampled_from([40, 1500]))
def test_chunks_cover_every_non_whitespace_character(lines, newline, cap):
    body = newline.join(lines)
    chunks = chunk_markdown("h", body, cap_tokens=cap)
    assert _ns("".join(c.source_text for c in chunks)) == _ns(body)
    for c in chunks:
        assert c.text[: c.prefix_chars].endswith("\n\n") or c.prefix_chars == 0
        assert c.source_text.strip() and c.tokens == math.ceil(len(c.text.encode("utf-8", "surrogatepass")) / 4)
    assert chunk_markdown("h", body, cap_tokens=cap) == chunks


@settings(max_examples=200, deadline=None)
@given(lines=_LINES, head=st.integers(16, 400))
def test_synopsis_head_is_a_prefix_within_budget(lines, head):
    body = "\n".join(lines)
    syn = synopsis(body, head_chars=head, outline_chars=128)
    if syn == body.replace("\r\n", "\n").replace("\r", "\n"):
        return
    cut = syn.split("\n\n# Outline\n")[0]
    assert len(cut.encode("utf-8", "surrogatepass")) <= head + 8  # + a closing fence line


# --------------------------------------------------------------------------- transcripts


def _session_body(messages) -> str:
    from tests.ingest.test_notes import conversation
    from vault_pipeline.ingest.notes import session_note

    return session_note(conversation(*messages), "We talked about storage.").body


def test_transcript_is_one_chunk_per_message_even_with_hostile_markdown():
    from tests.ingest.test_notes import MESSAGES
    from vault_pipeline.ingest.notes import block_id

    chunks = chunk_markdown("s", _session_body(MESSAGES))
    summary, turns = chunks[0], chunks[1:]
    assert summary.heading_path == ("Storage plans", "Summary") and "^m-" not in summary.text
    # A look-alike id inside a fence or an HTML block ends no message; an empty message keeps its own.
    wanted = [block_id(m.id) for m in MESSAGES]
    assert [re.findall(r"\^(m-[A-Za-z0-9-]+)\s*$", c.text)[-1] for c in turns] == wanted
    for c in turns:
        assert c.heading_path == ("Storage plans", "Transcript")
        assert c.text.startswith("Storage plans > Transcript\n\n**")  # each message says where it sits


def test_a_heading_inside_a_message_does_not_cut_the_transcript():
    from tests.ingest.test_notes import Message
    from vault_pipeline.ingest.notes import block_id

    steps = "Here is how.\n\n## Steps\n\n### 1. Install\n\nRun the installer.\n\n# Done\n\nThat is all."
    messages = (
        Message("a", "user", "User", "How do I set it up?"),
        Message("b", "assistant", "Assistant", steps),
        Message("c", "user", "User", "Thanks!"),
    )
    chunks = chunk_markdown("s", _session_body(messages))
    turns = chunks[1:]
    assert [c.heading_path for c in turns] == [("Storage plans", "Transcript")] * 3
    assert [c.source_text.rsplit("^", 1)[1] for c in turns] == [block_id(m) for m in "abc"]
    assert "### 1. Install" in turns[1].source_text and turns[1].source_text.startswith("**Assistant:** Here is how.")


def test_an_escaped_look_alike_block_id_does_not_end_a_message():
    from tests.ingest.test_notes import Message

    messages = (
        Message("a", "user", "User", "Look: this line ends in ^m-fake\n\nand goes on."),
        Message("b", "assistant", "Assistant", "Fine."),
    )
    turns = chunk_markdown("s", _session_body(messages))[1:]
    assert [c.source_text for c in turns] == [
        "**User:** Look: this line ends in \\^m-fake\n\nand goes on. ^m-a",
        "**Assistant:** Fine. ^m-b",
    ]


def test_a_message_over_the_cap_splits_further_and_keeps_every_character():
    from tests.ingest.test_notes import Message
    from vault_pipeline.ingest.notes import block_id

    long = "\n\n".join(f"Paragraph {i} says one thing about the vault in plain words." for i in range(80))
    messages = (Message("a", "user", "User", "Short question?"), Message("b", "assistant", "Assistant", long))
    body = _session_body(messages)
    chunks = chunk_markdown("s", body, cap_tokens=300)
    turns = [c for c in chunks if c.heading_path[-1] == "Transcript"]
    assert len(turns) > 2 and all(c.tokens <= 300 for c in turns)
    assert turns[0].source_text.startswith("**User:** Short question?")
    assert turns[0].source_text.endswith(f"^{block_id('a')}")
    # Every character but the transcript's heading line, which each message's path prefix names.
    assert _ns("".join(c.source_text for c in chunks)) == _ns(body.replace("## Transcript", "", 1))


def test_every_piece_of_a_long_message_cites_it_and_a_lone_label_is_no_piece():
    from tests.ingest.test_notes import Message
    from vault_pipeline.ingest.notes import MESSAGE_ID, block_id
    from vault_pipeline.retrieve.blocks import transcript_parts

    code = "```sql\n" + "\n".join(f"INSERT INTO orders VALUES ({i}, 'row {i}');" for i in range(120)) + "\n```"
    prose = "\n\n".join(f"Step {i} explains one more part of the import in plain words." for i in range(60))
    messages = (
        Message("a", "user", "User", code),  # a label alone on its line, then one fence over the cap
        Message("b", "assistant", "Assistant", prose),
    )
    body = _session_body(messages)
    chunks = chunk_markdown("s", body, cap_tokens=300)
    turns = [c for c in chunks if c.heading_path[-1] == "Transcript"]
    assert len(turns) > 3 and all(c.tokens <= 300 for c in turns)
    # No piece is the label alone: the first opens with it and holds code.
    assert turns[0].source_text.startswith("**User:**") and "INSERT INTO" in turns[0].source_text
    for chunk in turns:
        assert MESSAGE_ID.findall(chunk.text) in ([block_id("a")], [block_id("b")])
        heading = " > ".join(chunk.heading_path)
        parts = transcript_parts(chunk.text, heading, ("a", "b"))
        assert {m for part in parts for m in part.messages} in ({"a"}, {"b"})
    # The added anchor lines are no source text: every character of the note is still covered once.
    assert _ns("".join(c.source_text for c in chunks)) == _ns(body.replace("## Transcript", "", 1))


def test_a_label_or_a_block_id_alone_is_no_piece_of_a_long_message():
    from vault_pipeline.ingest.notes import MESSAGE_ID

    table = "create table orders\n(\n" + "\n".join(f"    column_{i} int default {i}," for i in range(150)) + "\n)"
    body = f"## Transcript\n\n**user:**\n\n{table}\n\n^m-a\n\n**assistant:** Fine. ^m-b\n"
    turns = [c for c in chunk_markdown("s", body, cap_tokens=300) if c.heading_path[-1] == "Transcript"]
    assert [MESSAGE_ID.findall(c.text) for c in turns] == [["m-a"]] * (len(turns) - 1) + [["m-b"]]
    assert all(c.source_text.strip() not in ("**user:**", "^m-a") for c in turns)
    assert turns[0].source_text.startswith("**user:**\n\ncreate table orders")
    assert _ns("".join(c.source_text for c in turns)) == _ns(body.replace("## Transcript", "", 1))
