"""The signs of a note sentence and the rules that fail one outright.

``features`` reads the signs of a fragment or of chat talk (no finite verb, a preposition or
conjunction opening, a dangling last word, an unresolved "this", a salutation, a quiz option, a
log line, template filler, ...): the selector (``select.py``) weighs them, with what the note
says (``meaning_vectors``), into the probability that a reader finds the note good. The hard
rules (``hard_problems``: the word limit, one sentence, the sentence type, the named exclusions)
and faithfulness to the source's literal tokens (``unfaithful``) fail a note whoever judges the rest.

English finite verbs come from TextBlob's PatternTagger (the CLiPS Pattern lexicon inside the
wheel; no model download); Dutch notes, which that tagger does not know, from simplemma's Dutch
lemmas (a word whose lemma is an infinitive it is not is a verb form: maak -> maken).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Any

from vault_pipeline.ingest.extract import MAX_VERBATIM_WORDS, MAX_WORDS
from vault_pipeline.models.offline.statements import is_verbatim
from vault_pipeline.text import (
    PLEASANTRY,
    TEMPLATE_LEADS,
    dutch_known,
    dutch_lemma,
    dutch_verb_form,
    sentence_count,
    word_count,
)

# --------------------------------------------------------------------------- features

# Feature -> the reason a user reads in `quality: fails — ...`. Order is the order of reasons.
FEATURES: dict[str, str] = {
    "no_verb": "fragment, no verb",
    "fragment_opener": "starts like a fragment",
    "dangling_end": "ends mid-phrase",
    "unresolved_reference": "unresolved reference",
    "salutation": "salutation",
    "quiz_option": "quiz option",
    "log_line": "log line",
    "template": "template filler",
    "no_capital": "no capital at the start",
    "no_full_stop": "no closing punctuation",
    "short": "too short to stand alone",
    "verb_first": "no subject",
    "pronoun": "refers to something outside the note",
    "cut_start": "starts mid-sentence in its source",
    "cut_end": "cut before its point (the source sentence goes on)",
    "about_the_chat": "about the conversation, not the subject",
    "relative_only": "a noun with a relative clause, no main clause",
    "no_noun": "says nothing about anything (no noun, no number)",
}

# Closed word classes (function words, not content tuned to the labels).
_DUTCH = frozenset(
    "de het een en van is dat niet zijn op te voor met als er aan ook maar om bij of dan door "
    "naar kan wordt worden je deze dit die wat wel nog geen moet uit heeft hebben zal".split()
)
_ENGLISH = frozenset("the a an and of is are to in that it for with as on be this can by or not".split())
_DUTCH_FINITE = frozenset(
    "is zijn was waren wordt worden werd werden heeft hebben had hadden heb ben bent kan kunnen kon konden "
    "kun kunt moet moeten moest zal zullen zou zouden wil wilt willen mag mogen gaat gaan ging komt komen "
    "doet doen maakt maken geeft geven staat staan ligt blijft blijven lijkt betekent biedt bieden helpt "
    "bevat gebruikt gebruiken zorgt hangt hoeft hoort vind vindt weet zie ziet krijgt krijg houdt "
    "leidt werkt werken past".split()
)
_DUTCH_OPENERS = frozenset(
    "en of maar want dus omdat als wanneer terwijl hoewel zodat doordat met voor in op bij van naar "
    "door zonder tot over onder tussen om tegen volgens na sinds".split()
)
_DUTCH_DANGLING = frozenset("de het een en of van met voor in op bij naar door om te aan dat die als zoals".split())
# Words that, opening a note, point at something before it; Dutch "daar" and "hier" stand for "that"
# and "this" with a preposition ("Daar ben ik het niet mee eens.", "Hier kun je ... schrijven.").
_DEICTIC = frozenset("this that these those it they he she dit dat deze die hij zij ze daar hier".split())
_ABOVE = re.compile(r"\b(?:the above|the following|as follows|hierboven|hieronder|het volgende)\b", re.I)
_QUIZ = re.compile(r"^(?:question\s*\d+\s*[:.]\s*)?(?:\(?[a-e][.):]\s|correct\b|incorrect\b|answer\b)", re.I)
_LOG = re.compile(
    r"^\W*\d+(?:[.:]\d+)*\s|\b(?:error|warning|traceback|exception)\s*:|=>|>>>|\$ |^\[\d|\d{2}:\d{2}:\d{2}"
)
# The log-line shapes that no sentence has: a level or traceback opening the line, a prompt, a
# bracketed or clock timestamp. A leading number ("3 May is ...") or "an error: ..." inside a
# sentence ("I get an error: There is no function named env.") is only a sign.
_LOG_HARD = re.compile(
    r"^\W*(?:ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL|FATAL|Traceback)\b|>>>|^\$ |^\[\d|\d{2}:\d{2}:\d{2}"
)
_OPENER_TAGS = ("IN", "CC", "TO", "WDT", "WRB")
_DANGLING_TAGS = ("DT", "IN", "CC", "TO", "PRP$")
_FINITE_TAGS = ("VBZ", "VBP", "VBD", "MD")
_FINITE = frozenset(_FINITE_TAGS)


@lru_cache(maxsize=1)
def _tagger() -> Any:
    from textblob.en.taggers import PatternTagger  # imported on first use: keep starts fast

    return PatternTagger()


def is_dutch(sentence: str) -> bool:
    """Whether a sentence reads as Dutch: more Dutch than English function words."""
    lowered = [w.strip(".,;:!?()\"'").lower() for w in sentence.split()]
    return sum(w in _DUTCH for w in lowered) > sum(w in _ENGLISH for w in lowered)


def features(sentence: str, source: str | None = None) -> dict[str, bool]:
    """The gate's interpretable signs of a fragment, each True when the sign is present.

    With the source message text, also whether the sentence was cut out of a longer one. The
    grammar signs come from one reading per language (English by the tagger, Dutch by lemma
    rules); the rest read the sentence's words and shape the same way in either language.
    Keys in ``FEATURES`` order, then ``imperative`` (a selector input, not a reason)."""
    text = sentence.strip()
    clause = _judged_clause(text)
    tokens = _tokens(clause)
    dutch = is_dutch(text)
    found = {
        **(_dutch_grammar(text, tokens) if dutch else _english_grammar(text, clause, tokens[-1].lower())),
        **_reference_signs(text, clause, tokens[0].lower(), dutch),
        **_talk_signs(text),
        **_form_signs(text),
        **_cut_signs(text, source),
    }
    return {name: found[name] for name in (*FEATURES, "imperative")}


def _judged_clause(text: str) -> str:
    """The clause judged: after a short field label ("Cloud Run: Deploy ..."), when three words follow it."""
    label = _LABEL.match(text)
    return text[label.end() :] if label and word_count(text[label.end() :]) >= 3 else text


def _tokens(clause: str) -> list[str]:
    """The clause's words without the punctuation and quotes around them; [""] for none."""
    tokens = [w.strip(".,;:!?()\"'`*“”‘’") for w in clause.split()]
    return [t for t in tokens if t] or [""]


def _dutch_grammar(text: str, tokens: Sequence[str]) -> dict[str, bool]:
    """The grammar signs of a Dutch sentence, from closed word classes and simplemma's lemmas."""
    lowered = [t.lower() for t in tokens]
    first, last = lowered[0], lowered[-1]
    second = lowered[1] if len(lowered) > 1 else ""
    # An imperative opens with the verb stem, its object's article or pronoun next ("Volg de ...").
    imperative = first not in _DUTCH and first not in _DUTCH_OPENERS and second in _DUTCH_OBJECT_OPENERS
    # "om" opens a purpose clause that needs "te" and an infinitive ("om patronen." is cut).
    purpose_cut = "om" in lowered and "te" not in lowered[lowered.index("om") :]
    # A separable verb's particle ends a main clause ("Pas de intensiteit aan.", "Berg ze netjes op."):
    # no open phrase when it joins a word of the sentence into a known verb (aanpassen, opbergen).
    dangling = (last in _DUTCH_DANGLING and not _particle_verb(last, lowered[:-1])) or purpose_cut
    return {
        "no_verb": not (imperative or any(_dutch_finite(t) for t in lowered)),
        "fragment_opener": first in _DUTCH_OPENERS and "," not in text,
        "dangling_end": dangling,
        "verb_first": first in _DUTCH_FINITE and not text.endswith("?"),
        "relative_only": False,
        "no_noun": not any(_dutch_content(t.lower()) for t in tokens[1:] if t.isalnum()),
        "imperative": imperative,
    }


def _dutch_content(word: str) -> bool:
    """Whether a lowercased Dutch word stands for a noun: no function word and no verb form."""
    return word not in _DUTCH and not _dutch_finite(word)


def _english_grammar(text: str, clause: str, last: str) -> dict[str, bool]:
    """The grammar signs of an English sentence, from the tags of TextBlob's PatternTagger."""
    raw = _tagger().tag(_for_tagging(clause))
    tagged = [(w.lower(), tag) for w, tag in raw if tag not in _PUNCT_TAGS]
    tags = [tag for _, tag in tagged]
    words = [w for w, _ in tagged]
    imperative = _english_imperative(tags, words, _clause_starts(raw))
    return {
        "no_verb": not _english_verb(tags, words, imperative),
        "fragment_opener": bool(tags) and tags[0] in _OPENER_TAGS and "," not in text and not text.endswith("?"),
        # An auxiliary or copula as the last word has lost its complement ("The distance is.").
        "dangling_end": bool(tags) and (tags[-1] in _DANGLING_TAGS or last in _AUXILIARIES),
        "verb_first": _english_verb_first(tags) and not text.endswith("?"),
        "relative_only": _relative_only(tags, words),
        # Chit-chat ("That's great, Maria.", "It's so rewarding.") names no thing: no common noun, no
        # number, no code span (a name alone is the person addressed).
        "no_noun": not any(tag in ("NN", "NNS", "CD") for tag in tags) and "`" not in clause,
        "imperative": imperative,
    }


def _english_verb(tags: Sequence[str], words: Sequence[str], imperative: bool) -> bool:
    """Whether the tagged clause has a verb: a finite one, an imperative, or a bare verb first."""
    # Adverbs may lead an imperative ("Always be sure ...", "Never commit ...").
    leading = next((tag for tag in tags if tag != "RB"), "")
    return _english_finite(tags, words) or imperative or leading == "VB"


def _english_finite(tags: Sequence[str], words: Sequence[str]) -> bool:
    """Whether the tagged clause has a finite verb, where the lexicon's tag may hide one."""
    # A subject pronoun makes the next word its verb ("We store ..."): the lexicon tags it a noun.
    after_pronoun = any(
        tag in _FINITE_TAGS or (prev == "PRP" and tag in ("NN", "VB", "VBN")) for prev, tag in pairwise(["", *tags])
    )
    # The lexicon reads a verb's -s form after a noun as a plural ("The method deletes all objects."):
    # between a noun and a determiner it is the finite verb.
    return after_pronoun or any(
        tags[i - 1] in ("NN", "NNS", "NNP") and tags[i + 1] in ("DT", "PRP$", "CD") and _third_person(words[i])
        for i in range(1, len(tags) - 1)
    )


def _english_imperative(tags: Sequence[str], words: Sequence[str], starts: Sequence[int]) -> bool:
    """Whether the sentence, or a stretch after one of its commas, opens with an imperative verb.

    A sentence-initial bare noun or verb followed straight by a determiner or possessive cannot be
    a subject noun phrase: it is an imperative verb ("Share your ...", "Access the ..."). So is a
    word the lexicon knows in a verb's inflections before a name ("Check GitHub ..."). The same
    holds after a fronted phrase and its comma ("For translations, use the ... tag.")."""
    return any(
        len(tags) - start > 1
        and (
            (tags[start] in ("VB", "NN", "NNP") and tags[start + 1] in ("DT", "PRP$", "PRP"))
            or (tags[start + 1] in ("DT", "PRP$", "PRP", "NNP") and _verbal(words[start]))
        )
        for start in starts
    )


def _english_verb_first(tags: Sequence[str]) -> bool:
    """Whether the clause opens with its finite verb, no subject before it.

    A gerund opens a subject when a finite verb follows ("Posting clips can help."); alone it is a
    fragment. Leading adverbs do not stand for a subject either ("Typically occurs when ...")."""
    body = tags[next((i for i, tag in enumerate(tags) if tag != "RB"), len(tags)) :]
    return bool(body) and (body[0] in _FINITE_TAGS or (body[0] == "VBG" and not set(body[1:]) & _FINITE))


def _reference_signs(text: str, clause: str, first: str, dutch: bool) -> dict[str, bool]:
    """Whether the sentence points at something it does not hold (first word, later word, connective)."""
    return {
        "unresolved_reference": first in _DEICTIC or bool(_ABOVE.search(text)),
        "pronoun": _points_outside(clause, dutch) or bool(_POINTING.search(text)),
    }


def _talk_signs(text: str) -> dict[str, bool]:
    """Whether the sentence is chat talk: a pleasantry, quiz option, log line, filler, talk about the chat."""
    return {
        "salutation": bool(PLEASANTRY.search(text)),
        "quiz_option": bool(_QUIZ.match(text)),
        "log_line": bool(_LOG.search(text)),
        "template": text.startswith(TEMPLATE_LEADS),
        "about_the_chat": bool(_ABOUT_THE_CHAT.search(text)),
    }


def _form_signs(text: str) -> dict[str, bool]:
    """Whether the sentence lacks a sentence's form: a capital first, closing punctuation, three words."""
    return {
        "no_capital": not text[:1].isupper() and not text[:1].isdigit(),
        "no_full_stop": not text.endswith((".", "?", "!", ".)", '."', ".”")),
        "short": word_count(text) < 3,
    }


def _cut_signs(text: str, source: str | None) -> dict[str, bool]:
    """Whether the sentence starts or ends inside a longer sentence of its source; False without one."""
    return {
        "cut_start": source is not None and _cut(text, source, head=True),
        "cut_end": source is not None and _cut(text, source, head=False),
    }


_CODE_SPAN = re.compile(r"`[^`]+`")
_DETERMINED_SPAN = re.compile(
    r"\b(the|a|an|this|that|these|those|your|my|our|their|its|his|her|each|every|any|no|some)\s+`[^`]+`", re.I
)
# A contraction's verb, where the tagger would split it into a quote and a letter ("It's" -> "It ' s").
_CONTRACTED = re.compile(
    r"\b(it|that|there|here|what|who|where|he|she|this)['’]s\b|(\w)n['’]t\b|['’](re|ll|ve|m|d)\b", re.I
)
_POSSESSIVE = re.compile(r"(\w)['’]s\b")
_CONTRACTIONS = {"re": " are", "ll": " will", "ve": " have", "m": " am", "d": " would"}


def _for_tagging(clause: str) -> str:
    """The clause as the tagger reads it best: a code span stands as "it" (a noun phrase), contractions spelled out."""

    def spell(match: re.Match[str]) -> str:
        if match.group(1):
            return f"{match.group(1)} is"
        if match.group(2):
            return f"{match.group(2)} not"
        return _CONTRACTIONS[match.group(3).lower()]

    # After a determiner the span names a thing ("the `-d` flag", "an `expiration_date` field"): as "it"
    # it would read as a subject pronoun and make the next noun its verb ("the it flag").
    clause = _DETERMINED_SPAN.sub(lambda m: f"{m.group(1)} item", clause)
    spelled = _CONTRACTED.sub(spell, _CODE_SPAN.sub("it", clause))
    # What is left of "'s" is a possessive; the tagger splits it off as "s", a pronoun, which then made
    # the next noun its verb ("The user's session data." had a verb).
    return _POSSESSIVE.sub(r"\1", spelled)


def _particle_verb(particle: str, words: Sequence[str]) -> bool:
    """Whether ``particle`` and one of ``words`` (a verb's stem or form) make a Dutch separable verb that
    simplemma's dictionary knows: 'aan' + 'pas' -> aanpassen, 'op' + 'berg' -> opbergen."""
    if particle not in _PARTICLES:
        return False
    for word in words:
        if not word.isalpha() or word in _DUTCH:
            continue
        forms = {dutch_lemma(word), word + "en", word + word[-1:] + "en"}
        if any(f.endswith("en") and dutch_known(particle + f) for f in forms):
            return True
    return False


@lru_cache(maxsize=8192)
def _dutch_finite(word: str) -> bool:
    """Whether a Dutch word is a finite verb form: a closed-class auxiliary, or a form whose lemma is an
    infinitive it is not (maak -> maken, voert -> voeren; oefeningen -> oefening is a noun)."""
    if word in _DUTCH_FINITE:
        return True
    if not word.isalpha() or word.endswith("en") or word in _DUTCH or word in _DUTCH_OPENERS:
        return False
    return dutch_verb_form(word)


def _clause_starts(raw: Sequence[tuple[str, str]]) -> list[int]:
    """Where the sentence and each stretch after a comma start, as indices into the tagged words without
    punctuation."""
    starts, kept = [0], 0
    for _, tag in raw:
        if tag == ",":
            starts.append(kept)
        elif tag not in _PUNCT_TAGS:
            kept += 1
    return starts


def _third_person(word: str) -> bool:
    """Whether ``word`` is a verb's -s form the lexicon knows by its stem ("deletes" -> "delete")."""
    if not word.endswith("s") or len(word) < 4:
        return False
    stems = (word[:-1], word[:-2]) if word.endswith("es") else (word[:-1],)
    return any(_verbal(stem) for stem in stems)


@lru_cache(maxsize=1)
def _lexicon() -> Any:
    """The lexicon the tagger reads (word -> its most frequent tag), imported once, on first use: every
    word of every note asks for it."""
    from textblob.en import lexicon

    return lexicon


def _verbal(word: str) -> bool:
    """Whether the tagger's lexicon knows ``word`` as a verb: its own tag, or an inflection's (typed, checking)."""
    lexicon = _lexicon()
    if lexicon.get(word) == "VB":
        return True
    stems = (word, word[:-1]) if word.endswith("e") else (word, word + word[-1:])
    forms = [f"{stem}{end}" for stem in stems for end in ("ed", "d", "ing")]
    return any(lexicon.get(form) in ("VBD", "VBN", "VBG") for form in forms)


_PUNCT_TAGS = frozenset((".", ",", ":", "(", ")", '"', "``", "''"))
_LABEL = re.compile(r"^[^\s:][^:]{0,40}?:\s+(?=\S)")
_PARTICLES = frozenset("aan op in bij door voor om".split())  # the separable particles among _DUTCH_DANGLING
_DUTCH_OBJECT_OPENERS = frozenset("de het een je jouw uw deze dit die dat alle".split())
_AUXILIARIES = frozenset(
    "is are was were be been am has have had can could will would shall should may might must".split()
)
# Talk about the exchange itself rather than its subject: the speaker's own next step, the other
# party's artefact, a pointer to somewhere else in the conversation.
_ABOUT_THE_CHAT = re.compile(
    r"^(?:I(?:'ll| will| can| would| am going to| have (?:created|written|provided))|let me|let's|please (?:provide|share|send|give)|"
    r"ik (?:zal|ga|kan)|laten we)\b"
    r"|\byou(?:'ve)? (?:provided|shared|posted|pasted)\b|\b(?:previous|earlier|last) (?:exercise|message|answer|question)\b"
    r"|\b(?:here|below|hieronder|hierboven)\s*[.:]?$",
    re.I,
)


def _relative_only(tags: Sequence[str], words: Sequence[str]) -> bool:
    """Whether every finite verb sits inside a relative clause opened after a leading noun phrase.

    "Expected problems that may need to be addressed." has a verb, but only in the clause that
    modifies its noun; there is no main clause."""
    rel = _relative_after_noun(tags, words)
    if rel is None:
        return False
    verbs = [i for i in range(rel + 1, len(tags)) if tags[i].startswith("VB") or tags[i] == "MD"]
    if tags[rel + 1 : rel + 2] == ["PRP"]:
        # "that we expected were addressed": the clause's own verb, then the main clause's.
        return len(verbs) < 2
    # "that may need to be addressed": one finite verb, the relative clause's own.
    return len([i for i in verbs if tags[i] in _FINITE_TAGS]) < 2


def _relative_after_noun(tags: Sequence[str], words: Sequence[str]) -> int | None:
    """Where a relative clause opens after a leading noun phrase with no finite verb before it, or
    None: the clause has no finite verb, opens with no noun phrase, or has no relative word after it."""
    finite = [i for i, tag in enumerate(tags) if tag in _FINITE_TAGS]
    if not finite or not tags or tags[0] not in ("DT", "JJ", "NN", "NNS", "NNP", "VBN"):
        return None
    rel = next((i for i, w in enumerate(words) if w in ("that", "which", "who", "where")), None)
    if rel is None or rel == 0 or any(i < rel for i in finite):
        return None
    return rel


_DEMONSTRATIVES = frozenset("this these those such dit deze zo'n".split())
_PERSONAL = frozenset("it its they them their hen hun".split())


def _points_outside(clause: str, dutch: bool) -> bool:
    """Whether a pointing word after the first refers to something the note does not hold.

    A demonstrative always does ("use `kubectl` to apply these files"). A personal pronoun does only
    when no noun stands before it in the note: in "If you don't have Cookiecutter installed, you can
    install it using pip." the pronoun has its antecedent."""
    words = [w.strip(".,;:!?()\"'*“”‘’") for w in clause.split()]
    seen_noun = False
    for i, word in enumerate(w for w in words if w):
        lower = word.lower()
        if i and (lower in _DEMONSTRATIVES or (lower in _PERSONAL and not seen_noun)):
            return True
        seen_noun = seen_noun or (lower not in _DEICTIC and _nounish(word, dutch, first=not i))
    return False


def _nounish(word: str, dutch: bool, *, first: bool) -> bool:
    """Whether a word can be a pronoun's antecedent: a code span, an identifier, a number, a name
    (capitalised, and as the first word of English one the lexicon does not know), or after the first word a
    noun by the tagger's lexicon (the first word is often an imperative the lexicon calls a noun:
    "Use it ..."). Dutch has no tagger here: after the first word, a word that is no function word
    and no verb form stands for a noun (as for the no-noun sign)."""
    lower = word.lower()
    if lower in _PERSONAL or lower in _DEMONSTRATIVES:
        return False
    if "`" in word or "_" in word or any(c.isdigit() for c in word) or _named(word, dutch, first=first):
        return True
    if first:
        return False
    if dutch:
        return lower.isalpha() and lower not in _DUTCH and lower not in _DUTCH_OPENERS and not _dutch_finite(lower)
    return str(_lexicon().get(lower, "")).startswith("NN")


def _named(word: str, dutch: bool, *, first: bool) -> bool:
    """Whether a word is a name: capitalised, not "I" or a contraction ("You'll"); as the first word
    (capitalised anyway) only an English word the lexicon does not know."""
    if not (word[:1].isupper() and word.isalpha() and len(word) > 1):
        return False
    return not first or (not dutch and word.lower() not in _lexicon())


_POINTING = re.compile(r"^(?:in this (?:case|view|way)|then\b|therefore|thus|hence|dus\b|daarom|daardoor)", re.I)
_WORD = re.compile(r"\w+")
_JOINER = re.compile(r"(?:and|or|but|en|of|maar)\b", re.I)
# A sentence opened by a connective only: the start of the text, a sentence end or a line break, then it.
_CONNECTIVE_HEAD = re.compile(
    r"(?:^|[.!?:\n]\s*|\*\*\s*)(?:yes|no|also|and|so|but|then|note that|however|therefore|at the same time|"
    r"ja|nee|ook|en|dus|maar)\s*,?$",
    re.I,
)


def _cut(sentence: str, source: str, *, head: bool) -> bool:
    """Whether the sentence's first (or last) three words sit inside a longer sentence of the source.

    Checked only where those words occur verbatim; a sentence compressed beyond that is not judged."""
    found = _WORD.findall(sentence)
    if len(found) < 3:
        return False
    probe = found[:3] if head else found[-3:]
    pattern = re.compile(r"\W+".join(re.escape(w) for w in probe), re.I)
    hits = list(pattern.finditer(source))
    if not hits:
        return False
    if head:
        before = [source[: m.start()].rstrip(" \t*_\"'“‘(") for m in hits]
        # A sentence connective alone before it ("Yes, you can ...", "Also, ensure ...", "Note that ...")
        # leaves the point whole, as a joiner after it does.
        return all(b and (b[-1].isalnum() or b[-1] in ",;") and not _CONNECTIVE_HEAD.search(b) for b in before)
    after = [source[m.end() :].lstrip(" \t*_\"'”’)") for m in hits]
    # A non-restrictive tail (", which ...", "and ...") leaves the point made; a bare word does not.
    return all(a and a[0].isalnum() and not _JOINER.match(a) for a in after)


# --------------------------------------------------------------------------- what it says


@lru_cache(maxsize=1)
def _meaning_embedder() -> Any:
    from vault_pipeline.models.embed import MiniLMEmbedder  # onnxruntime loads on the first call, not here

    return MiniLMEmbedder()


def meaning_vectors(sentences: Sequence[str]) -> list[list[float]]:
    """The MiniLM vectors the gate's meaning term reads (the shipped offline embedder, always)."""
    if not sentences:
        return []
    return [[float(x) for x in row] for row in _meaning_embedder().embed(list(sentences))]


# --------------------------------------------------------------------------- hard rules


def word_limit(sentence: str, source: str | None) -> int:
    """A note's word limit: the longer verbatim one for a sentence that is its source's own words."""
    return MAX_VERBATIM_WORDS if source is not None and is_verbatim(sentence, source) else MAX_WORDS


def hard_problems(sentence: str, category: str, *, limit: int = MAX_WORDS) -> list[str]:
    """The rules that fail a note outright, whoever judges the rest (the selector or a model).
    ``limit``: the word limit (longer for a sentence that is its source's own words)."""
    problems = []
    words = word_count(sentence)
    if words > limit:
        problems.append(f"{words} words (at most {limit})")
    if sentence_count(sentence) > 1:
        problems.append("more than one sentence")
    if sentence_count(sentence) == 1 and _INNER_EXCLAMATION.search(sentence):
        problems.append("more than one sentence")  # "Certainly! nnUNet is ...": an interjection glued on
    if sentence.endswith("!") or (sentence.endswith("?") and category != "open-question"):
        problems.append("not a declarative sentence")
    if category == "open-question" and not sentence.endswith("?"):
        problems.append("an open question that is not a question")
    # What the gate's definition excludes by name, whatever else the note has going for it: almost
    # no labelled note of these kinds is good, yet each is too rare for a fitted weight to refuse
    # it alone.
    text = sentence.strip()
    problems += [
        reason
        for reason, present in (
            (FEATURES["salutation"], bool(PLEASANTRY.search(text))),
            (FEATURES["quiz_option"], bool(_QUIZ.match(text))),
            (FEATURES["log_line"], bool(_LOG_HARD.search(text))),
            (FEATURES["template"], text.startswith(TEMPLATE_LEADS)),
        )
        if present
    ]
    return problems


_INNER_EXCLAMATION = re.compile(r"^[^`]*?\w[!?]\s+\S")
_LITERAL = re.compile(r"`([^`\n]+)`")
_EDGE = ".,;:!?()[]{}\"'“”‘’*"


def literal_tokens(sentence: str) -> list[str]:
    """Tokens a faithful note copies verbatim: backticked spans, and words with `_`, `.`, `/` or digits."""
    found = [m[1] for m in _LITERAL.finditer(sentence)]
    for raw in _LITERAL.sub(" ", sentence).split():
        token = raw.strip(_EDGE)
        if token and re.search(r"[_./\d]", token):
            found.append(token)
    return found


def unfaithful(sentence: str, source_text: str) -> list[str]:
    """The literal tokens of a sentence that its source message does not contain, then its words that
    are a source identifier with the separators dropped ("pgdump (pg_dump)", ``collapsed_identifiers``)."""
    missing = [t for t in literal_tokens(sentence) if t not in source_text]
    inside = {w.casefold() for t in missing for w in _WORD.findall(t)}
    return missing + [
        f"{w} ({whole})" for w, whole in collapsed_identifiers(sentence, source_text) if w.casefold() not in inside
    ]


_IDENTIFIER = re.compile(r"\w+(?:[-.]\w+)*")  # a source token, its `_`, `-` and `.` inside it


def collapsed_identifiers(sentence: str, source_text: str) -> list[tuple[str, str]]:
    """(word, source identifier) for each word of ``sentence`` that its source never uses but that is
    one of the source's identifiers with its `_`, `-` or `.` dropped: "pgdump" for `pg_dump`, a
    mangling the literal-token rule cannot see once the underscore is gone (how often, and on which
    labels, the hand-labelled notes say: `python benchmarks/bench_quality.py`)."""
    words, joined = _source_names(source_text)
    found = [(w, w.casefold()) for w in _WORD.findall(sentence)]
    return [(w, joined[key]) for w, key in found if key not in words and key in joined]


@lru_cache(maxsize=256)
def _source_names(source_text: str) -> tuple[frozenset[str], dict[str, str]]:
    """A source's words (casefolded), and its identifiers by their bare form ("pgdump" -> "pg_dump").
    Read once per message: its notes are judged one after another."""
    words = frozenset(w.casefold() for w in _WORD.findall(source_text))
    joined: dict[str, str] = {}
    for token in _IDENTIFIER.findall(source_text):
        core = token.strip("_")  # only separators inside a name: `_Description_` is emphasis
        bare = re.sub(r"[-._]", "", core).casefold()
        if bare != core.casefold() and bare not in words:
            joined.setdefault(bare, core)
    return words, joined
