"""What a word, a sentence and a token are: the text rules every stage shares, in one place.

Extraction, the keep gate, the offline backend, chunking, retrieval and the sweep all count,
split, normalise and estimate text; they import these rules instead of re-typing them.
Limits (how many words a unit may have) belong to the stage that owns the rule: the 15-word
limit and the categories live in ``ingest.extract``, the extraction schema.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, NamedTuple

# --------------------------------------------------------------------------- words

# What separates words besides white space: dashes ("Postgres—not MySQL"), two or more hyphens
# used as a dash, and ellipses. A single hyphen joins ("state-of-the-art" is one word).
_WORD_BREAK = re.compile(r"\s+|[\u2012-\u2015\u2e3a\u2e3b\u2026]|-{2,}|\.{3,}")
_HAS_WORD = re.compile(r"\w")


def _word_spans(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for gap in [*_WORD_BREAK.finditer(text), None]:
        end = gap.start() if gap else len(text)
        if _HAS_WORD.search(text, start, end):
            spans.append((start, end))
        start = gap.end() if gap else end
    return spans


def words(text: str) -> list[str]:
    """The words of a text as a person counts them (see ``word_count``), punctuation attached."""
    text = str(text)
    return [text[a:b] for a, b in _word_spans(text)]


def word_count(text: str) -> int:
    """Words as a person counts them: the one rule for every word limit in the pipeline.

    A word is a run of text between white space or dashes that holds a letter or digit.
    Contractions ("don't"), hyphenated words ("state-of-the-art"), abbreviations ("e.g."),
    versions ("v3.5") and URLs count once; a dash ("—", "–", "--") separates words, so
    "Postgres—not MySQL—for" is four words; pure punctuation ("—" alone, "&") is no word.
    """
    return len(_word_spans(str(text)))


def head_words(text: str, n: int) -> str:
    """``text`` up to the end of its ``n``-th word (all of it when it has no more than ``n``)."""
    spans = _word_spans(text)
    if len(spans) <= n:
        return text
    return text[: spans[n - 1][1]] if n > 0 else ""


# --------------------------------------------------------------------------- sentences

# Tokens before a period that do not end a sentence ("e.g. SQLite", "Prof. Motto", "Fig. 3"); not "no",
# which ends "I said no." far more often than it abbreviates "number". Single letters (initials) and
# dotted forms ("U.S", "a.m") are abbreviations too, see ``is_abbreviation``.
ABBREVIATIONS = frozenset(
    "e.g i.e vs etc cf al dr mr mrs ms prof st jr sr nr fig eq ca approx inc ltd co dept est vol ch sec pp "
    "incl excl resp a.m p.m u.s u.k bijv o.a d.w.z z.b mt".split()
)
_DOTTED = re.compile(r"(?:\w\.)+\w")
# A sentence end: . ! ? (then closing quotes or brackets) before white space, or a CJK full stop.
_SENTENCE_GAP = re.compile(r"[.!?][\"'”’)\]]*\s+|[。！？][」』）\"'”’)\]]*\s*")
_OPENERS = "\"'“‘«„([¿¡"


def is_abbreviation(token: str) -> bool:
    """True for a token (without its final period) that does not end a sentence: 'e.g', 'Dr', 'J', 'U.S'."""
    token = token.lstrip("\"'“‘«„([").lower()
    if len(token) == 1 and token.isalpha():
        return True
    return token in ABBREVIATIONS or _DOTTED.fullmatch(token) is not None


def starts_sentence(char: str) -> bool:
    """Whether a character can open a sentence: a capital (or a letter of a caseless script), digit or opener."""
    return char.isdigit() or char in _OPENERS or (char.isalpha() and not char.islower())


def sentence_starts(text: str) -> list[int]:
    """Offsets inside ``text`` where a new sentence begins; abbreviations and initials end none."""
    starts = []
    for gap in _SENTENCE_GAP.finditer(text):
        if gap.end() >= len(text):
            continue
        mark = text[gap.start()]
        if mark not in "。！？":
            if not starts_sentence(text[gap.end()]):
                continue
            token = _WORD_BREAK.split(text[max(0, gap.start() - 40) : gap.start()])[-1]
            if mark == "." and is_abbreviation(token):
                continue
        starts.append(gap.end())
    return starts


def split_sentences(text: str) -> list[str]:
    """The sentences of one line of text, stripped (cut by ``sentence_starts``)."""
    bounds = [0, *sentence_starts(text), len(text)]
    return [piece for a, b in pairwise(bounds) if (piece := text[a:b].strip())]


def sentence_count(text: str) -> int:
    """Sentences in a line of text, not splitting after abbreviations or initials."""
    return len(split_sentences(text))


# --------------------------------------------------------------------------- stopwords
# Words left out when a text is reduced to what it is about. The lists differ by purpose, so each
# is named for the question it answers; extend the one whose purpose fits.

# Title words that say nothing about which line of work a conversation belongs to (thread grouping).
TITLE_STOPWORDS = frozenset(
    "the a an and or of for to in on at by from with without about into over under my our your their its this "
    "that these those how what why when where which who is are was be do does can could should would will new "
    "chat conversation session help question questions using use used via vs part one two three fix fixing fixed "
    "error errors issue issues problem problems set setting create creating make making improve improving get "
    "getting add adding best tip tips guide explain explanation example examples summary overview request "
    "van het een de en voor met naar hoe wat".split()
)


# Closed-class words a statement never ends on (English and Dutch): articles, conjunctions, prepositions
# that need their object, possessive determiners, modals. "... between one and." is cut mid-phrase.
# Words that also end sentences as adverbs or separable particles ("over", "about", "op", "aan") are not here.
FUNCTION_WORDS = frozenset(
    "a an the and or but nor than as because if when while although though whereas unless whether of to for "
    "with from into onto via per between among during without within toward towards across upon at by "
    "my your our their its whose which e.g i.e vs can could will would should must shall may might be been being "
    "de een en of maar want omdat dus als van met naar door voor te tot tussen zonder tijdens volgens "
    "mijn jouw uw onze hun".split()
)


# Question words, pronouns, politeness, auxiliaries and generic verbs: never a query's subject domain.
QUERY_STOPWORDS = frozenset(
    """
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just
let lets me more most my myself no nor not now of off on once only or other our ours ourselves out
over own same she should so some such than that the their theirs them themselves then there these
they this those through to too under until up very was we were what when where which while who
whom whose why will with would you your yours yourself yourselves
please thanks thank hi hello hey talk talking discuss discussing tell explain help want wanted
need like know think thinking maybe kind sort thing things something anything way ways get got
make made use used using work works working does done go going say said ask asking let us
shall may might must also really quite rather still even well much many lot lots one ones
""".split()
)


# --------------------------------------------------------------------------- normalisation and tokens

_APOSTROPHES = re.compile(r"['’‘`]")


def estimate_tokens(text: str) -> int:
    """The one deterministic token estimate for windows, chunks and budgets: ceil(UTF-8 bytes / 4)."""
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


def normalise_text(text: str) -> str:
    """Case-, width- and punctuation-insensitive form of a sentence: 'the same sentence' for note ids,
    repeated extraction units and the keep gate's duplicate check."""
    folded = _APOSTROPHES.sub("", unicodedata.normalize("NFKC", str(text)).casefold())
    return " ".join(re.findall(r"\w+", folded))


def exact_key(text: str) -> str:
    """Exact-duplicate identity of a passage (retrieval dedup): NFKC, case-folded, white space collapsed,
    outer punctuation trimmed. Inner punctuation is kept: passages of code differ by it."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", text).strip().strip(".!?;:,")


# --------------------------------------------------------------------------- cutting

_JOINERS = {"\u200d", "\ufe0e", "\ufe0f"}


def _glued(ch: str) -> bool:
    """True if ``ch`` attaches to the character before it (never start a cut there)."""
    cp = ord(ch)
    return (
        ch in _JOINERS
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
        or 0x1F3FB <= cp <= 0x1F3FF
        or 0xE0020 <= cp <= 0xE007F
    )


def grapheme_safe(text: str, pos: int) -> int:
    """Move a cut at ``pos`` back until it splits no combining sequence, ZWJ emoji, modifier or flag."""
    while 0 < pos < len(text) and (_glued(text[pos]) or text[pos - 1] == "\u200d"):
        pos -= 1
    if 0 < pos < len(text) and 0x1F1E6 <= ord(text[pos]) <= 0x1F1FF:
        run = 0
        while pos - run > 0 and 0x1F1E6 <= ord(text[pos - run - 1]) <= 0x1F1FF:
            run += 1
        pos -= run % 2  # regional indicators pair up into flags
    return pos


# --------------------------------------------------------------------------- wikilinks

# Obsidian's [[target#anchor|alias]]; a note name holds none of [ ] | # ^. Not inside inline code.
WIKILINK = re.compile(r"(?<!`)\[\[([^\[\]|#^]*)(?:#([^\[\]|]*))?(?:\|([^\[\]]*))?\]\]")


class Wikilink(NamedTuple):
    """One parsed wikilink: ``target`` (a note stem or path, may be empty), ``anchor`` ('Heading' or
    '^block'), ``alias``; all as written, not stripped."""

    target: str
    anchor: str
    alias: str


def wikilinks(text: str) -> list[Wikilink]:
    """Every wikilink in ``text``, in order (embeds ``![[...]]`` included)."""
    return [Wikilink(m[1], m[2] or "", m[3] or "") for m in WIKILINK.finditer(text)]


def link_target(value: Any) -> str:
    """The note stem of ``[[stem]]``, ``[[stem|alias]]``, ``[[stem#heading]]`` or a bare stem."""
    text = str(value or "").strip()
    match = WIKILINK.fullmatch(text)
    return (match[1] if match and match[1] else text).strip()


# --------------------------------------------------------------------------- words, stems and overlap
# The lexical rules of the sweep's candidate pairs and of the offline judge's claim parser:
# tokens with number words as digits, a small stemmer, content stems, Jaccard and overlap.

from functools import lru_cache  # noqa: E402  (this section was appended to the module whole)

ARTICLES = frozenset({"a", "an", "the"})
STOPWORDS = ARTICLES | frozenset(
    "our we us my i me your you their they them its it his her he she this that these those of for to "
    "in on at by with from into onto about as and or but so if then than also just there here "
    "is are was were be been being am will would shall should can could must might do does did "
    "has have had get gets got some any all each every which who whom what when where how now "
    "s t let lets going gonna".split()
)
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen".split()
    )
}
_TENS = {
    w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if w != "_"
}
_TENS_DIGITS = frozenset(str(t) for t in _TENS.values())
_NUMBER_NAMES = frozenset(_NUMBER_WORDS) | frozenset(_TENS)
_TOKEN = re.compile(r"\d+(?:[.:/-]\d+)*(?:st|nd|rd|th|am|pm|k|m|%)?|[a-z]+\d[a-z\d]*|[a-z]+(?:'[a-z]+)?", re.I)
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")


def tokens(text: str, *, keep_case: bool = False) -> list[str]:
    """Word and number tokens, accents folded, number words turned into digits, lower-cased unless asked."""
    folded = text if text.isascii() else unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    if not keep_case:  # ASCII only by now: lower-casing first gives the same tokens, lower-cased
        folded = folded.lower()
    words = [_word(w) if "'" in w or w[:1].isdigit() else w for w in _TOKEN.findall(folded)]
    # Most texts hold no number word: lower-cased words skip the pass when none is among them.
    return words if not keep_case and _NUMBER_NAMES.isdisjoint(words) else _numbers(words)


def _word(w: str) -> str:
    """A token with an apostrophe ("don't" -> "dont", "it's" -> "it") or a leading digit ("3rd" -> "3")."""
    if "'" in w:
        w = w.replace("'", "") if w.lower().endswith("n't") else w.split("'")[0]
    return _ORDINAL.sub(r"\1", w.lower()) if w[:1].isdigit() else w


def _numbers(words: list[str]) -> list[str]:
    out: list[str] = []
    for word in words:
        low = word.lower()
        if low in _NUMBER_WORDS and out and out[-1] in _TENS_DIGITS and 0 < _NUMBER_WORDS[low] < 10:
            out[-1] = str(int(out[-1]) + _NUMBER_WORDS[low])  # "twenty five" -> 25
        elif low in _NUMBER_WORDS:
            out.append(str(_NUMBER_WORDS[low]))
        elif low in _TENS:
            out.append(str(_TENS[low]))
        else:
            out.append(word)
    return out


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """A deliberately small suffix stripper: plurals, -ing, -ed, final -e (so move/moved/moves meet)."""
    if word[:1].isdigit() or word.endswith(("ss", "eed", "us")):
        return word
    if len(word) <= 3:
        return word[:-1] if word.endswith("e") and len(word) == 3 else word  # use -> us, like used/uses
    for suffix, repl in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) + len(repl) >= 2:
            word = word[: len(word) - len(suffix)] + repl
            break
    return word[:-1] if word.endswith("e") and len(word) >= 3 else word


def stem_runs(text: str, also: frozenset[str] = frozenset()) -> list[list[str]]:
    """Runs of adjacent content stems (stopwords, question words and the words of ``also`` break a run)."""
    runs: list[list[str]] = [[]]
    for word in tokens(text):
        if word in STOPWORDS or word in QUERY_STOPWORDS or word in also:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(stem(word))
    return [r for r in runs if r]


def idf_overlap(terms: Sequence[str], docs: Sequence[set[str] | frozenset[str]]) -> list[float]:
    """Share of the terms' IDF mass (BM25's IDF over ``docs``) each document carries."""
    unique = list(dict.fromkeys(terms))
    n = len(docs)
    idf = {}
    for t in unique:
        df = sum(t in d for d in docs)
        idf[t] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    total = sum(idf.values())
    return [sum(idf[t] for t in unique if t in d) / total if total else 0.0 for d in docs]


def content_stems(text: str) -> frozenset[str]:
    """The set of stemmed content words and numbers: the unit of every lexical comparison."""
    return frozenset(stem(w) for w in tokens(text) if w not in STOPWORDS)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|A & B| / |A | B| (0.0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """|A & B| / min(|A|, |B|): a short rewrite inside a longer note still scores high."""
    small = min(len(a), len(b))
    return len(a & b) / small if small else 0.0


# --------------------------------------------------------------------------- conversational filler

# Lines that only manage the conversation: the offline extractor writes no note for them and the
# Note Quality Gate refuses a note that is one (a salutation, a pleasantry, a sign-post).
# Lead words of the offline extractor's own topic templates: filler, not memory.
TEMPLATE_LEADS = ("Recurring terms here are", "A recurring term here is", "The conversation is about")
PLEASANTRY = re.compile(
    r"^(sure|certainly|of course|absolutely|great|thanks|thank you|you're welcome|hi|hello|hey|ok|okay|"
    r"good question|great question|no problem|glad to help|happy to help|good luck|happy coding|cheers|"
    r"graag gedaan|geen probleem|natuurlijk|zeker|bedankt|dank je|dank u|hallo|succes|kind regards|best regards|"
    r"warm regards|regards|sincerely|best wishes|met vriendelijke groet(?:en)?|groeten)\b[^.!?]*[.!?]?$"
    r"|^(dear|beste|geachte|lieve|hoi|hi|hello|hey|hallo)(?:\s+[\w.'-]+){1,2}[,.!]?$"  # a salutation: greeting + name
    r"|^(i hope (this|that|these) helps?|hopefully this helps|let me know if|feel free to|here is|here's|"
    r"here are|below is|below are|i'd be happy to|i'm happy to|i would be happy to|i'd be glad to|"
    r"i would be glad to|i'm glad to|i am glad to|i can help|ik hoop dat|laat me weten|"
    r"hier is|hier zijn)\b",
    re.I,
)


# --------------------------------------------------------------------------- Dutch verbs


@lru_cache(maxsize=8192)
def dutch_lemma(word: str) -> str:
    """simplemma's Dutch lemma of a lower-case word (its dictionary loads on first use; offline, in the wheel)."""
    import simplemma

    return str(simplemma.lemmatize(word, lang="nl"))


def dutch_known(word: str) -> bool:
    """Whether simplemma's Dutch dictionary holds ``word`` (a lower-case form)."""
    import simplemma

    return bool(simplemma.is_known(word, lang="nl"))


def dutch_verb_form(word: str) -> bool:
    """Whether a Dutch word is a verb form other than the infinitive: its lemma is an infinitive it is not
    (maak -> maken, voert -> voeren; oefeningen -> oefening is a noun)."""
    lemma = dutch_lemma(word)
    return lemma != word and lemma.endswith("en")


# --------------------------------------------------------------------------- the prompt's language
# The lists above are English. A prompt in another language ("Hoe ruim ik mijn huis op?") would
# otherwise keep its own function words as content: its intent becomes the whole sentence, and
# any note with "ik" and "mijn" looks on topic. The stop-words package (BSD-3) carries lists for
# 33 languages; the prompt's language is the one whose list covers most of its words.


MIN_LANGUAGE_HITS = 2  # one shared word ("post", "die") does not make a prompt Dutch or German


@lru_cache(maxsize=1)
def _stop_lists() -> dict[str, frozenset[str]]:
    """Every language's stop words as ``tokens`` sees them (accents folded, lower case)."""
    from stop_words import AVAILABLE_LANGUAGES, get_stop_words  # files in the wheel, read on first use

    lists = {}
    for language in sorted(set(AVAILABLE_LANGUAGES)):
        folded = frozenset(t for word in get_stop_words(language) for t in tokens(word))
        if folded:  # a list in a script ``tokens`` drops (Greek, Russian, ...) cannot be matched
            lists[language] = folded
    return lists


def prompt_languages(text: str) -> tuple[str, ...]:
    """The languages other than English whose function words the prompt uses most (ties: all of
    them); empty when English covers as many of its words, or no list covers two."""
    words = tokens(text)
    lists = _stop_lists()
    hits = {language: sum(w in stop for w in words) for language, stop in lists.items()}
    best = max(hits.values(), default=0)
    if best < MIN_LANGUAGE_HITS or hits.get("english", 0) >= best:
        return ()
    return tuple(language for language, n in hits.items() if n == best)


@lru_cache(maxsize=512)
def prompt_stopwords(text: str) -> frozenset[str]:
    """The function words of the prompt's own language (``prompt_languages``); empty for English,
    whose words the module's own lists already hold."""
    lists = _stop_lists()
    return frozenset().union(*(lists[language] for language in prompt_languages(text)))


def query_runs(text: str, prompt: str | None = None) -> list[list[str]]:
    """``stem_runs`` of a prompt, or of a text read in its ``prompt``'s language (an intent: a few words
    tell no language, "evaluating a fine-tuned model" has more Italian function words than English),
    where that language's function words break runs too."""
    return stem_runs(text, prompt_stopwords(text if prompt is None else prompt))


def apart(value: float, bar: float, least: int = 2, most: int = 6) -> tuple[str, str]:
    """``value`` and ``bar`` printed with the fewest decimals (at least ``least``) that tell them
    apart: "0.6793 below 0.68", never "0.68 below 0.68"."""
    for places in range(least, most + 1):
        shown = f"{value:.{places}f}", f"{bar:.{places}f}"
        if shown[0] != shown[1]:
            return shown
    return f"{value:.{most}f}", f"{bar:.{most}f}"
