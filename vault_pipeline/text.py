"""What a word, a sentence and a token are: the text rules every stage shares, in one place.

Extraction, the keep gate, the offline backend, chunking, retrieval and the sweep all count,
split, normalise and estimate text; they import these rules instead of re-typing them.
"""

from __future__ import annotations

import re
import unicodedata

_APOSTROPHES = re.compile(r"['’‘`]")
_WORD = re.compile(r"\w+(?:['’.-]\w+)*")


def estimate_tokens(text: str) -> int:
    """The one deterministic token estimate for windows, chunks and budgets: ceil(UTF-8 bytes / 4)."""
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


def normalise_text(text: str) -> str:
    """Case-, width- and punctuation-insensitive form of a sentence (for ids and duplicate checks)."""
    folded = _APOSTROPHES.sub("", unicodedata.normalize("NFKC", str(text)).casefold())
    return " ".join(re.findall(r"\w+", folded))


def word_count(sentence: str) -> int:
    """Words in a sentence (contractions and hyphenated words count once)."""
    return len(_WORD.findall(str(sentence)))
