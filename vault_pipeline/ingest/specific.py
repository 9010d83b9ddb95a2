"""Signs of how particular a statement is: the inputs the selector weighs against generic advice.

No phrase list decides here. Each sign is measured, and the selector's fit (``select.py``,
``benchmarks/bench_selection.py``) learns what it is worth:

- **typicality**: how common the sentence's words are across a chat archive, as the share of its
  conversations that use each word (``wording.json``, counted over the MIT export by
  ``benchmarks/bench_selection.py --wording``). Advice any assistant gives anyone is written in
  words every conversation uses ("ensure", "important", "consider"); a particular answer names
  things few conversations mention.
- **the user's question**: how much of the statement the question before it asks about.
- **values**: numbers with a unit or currency, versions, prices, percentages, code spans and
  mid-sentence names.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from vault_pipeline.text import content_stems

WORDING_FILE = Path(__file__).with_name("wording.json")
# A word fewer than this share of the archive's conversations use counts as a rare, particular term.
RARE = 0.02
# A word this share of conversations use is common wording.
COMMON = 0.15

_VALUE = re.compile(
    r"[$€£]\s?\d|\d\s?(?:%|€|\$|eur\b|euro\b|usd\b|k\b|kb\b|mb\b|gb\b|tb\b|ms\b|s\b|h\b|g\b|kg\b|km\b|m\b|cm\b|mm\b|"
    r"px\b|dpi\b|hz\b|ghz\b|mhz\b|w\b|kw\b|v\b|gram\b|grams\b|hours?\b|minutes?\b|days?\b|weeks?\b|months?\b|"
    r"years?\b|jaar\b|uur\b|dagen\b|per\b)",
    re.I,
)
_VERSION = re.compile(r"\b[vV]?\d+\.\d+(?:\.\d+)*\b|\b(?:version|versie|release)\s+\d", re.I)
_DIGIT = re.compile(r"\d")
_MID_NAME = re.compile(r"(?<=[\w,;:)]\s)(?:[A-Z][a-z]*[A-Z0-9][\w-]*|[A-Z]{2,}[\w-]*|[A-Z][a-z]{2,}[\w-]*)")


@lru_cache(maxsize=1)
def _wording() -> tuple[dict[str, float], int]:
    """(word stem -> share of the archive's conversations using it, conversations counted)."""
    if not WORDING_FILE.exists():
        return {}, 0
    data = json.loads(WORDING_FILE.read_text(encoding="utf-8"))
    return {k: v / data["conversations"] for k, v in data["counts"].items()}, int(data["conversations"])


def wording_counts(conversations: list[set[str]]) -> dict[str, int]:
    """For ``wording.json``: each stem's number of conversations (sets of stems), those in 2+ only."""
    counts: dict[str, int] = {}
    for stems in conversations:
        for s in stems:
            counts[s] = counts.get(s, 0) + 1
    return {k: v for k, v in sorted(counts.items()) if v >= 2}


def specificity(text: str, context: str | None, question: str | None) -> dict[str, float]:
    """The specificity signs of one statement (each in [0, 1]; absent signs left out)."""
    out = {**_typicality(text), **_values(text), **_asked(text, context, question)}
    return {k: round(v, 4) for k, v in out.items() if v}


def _typicality(text: str) -> dict[str, float]:
    """How common the statement's words are across the archive (nothing without ``wording.json``)."""
    share, _ = _wording()
    stems = [s for s in content_stems(text) if len(s) > 2 and not s[:1].isdigit()]
    if not stems or not share:
        return {}
    shares = [share.get(s, 0.0) for s in stems]
    rare = sum(v < RARE for v in shares)
    return {
        "typical": sum(shares) / len(shares),
        "common_share": sum(v >= COMMON for v in shares) / len(shares),
        "rare_terms": min(rare, 3) / 3,
    }


def _values(text: str) -> dict[str, float]:
    """Values, versions, bare numbers and mid-sentence names."""
    out: dict[str, float] = {}
    if _VALUE.search(text):
        out["value"] = 1.0
    if _VERSION.search(text):
        out["version"] = 1.0
    if _DIGIT.search(text) and "value" not in out:
        out["bare_number"] = 1.0
    names = len(_MID_NAME.findall(text))
    if names:
        out["mid_names"] = min(names, 3) / 3
    return out


def _asked(text: str, context: str | None, question: str | None) -> dict[str, float]:
    """How much of the statement (with its context) the user's question asks about."""
    if not question:
        return {}
    asked = content_stems(question)
    said = content_stems(f"{text} {context or ''}")
    if not said or not asked:
        return {}
    return {"asked": len(said & asked) / len(said), "asked_terms": min(len(said & asked), 3) / 3}
