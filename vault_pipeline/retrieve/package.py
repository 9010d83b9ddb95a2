"""The context package: token-cap backstop, tiered budget assembly, JSON and Markdown.

The funnel's last step: the token-cap backstop and the tiered budget. Each selected chunk
gets a level:

* core: the top-ranked chunk of each note that is atomic or an engram (a kept
  note). Cut only after everything else has been cut.
* structural: chunks of session, thread, resource and topic notes. Cut to their
  first level (heading plus first paragraph) before any core text is cut. A transcript
  chunk that carries its turns as ``parts`` is cut by whole turns instead: the run of turns
  around the one carrying most of the query, as long as the room allows (at least that one),
  and it then cites only the turns it kept (``pick_parts``).
* peripheral: the lowest-provenance remainder (web tier, further chunks of an
  engram, unknown types). Cut first.

After the cuts, nothing is said twice: a transcript chunk leaves out the whole turns a verbatim
turn block shows or a note block was drawn from (a chunk left with no turn is left out), a session
summary the turn lines another block of its conversation holds, a session's statement that
another block shows (``repeats.py``); the room that frees takes back blocks left out for the budget.

Cuts land on a sentence boundary, else a word boundary, else a character (valid
UTF-8) boundary; a cut block says ``truncated: true``; a block with no room at
all is listed in ``stats.dropped_for_budget``, never dropped silently.
Tokens are counted by the package's tokenizer (``metering.token_counter``: a real tokenizer of
the configured model family, else ``ceil(UTF-8 bytes / 4)``, the estimate ``chunk.py`` uses for
chunk sizes); the package says which (``tokenizer``).

This module knows nothing of the funnel: ``rank.selection`` hands it the items (``items.py``)
and ``trace.build_package`` adds the stats and the per-candidate trace; ``markdown.py`` renders
the package and counts what it returns.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from vault_pipeline.retrieve.blocks import STRUCTURAL_TYPES, first_level, pick_parts
from vault_pipeline.retrieve.items import Block, Level, Selected
from vault_pipeline.retrieve.markdown import (
    REFERENCES,
    block_overhead,
    budget_line,
    compact,
    markdown_head,
    notices,
    reference_target,
    render_markdown,
    returned_tokens,
    structured_frame,
    structured_result,
)
from vault_pipeline.retrieve.metering import BYTES, TokenCounter, bytes_counter, token_counter
from vault_pipeline.retrieve.repeats import (
    statement_repeats,
    summary_repeats,
    transcript_repeats,
)
from vault_pipeline.retrieve.reports import CandidateTrace, FunnelStats
from vault_pipeline.text import estimate_tokens

Count = Callable[[str], int]

Cut = Literal["full", "truncated", "dropped"]
LEVEL_ORDER: dict[str, int] = {"core": 0, "structural": 1, "peripheral": 2}
FLOAT_PLACES = 6

# Where a cut may end: a sentence's or a clause's end (";"), a line's end. A colon promises what
# follows, so a cut never ends on one.
_CUT_POINT = re.compile(r"(?:[.!?;][\"'\u201d\u2019)\]]*(?=\s)|[\u3002\uff01\uff1f][\u300d\u300f\uff09]*|\n)")
# A last line that opens what the cut left out: a list marker alone ("7."), a heading, a bold label
# ("1. **Install the extension**"), a lead-in ("To do this, follow these steps:").
_OPENING_LINE = re.compile(
    r"(?:^|\n)[ \t]*(?:(?:[-*+\u2022]|\d{1,3}[.)])[ \t]*(?:\*\*[^\n]*\*\*[ \t]*)?|#{1,6}[ \t][^\n]*|\*\*[^\n]*\*\*[ \t]*"
    r"|[^\n]*:[\"'\u201d\u2019)\]*]*[ \t]*)\Z"
)


def hard_cap(window: int, window_share: float) -> int:
    """The token-cap backstop: a package never uses more than this share of the model window."""
    return math.floor(window * window_share)


# --------------------------------------------------------------------------- cutting


def cut_text(text: str, max_tokens: int, count: Count = estimate_tokens) -> str:
    """The longest head of ``text`` within ``max_tokens`` that ends a sentence (or a clause, or a
    line), without a last line that only opens what was cut off; "" when no such head fits.

    A cut never ends inside a sentence: "This means that the" is a fragment, not a shorter block."""
    if count(text) <= max_tokens:
        return text
    ends = [m.end() for m in _CUT_POINT.finditer(text)]
    # A head's tokens grow with it: the last cut point whose head fits is found by bisection.
    lo, hi = 0, len(ends)
    while lo < hi:
        mid = (lo + hi) // 2
        if count(text[: ends[mid]]) <= max_tokens:
            lo = mid + 1
        else:
            hi = mid
    for end in reversed(ends[:lo]):
        head = text[:end].rstrip()
        while head and (opening := _OPENING_LINE.search(head)):
            head = head[: opening.start()].rstrip()
        if head:
            return head
    return ""


# --------------------------------------------------------------------------- assembly


@dataclass(frozen=True)
class Outcome:
    """What assembly did to one selected chunk, for the trace."""

    level: Level
    cut: Cut
    by_cap: bool


@dataclass(frozen=True)
class Assembly:
    """The assembled blocks plus everything the stats and trace report about the budget."""

    blocks: tuple[Block, ...]
    outcomes: Mapping[str, Outcome]
    dropped: tuple[dict[str, Any], ...]
    tokens: int
    budget: int
    cap: int
    cap_fired: bool


@dataclass
class _Work:
    item: Selected
    level: Level
    text: str
    truncated: bool = False
    dropped: bool = False
    messages: tuple[str, ...] | None = None  # narrowed by a cut by parts
    extra: int = 0  # what the block costs beyond its text in the Markdown: its marker and reference line
    tokens: int = -1  # what this block costs now (0 once dropped); kept in step with ``text``
    count: Count = field(default=estimate_tokens, repr=False)

    def __post_init__(self) -> None:
        self.tokens = self.count(self.text) + self.extra

    @property
    def room(self) -> int:
        """Tokens the block's text may take now (its cost less its marker and reference)."""
        return self.tokens - self.extra

    def set_text(self, text: str) -> None:
        """Replace the text (a cut) and its cost."""
        self.text, self.truncated, self.tokens = text, True, self.count(text) + self.extra

    def cut_parts(self, room: int) -> None:
        """Cut a transcript chunk to the whole turns that fit ``room`` (at least one; see ``pick_parts``)."""
        text, cited = pick_parts(self.item.lead, self.item.parts, room, self.count)
        if text != self.text:
            self.set_text(text)
            self.messages = cited

    def drop(self) -> None:
        """Leave the block out (it is listed in ``dropped_for_budget``)."""
        self.dropped, self.tokens = True, 0


def assign_levels(selection: Sequence[Selected]) -> dict[str, Level]:
    """Level per chunk id; ``selection`` must be in rank order (the top chunk of a note is first)."""
    levels: dict[str, Level] = {}
    seen: set[str] = set()
    for item in selection:
        top = item.note_id not in seen
        seen.add(item.note_id)
        levels[item.chunk_id] = _level(item, top)
    return levels


def _level(item: Selected, top_of_note: bool) -> Level:
    if item.tier == "web":  # provenance 0.1: the least trusted text is the first to go
        return "peripheral"
    if item.type == "turn":  # a source turn verbatim, as fundamental as a note (several per session)
        return "core"
    if top_of_note and (item.type == "atomic" or item.tier == "engram"):
        return "core"
    if item.type in STRUCTURAL_TYPES:
        return "structural"
    return "peripheral"


def block_order(level: str, score: float, note_id: str, chunk_id: str) -> tuple:
    """Deterministic block order: level, then score desc, then id asc (a total order)."""
    return (LEVEL_ORDER[level], -round(score, 9), note_id, chunk_id)


def assemble(
    selection: Sequence[Selected],
    *,
    budget: int,
    window: int,
    window_share: float,
    head: str = "",
    structured: bool = False,
    counter: TokenCounter | None = None,
) -> Assembly:
    """Fit the selection into ``min(budget, cap)`` tokens, cutting peripheral, structural, then core.

    What is counted is the package as returned: ``head`` (the Markdown's title and notices) and,
    for each block, its text, its marker and its share of the reference list (``block_overhead``);
    with ``structured``, also the small structured result the MCP tool returns beside the text.
    A note's reference line is shared by its blocks, so the cuts count each block's share of it;
    the rendered whole is then measured, and the last blocks leave until it fits (``_fit_whole``).
    Tokens are ``counter``'s (default: the bytes estimate)."""
    count = (counter or bytes_counter()).count
    cap = hard_cap(window, window_share)
    frame = count(head + REFERENCES) + (count(structured_frame()) if structured else 0)
    limit = min(budget, cap) - (frame if selection else 0)
    levels = assign_levels(selection)
    width = len(str(len(selection)))
    shared = Counter(reference_target(s) for s in selection)
    work = sorted(
        (
            _Work(
                s,
                levels[s.chunk_id],
                s.text,
                extra=block_overhead(s, width, structured, shared[reference_target(s)], count),
                count=count,
            )
            for s in selection
        ),
        key=lambda w: block_order(w.level, w.item.score, w.item.note_id, w.item.chunk_id),
    )
    total = sum(w.tokens for w in work)
    # The backstop fires only when the cap, not the configured budget, is what binds.
    cap_fired = total > cap and cap < budget
    _cut_to(work, limit)
    _refill(work, limit)
    repeats = _leave_out_repeats(work, limit)
    blocks = _fit_whole(work, min(budget, cap), head, structured, count)
    outcomes = {w.item.chunk_id: Outcome(w.level, _cut_label(w), cap_fired and _cut_label(w) != "full") for w in work}
    dropped = tuple(
        {
            "id": w.item.note_id,
            "chunk_id": w.item.chunk_id,
            "path": w.item.path,
            "level": w.level,
            "tokens": count(w.item.text) + w.extra,
            **({"repeats": repeats[w.item.chunk_id]} if w.item.chunk_id in repeats else {}),
        }
        for w in work
        if w.dropped
    )
    return Assembly(blocks, outcomes, dropped, sum(b.tokens for b in blocks), budget, cap, cap_fired)


def _fit_whole(work: list[_Work], limit: int, head: str, structured: bool, count: Count) -> tuple[Block, ...]:
    """The kept blocks in source order, once what they render to (with ``head``, the references and,
    with ``structured``, the structured result) fits ``limit``: until it does, the last block in
    cutting order (peripheral, structural, then core, each from the bottom) leaves."""
    order = [w for level in LEVEL_ORDER for w in reversed(work) if w.level == level]
    while True:
        blocks = in_source_order(
            [Block(w.item, w.level, w.text, w.truncated, w.messages, w.room) for w in work if not w.dropped]
        )
        if not blocks or returned_tokens(head, blocks, structured, count) <= limit:
            return blocks
        next(w for w in order if not w.dropped).drop()


def in_source_order(blocks: Sequence[Block]) -> tuple[Block, ...]:
    """The blocks in rank order, except that atomic notes drawn from one message read in that message's
    order (``source_position``): a procedure's steps come as its source gave them, at the place of the
    group's best-ranked step. Notes without a position keep their rank's place."""

    def message(b: Block) -> tuple[str, str] | None:
        return (b.item.conversation, b.item.messages[0]) if b.item.position > 0 and b.item.messages else None

    groups: dict[tuple[str, str] | None, list[Block]] = {}
    for b in blocks:
        groups.setdefault(message(b), []).append(b)
    out: list[Block] = []
    for b in blocks:
        key = message(b)
        if key is None:
            out.append(b)
        elif key in groups:  # the group's first (best-ranked) block: the whole group goes here
            out += sorted(groups.pop(key), key=lambda m: m.item.position)
    return tuple(out)


def _leave_out_repeats(work: list[_Work], limit: int) -> dict[str, str]:
    """Leave out what another kept block already says (transcript turns, summary turns, a session's
    statements); the room that frees takes back blocks left out for the budget, which may repeat
    something in turn. Ends when a refill takes nothing back: a block once found to repeat stays out,
    so each round leaves fewer blocks to take back. Returns chunk id -> the block it repeats."""
    repeats: dict[str, str] = {}
    while True:
        repeats.update(transcript_repeats(work))
        repeats.update(summary_repeats(work))
        repeats.update(statement_repeats(work))
        before = [w.dropped for w in work]
        _refill(work, limit, skip=repeats)
        if [w.dropped for w in work] == before:
            return repeats


def _cut_label(w: _Work) -> Cut:
    return "dropped" if w.dropped else ("truncated" if w.truncated else "full")


def _cut_to(work: list[_Work], limit: int) -> None:
    """Cut until the blocks fit, in this order: peripheral, structural to first level, structural, core."""
    by_level = {lvl: [w for w in reversed(work) if w.level == lvl] for lvl in LEVEL_ORDER}
    for w in by_level["peripheral"]:
        _fit(w, work, limit)
    for w in by_level["structural"]:
        excess = _total(work) - limit
        if excess <= 0:
            return
        if w.item.parts:
            w.cut_parts(w.room - excess)
            continue
        short = first_level(w.text)
        if short != w.text.strip():
            w.set_text(short)
    for w in by_level["structural"] + by_level["core"]:
        _fit(w, work, limit)


def _refill(work: list[_Work], limit: int, skip: Mapping[str, str] | None = None) -> None:
    """Put back, in block order, each block left out whole that fits whole in what the cuts left.

    Cutting goes from the last block up, so a block that could not be cut to a sentence is left
    out; a shorter one after it may still fit (first fit, deterministic)."""
    total = _total(work)
    for w in work:
        if w.dropped and not w.truncated and not (skip and w.item.chunk_id in skip):  # a cut marks it truncated
            tokens = w.count(w.text) + w.extra
            if total + tokens <= limit:
                w.dropped, w.tokens = False, tokens
                total += tokens


def _total(work: list[_Work]) -> int:
    return sum(w.tokens for w in work)


def _fit(w: _Work, work: list[_Work], limit: int) -> None:
    """Shrink one block by the current excess; drop it (listed) when nothing of it fits."""
    excess = _total(work) - limit
    if excess <= 0 or w.dropped:
        return
    room = w.room - excess
    if w.item.parts and room > 0:
        w.cut_parts(room)
        if w.room <= room:
            return
    text = cut_text(w.text, room, w.count) if room > 0 else ""
    if not text.strip() or (w.item.parts and _only_a_label(text[len(w.item.lead) :])):
        w.drop()
        return
    w.set_text(text)


_LABEL_ONLY = re.compile(r"^\s*[^\s:]{1,40}:?\s*$")


def _only_a_label(rest: str) -> bool:
    """Whether a transcript cut kept nothing after its lead, or only a speaker's label ("assistant:")."""
    return not rest.strip() or bool(_LABEL_ONLY.match(rest))


# --------------------------------------------------------------------------- the package


def canonical(value: Any) -> Any:
    """JSON-ready copy: floats rounded to 6 places (no -0.0, no NaN), tuples as lists."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return round(value, FLOAT_PLACES) + 0.0
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return str(value)


@dataclass(frozen=True)
class ContextPackage:
    """A small, cited context package plus the stats and per-candidate trace of how it was chosen."""

    query: str
    intent: str
    blocks: tuple[Block, ...]
    tokens: int  # ``to_markdown()``'s tokens: the package as a model reads it, references included
    stats: FunnelStats | None = None
    trace: tuple[CandidateTrace, ...] = ()
    found: bool = True  # False: nothing in the vault clears the evidence threshold for the prompt
    tokenizer: str = BYTES  # the counter of ``tokens`` and the budget (``metering.TOKENIZERS``)
    # The Markdown ``counted`` rendered and counted, returned as is by ``to_markdown`` (a copy made
    # with ``dataclasses.replace`` renders its own: an init=False field is not copied).
    _markdown: str | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def counted(
        cls,
        query: str,
        intent: str,
        blocks: tuple[Block, ...],
        stats: FunnelStats,
        trace: tuple[CandidateTrace, ...],
        found: bool,
        counter: TokenCounter,
    ) -> ContextPackage:
        """The package whose ``tokens`` (and ``stats.tokens``) are ``counter``'s count of its Markdown,
        rendered once: the text counted is the text ``to_markdown`` returns."""
        text = _package_markdown(query, blocks, stats, found, counter.name)
        tokens = counter.count(text)  # the package as returned, references included
        package = cls(query, intent, blocks, tokens, replace(stats, tokens=tokens), trace, found, counter.name)
        object.__setattr__(package, "_markdown", text)  # frozen: set once, here, before anyone reads it
        return package

    def to_dict(self, *, trace: bool = False) -> dict[str, Any]:
        """The package as plain JSON-ready data (floats rounded); the trace only when asked for."""
        data: dict[str, Any] = {
            "query": self.query,
            "intent": self.intent,
            "found": self.found,
            "blocks": [b.to_dict() for b in self.blocks],
            "tokens": self.tokens,
            "tokenizer": self.tokenizer,
            "stats": self.stats.to_dict() if self.stats is not None else {},
        }
        if trace:
            data["trace"] = [t.to_dict() for t in self.trace]
        return canonical(data)

    def to_json(self, *, indent: int | None = 2, trace: bool = False) -> str:
        """Stable JSON: sorted keys, no timestamps, floats to 6 places; byte-identical across runs.

        ``indent=None`` gives one line (JSON Lines, as ``vault query --batch`` prints); ``trace``
        adds every candidate's path through the funnel (``vault query --json --explain``).
        """
        return json.dumps(self.to_dict(trace=trace), ensure_ascii=False, sort_keys=True, indent=indent) + "\n"

    def to_markdown(self) -> str:
        """Markdown for pasting into a prompt: the notices, the blocks, each marked [n], then one short
        reference line per block. ``tokens`` is this text's count."""
        if self._markdown is None:
            object.__setattr__(
                self, "_markdown", _package_markdown(self.query, self.blocks, self.stats, self.found, self.tokenizer)
            )
        assert self._markdown is not None
        return self._markdown

    def to_mcp(self) -> tuple[str, dict[str, Any]]:
        """(text, structured result) as the MCP ``query`` tool returns them: the Markdown, and beside
        it whether anything was found, the tokens of both together and each block's citation."""
        text = self.to_markdown()
        count = token_counter(self.tokenizer).count
        tokens = 0
        for _ in range(3):  # the count is part of what it counts: settle it (its digits change at most twice)
            counted = count(text) + count(compact(structured_result(self.found, self.blocks, tokens)))
            if counted == tokens:
                break
            tokens = counted
        return text, structured_result(self.found, self.blocks, tokens)

    def notices(self) -> list[str]:
        """The plain lines a reader needs before the blocks: nothing found, degraded, absent words;
        a budget too small for any block found."""
        return _package_notices(self.blocks, self.stats, self.found)


def _package_notices(blocks: Sequence[Block], stats: FunnelStats | None, found: bool) -> list[str]:
    """``ContextPackage.notices`` of a package with these blocks, stats and found."""
    absent = list(stats.absent_words) if stats is not None else []
    too_small = ""
    if stats is not None and stats.found and not blocks and stats.dropped_for_budget:
        too_small = budget_line(min(stats.budget, stats.cap), stats.budget_needed)
    return notices(
        found=found,
        closest=not found and bool(blocks),
        degraded=stats.degraded_line() if stats is not None and stats.degraded else "",
        absent_words=absent,
        too_small=too_small,
    )


def _package_markdown(
    query: str, blocks: Sequence[Block], stats: FunnelStats | None, found: bool, tokenizer: str
) -> str:
    """``ContextPackage.to_markdown`` of a package with these parts (its tokens are no part of it)."""
    budget = min(stats.budget, stats.cap) if stats is not None else None
    lines = _package_notices(blocks, stats, found)
    head = markdown_head(query, lines, budget)
    if budget is not None and not blocks and token_counter(tokenizer).count(head) > budget:
        head = markdown_head("", lines)  # the notices alone are over the budget: the prompt's echo goes
    return render_markdown(head, blocks)
