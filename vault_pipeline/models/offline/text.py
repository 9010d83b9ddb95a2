"""Text handling for the offline extractor: Markdown cleaning, sentences, compression to the word limit.

The limit is the caller's (the extract prompt's ``max_words``); words and sentence ends are the
shared rules of ``vault_pipeline.text``, the ones the validator applies, so a split unit passes it.
"""

from __future__ import annotations

import re

from vault_pipeline.text import (
    FINITE_AUXILIARIES,
    FUNCTION_WORDS,
    SUBJECT_PRONOUNS,
    split_sentences,
    word_count,
)

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
# Emphasis opens only after a space or bracket and never closes inside a word: `expiration_date`,
# Flask.__call__ and 2*3*4 keep their characters.
# Underscores emphasise only a phrase: `__init__` and _id_ are names, not bold or italic.
_EMPHASIS = re.compile(
    r"(?<![^\s(\[{\"'])(?:(\*\*|\*|~~)(?=\S)(.+?)(?<=\S)\1|(__|_)([^\s_][^_]*?\s[^_]*?[^\s_])\3)(?![\w*_~(])"
)

_INLINE_CODE = re.compile(r"`[^`\n]+`")
_CITATION = re.compile(r"【[^】]*】")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)]|[a-zA-Z]\))\s+(?:\[[ xX]\]\s+)?")
_HEADING = re.compile(r"^\s*#{1,6}\s+")
# A line that is only emphasis ("**Expected Problems**", "__Step 2__:"): a label, like a heading.
_LABEL_LINE = re.compile(r"^(\*\*|__)[^*_]+\1\s*:?$")
# One alternative of a multiple-choice list ("B. Support Vector Machine", "c) To reduce error"), or its key.
_OPTION = re.compile(
    r"^\(?[A-Ea-e][.)]\s+\S|^(?:\*\*)?(?:correct )?(?:answer|antwoord)\s*:?(?:\*\*)?\s*:?\s*\(?[A-Ea-e]\b", re.I
)
# Program output pasted as text: build steps, timestamps, log levels, prompts, stack frames.
_LOG = re.compile(
    r"^(?:#\d+\s|\d+(?:\.\d+)?\s+\d+\.\d+\s|\[?\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}|\[?\d{1,2}:\d{2}:\d{2}\b|"
    r"\[(?:[A-Z]+|\d+/\d+|[\w.-]+:\d+)\]|step \d+/\d+\b|-{1,3}>\s|(?-i:(?:DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL|"
    r"TRACE|SEVERE|NOTICE)\b[:\] ])|npm (?:ERR|WARN)!|\$\s|>>>\s|PS [A-Z]:\\|C:\\[^ ]*>|traceback \(most recent|"
    r"file \"[^\"]+\", line \d+|at [\w.$<>]+\([\w.]*:\d+\)|(?:[a-z]:)?[\\/]?[\w.\\/-]+:\d+(?::\d+)?:\s)",
    re.I,
)
_WORD = re.compile(r"\w", re.UNICODE)

_FILLERS = [
    (
        re.compile(
            r"^(so|well|okay|ok|basically|actually|honestly|also|yes|yeah|alright|great|right|now)\s*,\s*", re.I
        ),
        "",
    ),
    (re.compile(r"\bI (?:think|believe|feel) (?:that )?", re.I), ""),
    (re.compile(r"\b(basically|actually|really|just|simply|quite|very|definitely|certainly)\s+", re.I), ""),
    (re.compile(r"\bin order to\b", re.I), "to"),
    (re.compile(r"\bit is important to note that\s+", re.I), ""),
    (re.compile(r"\b(?:please )?note that\s+|^(?:please )?note:\s*", re.I), ""),
    (re.compile(r"\bas well as\b", re.I), "and"),
    (re.compile(r"\bdue to the fact that\b", re.I), "because"),
    (re.compile(r"\ba (?:large|great) number of\b", re.I), "many"),
]
# Strong clause boundaries: ";", ":" before a clause, ", and/but/which/because ...".
_CLAUSE = re.compile(
    r";\s+|:\s+(?=\S+\s+\S+\s+\S+)|,\s+(?=(?:and|but|so|which|because|while|whereas|although|or)\b)"
    r"|\s+(?=(?:because|whereas|although)\b)",
    re.I,
)
# Softer boundaries, used only when no strong one is left: a comma or a joining word.
_SOFT = re.compile(
    r",\s+|\s+(?=(?:but|then|when|if|where|unless|while|whereas|so that|before|after|"
    r"until|because|since|by(?=\s+\w+ing\b)|using|for|maar)\s)",
    re.I,
)
# "an engine that allows X": 'that' before one of these verbs opens a relative clause ("This allows X").
_RELATIVE_THAT = re.compile(
    r"that\s+(?=(?:is|are|was|were|has|have|had|can|could|will|would|should|may|might|must|allows?|lets?|"
    r"makes?|provides?|supports?|stores?|runs?|uses?|contains?|includes?|helps?|enables?|handles?|requires?|"
    r"gives?|takes?|keeps?|returns?|creates?|holds?|describes?|defines?|represents?|shows?)\b)",
    re.I,
)
_LEADING_JOIN = re.compile(r"^(?:and|but|so|or|then|also|plus|en|maar|of)\s+(?=\S)", re.I)
_DEPENDENT = re.compile(
    r"^(if|when|whenever|once|after|before|unless|until|since|where|depending on|as long as|"
    r"provided that|in case|because|so that|to|which|whereas|while|although|though|"
    r"even though|by|using|for(?! example| instance)|afhankelijk van|indien|tenzij|zodat|omdat|wanneer)\b\s*",
    re.I,
)
_REORDER = frozenset(
    (
        "if",
        "when",
        "whenever",
        "once",
        "after",
        "before",
        "unless",
        "until",
        "since",
        "because",
        "although",
        "though",
        "even though",
        "as long as",
        "provided that",
        "in case",
        "to",
        "for",
    )
)
_CAPITALISE = re.compile(r"^[a-z][a-z']*(?=[\s,;:!?]|\.(?:\s|$)|$)")
_INTERROGATIVE = re.compile(
    r"^(?:and |or |but |so )?(?:what|which|who|whom|whose|why|how|where|when|is|are|was|were|do|does|did|can|"
    r"could|should|would|will|shall|may|might|must|have|has|had|am|isn't|aren't|don't|doesn't|didn't|can't|"
    r"won't|shouldn't|wouldn't|wat|hoe|waarom|welke|wie|waar|wanneer|kan|kun|kunt|kunnen|moet|moeten|zijn|"
    r"heb|hebben|heeft|wordt|zal|zou)\b",
    re.I,
)
_QUALIFIER = re.compile(r"^This (applies|is for|is to) (.+?)\.$")
# Same meaning in fewer words, tried only on a sentence still over the limit.
_TIGHTER = [
    (re.compile(pattern, re.I), short)
    for pattern, short in (
        (r"\bwill have to\b", "must"),
        (r"\b(?:is|are) able to\b", "can"),
        (r"\bwas able to\b", "could"),
        (r"\bmake sure (?:that )?", "ensure "),
        (r"\ba lot of\b|\blots of\b", "many"),
        (r"\ba number of\b", "several"),
        (r"\bprior to\b", "before"),
        (r"\bwith regard to\b|\bwith respect to\b", "about"),
        (r"\bfor the purpose of\b", "for"),
        (r"\bin addition to\b", "besides"),
        (r"\bat this point in time\b", "now"),
        (r"\bin the event that\b", "if"),
        (r"\bthe majority of\b", "most"),
        (r"\bis capable of\b", "can"),
    )
]
_ARTICLE = re.compile(r"\b(?:the|a|an)\s+(?=\S)", re.I)
MAX_ARTICLES_DROPPED = 2  # beyond that the sentence reads like a telegram; cut or split instead


def mask(text: str) -> str:
    """Inline code made opaque to every rule that reads punctuation or spaces: `GCP_PROJECT_ID` stays whole.

    Each character of a code span other than a letter or digit moves to the private-use plane, so no
    sentence, clause, emphasis or bracket rule sees inside it; ``unmask`` gives back the exact characters.
    """
    return _INLINE_CODE.sub(lambda m: "".join(_MASKED.get(c, c) for c in m.group()), text)


def unmask(text: str) -> str:
    """The exact characters a ``mask`` hid."""
    return text.translate(_UNMASKED)


_MASKED = {chr(i): chr(0xE000 + i) for i in range(0x20, 0x80) if not chr(i).isalnum() and chr(i) != "`"}
_UNMASKED = {ord(v): k for k, v in _MASKED.items()}


def count_words(text: str) -> int:
    """``word_count`` of the text as it will read, code spans unmasked."""
    return word_count(unmask(text))


def segments(text: str) -> list[tuple[str, str]]:
    """(sentence, kind) of Markdown; sentences are masked (see ``mask``), kinds say what the line was.

    Kinds: ``line`` (prose), ``item`` (a list item), ``heading`` (a heading or a line that is only
    emphasis: a label), ``option`` (an alternative of a lettered multiple-choice list, or its answer
    key), ``log`` (program output), ``intro`` (the sentence that ends a line in ':', its point in
    what follows).
    """
    text = _CITATION.sub("", _FENCE.sub("\n", text))
    lines = [raw.strip() for raw in text.splitlines()]
    options = sum(1 for line in lines if _OPTION.match(_bare(line)))
    out = []
    for line in lines:
        if not line or line.startswith("|") or set(line) <= set("-=*_ >"):
            continue
        kind = "item" if _BULLET.match(line) else "line"
        if _HEADING.match(line):
            kind = "heading"
        option = options >= 2 and _OPTION.match(_bare(line)) is not None
        line = mask(_HEADING.sub("", _BULLET.sub("", line)).lstrip("> ").strip())
        if _LABEL_LINE.match(line):
            kind = "heading"
        elif option:
            kind = "option"
        elif _LOG.match(line):
            kind = "log"
        line = _BULLET.sub("", _EMPHASIS.sub(_emphasised, _LINK.sub(r"\1", line)))  # "**3. Step**" is a list item too
        if not _WORD.search(line):
            continue
        pieces = [piece for piece in split_sentences(" ".join(line.split())) if _WORD.search(piece)]
        for i, piece in enumerate(pieces):
            intro = i == len(pieces) - 1 and piece.endswith(":") and kind in ("line", "item")
            aside = _ASIDE.fullmatch(piece) is not None  # "(e.g., clustering problems)." says nothing alone
            out.append((piece, "intro" if intro else "aside" if aside else kind))
    return out


_ASIDE = re.compile(r"\([^()]*\)[.!?:]?")


def _emphasised(match: re.Match[str]) -> str:
    return match.group(2) if match.group(1) else match.group(4)


def _bare(line: str) -> str:
    """A line without its bullet and bold markers, for telling an option line: '- **B.** Text' -> 'B. Text'."""
    return re.sub(r"^[-*+•]\s+", "", line.strip()).replace("**", "")


def clean_markdown(text: str) -> list[str]:
    """Markdown to plain prose lines: code blocks and tables dropped, bullets and headings become lines.

    Inline code keeps its backticks and exact characters."""
    return [unmask(line) for line in _masked_lines(text)]


def _masked_lines(text: str) -> list[str]:
    text = _CITATION.sub("", _FENCE.sub("\n", text))
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("|") or set(line) <= set("-=*_ >"):
            continue
        line = mask(_HEADING.sub("", _BULLET.sub("", line)).lstrip("> ").strip())
        line = _BULLET.sub("", _EMPHASIS.sub(_emphasised, _LINK.sub(r"\1", line)))  # "**3. Step**" is a list item too
        if _WORD.search(line):
            lines.append(" ".join(line.split()))
    return lines


def sentences(text: str) -> list[str]:
    """Sentence segmentation of cleaned Markdown: list items and headings are sentences of their own."""
    return [unmask(piece) for line in _masked_lines(text) for piece in split_sentences(line) if _WORD.search(piece)]


def complete(sentence: str) -> bool:
    """Whether a short sentence (three words or fewer) is complete: a subject pronoun or a finite auxiliary."""
    if count_words(sentence) > 3:
        return True
    found = [w.strip(".,;:!?\"'()").lower().replace("’", "'") for w in unmask(sentence).split()]
    if not found or found[-1] in FINITE_AUXILIARIES:
        return False  # "This is.", "Hierbij moet.": the verb's complement is missing
    return found[0] in SUBJECT_PRONOUNS or any(w in FINITE_AUXILIARIES for w in found)


def dangling(sentence: str) -> bool:
    """Whether a sentence ends mid-phrase, on a function word ("... between one and.")."""
    found = unmask(sentence).rstrip(".!?…\"'”’)] ").split()
    last = found[-1].lower().lstrip("([{\"'“‘").rstrip(".,;:") if found else ""
    return bool(found) and (last in FUNCTION_WORDS or not _WORD.search(last))  # "... (e.g.", "... is >."


def strip_fillers(sentence: str) -> str:
    """Drop words that carry no meaning ('basically', 'I think that', 'in order to' -> 'to')."""
    for pattern, replacement in _FILLERS:
        sentence = pattern.sub(replacement, sentence)
    return " ".join(sentence.split())


def _balance(text: str) -> str:
    """Drop brackets and quotes left without their partner by a split."""
    for opening, closing in ("()", "[]", "“”"):
        if text.count(opening) != text.count(closing):
            text = text.replace(opening, "").replace(closing, "")
    if text.count('"') % 2:
        text = text.replace('"', "")
    return text


_OPENS_QUOTE = re.compile(r"(?:^|[\s(])['‘](?=\w)")
_CLOSES_QUOTE = re.compile(r"(?<=[\w.!?])['’](?=[\s,.;:!?)]|$)")


def _unquote(text: str) -> str:
    """Drop a quote at either end when it wraps the whole text or has no partner ('White' stays quoted)."""
    for opening, closing in ("''", '""', "‘’", "“”"):
        inner = text[1:-1]
        if (
            len(text) > 2
            and text[0] == opening
            and text[-1] == closing
            and opening not in inner
            and closing not in inner
        ):
            return inner
    if text[:1] in "'‘" and not _CLOSES_QUOTE.search(text, 1):
        text = text[1:]
    if text[-1:] in "'’" and not _OPENS_QUOTE.search(text[:-1]):
        text = text[:-1]
    return text


def finish(sentence: str, question: bool = False) -> str:
    """Capitalised, brackets and quotes balanced, one final '.' (or '?' for a question)."""
    sentence, previous = sentence.strip().lstrip("#|*>-+ "), None
    while sentence != previous:  # '...code."' -> '...code.' -> '...code': strip until nothing changes
        previous = sentence
        sentence = _unquote(_balance(sentence).strip(" ,;:-–—*_").rstrip(".!?…").strip())
    if not sentence:
        return ""
    if _CAPITALISE.match(sentence):  # leave 'iPhone', 'gRPC', 'numpy.ndarray' alone
        sentence = sentence[0].upper() + sentence[1:]
    if not question and re.search(r"\.[\"”’']$", sentence):
        return sentence  # 'Press "OK."': the period sits inside the closing quote
    return sentence + ("?" if question else ".")


def stand_alone(clause: str) -> str:
    """Make a split-off clause read as a sentence: 'which X' -> 'This X', 'because X' -> 'This is because X'."""
    clause = _LEADING_JOIN.sub("", clause.strip())
    relative = _RELATIVE_THAT.match(clause)
    if relative:
        return "This " + clause[relative.end() :]
    match = _DEPENDENT.match(clause)
    if not match:
        return clause
    word, rest = match.group(1).lower(), clause[match.end() :]
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


def compress(sentence: str, *, limit: int, question: bool = False) -> tuple[list[str], int]:
    """Split a sentence into sentences of <= ``limit`` words; returns (sentences, pieces skipped).

    Nothing is ever cut: a piece that cannot be said in ``limit`` words, even without its asides
    (brackets, 'such as ...'), or that would end on a function word, is skipped and counted; when
    that piece is the sentence's main clause, the pieces that qualify it go with it.
    A split question stays a question only in its asking pieces ('How do I X?'); its split-off
    clauses ('This applies if Y.') are statements the caller can attach as context.
    """
    split = _split(strip_fillers(sentence), limit)
    if not split or split[0] is None:
        return [], len(split)  # the main clause cannot be said: its qualifiers mean nothing alone
    pieces = [p for p in split if p is not None]
    asking = [question and (len(pieces) == 1 or bool(_INTERROGATIVE.match(p))) for p in pieces]
    if question and not any(asking):
        asking[0] = True
    out = [finish(piece, ask) for piece, ask in zip(pieces, asking)]
    said = [o if o and count_words(o) <= limit and not dangling(o) else None for o in out]
    if said[0] is None:
        return [], len(split)
    return [o for o in said if o], len(split) - sum(1 for o in said if o)


def as_context(piece: str) -> str | None:
    """A split-off condition or purpose as a qualifier: 'This applies if X.' -> 'if X'; None for other pieces."""
    match = _QUALIFIER.match(piece)
    if not match:
        return None
    head, rest = match.group(1), match.group(2)
    return f"{'' if head.startswith('applies') else head.split()[-1] + ' '}{rest}".strip()


def _split(text: str, limit: int, loose: bool = False) -> list[str | None]:
    """Clauses first, then the softer boundary nearest the middle, then the same words without their asides.

    ``loose`` marks a split-off clause: it is made to stand alone, its prefix counted in the limit.
    A piece that still does not fit is None: never cut, the caller skips and counts it.
    """
    prefix = 2 if loose and _DEPENDENT.match(_LEADING_JOIN.sub("", text.strip())) else 0
    if count_words(text) + prefix <= limit:
        return [stand_alone(text) if loose else text]
    parts = _clauses(text)
    if len(parts) < 2:
        tight = _tightened(text, limit - prefix)
        if tight is not None:
            return [stand_alone(tight) if loose else tight]
        parts = _halves(text) or []
    if len(parts) < 2:
        tight = _tightened(_without_asides(text), limit - prefix)
        return [(stand_alone(tight) if loose else tight) if tight is not None else None]
    lead = _DEPENDENT.match(parts[0]) is not None and not _DEPENDENT.match(parts[1])
    if lead:
        parts[0], parts[1] = parts[1], parts[0]  # "If X, Y" -> "Y." + "This applies if X."
    done = [_split(part, limit, loose or i > 0 or bool(_DEPENDENT.match(part))) for i, part in enumerate(parts)]
    if lead:  # the condition follows the first piece of its main clause, the piece it qualifies
        done[0], done[1] = done[0][:1], done[1] + done[0][1:]
    return [piece for pieces in done for piece in pieces]


# Asides a point survives without: a bracketed remark, an example list after a comma.
_ASIDES = re.compile(
    r"\s+\([^()]*\)|,\s+(?:e\.g\.|i\.e\.|for example|for instance|including|like|waaronder)\s[^,;]*(?=[,;]|$)"
    r"|,?\s+(?:such as|zoals|bijvoorbeeld|bijv\.)\s[^;]*$",
    re.I,
)
# A list label before the sentence it names ("Ease of Access: The track ... should be easy").
_LEAD_LABEL = re.compile(r"^[^:]{1,40}:\s+(?=[A-Z])")


def _without_asides(text: str) -> str:
    """The sentence without its asides ('X (see Y) does Z, such as A and B' -> 'X does Z')."""
    label = _LEAD_LABEL.match(text)
    if label and count_words(label.group()) <= 4:
        text = text[label.end() :]
    return " ".join(_ASIDES.sub("", text).split())


def _clauses(text: str) -> list[str]:
    """Cut at strong clause boundaries; a colon only after a lead-in of 5+ words ('Consider: X' stays whole).

    A leading dependent clause ends at its first comma: 'If X, Y' -> 'If X' + 'Y'.
    """
    lead = _DEPENDENT.match(text)
    comma = text.find(", ", lead.end()) if lead else -1
    if comma > 0 and count_words(text[:comma]) >= 3 and count_words(text[comma:]) >= 3:
        return [text[:comma], *_clauses(text[comma + 2 :])]
    parts, start = [], 0
    for match in _CLAUSE.finditer(text):
        if match.group().startswith(":") and count_words(text[start : match.start()]) < 5:
            continue
        if match.group().startswith(",") and _in_list(text, match.start()):
            continue  # "store, search, and analyze" is one clause
        parts.append(text[start : match.start()])
        start = match.end()
    parts.append(text[start:])
    return [p for p in parts if _WORD.search(p)]


def _halves(text: str) -> list[str] | None:
    """A softer split, at the comma, joining word or relative 'that' nearest the middle, 4+ words a side."""
    best = None
    middle = len(text) / 2
    bounds = [(m.start(), m.end()) for m in _SOFT.finditer(text)]
    bounds += [(m.start(), m.start()) for m in _RELATIVE_THAT.finditer(text) if text[m.start() - 1 : m.start()] == " "]
    for start, end in sorted(bounds):
        if text[start] == "," and _in_list(text, start):
            continue  # "between one, two and four weeks" is one phrase
        left, right = text[:start].rstrip(), text[end:]
        balanced = count_words(left) >= 4 and count_words(right) >= 4
        if balanced and (best is None or abs(start - middle) < abs(best[0] - middle)):
            best = (start, [left, right])
    return best[1] if best else None


def _in_list(text: str, at: int) -> bool:
    """True for a boundary at ``at`` between the short items of a list ('scalability, speed, and size')."""
    before = text.rfind(",", 0, at)
    short_before = before >= 0 and count_words(text[before + 1 : at]) <= 3
    if re.match(r",?\s*(?:and|or|en|of)\s", text[at:], re.I):
        return short_before
    after = text.find(",", at + 1)
    return text[at] == "," and (short_before or (after > 0 and count_words(text[at + 1 : after]) <= 3))


def _reworded(text: str) -> str:
    """Wordy phrases in their short forms: 'will have to' -> 'must', 'prior to' -> 'before'."""
    for pattern, short in _TIGHTER:
        text = pattern.sub(short, text)
    return " ".join(text.split())


def _tightened(text: str, limit: int) -> str | None:
    """The same sentence in at most ``limit`` words (short forms, then up to two articles), else None."""
    text = _reworded(text)
    for _ in range(MAX_ARTICLES_DROPPED + 1):
        if count_words(text) <= limit:
            return text
        matches = list(_ARTICLE.finditer(text))
        if not matches:
            return None
        last = matches[-1]  # from the end: the subject's article reads most naturally kept
        text = text[: last.start()] + text[last.end() :]
    return None
