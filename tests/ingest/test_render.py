"""Transcripts that render: no message's Markdown leaks into the next, every block id is a paragraph's.

Checked with a real CommonMark parser (markdown-it-py, GFM tables on: Obsidian's flavour): each
``^m-<id>`` must be the last text of a paragraph, never inside a code block, a fence or raw HTML.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from tests.support.paths import shared_data
from vault_pipeline.index.check import check
from vault_pipeline.ingest.notes import block_id, render_transcript, session_note
from vault_pipeline.ingest.parse import Conversation
from vault_pipeline.ingest.parse import Message as ParsedMessage

WHEN = datetime(2024, 3, 1, 9, 30, tzinfo=UTC)
MD = MarkdownIt("commonmark").enable("table")
ANCHOR = re.compile(r"(?:^|\s)\^(m-[A-Za-z0-9-]+)[ \t]*$")


def paragraph_anchors(body: str) -> list[str]:
    """The block ids that end a paragraph (raw source and last text token agree), in order.

    An id swallowed by a fence, a code block or raw HTML is missing here; one in the middle of a
    paragraph fails."""
    tokens = MD.parse(body)
    found = []
    for index, token in enumerate(tokens):
        if token.type != "inline" or tokens[index - 1].type != "paragraph_open":
            continue
        source = token.content.split("\n")
        assert not any(ANCHOR.search(line) for line in source[:-1]), f"block id inside a paragraph: {source}"
        hit = ANCHOR.search(source[-1])
        if hit:
            last = token.children[-1]
            assert last.type == "text" and last.content.endswith(f"^{hit[1]}"), (token.content, last)
            found.append(hit[1])
    return found


def Message(mid: str, role: str, speaker: str, text: str) -> ParsedMessage:
    return ParsedMessage(mid, role, speaker, text, WHEN)  # type: ignore[arg-type]


def conversation(*messages: ParsedMessage) -> Conversation:
    return Conversation("chatgpt", "c-1", "Hostile", WHEN, WHEN, tuple(messages), "test")


HOSTILE = [
    "Unclosed backticks:\n\n```python\nprint('UNCLOSED')\n\nmore code",
    "Tildes left open:\n~~~\nTILDE code",
    "Indented code at the end:\n\n    INDENTED = 1\n    x = 2",
    "<?php\n\nnamespace PHPCODE;\n\nclass A {\n    function b() {}\n}",
    '<div class="x">\nDIVBLOCK\n</div>',
    "<!-- COMMENT never closed\n\nstill in the comment",
    "```markdown\nFENCE-IN-FENCE outer\n```python\nx = 1\n```\ntail\n```",
    "````\n```\nLONGFENCE inner\n```\n````",
    "A list:\n\n- LISTITEM one\n- two",
    "| TABLE | b |\n|---|---|\n| 1 | 2 |",
    "TABLE2 | b\n--|--\n1 | 2",
    "> QUOTE line\n> more",
    "Text with a lookalike at the end ^m-fake\n\nFAKE closing line ^m-fake",
    "<script>\nSCRIPT = 1\n\nvar y;",
    "<![CDATA[\nCDATA here",
    "<!DOCTYPE html>\n<html>\n<body>DOCTYPE page",
    "<Resultaat>\n  <Status>XMLTAG</Status>\n",
    "1. Step one:\n   ```bash\n   pip install LISTFENCE\n",
    "- item\n  ```\n  NESTEDOPEN\n\n  more\nlazy LAZYLINE",
    "Heading next:\n\nSETEXT\n===",
    "$$\nMATH\n$$",
    "<pre>\nPRE block ^m-n0",
]
MARKERS = [
    "UNCLOSED",
    "TILDE",
    "INDENTED",
    "PHPCODE",
    "DIVBLOCK",
    "COMMENT",
    "FENCE-IN-FENCE",
    "LONGFENCE",
    "LISTITEM",
    "TABLE",
    "TABLE2",
    "QUOTE",
    "FAKE",
    "SCRIPT",
    "CDATA",
    "DOCTYPE",
    "XMLTAG",
    "LISTFENCE",
    "NESTEDOPEN",
    "SETEXT",
    "MATH",
    "PRE",
]


def hostile_then_normal() -> list[ParsedMessage]:
    messages = []
    for number, text in enumerate(HOSTILE):
        messages.append(Message(f"h{number}", "assistant", "Assistant", text))
        messages.append(Message(f"n{number}", "user", "User", f"Normal reply {number}."))
    return messages


def test_every_block_id_ends_a_paragraph_after_hostile_messages():
    messages = hostile_then_normal()
    body = session_note(conversation(*messages), "summary").body
    assert paragraph_anchors(body) == [block_id(m.id) for m in messages]
    for number, marker in enumerate(MARKERS):
        assert marker in body, marker  # the message's text is still there
        assert f"**User:** Normal reply {number}. ^m-n{number}" in body  # and the next one renders plain


def test_raw_html_is_shown_as_code_and_open_fences_are_closed():
    body = render_transcript(hostile_then_normal())
    tokens = MD.parse(body)
    assert not [t for t in tokens if t.type == "html_block"]
    fences = {t.content.split("\n")[0]: t.info for t in tokens if t.type == "fence"}
    assert fences["<?php"] == "php" and fences['<div class="x">'] == "html"
    assert fences["<!DOCTYPE html>"] == "html"  # the HTML blocks of one page stay one block
    assert "print('UNCLOSED')\n\nmore code\n```\n\n^m-h0" in body
    assert "TILDE code\n~~~\n\n^m-h1" in body
    assert "FAKE closing line \\^m-fake ^m-h12" in body  # a lookalike id is escaped, not taken


def test_a_fence_around_html_is_longer_than_any_backticks_inside():
    text = "<div>\n````\nnot a closer\n````\n</div>"
    body = render_transcript([Message("a", "user", "User", text), Message("b", "user", "User", "after")])
    assert "`````html\n<div>\n````\nnot a closer\n````\n</div>\n`````" in body
    assert paragraph_anchors(body) == ["m-a", "m-b"]


@pytest.mark.parametrize(
    ("text", "rendered"),
    [
        ("Plain question?", "**User:** Plain question? ^m-x"),
        ("Two\nlines", "**User:** Two\nlines ^m-x"),
        ("First.\n\n- a\n- b", "**User:** First.\n\n- a\n- b\n\n^m-x"),
        ("Code:\n\n```py\nx\n```\n\nDone.", "**User:** Code:\n\n```py\nx\n```\n\nDone. ^m-x"),
        ("Code:\n```py\nx\n```", "**User:**\n\nCode:\n```py\nx\n```\n\n^m-x"),
        ("a < b and <3", "**User:** a < b and <3 ^m-x"),
    ],
)
def test_plain_and_closed_messages_render_as_before(text, rendered):
    assert render_transcript([Message("x", "user", "User", text)]) == rendered + "\n"


FRAGMENTS = st.sampled_from(
    [
        "```",
        "````js",
        "~~~",
        "    indented",
        "\tcode",
        "<?php",
        "?>",
        "<div>",
        "</div>",
        "<!--",
        "-->",
        "<pre>",
        "<span>",
        "<custom-tag attr='1'>",
        "<![CDATA[",
        "- item",
        "  - nested",
        "1. step",
        "   ```",
        "> quote",
        "> ```",
        "| a | b |",
        "|---|---|",
        "a | b",
        "--|--",
        "# heading",
        "===",
        "---",
        "text ^m-fake",
        "plain words",
        "",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(FRAGMENTS, min_size=1, max_size=8), min_size=1, max_size=4))
def test_no_mix_of_markdown_leaks_into_the_next_message(texts):
    messages = []
    for number, lines in enumerate(texts):
        messages.append(Message(f"h{number}", "assistant", "Assistant", "\n".join(lines)))
        messages.append(Message(f"n{number}", "user", "User", "after"))
    body = render_transcript(messages)
    assert paragraph_anchors(body) == [block_id(m.id) for m in messages]
    for number in range(len(texts)):
        assert f"**User:** after ^m-n{number}" in body


# --------------------------------------------------------------------------- vault check


def test_check_tells_heading_links_from_block_links(make_vault):
    vault = make_vault(
        notes={
            "target.md": "# Title\n\n## Next steps: soon\n\nText ^para\n\n```\ncode ^incode\n```\n\n<div>\nhtml ^inhtml\n</div>\n",
            "links.md": (
                "[[target#Title]] [[target#next steps soon]] [[target#Title#Next steps: soon]] [[target#^para]]\n"
                "[[target#Missing]] [[target#^incode]] [[target#^inhtml]] [[target#^Title]]\n\n"
                "```\n[[target#^in-code-not-a-link]]\n```\n"
            ),
        }
    )
    report = check(vault)
    assert report.dangling_headings == [("links.md", "target#Missing")]
    assert report.dangling_blocks == [
        ("links.md", "target#^incode"),
        ("links.md", "target#^inhtml"),
        ("links.md", "target#^Title"),
    ]
    assert report.dangling_links == []


def test_check_pairs_fences_as_commonmark_does(make_vault):
    body = "Use ``` inline.\n\n````\n```\nnot closed by this ^inside\n````\n\nAfter ^after\n"
    vault = make_vault(notes={"t.md": body, "l.md": "[[t#^after]] [[t#^inside]]\n"})
    assert check(vault).dangling_blocks == [("l.md", "t#^inside")]


# --------------------------------------------------------------------------- the real export


@pytest.mark.slow
def test_real_export_ingests_to_a_vault_without_dangling_links(tmp_path):
    export = shared_data() / "exports" / "chatgpt-pkuppens-2023.json"
    if not export.exists():
        pytest.skip(f"{export} is absent")
    from vault_pipeline import pipeline
    from vault_pipeline.models.offline import OfflineBackend
    from vault_pipeline.vault.files import Vault

    Vault.init(tmp_path / "v").close()
    vault = Vault.open(tmp_path / "v")
    try:
        pipeline.ingest(vault, [export], OfflineBackend())
        report = check(vault)
        assert (report.invalid, report.dangling_links, report.dangling_blocks, report.dangling_headings) == (
            [],
            [],
            [],
            [],
        )
        sessions = sorted((vault.root / "sessions").glob("*.md"))
        assert len(sessions) > 100
        for path in sessions:
            text = path.read_text(encoding="utf-8")
            anchors = paragraph_anchors(text)
            assert anchors and len(anchors) == len(set(anchors)), path.name
            assert len(anchors) == len(ANCHOR_LINE.findall(text)), path.name  # none hidden in code
    finally:
        vault.close()


ANCHOR_LINE = re.compile(r"(?:^|[ \t])\^m-[A-Za-z0-9-]+[ \t]*$", re.M)
