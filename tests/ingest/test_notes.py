"""notes.py: frontmatter, ids, safe names, block ids, builders, tiers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from vault_pipeline.errors import FrontmatterError
from vault_pipeline.ingest.notes import (
    atomic_id,
    atomic_note,
    block_id,
    session_id,
    session_note,
    thread_note,
    topic_hub,
    topic_id,
)
from vault_pipeline.text import word_count
from vault_pipeline.vault.frontmatter import KEY_ORDER, _Dumper, _fast_block, dump_yaml, render_note, split_frontmatter
from vault_pipeline.vault.note import TIER_WEIGHTS, note_id, note_tier, safe_stem


# Stand-ins for parse.Message / parse.Conversation / extract.AtomicUnit / extract.ThreadMap.
@dataclass(frozen=True)
class Message:
    id: str
    role: str
    speaker: str
    text: str
    created: datetime | None = None


@dataclass(frozen=True)
class Conversation:
    kind: str
    id: str
    title: str
    created: datetime | None
    updated: datetime | None
    messages: tuple[Message, ...]
    source: str = "export.json"
    thread: str | None = None
    alternates: int = 0


@dataclass(frozen=True)
class Unit:
    text: str
    category: str
    source_ids: list[str]
    speaker: str = "user"
    context: str | None = None


@dataclass(frozen=True)
class Step:
    session_id: str
    step: str


@dataclass(frozen=True)
class ThreadMap:
    title: str
    steps: list[Step]
    open_questions: list[str]


WHEN = datetime(2024, 3, 1, 9, 30, tzinfo=UTC)


def conversation(
    *messages: Message, kind: str = "chatgpt", cid: str = "c-1", title: str = "Storage plans"
) -> Conversation:
    return Conversation(kind, cid, title, WHEN, WHEN, tuple(messages))


# --------------------------------------------------------------------------- frontmatter


def test_render_is_canonical_byte_stable_and_round_trips():
    frontmatter = {
        "zeta": "last",
        "tags": ["b", "a"],
        "id": "a-1",
        "created": WHEN,
        "empty": "",
        "none": None,
        "session": "[[my-session-abc123]]",
        "type": "atomic",
        "source": {"kind": "chatgpt", "messages": ["m1", "m2"], "title": None},
    }
    text = render_note(frontmatter, "Body line.")
    assert text == render_note(dict(frontmatter), "Body line.")
    block = text.split("---\n")[1]
    keys = [line.split(":")[0] for line in block.splitlines() if re.match(r"^\w", line)]
    assert keys == ["id", "type", "source", "session", "created", "tags", "zeta"]
    assert 'session: "[[my-session-abc123]]"' in text
    assert "tags:\n  - b\n  - a\n" in text
    assert "created: 2024-03-01T09:30:00+00:00\n" in text
    assert "none" not in text and "empty" not in text and "title" not in text
    parsed, body = split_frontmatter(text)
    assert body == "Body line.\n"
    assert parsed["created"] == "2024-03-01T09:30:00+00:00"  # dates stay strings
    assert render_note(parsed, body) == text


def test_key_order_constant_matches_the_architecture():
    assert KEY_ORDER[:6] == ("id", "type", "category", "status", "tier", "speaker")


def test_unicode_values_are_written_readably():
    text = render_note({"id": "a-1", "title": "日本語 🎉"}, "x")
    assert "日本語 🎉" in text
    assert split_frontmatter(text)[0]["title"] == "日本語 🎉"


TRICKY = st.sampled_from(
    [
        "yes",
        "No",
        "null",
        "~",
        "123",
        "0x1F",
        "1e3",
        "2024-01-02",
        "12:30",
        "- a",
        "a: b",
        "a #b",
        "a#b",
        "#c",
        "x:",
        "'q'",
        'say "hi"',
        " lead",
        "trail ",
        "é ü",
        "[[link]]",
        '[[a"b]]',
        "[x]",
        "{y}",
        "...",
        "---",
        "? q",
        "D1:3",
        "@at",
        "%p",
        "a,b",
        "tab\tin",
        "line\nbreak",
        "\u2028",
        "\xa0nbsp",
        "🎉 party",
        "a" * 130,
    ]
)
SCALARS = st.one_of(TRICKY, st.text(max_size=40), st.integers(), st.booleans(), st.floats(allow_nan=False))
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, min_size=1, max_size=4),
    st.dictionaries(
        st.one_of(TRICKY, st.text(min_size=1, max_size=10)),
        st.one_of(SCALARS, st.lists(SCALARS, min_size=1, max_size=3)),
        min_size=1,
        max_size=3,
    ),
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.one_of(TRICKY, st.text(min_size=1, max_size=12)), VALUES, min_size=1, max_size=6))
def test_fast_yaml_emitter_matches_pyyaml_byte_for_byte(mapping):
    slow = yaml.dump(
        mapping, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=10**9
    )
    lines: list[str] = []
    if _fast_block(mapping, "", lines):
        assert "\n".join(lines) + "\n" == slow
    assert dump_yaml(mapping) == slow


def test_note_without_frontmatter_is_all_body():
    text = "# My own note\n\nWritten in Obsidian.\n"
    assert split_frontmatter(text) == ({}, text)
    assert render_note({}, text) == text


def test_crlf_and_empty_frontmatter():
    assert split_frontmatter("---\r\nid: x\r\n---\r\nbody\r\n") == ({"id": "x"}, "body\r\n")
    assert split_frontmatter("---\n---\nbody\n") == ({}, "body\n")


@pytest.mark.parametrize(
    "text",
    [
        "---\nid: [unclosed\n---\nbody\n",
        "---\nid: x\nbody without end\n",
        "---\n- a list\n---\n",
        "---\njust a string\n---\n",
    ],
)
def test_broken_frontmatter_raises(text):
    with pytest.raises(FrontmatterError):
        split_frontmatter(text, "inbox/broken.md")


# --------------------------------------------------------------------------- ids and names


def test_ids_are_stable_and_normalised():
    assert re.fullmatch(r"a-[0-9a-f]{12}", note_id("a", "x", "y"))
    assert note_id("a-", "x") == note_id("a", "x")
    first = atomic_id("chatgpt", "c-1", "decision", "We use Postgres.")
    assert first == atomic_id("chatgpt", "c-1", "decision", "we  use postgres")
    assert first != atomic_id("chatgpt", "c-1", "fact", "We use Postgres.")
    assert first != atomic_id("claude", "c-1", "decision", "We use Postgres.")
    assert session_id("chatgpt", "c-1") != session_id("chatgpt", "c-2")
    assert topic_id("Databases") == topic_id("databases!")


@pytest.mark.parametrize(
    "title",
    [
        "../../etc/passwd",
        "a" * 300,
        "日本語のノート " * 40,
        "🎉🚀✨",
        '?!/\\:*"<>|#^[]',
        "CON",
        "nul",
        "COM1",
        "..",
        ".hidden",
        "a\x00b\x07c",
        "",
        "   ",
        "x" + "é" * 200,
    ],
)
def test_safe_stem_edge_cases(title):
    nid = note_id("a", title)
    stem = safe_stem(title, nid)
    _assert_safe(stem)
    assert stem.endswith(nid[-6:])
    assert stem == safe_stem(title, nid)


def test_safe_stem_is_readable():
    assert (
        safe_stem("We will use Postgres (v16) for storage!", "a-0123456789ab")
        == "we-will-use-postgres-v16-for-storage-6789ab"
    )
    assert safe_stem("Café in Zürich", "a-0123456789ab").startswith("café-in-zürich-")
    assert safe_stem("../../etc/passwd", "a-0123456789ab") == "etc-passwd-6789ab"
    assert safe_stem("🎉", "a-0123456789ab") == "note-6789ab"


def _assert_safe(stem: str) -> None:
    assert stem and stem.strip() == stem
    assert len(stem.encode("utf-8")) <= 120
    assert ".." not in stem and not stem.startswith(".")
    assert not set(stem) & set('/\\:*?"<>|#^[]')
    assert all(ord(ch) >= 32 for ch in stem)
    assert stem.split(".")[0].lower() not in {"con", "prn", "aux", "nul", "com1", "lpt1"}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.text(max_size=30))
def test_safe_stem_property(title, nid):
    _assert_safe(safe_stem(title, nid))


@pytest.mark.parametrize(
    "mid", ["D1:3", "D12:104", "6f1c2d3e-1111-2222-3333-444455556666", "msg_01AbC", "a b/c", "", "::"]
)
def test_block_ids_are_obsidian_safe_and_deterministic(mid):
    bid = block_id(mid)
    assert re.fullmatch(r"m-[A-Za-z0-9-]+", bid)
    assert bid == block_id(mid)


def test_block_id_examples():
    uuid = "6f1c2d3e-1111-2222-3333-444455556666"
    assert block_id(uuid) == f"m-{uuid}"
    assert re.fullmatch(r"m-D1-3-[0-9a-f]{4}", block_id("D1:3"))
    assert block_id("D1:3") != block_id("D1;3")


# --------------------------------------------------------------------------- builders


def _block_ids(body: str) -> list[str]:
    """Block ids as Obsidian finds them: at a line end after a space, or alone, outside code and HTML."""
    found, fence, html = [], None, None
    for line in body.splitlines():
        if fence is not None:
            if re.fullmatch(rf" {{0,3}}{fence[0]}{{{len(fence)},}}\s*", line):
                fence = None
            continue
        if html is not None:
            if html in line.lower():
                html = None
            continue
        marker = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if marker:
            fence = marker[1]
            continue
        tag = re.match(r"^ {0,3}<(pre|script|style|textarea|!--)", line, re.I)
        if tag:
            end = "-->" if tag[1] == "!--" else f"</{tag[1].lower()}>"
            html = None if end in line.lower()[tag.end() :] else end
            continue
        hit = re.search(r"(?:^|\s)\^([A-Za-z0-9-]+)$", line)
        if hit:
            found.append(hit[1])
    assert fence is None and html is None, "transcript ends inside a code fence or HTML block"
    return found


MESSAGES = (
    Message("D1:1", "user", "Caroline", "Plain question about storage?"),
    Message(
        "6f1c2d3e-1111-2222-3333-444455556666",
        "assistant",
        "Assistant",
        "Here is code:\n\n```python\nprint('hi') ^m-fake\n```\n\nAnd a closing paragraph.",
    ),
    Message("m3", "assistant", "Assistant", "Ends in code:\n\n```sql\nSELECT 1;\n```"),
    Message("m4", "assistant", "Assistant", "Unclosed fence:\n~~~\nstill code"),
    Message("m5", "user", "User", "- a list\n- of items"),
    Message("m6", "user", "User", "| a | b |\n|---|---|\n| 1 | 2 |"),
    Message("m7", "user", "User", "First paragraph.\n\nSecond paragraph ends with ^lookalike"),
    Message("m8", "user", "User", "   "),
    Message("m9", "assistant", "**Bot**", "> a quote\n> continued"),
    Message("m10", "assistant", "Assistant", "Raw HTML:\n\n<pre>\nnever closed ^m-m11"),
    Message("m11", "user", "User", "<!-- an open comment\nstill open"),
    Message("m12", "user", "User", "Hard break  \nkept\t"),
)


def test_session_note_has_one_block_id_per_message():
    conv = conversation(*MESSAGES)
    note = session_note(conv, "We talked about storage.")
    ids = _block_ids(note.body)
    assert ids == [block_id(m.id) for m in MESSAGES]
    assert note.folder == "sessions" and note.relpath == f"sessions/{note.stem}.md"
    assert note.frontmatter["source_messages"] == [m.id for m in MESSAGES] and "source" not in note.frontmatter
    assert note.frontmatter["source_kind"] == "chatgpt" and "status" not in note.frontmatter
    assert note.frontmatter["tags"] == ["session", "chatgpt"]
    assert note.frontmatter["created"] == "2024-03-01T09:30:00+00:00"
    assert note.body.startswith("# Storage plans\n\n## Summary\n\nWe talked about storage.\n\n## Transcript\n\n")
    assert "**Caroline:** Plain question about storage? ^m-D1-1-" in note.body
    assert "print('hi') ^m-fake" in note.body  # code is left as it was
    assert "Hard break  \nkept ^m-m12" in note.body
    assert session_note(conv, "We talked about storage.").text() == note.text()


def test_session_note_can_link_units_by_message():
    conv = conversation(MESSAGES[0])
    note = session_note(conv, "s", {"D1:1": ["we-use-postgres-abc123"]})
    assert "Notes: [[we-use-postgres-abc123]]" in note.body
    assert _block_ids(note.body) == [block_id("D1:1")]


def test_atomic_note_links_resolve_into_the_session_transcript():
    conv = conversation(*MESSAGES[:2], kind="locomo")
    session = session_note(conv, "summary")
    unit = Unit("We will store notes in   Postgres.", "decision", ["D1:1", MESSAGES[1].id], context="for the prototype")
    note = atomic_note(unit, conv, session.stem, "2024-03-01T09:30:00+00:00", ["Data storage", "Postgres 16"])
    fm = note.frontmatter
    assert (note.folder, fm["type"], fm["status"], fm["tier"], fm["category"]) == (
        "inbox",
        "atomic",
        "provisional",
        "chat",
        "decision",
    )
    assert "source" not in fm  # flat properties: Obsidian does not show nested mappings
    assert (fm["source_kind"], fm["source_conversation"], fm["source_title"]) == ("locomo", "c-1", "Storage plans")
    assert fm["source_messages"] == ["D1:1", MESSAGES[1].id]
    assert fm["tags"] == ["decision", "topic/data-storage", "topic/postgres-16"]
    assert fm["created"] == "2024-03-01T09:30:00+00:00"
    assert fm["session"] == f"[[{session.stem}]]"
    lines = note.body.splitlines()
    assert lines[0] == "We will store notes in Postgres."
    assert "Context: for the prototype. Caroline, 1 March 2024." in lines  # + who and when (ingest/context.py)
    targets = re.findall(r"\[\[([^\]#]+)#\^([A-Za-z0-9-]+)\]\]", note.body)
    assert [t[0] for t in targets] == [session.stem, session.stem]
    assert {t[1] for t in targets} <= set(_block_ids(session.body))
    again = atomic_note(unit, conv, session.stem, "2024-03-01T09:30:00+00:00", ["Data storage", "Postgres 16"])
    assert again.id == note.id and again.text() == note.text()
    parsed, body = split_frontmatter(note.text())
    assert parsed["id"] == note.id and body == note.body


def test_topic_hub_sorted_deduplicated_and_extendable():
    hub = topic_hub("Databases", ["b-note", "a-note", "b-note"])
    assert hub.folder == "topics" and hub.frontmatter["type"] == "topic"
    assert hub.frontmatter["tags"] == ["hub", "topic/databases"]
    assert re.findall(r"\[\[([^\]]+)\]\]", hub.body) == ["a-note", "b-note"]
    grown = topic_hub("Databases", ["c-note", *re.findall(r"\[\[([^\]]+)\]\]", hub.body)])
    assert re.findall(r"\[\[([^\]]+)\]\]", grown.body) == ["a-note", "b-note", "c-note"]
    assert grown.id == hub.id and grown.stem == hub.stem


def test_thread_note_links_each_session():
    tmap = ThreadMap(
        "Storage work",
        [Step("c-1", "Chose Postgres"), Step("c-2", "Benchmarked"), Step("c-9", "Unknown session")],
        ["Which index type?"],
    )
    note = thread_note("storage", tmap, {"c-1": "storage-plans-aaaaaa", "c-2": "bench-bbbbbb"})
    assert note.folder == "threads" and note.frontmatter["type"] == "thread"
    assert note.frontmatter["tags"] == ["thread"]
    assert "1. [[storage-plans-aaaaaa]]: Chose Postgres" in note.body
    assert "2. [[bench-bbbbbb]]: Benchmarked" in note.body
    assert "3. session c-9: Unknown session" in note.body
    assert "- Which index type?" in note.body


# --------------------------------------------------------------------------- tiers and words


@pytest.mark.parametrize(
    "frontmatter, relpath, tier",
    [
        ({"status": "kept", "tier": "chat"}, "inbox/x.md", "engram"),
        ({"tier": "resource"}, "inbox/x.md", "resource"),
        ({}, "engrams/x.md", "engram"),
        ({}, "resources/x.md", "resource"),
        ({}, "web/x.md", "web"),
        ({}, "sessions/x.md", "chat"),
        ({}, "threads/x.md", "chat"),
        ({}, "topics/x.md", "chat"),
        ({}, "inbox/x.md", "chat"),
        ({}, "My idea.md", "engram"),
        ({}, "Projects/deep/idea.md", "engram"),
        ({"tier": "bogus"}, "web/x.md", "web"),
    ],
)
def test_note_tier(frontmatter, relpath, tier):
    assert note_tier(frontmatter, relpath) == tier
    assert tier in TIER_WEIGHTS


def test_tier_weights():
    assert TIER_WEIGHTS == {"engram": 1.0, "resource": 0.8, "chat": 0.6, "web": 0.1}


def test_word_count():
    assert word_count("We don't use state-of-the-art tools, e.g. Postgres 16.") == 8
    assert word_count("") == 0


def test_builders_accept_dates_and_missing_created():
    conv = Conversation("claude", "u-1", "", None, None, (Message("x", "user", "User", "hi"),))
    note = session_note(conv, "")
    assert "created" not in note.frontmatter or not note.frontmatter["created"]
    assert "created" not in note.text()
    assert render_note({"created": date(2024, 1, 2)}, "").startswith("---\ncreated: 2024-01-02\n")


@pytest.mark.parametrize("title", ["The __str__ method returns a string", "_private_ names", "a__b and pg_dump"])
def test_stems_keep_no_underscore_a_markdown_reader_takes_for_emphasis(title):
    from markdown_it import MarkdownIt

    stem = safe_stem(title, "a-0123456789ab")
    html = MarkdownIt("commonmark").render(f"[[{stem}]]")
    assert "<em>" not in html and "<strong>" not in html and stem in html, (stem, html)
    assert ("pg_dump" in stem) == ("pg_dump" in title)  # inside a word an underscore is kept
