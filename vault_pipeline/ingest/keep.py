"""The Note Quality Gate and the user's keep: a provisional inbox note becomes an engram.

Keeping is the user's act of adopting a note as their own thinking; that is why a kept
engram carries full retrieval weight (tier engram, 1.0) whoever first typed it.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from vault_pipeline.errors import FrontmatterError, VaultError
from vault_pipeline.ingest.extract import CATEGORIES, MAX_WORDS
from vault_pipeline.text import normalise_text, sentence_count, word_count
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import frontmatter_span

# Word-set Jaccard at or above this is the same note reworded (HIPPOCAMPUS' merge threshold).
DUPLICATE_JACCARD = 0.9
INBOX = "inbox/"
ENGRAMS = "engrams"


@dataclass
class KeepReport:
    """What a keep run kept, refused and skipped, in a deterministic order."""

    kept: list[str] = field(default_factory=list)
    refused: list[tuple[str, list[str]]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    flagged: list[tuple[str, list[str]]] = field(default_factory=list)  # kept despite problems


# --------------------------------------------------------------------------- the gate


class EngramIndex:
    """Kept sentences, indexed for the duplicate check (fast at 100,000 engrams)."""

    def __init__(self, texts: Iterable[str] = ()):
        self._exact: dict[str, str] = {}
        self._words: list[frozenset[str]] = []
        self._texts: list[str] = []
        self._postings: dict[str, list[int]] = defaultdict(list)
        for text in sorted(texts):
            self.add(text)

    def add(self, text: str) -> None:
        """Index one more engram sentence."""
        norm = normalise_text(text)
        if not norm:
            return
        self._exact.setdefault(norm, text)
        words = frozenset(norm.split())
        for word in words:
            self._postings[word].append(len(self._words))
        self._words.append(words)
        self._texts.append(text)

    def duplicate_of(self, text: str) -> str | None:
        """The engram this sentence duplicates (same normalised text, or Jaccard >= 0.9)."""
        norm = normalise_text(text)
        if not norm:
            return None
        if norm in self._exact:
            return self._exact[norm]
        words = frozenset(norm.split())
        # Prefix filter: a set with Jaccard >= t shares at least one of the
        # n - ceil(t*n) + 1 rarest words of this sentence, so only their postings need checking.
        need = len(words) - math.ceil(DUPLICATE_JACCARD * len(words) - 1e-9) + 1
        rarest = sorted(words, key=lambda w: (len(self._postings.get(w, ())), w))[:need]
        for i in sorted({i for w in rarest for i in self._postings.get(w, ())}):
            other = self._words[i]
            if len(words & other) >= DUPLICATE_JACCARD * len(words | other) - 1e-9:
                return self._texts[i]
        return None


def note_sentence(body: str) -> str:
    """The atomic sentence of a note body: its first line that is not a heading or a label."""
    for line in body.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and not line.startswith(("Context:", "Source:")):
            return line
    return ""


def quality_problems(frontmatter: Mapping[str, Any], body: str, engram_texts: set[str] | EngramIndex) -> list[str]:
    """Why a note fails the Note Quality Gate; an empty list means it passes."""
    problems: list[str] = []
    sentence = note_sentence(body)
    category = str(frontmatter.get("category") or "")
    if sentence:
        problems += _sentence_problems(sentence, category)
    else:
        problems.append("no sentence in the body")
    if category not in CATEGORIES:
        problems.append(f"category {category!r} is not one of {', '.join(CATEGORIES)}")
    if not _has_source(frontmatter):
        problems.append("no source (source.messages or source_conversation)")
    index = engram_texts if isinstance(engram_texts, EngramIndex) else EngramIndex(engram_texts)
    duplicate = index.duplicate_of(sentence) if sentence else None
    if duplicate is not None:
        problems.append(f"duplicates an existing engram: {duplicate!r}")
    return problems


def _sentence_problems(sentence: str, category: str) -> list[str]:
    problems = []
    words = word_count(sentence)
    if words > MAX_WORDS:
        problems.append(f"{words} words (at most {MAX_WORDS})")
    if sentence_count(sentence) > 1:
        problems.append("more than one sentence")
    # An open question may keep its question mark; everything else must state something.
    if sentence.endswith("!") or (sentence.endswith("?") and category != "open-question"):
        problems.append("not a declarative sentence")
    return problems


def _has_source(frontmatter: Mapping[str, Any]) -> bool:
    source = frontmatter.get("source")
    if isinstance(source, Mapping) and source.get("messages"):
        return True
    return bool(frontmatter.get("source_conversation"))


# --------------------------------------------------------------------------- keeping


@dataclass(frozen=True)
class _Entry:
    relpath: str
    frontmatter: dict
    body: str
    sha256: str
    error: str = ""


def keep(
    vault: Vault,
    *,
    targets: Sequence[str] = (),
    all_passing: bool = False,
    force: bool = False,
    today: date | None = None,
    wait: float = 0,
) -> KeepReport:
    """Keep named (or all passing, or user-flipped) inbox notes: gate, mark kept, move to engrams/."""
    report = KeepReport()
    with vault.lock("keep", wait=wait):
        paths = vault.iter_note_paths()
        engrams = EngramIndex(_engram_sentences(vault, paths))
        inbox = {p: _load(vault, p) for p in paths if p.startswith(INBOX)}
        modes = _select(vault, inbox, paths, targets, all_passing, report)
        stamp = (today or date.today()).isoformat()
        for relpath in sorted(modes):
            _keep_one(vault, inbox[relpath], modes[relpath], engrams, force, stamp, report)
        for relpath, entry in inbox.items():
            if entry.error and relpath not in modes:
                report.skipped.append((relpath, entry.error))
    return report


def _engram_sentences(vault: Vault, paths: list[str]) -> list[str]:
    sentences = []
    for relpath in paths:
        if not relpath.startswith(ENGRAMS + "/"):
            continue
        try:
            text = vault.path(relpath, allow_symlink=True).read_text(encoding="utf-8")
            span = frontmatter_span(text, relpath)
        except (OSError, UnicodeDecodeError, VaultError):
            continue  # an unreadable engram cannot be a duplicate target; keep goes on
        sentence = note_sentence(text[span[2] :] if span else text)
        if sentence:
            sentences.append(sentence)
    return sentences


def _load(vault: Vault, relpath: str) -> _Entry:
    try:
        frontmatter, body, digest = vault.read(relpath)
    except (FrontmatterError, VaultError) as exc:
        return _Entry(relpath, {}, "", "", error=str(exc))
    return _Entry(relpath, frontmatter, body, digest)


def _select(
    vault: Vault,
    inbox: dict[str, _Entry],
    paths: list[str],
    targets: Sequence[str],
    all_passing: bool,
    report: KeepReport,
) -> dict[str, str]:
    """relpath -> why it is a candidate; a user's flip outranks a name, a name outranks the gate."""
    modes: dict[str, str] = {}
    if all_passing:
        modes.update({p: "passing" for p, e in inbox.items() if not e.error and e.frontmatter.get("type") == "atomic"})
    for target in targets:
        relpath, reason = _resolve(vault, str(target), inbox, paths)
        if relpath is None:
            report.skipped.append((str(target), reason))
        else:
            modes[relpath] = "named"
    for relpath, entry in inbox.items():
        if str(entry.frontmatter.get("status", "")).strip().lower() == "kept":
            modes[relpath] = "flipped"
    return modes


def _resolve(vault: Vault, target: str, inbox: dict[str, _Entry], paths: list[str]) -> tuple[str | None, str]:
    """An inbox relpath for a note id, stem or path; otherwise why not."""
    name = target.strip().replace("\\", "/")
    stem = name[:-3] if name.endswith(".md") else name
    for candidate in (name, f"{INBOX}{name}", f"{INBOX}{stem}.md"):
        if candidate in inbox:
            return candidate, ""
    by_stem = [p for p in inbox if p.rsplit("/", 1)[-1][:-3] == stem]
    by_id = [p for p, e in inbox.items() if str(e.frontmatter.get("id", "")) == name]
    if by_stem or by_id:
        return sorted(by_stem or by_id)[0], ""
    elsewhere = next((p for p in paths if p == name or p.rsplit("/", 1)[-1][:-3] == stem), None)
    elsewhere = elsewhere or vault.locate(name)
    if elsewhere and elsewhere.startswith(ENGRAMS + "/"):
        return None, f"already kept: {elsewhere}"
    if elsewhere:
        return None, f"not in inbox/: {elsewhere}"
    return None, "no such note in inbox/"


def _keep_one(
    vault: Vault, entry: _Entry, mode: str, engrams: EngramIndex, force: bool, stamp: str, report: KeepReport
) -> None:
    if entry.error:
        report.refused.append((entry.relpath, [entry.error]))
        return
    problems = quality_problems(entry.frontmatter, entry.body, engrams)
    if problems and mode == "passing":
        report.skipped.append((entry.relpath, "fails the gate: " + "; ".join(problems)))
        return
    if problems and mode == "named" and not force:
        report.refused.append((entry.relpath, problems))
        return
    target = f"{ENGRAMS}/{entry.relpath.rsplit('/', 1)[-1]}"
    if os.path.lexists(vault.root / target):  # refuse before editing anything, not half-way
        report.refused.append((entry.relpath, [f"{target} already exists; not kept"]))
        return
    if problems:
        report.flagged.append((entry.relpath, problems))
    try:
        vault.update_frontmatter(
            entry.relpath, {"status": "kept", "tier": "engram", "kept": stamp}, expected_sha256=entry.sha256
        )
        report.kept.append(vault.move(entry.relpath, ENGRAMS))
    except VaultError as exc:
        report.refused.append((entry.relpath, [str(exc)]))
        return
    sentence = note_sentence(entry.body)
    if sentence:
        engrams.add(sentence)
