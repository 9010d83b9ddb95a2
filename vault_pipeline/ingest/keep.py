"""The Note Quality Gate and the user's keep: a provisional inbox note becomes an engram.

Keeping is the user's act of adopting a note as their own thinking; that is why a kept
engram carries full retrieval weight (tier engram, 1.0) whoever first typed it.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from vault_pipeline.errors import FrontmatterError, StorageError, VaultError
from vault_pipeline.ingest.extract import CATEGORIES
from vault_pipeline.ingest.quality import hard_problems, unfaithful, word_limit
from vault_pipeline.ingest.quality_model import QualityItem, judge_notes, problems_of
from vault_pipeline.ingest.select import Candidate, Scored, Selector, score, shipped
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.text import apart, link_target, normalise_text, sentence_count
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.format import block_id, parse_atomic_body, transcript_turns
from vault_pipeline.vault.frontmatter import frontmatter_span, source_messages, source_properties

__all__ = ["EngramIndex", "KeepReport", "SourceTexts", "keep", "quality_problems", "sentence_count", "verdict"]

Progress = Callable[[int, int | None, str], None]

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
    judge: str = "fitted gate"  # who judged the notes beyond the hard rules: the fitted gate or a model
    model_judged: int = 0  # notes the model judged (the rest, the fitted gate)
    model_errors: list[str] = field(default_factory=list)  # batches the model could not answer
    dry_run: bool = False  # nothing was written

    def to_dict(self) -> dict[str, Any]:
        """The report as ``vault keep --json`` prints it (the CLI adds ``exit_code``)."""
        return {
            "kept": self.kept,
            "refused": [{"path": p, "reasons": r} for p, r in self.refused],
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "judge": {"by": self.judge, "model_judged": self.model_judged, "errors": self.model_errors},
            "dry_run": self.dry_run,
        }


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
    """The atomic sentence of a note body: its first paragraph that is not a heading or a label."""
    return parse_atomic_body(body).sentence


def quality_problems(
    frontmatter: Mapping[str, Any],
    body: str,
    engram_texts: set[str] | EngramIndex,
    source: str | None = None,
    scored: Scored | None = None,
    judged: Sequence[str] | None = None,
    keep_at: float | None = None,
) -> list[str]:
    """Why a note fails the Note Quality Gate; an empty list means it passes.

    ``source`` is the text of the note's source message(s) where it can be read: then every
    literal token of the sentence (identifiers, paths, numbers, code) must appear there verbatim,
    and a sentence that is the source's own words may run to the verbatim word limit. ``scored`` is
    the selector's judgement of the note (``keep_scores``): below its keep threshold the note fails
    with the reasons the selector reads. ``judged`` is a quality model's problems with the sentence
    (``quality_model.problems_of``): given, they stand in for the selector's; the hard rules apply.
    ``keep_at``: the selector's keep threshold (default: the shipped selector's).
    """
    sentence = note_sentence(body)
    category = str(frontmatter.get("category") or "")
    if sentence:
        problems = _sentence_problems(sentence, category, source, judged)
        if judged is None:
            problems += _score_problem(scored, keep_at)
        missing = unfaithful(sentence, source) if source is not None else []
        if missing:
            problems.append("not in its source: " + ", ".join(missing[:3]))
    else:
        problems = ["no sentence in the body"]
    if category not in CATEGORIES:
        problems.append(f"category {category!r} is not one of {', '.join(CATEGORIES)}")
    if not _has_source(frontmatter):
        problems.append("no source (source.messages or source_conversation)")
    index = engram_texts if isinstance(engram_texts, EngramIndex) else EngramIndex(engram_texts)
    duplicate = index.duplicate_of(sentence) if sentence else None
    if duplicate is not None:
        problems.append(f"duplicates an existing engram: {duplicate!r}")
    return problems


def _sentence_problems(sentence: str, category: str, source: str | None, judged: Sequence[str] | None) -> list[str]:
    """The hard rules' problems with a note's sentence (the verbatim word limit for a sentence that
    is its source's own words), then a quality model's where it judged the sentence."""
    problems = hard_problems(sentence, category, limit=word_limit(sentence, source))
    if judged is not None:
        problems += [p for p in judged if p not in problems]
    return problems


def _score_problem(scored: Scored | None, keep_at: float | None) -> list[str]:
    """The selector's reason to fail a note it scored below the keep threshold, or none."""
    if scored is None:
        return []
    bar = shipped().keep if keep_at is None else keep_at
    if scored.probability < bar:
        why = ", ".join(scored.reasons) or "no one sign against it, but not enough for it"
        score, least = apart(scored.probability, bar)
        return [f"quality score {score} below {least}: {why}"]
    return []


def note_context(body: str) -> str | None:
    """The note's ``Context:`` line, if it has one."""
    return parse_atomic_body(body).context or None


def keep_scores(
    entries: Sequence[tuple[str, Mapping[str, Any], str, str | None]],
    selector: Selector | None = None,
    questions: Mapping[str, str | None] | None = None,
) -> dict[str, Scored]:
    """The selector's judgement of notes ((key, frontmatter, body, source text)), in one batch;
    ``questions``: by key, the user's message an assistant's note answers, as ingest read it."""
    found: dict[str, Candidate] = {}
    for key, frontmatter, body, source in entries:
        sentence = note_sentence(body)
        if sentence:
            found[key] = Candidate(
                sentence,
                note_context(body),
                str(frontmatter.get("category") or ""),
                str(frontmatter.get("speaker") or "assistant"),
                source,
                str(frontmatter.get("source_title") or "") or None,
                people=bool(frontmatter.get("speaker_name")),
                question=(questions or {}).get(key),
            )
    return dict(zip(found, score(list(found.values()), selector)))


def verdict(problems: Sequence[str]) -> str:
    """The gate's verdict as the note's ``quality`` property: ``passes`` or ``fails — <reasons>``."""
    return "fails — " + "; ".join(problems) if problems else "passes"


def _has_source(frontmatter: Mapping[str, Any]) -> bool:
    source = source_properties(frontmatter)  # flat source_* keys, or the nested form of older notes
    return bool(source["source_messages"] or source["source_conversation"])


# --------------------------------------------------------------------------- sources


class SourceTexts:
    """The source message text of atomic notes, read from their session notes (one read per session)."""

    def __init__(self, vault: Vault, paths: Sequence[str]):
        self._vault = vault
        self._by_stem = {p.rsplit("/", 1)[-1][:-3]: p for p in paths if p.startswith("sessions/")}
        self._sessions: dict[str, dict[str, str]] = {}
        self._turns: dict[str, list[tuple[str, str, str]]] = {}  # (block id, speaker label, text) in order

    def text(self, frontmatter: Mapping[str, Any]) -> str | None:
        """The note's source messages joined, or None where they cannot be read (then nothing is checked)."""
        ids = source_messages(frontmatter)
        relpath = self._by_stem.get(link_target(frontmatter.get("session")))
        if not ids or relpath is None:
            return None
        messages = self._session(relpath)
        found = [messages.get(block_id(str(m))) for m in ids]
        return None if any(f is None for f in found) else "\n".join(f or "" for f in found)

    def question(self, frontmatter: Mapping[str, Any]) -> str | None:
        """The user's message before an assistant's note's first source message (what it answers), as
        ingest read it (``select.questions``); None for the user's own notes or where it cannot be read."""
        ids = source_messages(frontmatter)
        relpath = self._by_stem.get(link_target(frontmatter.get("session")))
        if frontmatter.get("speaker") != "assistant" or not ids or relpath is None:
            return None
        self._session(relpath)
        turns = self._turns.get(relpath, [])
        at = next((i for i, (k, _, _) in enumerate(turns) if k == block_id(str(ids[0]))), None)
        before = [text for _, who, text in turns[:at] if who != turns[at][1]] if at is not None else []
        return before[-1] if before else None

    def _session(self, relpath: str) -> dict[str, str]:
        if relpath not in self._sessions:
            try:
                _, body, _ = self._vault.read(relpath)
                turns = transcript_turns(body)
                self._sessions[relpath] = {block: text for block, (_, text) in turns.items()}
                self._turns[relpath] = [(block, who, text) for block, (who, text) in turns.items()]
            except (FrontmatterError, VaultError):
                self._sessions[relpath] = {}
        return self._sessions[relpath]


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
    dry_run: bool = False,
    today: date | None = None,
    wait: float = 0,
    progress: Progress | None = None,
    llm: StructuredLLM | None = None,
    selector: Selector | None = None,
) -> KeepReport:
    """Keep named (or all passing, or user-flipped) inbox notes: gate, mark kept, move to engrams/.

    Every note the gate evaluates gets its verdict in its ``quality`` property (a key-level
    frontmatter edit that leaves the rest of the file alone); ``dry_run`` writes nothing.
    ``llm``: a quality model (``[models] quality``) judges the notes beyond the hard rules;
    where it cannot answer, the selector does (``selector``: default, the shipped one).
    """
    report = KeepReport(judge=llm.model if llm is not None else "fitted gate", dry_run=dry_run)
    with vault.lock("keep", wait=wait):
        paths = vault.iter_note_paths()
        engrams = EngramIndex(_engram_sentences(vault, paths))
        inbox = {p: _load(vault, p) for p in paths if p.startswith(INBOX)}
        modes = _select(vault, inbox, paths, targets, all_passing, report)
        run = _Run(vault, engrams, SourceTexts(vault, paths), force, dry_run, (today or date.today()).isoformat())
        run.selector = selector or shipped()
        order = sorted(modes)
        for done, relpath in enumerate(order):
            if progress:
                progress(done, len(modes), relpath.rsplit("/", 1)[-1])
            if done % _EMBED_BATCH == 0:  # judge (a model) or score (the selector) the next batch at once
                batch = [inbox[p] for p in order[done : done + _EMBED_BATCH]]
                run.judged = run.judge(batch, llm, report) if llm is not None and not run.model_down else {}
                run.score([e for e in batch if e.relpath not in run.judged])
            run.keep_one(inbox[relpath], modes[relpath], report)
        if progress:
            progress(len(modes), len(modes), "")
        report.skipped.extend(_unreadable(inbox, modes))
    return report


def _unreadable(inbox: Mapping[str, _Entry], modes: Mapping[str, str]) -> list[tuple[str, str]]:
    """(path, error) of the inbox notes that could not be read, other than this run's candidates."""
    return [(relpath, entry.error) for relpath, entry in inbox.items() if entry.error and relpath not in modes]


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
    found = _in_inbox(name, stem, inbox)
    if found is not None:
        return found, ""
    elsewhere = next((p for p in paths if p == name or p.rsplit("/", 1)[-1][:-3] == stem), None)
    elsewhere = elsewhere or vault.locate(name)
    if elsewhere and elsewhere.startswith(ENGRAMS + "/"):
        return None, f"already kept: {elsewhere}"
    if elsewhere:
        return None, f"not in inbox/: {elsewhere}"
    return None, "no such note in inbox/"


def _in_inbox(name: str, stem: str, inbox: dict[str, _Entry]) -> str | None:
    """The inbox relpath a target names: as a path (with or without ``inbox/`` and ``.md``), else by
    its file stem, else by its note id (the first in path order); None when none matches."""
    for candidate in (name, f"{INBOX}{name}", f"{INBOX}{stem}.md"):
        if candidate in inbox:
            return candidate
    by_stem = [p for p in inbox if p.rsplit("/", 1)[-1][:-3] == stem]
    by_id = [p for p, e in inbox.items() if str(e.frontmatter.get("id", "")) == name]
    return sorted(by_stem or by_id)[0] if by_stem or by_id else None


_EMBED_BATCH = 256  # notes embedded per call when the gate reads meaning (progress stays live)


@dataclass
class _Run:
    vault: Vault
    engrams: EngramIndex
    sources: SourceTexts
    force: bool
    dry_run: bool
    stamp: str
    scores: dict[str, Scored] = field(default_factory=dict)
    selector: Selector | None = None
    judged: dict[str, list[str]] = field(default_factory=dict)  # relpath -> a quality model's problems
    model_down: bool = False  # the quality model was out of reach: the fitted gate judges the rest

    def score(self, entries: Sequence[_Entry]) -> None:
        """The selector's judgement of these candidates, in one batch."""
        live = [e for e in entries if not e.error]
        rows = [(e.relpath, e.frontmatter, e.body, self.sources.text(e.frontmatter)) for e in live]
        asked = {e.relpath: self.sources.question(e.frontmatter) for e in live}
        self.scores = keep_scores(rows, self.selector, asked)

    def judge(self, entries: Sequence[_Entry], llm: StructuredLLM, report: KeepReport) -> dict[str, list[str]]:
        """relpath -> a quality model's problems with these candidates' sentences, in batched calls."""
        items: list[QualityItem] = []
        paths: dict[str, str] = {}  # short key -> relpath
        for e in entries:
            sentence = note_sentence(e.body) if not e.error else ""
            if sentence:
                key = f"n{len(paths) + 1:03d}"
                paths[key] = e.relpath
                category = str(e.frontmatter.get("category") or "")
                items.append(QualityItem(key, sentence, category, self.sources.text(e.frontmatter)))
        judged = judge_notes(items, llm)  # short keys: a model echoes them reliably
        report.model_judged += len(judged.verdicts)
        report.model_errors += judged.errors
        self.model_down = judged.unreachable
        return {paths[key]: problems_of(v) for key, v in judged.verdicts.items()}

    def _keep_at(self, frontmatter: Mapping[str, Any]) -> float | None:
        """The selector's keep threshold for the note's speaker."""
        if self.selector is None:
            return None
        return self.selector.keep_for(str(frontmatter.get("speaker") or ""), bool(frontmatter.get("speaker_name")))

    def keep_one(self, entry: _Entry, mode: str, report: KeepReport) -> None:
        """Gate one candidate, record the verdict on it, and keep it if it passes (or the user insists)."""
        if entry.error:
            report.refused.append((entry.relpath, [entry.error]))
            return
        problems = quality_problems(
            entry.frontmatter,
            entry.body,
            self.engrams,
            self.sources.text(entry.frontmatter),
            self.scores.get(entry.relpath),
            self.judged.get(entry.relpath),
            self._keep_at(entry.frontmatter),
        )
        changes = {"quality": verdict(problems)}
        if problems and (mode == "passing" or (mode == "named" and not self.force)):
            report.refused.append((entry.relpath, problems))
            self._mark(entry, changes, report)
            return
        target = f"{ENGRAMS}/{entry.relpath.rsplit('/', 1)[-1]}"
        if os.path.lexists(self.vault.root / target):  # refuse before editing anything, not half-way
            report.refused.append((entry.relpath, [f"{target} already exists; not kept"]))
            return
        if problems:
            report.flagged.append((entry.relpath, problems))
        if self.dry_run:
            report.kept.append(target)
        elif not self._promote(entry, {**changes, "status": "kept", "tier": "engram", "kept": self.stamp}, report):
            return
        sentence = note_sentence(entry.body)
        if sentence:
            self.engrams.add(sentence)

    def _mark(self, entry: _Entry, changes: dict[str, str], report: KeepReport) -> None:
        if self.dry_run or entry.frontmatter.get("quality") == changes["quality"]:
            return
        try:
            self.vault.update_frontmatter(entry.relpath, changes, expected_sha256=entry.sha256)
        except VaultError as exc:  # the verdict is a courtesy: a note changed meanwhile keeps its text
            _stop_on_full_disk(exc)
            report.skipped.append((entry.relpath, f"verdict not written: {exc}"))

    def _promote(self, entry: _Entry, changes: dict[str, str], report: KeepReport) -> bool:
        try:
            self.vault.update_frontmatter(entry.relpath, changes, expected_sha256=entry.sha256)
            report.kept.append(self.vault.move(entry.relpath, ENGRAMS))
        except VaultError as exc:
            _stop_on_full_disk(exc)  # an unwritable note is refused and the rest kept; a full disk stops
            report.refused.append((entry.relpath, [str(exc)]))
            return False
        return True


def _stop_on_full_disk(exc: VaultError) -> None:
    if isinstance(exc, StorageError) and exc.stops:
        raise exc
