"""Heading-structured chunks of a note body: one complete level of one concept per chunk.

The retrieval unit is one complete level of one concept: a heading (H1-H4)
with its own content down to the next H1-H4 heading. Content before the
first heading is one chunk; an atomic note (short, no headings) is exactly
one chunk. A chunk's text is the verbatim source slice, with the heading
path ("Project > Risks") prepended where the slice alone would not say where
it sits, so it reads alone. Tokens are counted after the split, for the
budget only: ``ceil(utf8_bytes / 4)``, a cheap deterministic estimate.

A session note's transcript section is one chunk per message (the
"Transcript" heading, each message ending with its ``^m-`` block id): a
question matches one turn, and a turn is what a package cites and a reader
checks. Otherwise only a section above the hard cap (1,500 tokens) is split
further, at paragraph boundaries first, then at sentence or list-item line
ends, never mid-sentence. Large resources (engram-go's size tiers) are chunked from a
synopsis: the first 8 KiB cut at a clean boundary, plus an outline.

Headings come from mistune's block parser (so a ``#`` line inside fenced
code is not a heading), with a small subclass that records where top-level
headings and fences sit in the source.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mistune.block_parser import BlockParser
from mistune.core import BlockState

from vault_pipeline.text import estimate_tokens, grapheme_safe
from vault_pipeline.vault.format import MESSAGE_ID, TRANSCRIPT_HEADING, embedding_text

# Bumped when the same note would chunk differently; an index chunked the old way is re-chunked by
# the next sync (``index.sync``), keeping the vectors of unchanged texts. 2: one chunk per
# transcript message; 3: a heading inside a message no longer ends the transcript; 4: an escaped
# look-alike ("\^m-x" in a message's text) no longer ends a message; 5: every piece of a message
# over the cap cites it (an added anchor line), and a speaker's label alone is no piece.
CHUNKING_VERSION = 6
HARD_CAP_TOKENS = 1500
SPLIT_LEVELS = 4  # H1-H4 split; H5/H6 stay inside their section
BULLET_CEILING = 4  # more bullets than this under one heading is more than one governing idea
LARGE_THRESHOLD_CHARS = 500_000  # engram-go's Tier-1 boundary (500 KB)
PATH_SEPARATOR = " > "

_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")
_BLANK_RUN = re.compile(r"\n[ \t]*\n\s*")
_LINE_START = re.compile(r"\n(?=\S|[ \t]+\S)")
_LIST_OR_ROW = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)]|\|)(?:[ \t]|$)")
_SENTENCE_END = re.compile(r"[.!?:;\u3002\uff01\uff1f][\"'\u201d\u2019)\]]*[ \t]*$")
_SENTENCE_GAP = re.compile(
    r"(?:[.!?][\"'\u201d\u2019)\]]*[ \t]+"  # Latin: punctuation, then a space
    r"|[\u3002\uff01\uff1f][\u300d\u300f\uff09]*[ \t]*)(?=\S)"
)  # CJK: no space
_WHITESPACE = re.compile(r"\s+")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Chunk:
    """One retrieval unit of a note; ``text[prefix_chars:]`` is verbatim source."""

    note_id: str
    ordinal: int
    heading_path: tuple[str, ...]
    level: int
    text: str
    tokens: int
    synopsis: bool = False
    prefix_chars: int = 0
    suffix_chars: int = 0  # an added anchor line: a piece of a long message cites that message
    columns: Mapping[str, Any] | None = None  # row columns of its own (a statement: its type, speaker, message)

    @property
    def source_text(self) -> str:
        """The chunk's text without the added heading-path prefix and anchor line."""
        return self.text[self.prefix_chars : len(self.text) - self.suffix_chars]

    @property
    def embedded_text(self) -> str:
        """What the index embeds for this chunk: its text without machine ids (``embedding_text``)."""
        return embedding_text(self.text)


@dataclass(frozen=True)
class LintFinding:
    """A heading whose level holds more bullets than one governing idea can carry."""

    heading_path: tuple[str, ...]
    line: int
    bullets: int
    message: str


@dataclass(frozen=True)
class _Heading:
    level: int
    title: str
    start: int  # offset of the heading's first line
    end: int  # offset just after the heading line(s)


@dataclass(frozen=True)
class _Section:
    heading_path: tuple[str, ...]
    level: int
    start: int
    heading_end: int  # == start for the preamble
    end: int


@dataclass(frozen=True)
class _Parsed:
    text: str
    tokens: list[dict]
    headings: list[_Heading]
    fences: list[tuple[int, int]]  # top-level fenced code spans


# -- parsing ---------------------------------------------------------------


class _SpanState(BlockState):
    """Block state that remembers where each top-level paragraph starts."""

    def add_paragraph(self, text: str) -> None:
        before = self.last_token()
        super().add_paragraph(text)
        if self.parent is None and self.last_token() is not before:
            self.tokens[-1]["_start"] = self.cursor


class _SpanParser(BlockParser):
    """mistune's block parser, recording source spans of top-level headings and fences."""

    state_cls = _SpanState

    def parse_atx_heading(self, m, state):
        end = super().parse_atx_heading(m, state)
        if state.parent is None:
            state.last_token()["_span"] = (m.start(), end)
        return end

    def parse_setex_heading(self, m, state):
        before = state.last_token()
        end = super().parse_setex_heading(m, state)
        if (
            end
            and state.parent is None
            and before is not None
            and state.last_token() is before
            and before["type"] == "heading"
        ):
            start = before["_start"] if "_start" in before else _paragraph_start(state.src, m.start())
            before["_span"] = (start, end)
        return end

    def parse_fenced_code(self, m, state):
        end = super().parse_fenced_code(m, state)
        if end and state.parent is None:
            state.last_token()["_span"] = (m.start(), end)
        return end


def _paragraph_start(src: str, underline: int) -> int:
    """Fallback: the first line of the non-blank run that ends just before ``underline``."""
    pos = underline
    while pos > 0:
        prev = src.rfind("\n", 0, pos - 1) + 1
        if not src[prev:pos].strip():
            return pos
        pos = prev
    return 0


_PARSER = _SpanParser()


def normalise_newlines(body: str) -> str:
    """The body with CRLF and CR line ends turned into LF (offsets refer to this text)."""
    return body.replace("\r\n", "\n").replace("\r", "\n")


def _parse(text: str) -> _Parsed:
    """Top-level block tokens of ``text`` plus the spans of its headings and fences."""
    state = _SpanState()
    state.process(text if text.endswith("\n") else text + "\n")
    _PARSER.parse(state)
    headings, fences = [], []
    limit = len(text)
    for tok in state.tokens:
        span = tok.get("_span")
        if span is None:
            continue
        start, end = span[0], min(span[1], limit)
        if tok["type"] == "heading":
            title = _WHITESPACE.sub(" ", tok.get("text", "")).strip()
            headings.append(_Heading(tok["attrs"]["level"], title, start, end))
        elif tok["type"] == "block_code":
            fences.append((start, end))
    return _Parsed(text, state.tokens, headings, fences)


# -- sections --------------------------------------------------------------


def _sections(parsed: _Parsed, max_level: int = SPLIT_LEVELS) -> list[_Section]:
    """Preamble plus one section per heading up to ``max_level``, each down to the next one."""
    text, heads = parsed.text, [h for h in parsed.headings if h.level <= max_level]
    first = heads[0].start if heads else len(text)
    sections = [_Section((), 0, 0, 0, first)] if text[:first].strip() else []
    stack: list[_Heading] = []
    for i, head in enumerate(heads):
        while stack and stack[-1].level >= head.level:
            stack.pop()
        stack.append(head)
        end = heads[i + 1].start if i + 1 < len(heads) else len(text)
        sections.append(_Section(tuple(h.title for h in stack), head.level, head.start, head.end, end))
        if head.title == TRANSCRIPT_HEADING:
            # A session's transcript runs to the end of the note: a heading inside it is a message's
            # own Markdown ("### 3. Set up the database"), which must not cut the message apart.
            sections[-1] = replace(sections[-1], end=len(text))
            break
    return sections


def _fold_empty_parents(text: str, sections: list[_Section]) -> list[_Section]:
    """Fold a heading with no own content into its first child, so no chunk is a bare title."""
    out: list[_Section] = []
    carried: int | None = None
    for i, sec in enumerate(sections):
        start = sec.start if carried is None else carried
        nxt = sections[i + 1] if i + 1 < len(sections) else None
        if sec.level and nxt and nxt.level > sec.level and not text[sec.heading_end : sec.end].strip():
            carried = start
            continue
        carried = None
        out.append(replace(sec, start=start))
    return out


# -- splitting an over-long section -------------------------------------------


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    """True if ``pos`` falls strictly inside one of the sorted, disjoint ``spans``."""
    i = bisect.bisect_right(spans, (pos, math.inf)) - 1
    return i >= 0 and spans[i][0] < pos < spans[i][1]


def _cut_points(text: str, lo: int, hi: int, fences: list[tuple[int, int]]) -> dict[int, int]:
    """Safe places to cut ``text[lo:hi]``, by priority: 3 paragraph, 2 line end, 1 sentence."""
    cuts: dict[int, int] = {}
    local = [(a, b) for a, b in fences if a < hi and b > lo]
    for m in _SENTENCE_GAP.finditer(text, lo, hi):
        if not _inside(m.end(), local):
            cuts[m.end()] = 1
    _line_cuts(text, lo, hi, local, cuts)
    for m in _BLANK_RUN.finditer(text, lo, hi):
        pos = m.end()
        if lo < pos < hi and not _inside(pos, local):
            cuts[pos] = 3
    return {p: v for p, v in cuts.items() if lo < p < hi}


def _line_cuts(text: str, lo: int, hi: int, local: list[tuple[int, int]], cuts: dict[int, int]) -> None:
    """Line starts into ``cuts``: 2 after a sentence's end or at a list item or table row, 1 inside a fence."""
    for m in _LINE_START.finditer(text, lo, hi):
        pos = m.end()
        line_start = text.rfind("\n", lo, m.start())
        prev_line = text[(lo if line_start < 0 else line_start + 1) : m.start()]
        in_fence = _inside(pos, local)
        if in_fence or _SENTENCE_END.search(prev_line) or _LIST_OR_ROW.match(text, pos):
            cuts[pos] = max(cuts.get(pos, 0), 1 if in_fence else 2)


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def _choose_cut(cands: list[tuple[int, int, int]], floor: int) -> int:
    """Best (priority, position) among candidates past ``floor`` bytes, else among all."""
    late = [c for c in cands if c[1] >= floor] or cands
    return max(late, key=lambda c: (c[2], c[0]))[0]


def _split_span(text: str, lo: int, hi: int, budget_bytes: int, fences: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Split ``text[lo:hi]`` into spans of at most ``budget_bytes`` at the best safe cuts."""
    cuts = sorted(_cut_points(text, lo, hi, fences).items())
    offsets, acc, prev = [], 0, lo
    for pos, _ in cuts:
        acc += _utf8_len(text[prev:pos])
        offsets.append(acc)
        prev = pos
    total = acc + _utf8_len(text[prev:hi])
    spans, start, base, i = [], lo, 0, 0
    while total - base > budget_bytes and i < len(cuts):
        j = bisect.bisect_right(offsets, base + budget_bytes, lo=i)
        if j > i:
            cands = [(cuts[k][0], offsets[k] - base, cuts[k][1]) for k in range(i, j)]
            pos = _choose_cut(cands, budget_bytes // 2)
        else:  # nothing safe inside the budget: overrun to the next safe cut
            pos = cuts[i][0]
        k = bisect.bisect_left(cuts, (pos, 0))
        spans.append((start, pos))
        start, base, i = pos, offsets[k], k + 1
    spans.append((start, hi))
    return spans


# -- chunks ----------------------------------------------------------------


def _clean(raw: str) -> str:
    """Drop leading blank lines and trailing whitespace (indentation of line one stays)."""
    return _LEADING_BLANK_LINES.sub("", raw).rstrip()


def _prefix(path: tuple[str, ...], continued: bool) -> str:
    """The heading-path line, needed when the slice does not open with its whole path."""
    titles = [t for t in path if t]
    if not titles or (len(path) == 1 and not continued):
        return ""
    return PATH_SEPARATOR.join(titles) + "\n\n"


def _message_spans(parsed: _Parsed, sec: _Section) -> list[tuple[int, int, str]]:
    """A transcript section's messages: each span ends after its block anchor line (its block id;
    "" for text after the last one)."""
    text, spans, start = parsed.text, [], sec.heading_end
    local = [(a, b) for a, b in parsed.fences if a < sec.end and b > sec.start]
    for m in MESSAGE_ID.finditer(text, sec.heading_end, sec.end):
        if not _inside(m.start(), local):
            spans.append((start, m.end(), m.group(1)))
            start = m.end()
    if text[start : sec.end].strip():
        spans.append((start, sec.end, ""))
    return spans


Piece = tuple[str, str, str]  # (prefix, verbatim text, suffix)


def _section_pieces(parsed: _Parsed, sec: _Section, cap_tokens: int) -> list[Piece]:
    """(prefix, verbatim text, suffix) pieces of one section, split only above the hard cap; a
    transcript section gives one piece per message (each under its heading path), a message over
    the cap more, each of them closed by the message's block id so that it cites its message."""
    head = _prefix(sec.heading_path, continued=False)
    tail = _prefix(sec.heading_path, continued=True)
    if sec.heading_path and sec.heading_path[-1] == TRANSCRIPT_HEADING:
        return [
            piece
            for a, b, anchor in _message_spans(parsed, sec)
            for piece in _pieces(parsed, a, b, tail, tail, cap_tokens, anchor=anchor)
        ]
    return _pieces(parsed, sec.start, sec.end, head, tail, cap_tokens)


def _pieces(
    parsed: _Parsed, lo: int, hi: int, head: str, tail: str, cap_tokens: int, *, anchor: str = ""
) -> list[Piece]:
    """``text[lo:hi]`` whole under ``head`` when it fits the cap, else split at the best safe cuts
    (the first piece under ``head``, the others under ``tail``). With a message's ``anchor``, every
    piece but the last (which holds the anchor itself) ends in an added ``^anchor`` line; a first
    piece that is only the speaker's label opens the next one, a last that is only the anchor closes
    the one before."""
    text = parsed.text
    whole = _clean(text[lo:hi])
    if not whole or estimate_tokens(head + whole) <= cap_tokens:
        return [(head, whole, "")] if whole else []
    suffix = f"\n\n^{anchor}" if anchor else ""
    label = _LABEL_ONLY.match(text, lo, hi)
    budget = max(256, cap_tokens * 4 - _utf8_len(tail) - _utf8_len(suffix) - (label.end() - lo if label else 0) - 8)
    spans = _joined_ends(text, _split_span(text, lo, hi, budget, parsed.fences), label, anchor)
    pieces: list[Piece] = []
    for n, (a, b) in enumerate(spans):
        piece = _clean(text[a:b])
        if piece:
            pieces.append((head if n == 0 else tail, piece, suffix if n < len(spans) - 1 else ""))
    return pieces


def _joined_ends(
    text: str, spans: list[tuple[int, int]], label: re.Match[str] | None, anchor: str
) -> list[tuple[int, int]]:
    """``spans`` with a first that is only the speaker's ``label`` joined to the next, and a last
    that is only the ``anchor`` line joined to the one before."""
    if label and len(spans) > 1 and not text[spans[0][0] : spans[0][1]].strip().replace(label.group(1), "", 1):
        spans = [(spans[0][0], spans[1][1]), *spans[2:]]
    if anchor and len(spans) > 1 and text[spans[-1][0] : spans[-1][1]].strip() == f"^{anchor}":
        spans = [*spans[:-2], (spans[-2][0], spans[-1][1])]  # the block id alone is no piece either
    return spans


# A message opening with its speaker's label alone on a line ("**user:**" before a pasted code block).
_LABEL_ONLY = re.compile(r"\s*(\*\*[^*\n]{1,60}:\*\*)[ \t]*\n")


def chunk_markdown(note_id: str, body: str, *, cap_tokens: int = HARD_CAP_TOKENS) -> list[Chunk]:
    """Split a note body (frontmatter removed) into heading-structured chunks."""
    parsed = _parse(normalise_newlines(body))
    chunks: list[Chunk] = []
    for sec in _fold_empty_parents(parsed.text, _sections(parsed)):
        for prefix, piece, suffix in _section_pieces(parsed, sec, cap_tokens):
            text = prefix + piece + suffix
            chunks.append(
                Chunk(
                    note_id,
                    len(chunks),
                    sec.heading_path,
                    sec.level,
                    text,
                    estimate_tokens(text),
                    prefix_chars=len(prefix),
                    suffix_chars=len(suffix),
                )
            )
    return chunks


# -- lint ------------------------------------------------------------------


def lint_levels(body: str, *, ceiling: int = BULLET_CEILING) -> list[LintFinding]:
    """Headings with more than ``ceiling`` bullets directly under them (more than one governing idea)."""
    parsed = _parse(normalise_newlines(body))
    findings: list[LintFinding] = []
    stack: list[_Heading] = []
    current: tuple[tuple[str, ...], int] = ((), 1)
    counts: dict[tuple[tuple[str, ...], int], int] = {}
    heads = iter(parsed.headings)
    for tok in parsed.tokens:
        if tok["type"] == "heading" and "_span" in tok:
            head = next(heads)
            while stack and stack[-1].level >= head.level:
                stack.pop()
            stack.append(head)
            current = (tuple(h.title for h in stack), parsed.text.count("\n", 0, head.start) + 1)
        elif tok["type"] == "list" and not tok.get("attrs", {}).get("ordered"):
            counts[current] = counts.get(current, 0) + len(tok.get("children", []))
    for (path, line), n in counts.items():
        if n > ceiling:
            where = PATH_SEPARATOR.join(path) or "(before the first heading)"
            message = (
                f"{where}: {n} bullets in one level; 2-{ceiling} per level is the soft "
                "ceiling (can one sentence of 15 words or fewer govern them all?)"
            )
            findings.append(LintFinding(path, line, n, message))
    return findings


# -- size tiers (engram-go) ------------------------------------------------


def _head_cut(text: str, fences: list[tuple[int, int]], max_bytes: int) -> int:
    """The end of the longest clean head of ``text`` within ``max_bytes`` of UTF-8."""
    fit = len(text[:max_bytes].encode("utf-8", "surrogatepass")[:max_bytes].decode("utf-8", "ignore"))
    if fit >= len(text):
        return len(text)
    cuts = _cut_points(text, 0, fit + 1, fences)
    cands = [(pos, pos, prio) for pos, prio in cuts.items() if pos <= fit]
    if not cands:
        cands = [(m.end(), m.end(), 0) for m in _WHITESPACE.finditer(text, 0, fit)]
    return grapheme_safe(text, _choose_cut(cands, fit // 2) if cands else fit)


def _outline(headings: list[_Heading], max_bytes: int, max_level: int) -> str:
    """An "Outline" section listing headings up to ``max_level``, capped, saying what it left out."""
    lines = ["# Outline", ""]
    used = _utf8_len("\n".join(lines)) + 64  # room for the "more headings" line
    items = [h for h in headings if h.level <= max_level]
    if not items:
        lines.append("- (no headings)")
    for n, head in enumerate(items):
        line = "  " * (head.level - 1) + "- " + (head.title or "(untitled)")
        if used + _utf8_len(line) + 1 > max_bytes:
            lines.append(f"- ... {len(items) - n} more headings not listed")
            break
        lines.append(line)
        used += _utf8_len(line) + 1
    return "\n".join(lines)


def synopsis(body: str, head_chars: int = 8192, outline_chars: int = 2048, *, outline_levels: int = 2) -> str:
    """First ``head_chars`` bytes cut at a clean boundary, plus an outline of the headings."""
    parsed = _parse(normalise_newlines(body))
    text = parsed.text
    cut = _head_cut(text, parsed.fences, head_chars)
    if cut >= len(text):
        return text
    head = text[:cut].rstrip()
    open_fence = next((a for a, b in parsed.fences if a < cut < b), None)
    if open_fence is not None:  # a cut inside fenced code must not swallow the outline
        fence = _FENCE_OPEN.match(text, open_fence)
        head += "\n" + (fence.group(1) if fence else "```")
    return head + "\n\n" + _outline(parsed.headings, outline_chars, outline_levels) + "\n"


def chunks_for_note(
    note_id: str, body: str, *, large_threshold_chars: int = LARGE_THRESHOLD_CHARS, cap_tokens: int = HARD_CAP_TOKENS
) -> list[Chunk]:
    """Chunks of a note: of its synopsis (flagged) above the size threshold, else of its body."""
    if len(body) <= large_threshold_chars:
        return chunk_markdown(note_id, body, cap_tokens=cap_tokens)
    return [replace(c, synopsis=True) for c in chunk_markdown(note_id, synopsis(body), cap_tokens=cap_tokens)]
