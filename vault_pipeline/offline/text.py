"""Text handling for the offline extractor: Markdown cleaning, sentences, compression to 15 words."""

from __future__ import annotations

import re

MAX_WORDS = 15

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|~~)(?=\S)(.+?)(?<=\S)\1")
_INLINE_CODE = re.compile(r"`([^`]*)`")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_HEADING = re.compile(r"^\s*#{1,6}\s+")
_ABBREV = ("e.g.", "i.e.", "vs.", "etc.", "Dr.", "Mr.", "Mrs.", "Ms.", "St.", "No.", "approx.", "cf.", "Inc.", "Fig.")
_SPLIT = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[¿¡]|[^\x00-\x7F])")
_WORD = re.compile(r"\w", re.UNICODE)

_FILLERS = [
    (re.compile(r"^(so|well|okay|ok|basically|actually|honestly|also|yes|yeah|alright|great|right)\s*,\s*", re.I), ""),
    (re.compile(r"\bI (?:think|believe|guess|feel) (?:that )?", re.I), ""),
    (re.compile(r"\b(basically|actually|really|just|simply|quite|very|definitely|certainly)\s+", re.I), ""),
    (re.compile(r"\bin order to\b", re.I), "to"),
    (re.compile(r"\bit is important to note that\s+", re.I), ""),
    (re.compile(r"\bplease note that\s+", re.I), ""),
    (re.compile(r"\bas well as\b", re.I), "and"),
    (re.compile(r"\bdue to the fact that\b", re.I), "because"),
    (re.compile(r"\ba (?:large|great) number of\b", re.I), "many"),
]
_CLAUSE = re.compile(r";\s+|:\s+(?=\S+\s+\S+\s+\S+)|,\s+(?=(?:and|but|so|which|because|while|whereas|although|or)\b)"
                     r"|\s+(?=(?:because|whereas|although)\b)", re.I)
_LEADING_JOIN = re.compile(r"^(?:and|but|so|or|while|whereas|although|because)\s+", re.I)


def count_words(text: str) -> int:
    """White-space tokens holding a letter or digit."""
    return sum(1 for token in text.split() if _WORD.search(token))


def clean_markdown(text: str) -> list[str]:
    """Markdown to plain prose lines: code and tables dropped, bullets and headings become lines."""
    text = _FENCE.sub("\n", text)
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("|") or set(line) <= set("-=*_ >"):
            continue
        line = _HEADING.sub("", _BULLET.sub("", line)).lstrip("> ").strip()
        line = _INLINE_CODE.sub(lambda m: m.group(1) if len(m.group(1)) <= 30 else "", line)
        line = _EMPHASIS.sub(r"\2", _LINK.sub(r"\1", line))
        if _WORD.search(line):
            lines.append(" ".join(line.split()))
    return lines


def sentences(text: str) -> list[str]:
    """Sentence segmentation that leaves abbreviations and decimals alone."""
    result = []
    for line in clean_markdown(text):
        protected = line
        for i, abbrev in enumerate(_ABBREV):
            protected = protected.replace(abbrev, abbrev.replace(".", f"\x00{i}\x00"))
        for piece in _SPLIT.split(protected):
            piece = re.sub(r"\x00\d+\x00", ".", piece).strip()
            if _WORD.search(piece):
                result.append(piece)
    return result


def strip_fillers(sentence: str) -> str:
    """Drop words that carry no meaning ('basically', 'I think that', 'in order to' -> 'to')."""
    for pattern, replacement in _FILLERS:
        sentence = pattern.sub(replacement, sentence)
    return " ".join(sentence.split())


def finish(sentence: str, question: bool = False) -> str:
    """Capitalised, trailing punctuation normalised to '.' (or '?' for a kept question)."""
    sentence = sentence.strip().lstrip("#|*>-+ ").strip(",;:-–— ").rstrip(".!?…").strip()
    sentence = sentence.strip("\"'“”")
    if not sentence:
        return ""
    sentence = sentence[0].upper() + sentence[1:]
    return sentence + ("?" if question else ".")


def compress(sentence: str, *, question: bool = False, limit: int = MAX_WORDS) -> tuple[list[str], int]:
    """Split a sentence into clauses of <= ``limit`` words; returns (sentences, hard cuts made)."""
    text = strip_fillers(sentence)
    if count_words(text) <= limit:
        done = finish(text, question)
        return ([done] if done else []), 0
    clauses = [c for c in _CLAUSE.split(text) if c and _WORD.search(c)]
    if len(clauses) > 1:
        out, cuts = [], 0
        for clause in clauses:
            clause = _LEADING_JOIN.sub("", clause.strip())
            clause = re.sub(r"^which\b", "This", clause, flags=re.I)
            pieces, n = compress(clause, question=question and clause is clauses[-1], limit=limit)
            out += pieces
            cuts += n
        return out, cuts
    halves = _halves(text)
    if halves:
        out, cuts = [], 0
        for half in halves:
            pieces, n = compress(half, question=question and half is halves[-1], limit=limit)
            out, cuts = out + pieces, cuts + n
        return out, cuts
    return [finish(_cut(text, limit), question)], 1


_SOFT = re.compile(r",\s+|\s+(?=(?:and|or|with|by|for|to|so that|when|where|if|unless|then)\s)", re.I)


def _halves(text: str) -> list[str] | None:
    """A softer split, at the comma or joining word nearest the middle, keeping 4+ words a side."""
    best = None
    middle = len(text) / 2
    for match in _SOFT.finditer(text):
        left, right = text[: match.start()], text[match.end():]
        if count_words(left) >= 4 and count_words(right) >= 4:
            if best is None or abs(match.start() - middle) < abs(best[0] - middle):
                best = (match.start(), [left, _LEADING_JOIN.sub("", right)])
    return best[1] if best else None


def _cut(text: str, limit: int) -> str:
    """Last resort: the first ``limit`` words, ending at a comma when one falls late enough."""
    words = text.split()
    kept, count = [], 0
    for word in words:
        if _WORD.search(word):
            count += 1
        if count > limit:
            break
        kept.append(word)
    head = " ".join(kept)
    comma = head.rfind(",")
    if comma > len(head) * 0.6:
        head = head[:comma]
    return head
