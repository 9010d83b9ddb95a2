"""The package as returned: its Markdown (title, notices, blocks with their markers, one reference
line per note) and the small structured result the MCP tool returns beside it. ``tokens`` is this
text's count (by the package's tokenizer, ``metering.token_counter``), and assembly counts with the
same functions (``block_overhead``, ``returned_tokens``), so the budget holds for what is printed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from vault_pipeline.retrieve.items import Block, Selected, is_statement, utf8_bytes
from vault_pipeline.text import estimate_tokens

REFERENCES = "References:\n"
NOT_FOUND = "Nothing on this in the vault: no note is close enough to this prompt to be evidence."
CLOSEST_ONLY = "Nothing in the vault is clearly about this: the closest notes follow, and may not be about it."


def notices(
    *, found: bool, degraded: str, absent_words: Sequence[str], closest: bool = False, too_small: str = ""
) -> list[str]:
    """The package's notice lines, in this order: nothing found (or only the closest notes),
    degraded (what failed open and why, "" when nothing did), the words no note holds. A package
    whose evidence did not fit its budget (``too_small``: ``budget_line``) says that alone, and
    whether it is degraded: the words no note holds are in its stats."""
    if too_small:
        return [too_small, *([f"Degraded package: {degraded}"] if degraded else [])]
    lines = []
    if not found:
        lines.append(CLOSEST_ONLY if closest else NOT_FOUND)
    if degraded:
        lines.append(f"Degraded package: {degraded}")
    if absent_words:
        lines.append(f"No note in the vault holds: {', '.join(absent_words)}.")
    return lines


def budget_line(budget: int, needed: int) -> str:
    """The notice of a package whose budget holds none of the blocks found, with the budget that
    holds one (0: none within the model window's share; kept short: it is most of such a package)."""
    then = f": ask for {needed}." if needed else ", and the model window allows no more."
    return f"Budget {budget} too small for any block found{then}"


HEAD_QUERY_CHARS = 200  # the prompt as the title echoes it: a long prompt must not eat the budget
HEAD_BUDGET_SHARE = 0.1  # and at most about this share of the budget (4 characters a token)


def markdown_head(query: str, lines: Sequence[str], budget: int | None = None) -> str:
    """The Markdown's title (the prompt, cut to ``HEAD_QUERY_CHARS``, and with a ``budget`` to about
    ``HEAD_BUDGET_SHARE`` of it: a small budget is for blocks, not for the prompt's echo) and notice
    lines, ending in a blank line."""
    said = " ".join(query.split())
    limit = HEAD_QUERY_CHARS if budget is None else min(HEAD_QUERY_CHARS, 4 * int(budget * HEAD_BUDGET_SHARE))
    if len(said) > limit:
        said = said[: limit - 1].rstrip() + "…" if limit > 1 else ""
    head = f"# Context: {said}\n\n" if said else "# Context\n\n"
    return head + "".join(f"> {line}\n\n" for line in lines)


def render_markdown(head: str, blocks: Sequence[Block]) -> str:
    """``head``, each block with its marker, then the reference list (none when there is no block)."""
    if not blocks:
        return head.rstrip() + "\n"
    body = "".join(_marked(number, block) for number, block in enumerate(blocks, 1))
    numbers: dict[str, list[int]] = {}
    for number, block in enumerate(blocks, 1):
        numbers.setdefault(reference_target(block.item), []).append(number)
    refs = "".join(_reference(target, found) + "\n" for target, found in numbers.items())
    return head + body + REFERENCES + refs


def _marked(number: int, block: Block) -> str:
    return f"{block.text.strip()}{' …' if block.truncated else ''} [{number}]\n\n"


def block_overhead(
    item: Selected,
    width: int,
    structured: bool = False,
    shared: int = 1,
    count: Callable[[str], int] = estimate_tokens,
) -> int:
    """Tokens a block costs beyond its text: its marker (with a cut's " …"), its number in its note's
    reference line and its share of that line (``shared`` blocks cite the note), numbered with
    ``width`` digits; with ``structured``, its entry in the structured result too."""
    number = 10 ** (width - 1)
    marker = f" … [{number}]\n\n"
    line = _reference(reference_target(item), [number]) + "\n"
    entry = compact(citation(number, item)) + "," if structured else ""
    if count is estimate_tokens:  # the bytes estimate: one rounding over the bytes, as before
        size = utf8_bytes(marker) + len(str(number)) + 2 + utf8_bytes(line) / max(1, shared) + utf8_bytes(entry)
        return math.ceil(size / 4)
    return math.ceil(count(f"{marker}, {number}{entry}") + count(line) / max(1, shared))


def citation(number: int, item: Selected) -> dict[str, Any]:
    """A block's entry in the structured result: its number in the text and its note's id."""
    return {"n": number, "id": item.note_id}


def structured_result(found: bool, blocks: Sequence[Block], tokens: int) -> dict[str, Any]:
    """The small structured result beside the MCP text: found, the tokens returned, the blocks' citations."""
    return {"found": found, "tokens": tokens, "blocks": [citation(n, b.item) for n, b in enumerate(blocks, 1)]}


def structured_frame() -> str:
    # The widest frame: "found" false and a five-digit token count.
    return compact({"found": False, "tokens": 99999, "blocks": []})


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def reference_target(item: Selected) -> str:
    """What a block's reference line links: its note (a verbatim turn's is its session note); a
    statement of a session (an index row, no file of its own) links its message in the session."""
    if is_statement(item) and item.links:
        return item.links[0]
    return item.stem


def _reference(target: str, numbers: Sequence[int]) -> str:
    """One short reference line per note: its wikilink and the numbers of its blocks."""
    return f"[[{target}]] {', '.join(str(n) for n in numbers)}"


def returned_tokens(
    head: str, blocks: Sequence[Block], structured: bool, count: Callable[[str], int] = estimate_tokens
) -> int:
    """Tokens of what a package with these blocks returns: its Markdown, and with ``structured`` the
    structured result beside it (``found`` written as the longer ``false`` and the token count as five
    digits: an upper bound)."""
    tokens = count(render_markdown(head, blocks))
    if structured:
        tokens += count(compact(structured_result(False, blocks, 99999)))
    return tokens
