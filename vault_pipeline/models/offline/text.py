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
    dutch_verb_form,
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
# Strong clause boundaries: ";", ", and/but/which/because ...".
# A colon is no boundary: what follows it is the point of what precedes it (a complement, never dropped).
_CLAUSE = re.compile(
    r";\s+|,\s+(?=(?:and|but|so|which|because|while|whereas|although|or)\b)"
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
_LEAD_IN = re.compile(r"^[^\W\d_]+,\s+(?=\S)")  # "However, ", "Finally, ": one word and a comma
# A split-off dependent clause is never a note of its own (no invented "This applies if ..."): it stays with
# its main clause as that unit's context. When it does not fit there, one of these may be dropped (the main
# clause still holds without it); any other (a condition, a purpose, a means) takes the sentence with it.
_DROPPABLE = frozenset(("which", "that", "because", "omdat", "whereas", "while", "although", "though", "even though"))
# A sentence's opening phrase that leads to its main clause after a comma, as a condition does: "As of
# my knowledge cutoff in 2021, X", "Based on your description, X", "As a user, I want X". Split off, it is
# the main clause's context (not a note of its own: "As of my knowledge cutoff in September 2021.").
_LEADS = (
    r"as of|as an?|based on|due to|according to|in the (?:context|case) of|in terms of|with respect to|"
    r"regarding|in addition to|apart from|aside from"
)
_LEAD_PHRASE = re.compile(rf"^(?:{_LEADS})\b", re.I)
# Dutch pieces split off after a comma that qualify the clause before them, as the English ones above do:
# a relative adverb ("..., waarbij je kracht vanuit je heupen komt", "..., waardoor X ontstaat"), a relative
# "die" or "wat", "terwijl/hoewel/doordat", an example ("zoals X"), "met je/de ..." ("Met je kin iets naar je
# borst."). Alone each was a fragment in the real export's inbox.
_DUTCH_QUALIFIER = (
    r"waarbij|waardoor|waarmee|waarin|waarop|waarna|waarvan|waarvoor|die|wat|terwijl|hoewel|doordat|zoals|"
    r"inclusief|bijvoorbeeld|met name|zonder dat|"
    r"met(?=\s+(?:je|jouw|de|het|een|hun|zijn|haar|uw|ons|onze|deze|dit|die|elke|alle)\b)"
)
# A split-off piece that only qualifies the clause before it: a causal "as", a participle ("..., indicating
# that X", "..., making it Y"), "rather than Y", "such as X", "with the focus on Y", a lead phrase. Alone it
# is no sentence ("As there are no connections between nodes.", "Making it a valuable tool."); its main
# clause holds without it, so it is that clause's context or is dropped. Read only in a piece split off
# after a comma, never at a sentence's start, where "Making a backup is ..." is a subject.
_QUALIFIER = re.compile(
    r"^(as(?=\s+(?:there|it|they|he|she|we|you|i|the|this|these|those|each|all|both|no|its|their|our|my|your)\b)"
    r"|indicating|making|allowing|enabling|ensuring|providing|resulting in|leading to|meaning|causing|"
    r"creating|giving|helping|reducing|improving|increasing|requiring|suggesting|rather than|"
    rf"given that|now that|such as|including|{_LEADS}|"
    r"with(?=\s+(?:the|a|an|its|their|his|her|our|your|this|these|those|each|all|no|some|many|most)\b)|"
    rf"{_DUTCH_QUALIFIER})\b\s*",
    re.I,
)
# A Dutch condition, time or purpose split off after a comma ("..., als je X", "..., om X te Y"): the
# clause before needs it, so it is context or the sentence is skipped, never dropped.
_DUTCH_DEPENDENT = re.compile(r"^(als|zodra|mits|nadat|voordat|totdat|zolang|om|door|zonder)\b\s*", re.I)
# A Dutch sentence that opens with a dependent clause puts its main clause's verb before the subject ("Als
# je X hebt, kun je Y"). Over the word limit, the main clause is said in subject-verb order with the
# opening clause as its context ("Je kunt Y" + "als je X hebt"); when its subject is no pronoun (the verb
# and a noun phrase, "wordt de tabel ...") it cannot be reordered safely, and the sentence is skipped.
# An optional short label ("Let op: ", "Maak een Steam-account: ") may precede the opening clause.
_DUTCH_LEAD = re.compile(
    r"^(?:[^:]{1,40}:\s+)?(?P<clause>(?:als|wanneer|indien|omdat|hoewel|nadat|voordat|zodra|terwijl|doordat|mits|"
    r"tenzij|om|door|zonder|zoals|sinds)\b.*)$",
    re.I | re.S,
)
_INVERTED = re.compile(
    r"^(?:dan\s+)?(?P<verb>[^\W\d_]+)\s+(?P<subject>je|jij|u|het|er|ik|we|wij|ze|zij|hij|dit|dat|deze|men)\b", re.I
)
# A verb before "je/jij" is its stem; after the subject it takes the second person's "t" ("kun je" -> "je
# kunt", "word je" -> "je wordt"), except where it has none (a modal, a past form) or another form.
_SECOND_PERSON = {
    "kun": "kunt",
    "ga": "gaat",
    "sta": "staat",
    "sla": "slaat",
    "zal": "zult",
    "ben": "bent",
    "heb": "hebt",
}
_NO_T = frozenset("kan mag zou moet kon mocht moest was had ging kreeg werd zag deed wist".split())
# What follows "after X, " is no main clause to put first when it is a relative clause ("until X, at which
# point Y"), a gerund going on with a list ("for X, creating A, adding B"), or another dependent clause.
_NO_MAIN = re.compile(r"(?:\w+\s+(?:which|whom)\b|which\b|who\b|whose\b|\w+ing\b)", re.I)
# A main clause ending on one of these verbs before "if/whether/that ..." is cut before its point: the clause
# is its complement ("is used to determine | if X", "check | whether Y").
_TAKES_CLAUSE = re.compile(
    r"^(?:check|determin|know|see|ask|test|verif|decid|wonder|tell|find|learn|understand|show|indicat|explain|"
    r"evaluat|assess|confirm|ensur|sure|unsure|clear|unclear|out|bepal|controleer|weet|vraag|kijk)\w*$",
    re.I,
)
# ... and on one of these before "using X": the gerund is its object ("I recommend | using X").
_TAKES_GERUND = re.compile(
    r"^(?:recommend|suggest|advis|consider|avoid|try|tri|start|stop|keep|enjoy|prefer|begin|"
    r"continu|practi[cs]|imagin|involv|risk|mention)\w*$",
    re.I,
)
_COMPLEMENTISER = frozenset(("if", "when", "where", "that", "whether", "dat", "of", "om", "to", "te"))
# A piece that ends on one of these was cut before its point ("The Mahalanobis distance is.").
_CUT_ENDS = frozenset("is are was were am be been has have had does do did om zijn whether that dat".split())
_MARKER = "\x00"  # leads a split-off dependent clause inside ``_split``
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
    """A split-off clause as it may stand: its joining word gone, a trailing main clause moved first.

    'and X' -> 'X'; 'after X, I will ask' -> 'I will ask after X'. A dependent clause without a main
    clause of its own ('if X', 'which Y', 'that is Z') comes back marked (``_MARKER``): it is never
    reworded into a sentence ('This applies if X') but stays with the clause it qualifies.
    """
    clause = _LEADING_JOIN.sub("", clause.strip())
    if _RELATIVE_THAT.match(clause) or _QUALIFIER.match(clause) or _dutch_dependent(clause):
        return _MARKER + clause
    match = _DEPENDENT.match(clause)
    if not match:
        return clause
    word, rest = match.group(1).lower(), clause[match.end() :]
    head, comma, main = rest.partition(", ")
    if (
        comma
        and word in _REORDER
        and count_words(main) >= 2
        and not _DEPENDENT.match(main)
        and not _NO_MAIN.match(main)
    ):
        return f"{main.rstrip(' .!?…')} {word} {head}"  # "after X, I will ask" -> "I will ask after X"
    return _MARKER + clause


def _dependent_word(clause: str) -> str:
    relative = _RELATIVE_THAT.match(clause)
    if not relative and (qualifier := _QUALIFIER.match(clause)):
        return qualifier.group(1).lower()
    match = _DEPENDENT.match(clause) or _DUTCH_DEPENDENT.match(clause)
    return "that" if relative else match.group(1).lower() if match else ""


def compress(sentence: str, *, limit: int, question: bool = False) -> tuple[list[str], int]:
    """The sentences of ``compress_units``, without their contexts."""
    units, skipped = compress_units(sentence, limit=limit, question=question)
    return [text for text, _ in units], skipped


def compress_units(
    sentence: str, *, limit: int, context_limit: int | None = None, question: bool = False
) -> tuple[list[tuple[str, str | None]], int]:
    """Split a sentence into (sentence, context) pairs of <= ``limit`` words; returns (pairs, pieces skipped).

    Nothing is ever cut or invented: a main clause that cannot be said in ``limit`` words, even without
    its asides (brackets, 'such as ...'), or that would end on a function word, is skipped and counted.
    A split-off dependent clause ('if X', 'which Y', 'to Z') is the context of the clause before it, in at
    most ``context_limit`` words (default ``limit``); when it does not fit there it is dropped only if the
    main clause holds without it (a relative or 'because' clause), else the whole sentence is skipped.
    A complement ('is used to determine | if X', what follows a colon) is never split off.
    A split question stays a question only in its asking pieces ('How do I X?').
    """
    context_limit = limit if context_limit is None else context_limit
    split = _split(_without_lead_in(strip_fillers(sentence), limit), limit)
    mains = max(1, sum(1 for p in split if p is None or not p.startswith(_MARKER)))
    if not split or split[0] is None or split[0].startswith(_MARKER):
        return [], mains  # the main clause cannot be said: its qualifiers mean nothing alone
    whole = len(split) == 1
    mained = [p for p in split if p is None or not p.startswith(_MARKER)]
    asking = [question and (whole or bool(p and _INTERROGATIVE.match(p))) for p in mained]
    if question and not any(asking):
        asking[0] = True
    out: list[list] = []  # [sentence or None, context]
    for piece in split:
        if piece is None or not piece.startswith(_MARKER):
            said = finish(piece, asking[len(out)]) if piece else ""
            fits = said and count_words(said) <= limit and not dangling(said) and (whole or not _cut(said))
            out.append([said if fits else None, None])
            continue
        clause = piece[1:]
        word = _dependent_word(clause)
        main = out[-1]
        if main[0] and _complement(main[0], word):
            return [], mains  # "X is used to determine." without its "if Y": cut before its point
        context = _as_context(clause, context_limit)
        if main[0] is None:
            continue  # its main clause is skipped already
        if context and main[1] is None:
            main[1] = context
        elif word not in _DROPPABLE and not _QUALIFIER.match(clause):
            return [], mains  # a condition or purpose the claim needs: never dropped
    if out[0][0] is None:
        return [], mains
    return [(text, context) for text, context in out if text], sum(1 for text, _ in out if not text)


def _without_lead_in(text: str, limit: int) -> str:
    """A sentence over ``limit`` words without a one-word lead-in before its dependent clause:
    'However, if X, Y' -> 'if X, Y', so the condition is found and goes with its main clause (kept,
    it left 'However, if X.' alone as a note). A sentence that fits stays as it is."""
    lead = _LEAD_IN.match(text)
    if lead and count_words(text) > limit and _DEPENDENT.match(text[lead.end() :]):
        return text[lead.end() :]
    return text


def _cut(said: str) -> bool:
    """A piece of a split sentence that stops before its point: 'X is.', 'Het doel is om patronen.'."""
    words = unmask(said).rstrip(".!?").split()
    last = words[-1].lower().strip("\"'()") if words else ""
    lowered = [w.lower() for w in words]
    om = max((i for i, w in enumerate(lowered) if w == "om"), default=-1)
    return last in _CUT_ENDS or (om >= 0 and "te" not in lowered[om:])


def _complement(main: str, word: str) -> bool:
    """Whether a clause opened by ``word`` completes ``main`` ('determine | if', 'om patronen | te ...')."""
    last = unmask(main).rstrip(".!?").split()[-1:]
    verb = last[0].strip("\"'()") if last else ""
    if word == "using":  # "I recommend | using X": the gerund is the verb's object
        return _TAKES_GERUND.match(verb) is not None
    return word in _COMPLEMENTISER and bool(verb) and _TAKES_CLAUSE.match(verb) is not None


def _as_context(clause: str, limit: int) -> str | None:
    """A dependent clause as a unit's context ('if X'), in at most ``limit`` words; None if it cannot be."""
    clause = " ".join(_balance(clause).split()).rstrip(" .!?…,;:")
    if (
        _DEPENDENT.match(clause)
        or _RELATIVE_THAT.match(clause)
        or _QUALIFIER.match(clause)
        or _DUTCH_LEAD.match(clause)
    ):
        clause = clause[:1].lower() + clause[1:]  # "If X, Y" -> context "if X"
    for text in (clause, _without_asides(clause)):
        tight = _tightened(text, limit)
        if tight and not dangling(tight) and _WORD.search(tight):
            return tight.rstrip(" .!?…,;:")
    return None


def _split(text: str, limit: int, loose: bool = False) -> list[str | None]:
    """Clauses first, then the softer boundary nearest the middle, then the same words without their asides.

    ``loose`` marks a split-off clause: it loses its joining word, and a dependent one ('if X, Y' aside)
    stays one piece, marked, for the caller to keep as context or not at all.
    A main piece that still does not fit is None: never cut, the caller skips and counts it.
    """
    dependent = False
    if loose:
        text = _LEADING_JOIN.sub("", text.strip())
        dependent = bool(
            _DEPENDENT.match(text) or _RELATIVE_THAT.match(text) or _QUALIFIER.match(text) or _dutch_dependent(text)
        )
    if count_words(text) <= limit:
        return [stand_alone(text) if loose else text]
    parts = _clauses(text)
    if dependent and not (len(parts) >= 2 and _DEPENDENT.match(parts[0]) and not _DEPENDENT.match(parts[1])):
        return [_MARKER + text]  # a condition or purpose is said whole, as context, or not at all
    if len(parts) < 2:
        tight = _tightened(text, limit)
        if tight is not None:
            return [stand_alone(tight) if loose else tight]
        parts = _halves(text) or []
    if len(parts) < 2:
        tight = _tightened(_without_asides(text), limit)
        return [(stand_alone(tight) if loose else tight) if tight is not None else None]
    # A Dutch opening clause alone (a first part that holds its main clause too, "Hoewel X, wordt het Y",
    # is a sentence already).
    dutch = None if loose else _DUTCH_LEAD.match(parts[0])
    if dutch and _holds_main(parts[0]):
        dutch = None
    if dutch:
        main = _uninverted(parts[1]) or (parts[1] if _imperative(parts[1]) else None)
        if main is not None:
            parts[:2] = [dutch.group("clause"), main]
        elif parts[1].split(maxsplit=1)[0].lower() in FINITE_AUXILIARIES:
            return [None]  # an inverted main clause with a noun subject ("wordt de tabel ..."): skipped
        else:
            dutch = None  # no main clause follows ("Door X biedt FastAPI Y, ..."): split as any sentence
    lead = bool(dutch or _DEPENDENT.match(parts[0]) or _LEAD_PHRASE.match(parts[0])) and not _DEPENDENT.match(parts[1])
    if lead:
        parts[0], parts[1] = parts[1], parts[0]  # "If X, Y" -> "Y." + "This applies if X."
    done = [_split(part, limit, loose or i > 0 or bool(_DEPENDENT.match(part))) for i, part in enumerate(parts)]
    if lead:  # the condition follows the first piece of its main clause, the piece it qualifies
        done[0], done[1] = done[0][:1], done[1] + done[0][1:]
    return [piece for pieces in done for piece in pieces]


def _holds_main(text: str) -> bool:
    """Whether a Dutch clause goes on to its inverted main clause after a comma ('door X, zul je Y')."""
    return any(_INVERTED.match(text[m.end() :]) for m in re.finditer(r",\s+", text))


def _dutch_dependent(clause: str) -> bool:
    """A Dutch condition, time or purpose alone ('als je X', 'om X te Y'), not one with its main clause."""
    return bool(_DUTCH_DEPENDENT.match(clause)) and not _holds_main(clause)


def _imperative(main: str) -> bool:
    """Whether a Dutch main clause opens with an imperative ('neem dan een stapje terug'): a verb's stem
    (its lemma an infinitive it is not; a stem ending in "t" may be a third person, 'biedt') and no subject."""
    first = (main.split(maxsplit=1) or [""])[0].lower()
    if not first.isalpha() or first.endswith("t") or first in FINITE_AUXILIARIES or _INVERTED.match(main):
        return False
    return dutch_verb_form(first)


def _uninverted(main: str) -> str | None:
    """A Dutch main clause after its opening dependent clause, in subject-verb order ('kun je Y' -> 'je kunt
    Y', 'is het belangrijk om Z' -> 'het is belangrijk om Z'); None when its subject is no pronoun. 'het',
    'ze' and the demonstratives may be an imperative's object ('laat het me weten') or an article: they
    count as the subject only after an auxiliary and before the clause they stand for."""
    inverted = _INVERTED.match(main)
    if not inverted:
        return None
    verb, subject = inverted.group("verb").lower(), inverted.group("subject")
    if verb in FUNCTION_WORDS or _DUTCH_LEAD.match(verb) or _QUALIFIER.match(verb) or _DUTCH_DEPENDENT.match(verb):
        return None  # "zodat ik ...": a joining word, no verb (simplemma misses verb forms: "ontstaat", "vraag")
    rest = main[inverted.end() :]
    # "het" may also be an article ("wordt het lege formulier getoond"): a subject only as the formal one of
    # "is het belangrijk om/dat ..." (a word or two, then the clause it stands for).
    if subject.lower() in ("het", "ze", "dit", "dat", "deze") and (
        verb not in FINITE_AUXILIARIES or not re.match(r"(?:\s+[^\s,]+){1,2}\s+(?:om|dat)\b", rest)
    ):
        return None
    if subject.lower() in ("je", "jij"):
        verb = _SECOND_PERSON.get(verb) or (verb if verb in _NO_T or verb.endswith(("t", "e")) else verb + "t")
    return f"{subject} {verb}{rest}"


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
    while comma > 0 and _in_list(text, comma):  # "If you need X, Y, and Z, Unity ..." ends before "Unity"
        comma = text.find(", ", comma + 1)
    if comma > 0 and count_words(text[:comma]) >= 3 and count_words(text[comma:]) >= 3:
        return [text[:comma], *_clauses(text[comma + 2 :])]
    parts, start = [], 0
    for match in _CLAUSE.finditer(text):
        if match.group().startswith(":") and count_words(text[start : match.start()]) < 5:
            continue
        if match.group().startswith(",") and _in_list(text, match.start()):
            continue  # "store, search, and analyze" is one clause
        if _after_intro(text, match.start()):
            continue  # "Examples are: A; B" is one sentence: the list is the point
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
        if _after_intro(text, start):
            continue  # what follows a colon is the point of what precedes it
        left, right = text[:start].rstrip(), text[end:]
        balanced = count_words(left) >= 4 and count_words(right) >= 4
        if balanced and (best is None or abs(start - middle) < abs(best[0] - middle)):
            best = (start, [left, right])
    return best[1] if best else None


def _after_intro(text: str, at: int) -> bool:
    """True for a boundary after a colon that ends a lead-in of 5+ words ('Examples are: A, B')."""
    colon = text.find(": ")
    return 0 <= colon < at and count_words(text[:colon]) >= 5


def _in_list(text: str, at: int) -> bool:
    """True for a boundary at ``at`` between the short items of a list ('scalability, speed, and size')."""
    if text[at] == "," and re.match(r",\s+(?:[^\s,]+\s+){1,3}(?:and|or|en|of)\s", text[at:], re.I):
        return True  # "patronen, relaties of structuren": the next item is the list's last
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
