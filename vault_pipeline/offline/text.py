"""Text handling for the offline extractor: Markdown cleaning, sentences, compression to 15 words."""

from __future__ import annotations

import re

MAX_WORDS = 15

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|~~)(?=\S)(.+?)(?<=\S)\1")
_INLINE_CODE = re.compile(r"`([^`]*)`")
_CITATION = re.compile(r"【[^】]*】")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)]|[a-zA-Z]\))\s+")
_HEADING = re.compile(r"^\s*#{1,6}\s+")
_BREAK = re.compile(r"[.!?][\"'”’)\]]*\s+(?=[A-Z0-9\"'“‘(\[¿¡]|[^\x00-\x7F])")
_WORD = re.compile(r"\w", re.UNICODE)
_WORD_TOKEN = re.compile(r"\S*\w\S*", re.UNICODE)  # one match per white-space token holding a letter or digit
# Kept in step with vault_pipeline.extract.ABBREVIATIONS: the offline splitter must cut wherever
# the validator sees a sentence end, or its units would fail validation.
_ABBREVIATIONS = frozenset(
    "e.g i.e vs etc cf al dr mr mrs ms prof st jr sr nr fig eq ca approx inc ltd co dept est vol ch sec pp "
    "incl excl resp a.m p.m u.s u.k bijv o.a d.w.z z.b mt".split())

_FILLERS = [
    (re.compile(r"^(so|well|okay|ok|basically|actually|honestly|also|yes|yeah|alright|great|right|now)\s*,\s*",
                re.I), ""),
    (re.compile(r"\bI (?:think|believe|guess|feel) (?:that )?", re.I), ""),
    (re.compile(r"\b(basically|actually|really|just|simply|quite|very|definitely|certainly)\s+", re.I), ""),
    (re.compile(r"\bin order to\b", re.I), "to"),
    (re.compile(r"\bit is important to note that\s+", re.I), ""),
    (re.compile(r"\b(?:please )?note that\s+|^(?:please )?note:\s*", re.I), ""),
    (re.compile(r"\bas well as\b", re.I), "and"),
    (re.compile(r"\bdue to the fact that\b", re.I), "because"),
    (re.compile(r"\ba (?:large|great) number of\b", re.I), "many"),
]
# Strong clause boundaries: ";", ":" before a clause, ", and/but/which/because ...".
_CLAUSE = re.compile(r";\s+|:\s+(?=\S+\s+\S+\s+\S+)|,\s+(?=(?:and|but|so|which|because|while|whereas|although|or)\b)"
                     r"|\s+(?=(?:because|whereas|although)\b)", re.I)
# Softer boundaries, used only when no strong one is left: a comma or a joining word.
_SOFT = re.compile(r",\s+|\s+(?=(?:and|or|but|then|when|if|where|unless|while|whereas|so that|before|after|"
                   r"until|because|since|by|using|for|en|maar|of)\s)", re.I)
_LEADING_JOIN = re.compile(r"^(?:and|but|so|or|then|also|plus|en|maar|of)\s+(?=\S)", re.I)
_DEPENDENT = re.compile(r"^(if|when|whenever|once|after|before|unless|until|since|where|depending on|as long as|"
                        r"provided that|in case|because|so that|to|which|whereas|while|although|though|"
                        r"even though|by|using|for(?! example| instance))\b\s*", re.I)
_REORDER = frozenset(("if", "when", "whenever", "once", "after", "before", "unless", "until", "since", "because",
                      "although", "though", "even though", "as long as", "provided that", "in case", "to", "for"))
_CAPITALISE = re.compile(r"^[a-z][a-z']*\b")


def count_words(text: str) -> int:
    """White-space tokens holding a letter or digit."""
    return len(_WORD_TOKEN.findall(text))


def clean_markdown(text: str) -> list[str]:
    """Markdown to plain prose lines: code and tables dropped, bullets and headings become lines."""
    text = _CITATION.sub("", _FENCE.sub("\n", text))
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("|") or set(line) <= set("-=*_ >"):
            continue
        line = _HEADING.sub("", _BULLET.sub("", line)).lstrip("> ").strip()
        line = _INLINE_CODE.sub(lambda m: m.group(1) if len(m.group(1)) <= 30 else "", line)
        line = _BULLET.sub("", _EMPHASIS.sub(r"\2", _LINK.sub(r"\1", line)))  # "**3. Step**" is a list item too
        if _WORD.search(line):
            lines.append(" ".join(line.split()))
    return lines


def _is_abbreviation(token: str) -> bool:
    token = token.lstrip("\"'“‘([").lower()
    if len(token) == 1 and token.isalpha():
        return True
    return token in _ABBREVIATIONS or re.fullmatch(r"(?:\w\.)+\w", token) is not None


def _split_line(line: str) -> list[str]:
    """Cut one line at sentence ends; 'e.g. SQLite', 'Dr. Li', 'v3.5' and initials are not ends."""
    pieces, start = [], 0
    for match in _BREAK.finditer(line):
        head = line[start: match.start()]
        token = head.rsplit(None, 1)[-1] if head.strip() else ""
        if line[match.start()] == "." and _is_abbreviation(token):
            continue
        pieces.append(line[start: match.end()].strip())
        start = match.end()
    pieces.append(line[start:].strip())
    return pieces


def sentences(text: str) -> list[str]:
    """Sentence segmentation of cleaned Markdown: list items and headings are sentences of their own."""
    return [piece for line in clean_markdown(text) for piece in _split_line(line) if _WORD.search(piece)]


def strip_fillers(sentence: str) -> str:
    """Drop words that carry no meaning ('basically', 'I think that', 'in order to' -> 'to')."""
    for pattern, replacement in _FILLERS:
        sentence = pattern.sub(replacement, sentence)
    return " ".join(sentence.split())


def _balance(text: str) -> str:
    """Drop brackets and quotes left without their partner by a split."""
    for opening, closing in ("()", "[]", "“”", "‘’"):
        if text.count(opening) != text.count(closing):
            text = text.replace(opening, "").replace(closing, "")
    if text.count('"') % 2:
        text = text.replace('"', "")
    return text


def finish(sentence: str, question: bool = False) -> str:
    """Capitalised, brackets balanced, trailing punctuation normalised to '.' (or '?' for a question)."""
    sentence = _balance(sentence.strip().lstrip("#|*>-+ ").strip(",;:-–— ").rstrip(".!?…").strip())
    sentence = sentence.strip("\"'“”").strip(",;:-–— ")
    if not sentence:
        return ""
    if _CAPITALISE.match(sentence):  # leave 'iPhone', 'gRPC', 'numpy.ndarray' alone
        sentence = sentence[0].upper() + sentence[1:]
    return sentence + ("?" if question else ".")


def stand_alone(clause: str) -> str:
    """Make a split-off clause read as a sentence: 'which X' -> 'This X', 'because X' -> 'This is because X'."""
    clause = _LEADING_JOIN.sub("", clause.strip())
    match = _DEPENDENT.match(clause)
    if not match:
        return clause
    word, rest = match.group(1).lower(), clause[match.end():]
    head, comma, main = rest.partition(", ")
    if comma and word in _REORDER and count_words(main) >= 2:
        return f"{main} {word} {head}"  # "after X, I will ask" -> "I will ask after X"
    if word == "which":
        return f"This {rest}"
    if word in ("although", "though", "even though"):
        return f"{rest}, though"
    if word in ("whereas", "while"):
        return f"By contrast, {rest}"
    if word in ("because", "to", "so that", "for"):
        return f"This is {word} {rest}"
    if word == "by":
        return f"This works by {rest}"
    if word == "using":
        return f"This uses {rest}"
    return f"This applies {word} {rest}"


def compress(sentence: str, *, question: bool = False, limit: int = MAX_WORDS) -> tuple[list[str], int]:
    """Split a sentence into sentences of <= ``limit`` words; returns (sentences, hard cuts made)."""
    pieces, cuts = _split(strip_fillers(sentence), limit)
    out = [finish(piece, question and i == len(pieces) - 1) for i, piece in enumerate(pieces)]
    return [o for o in out if o], cuts


def _split(text: str, limit: int, loose: bool = False) -> tuple[list[str], int]:
    """Clauses first, then the softer boundary nearest the middle, a cut at ``limit`` words last.

    ``loose`` marks a split-off clause: it is made to stand alone, its prefix counted in the limit.
    """
    prefix = 2 if loose and _DEPENDENT.match(_LEADING_JOIN.sub("", text.strip())) else 0
    if count_words(text) + prefix <= limit:
        return [stand_alone(text) if loose else text], 0
    parts = _clauses(text)
    if len(parts) < 2:
        parts = _halves(text) or []
    if len(parts) < 2:
        cut = _cut(text, limit - prefix)
        return [stand_alone(cut) if loose else cut], 1
    if _DEPENDENT.match(parts[0]) and not _DEPENDENT.match(parts[1]):
        parts[0], parts[1] = parts[1], parts[0]  # "If X, Y" -> "Y." + "This applies if X."
    out, cuts = [], 0
    for i, part in enumerate(parts):
        pieces, n = _split(part, limit, loose or i > 0 or bool(_DEPENDENT.match(part)))
        out, cuts = out + pieces, cuts + n
    return out, cuts


def _clauses(text: str) -> list[str]:
    """Cut at strong clause boundaries; a colon only after a lead-in of 5+ words ('Consider: X' stays whole)."""
    parts, start = [], 0
    for match in _CLAUSE.finditer(text):
        if match.group().startswith(":") and count_words(text[start: match.start()]) < 5:
            continue
        parts.append(text[start: match.start()])
        start = match.end()
    parts.append(text[start:])
    return [p for p in parts if _WORD.search(p)]


def _halves(text: str) -> list[str] | None:
    """A softer split, at the comma or joining word nearest the middle, keeping 4+ words a side."""
    best = None
    middle = len(text) / 2
    for match in _SOFT.finditer(text):
        left, right = text[: match.start()], text[match.end():]
        if count_words(left) >= 4 and count_words(right) >= 4:
            if best is None or abs(match.start() - middle) < abs(best[0] - middle):
                best = (match.start(), [left, right])
    return best[1] if best else None


def _cut(text: str, limit: int) -> str:
    """Last resort: the first ``limit`` words, ending at a comma when one falls late enough."""
    kept, count = [], 0
    for word in text.split():
        count += 1 if _WORD.search(word) else 0
        if count > limit:
            break
        kept.append(word)
    head = " ".join(kept)
    comma = head.rfind(",")
    return head[:comma] if comma > len(head) * 0.6 else head
