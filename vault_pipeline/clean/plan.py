"""The cleaning sweep: plan, apply and undo (the nightly part of a note's lifecycle).

``plan`` reads every active atomic note (``notes.py``; the vault is the truth, the index gives
the vectors, the caller syncs the index first), builds candidate pairs (``pairs.py``: vector
neighbours combined with a lexical signal), has them judged (``judge.py``) and turns the
judgements into ordered actions (``types.py``). Nothing is written. ``apply.py`` performs a
plan under the vault lock, skipping any note edited since planning, and journals every
touched file (``journal.py``); ``undo.py`` puts every file back, byte for byte, unless it
changed after the run. Policy, in the order the plan applies it:

* duplicates: judged-duplicate pairs form clusters (transitively); each cluster keeps one
  canonical note - provenance first (a kept engram never yields to a chat note), then the
  richer note (more source messages, a Context line), then the newer, then the id - which
  absorbs the others' source message ids, related links and tags; the others are archived
  with ``duplicate_of``.
* contradictions: the newer note supersedes the older (``supersedes`` / ``superseded_by``);
  the older is archived, kept as a record. Each note is superseded once, by its nearest newer
  contradictor, so May 3 -> May 10 -> May 17 stays a chain. When the older note has better
  provenance (a kept engram against a provisional chat note), or the two cannot be ordered in
  time, the plan relates them instead and says why.
* related: both notes get a ``related`` link when the pair's cosine clears the embedder's
  related floor (``Calibration.related_floor``).
* edited by you: a note whose bytes the user changed since vault_pipeline wrote them is never
  archived, superseded or merged away (nor a canonical that absorbs others); a duplicate or
  contradiction judged on it becomes a ``related`` link whose reason starts "edited by you: review".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, assert_never

import numpy as np

from vault_pipeline.clean.judge import (
    Contradiction,
    Duplicate,
    PairText,
    Related,
    Relation,
    Unrelated,
    judge_pairs,
    relation_name,
)
from vault_pipeline.clean.notes import SweepNote, load_notes
from vault_pipeline.clean.pairs import Candidate, CandidateSettings, candidate_pairs
from vault_pipeline.clean.types import Action, Collapse, NoteRef, Plan, Relate, Supersede
from vault_pipeline.models.embed import calibration_named
from vault_pipeline.models.offline.claims import parse_claim
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.format import CONTEXT_LABEL

Progress = Callable[[int, int], None]
# Cosine never merges: on short notes look-alikes about another subject score as high as true
# duplicates, so the judge decides. A cosine band only bounds the related links: a judged-related
# pair is linked at or above the embedder's related floor (MiniLM 0.60, about the 3rd percentile
# of true relations; unknown embedders a permissive 0.30). docs/decisions/0011-sweep-candidates.md.


class VectorSource(Protocol):
    """What the sweep needs of the index: one vector per active atomic note, and its metadata."""

    @property
    def meta(self) -> Mapping[str, Any]:
        """The index's identity: ``embedder`` names the model its vectors came from."""
        ...

    def all_vectors(self) -> tuple[list[str], list[str], np.ndarray]:
        """(note ids, paths, unit float32 vectors)."""
        ...


@dataclass(frozen=True)
class _Judged:
    older: SweepNote
    newer: SweepNote
    relation: Relation
    cosine: float


def plan(
    vault: Vault,
    index: VectorSource,
    llm: StructuredLLM,
    *,
    progress: Progress | None = None,
    settings: CandidateSettings = CandidateSettings(),
) -> Plan:
    """Candidates -> judgements -> ordered actions; reads only, writes nothing."""
    clock = _Clock()
    ids, paths, vectors = index.all_vectors()
    notes, rows, skipped = load_notes(vault, ids, paths)
    result = Plan(skipped=skipped, notes=len(notes))
    vectors = np.asarray(vectors, dtype=np.float32)[rows] if rows else np.zeros((0, 1), np.float32)
    clock.lap(result, "read")
    cands = [
        c
        for c in candidate_pairs([parse_claim(n.text).stems for n in notes], vectors, settings)
        if not _linked(notes[c.a], notes[c.b])
    ]  # linked pairs were judged related before
    result.candidates = len(cands)
    clock.lap(result, "candidates")
    judged = _judge(llm, notes, cands, result, progress)
    clock.lap(result, "judge")
    floor = calibration_named(str(index.meta.get("embedder", ""))).related_floor
    result.actions = _actions(judged, floor, result.skipped)
    clock.lap(result, "actions")
    result.seconds = round(sum(result.timings.values()), 3)
    return result


class _Clock:
    def __init__(self) -> None:
        self.last = time.perf_counter()

    def lap(self, plan: Plan, stage: str) -> None:
        """Record the seconds since the last lap under ``stage``."""
        now = time.perf_counter()
        plan.timings[stage] = round(now - self.last, 3)
        self.last = now


def _linked(a: SweepNote, b: SweepNote) -> bool:
    return b.stem in a.related and a.stem in b.related


def _order(a: SweepNote, b: SweepNote) -> tuple[SweepNote, SweepNote]:
    return (a, b) if (_time(a), a.id) <= (_time(b), b.id) else (b, a)


def _time(note: SweepNote) -> float:
    try:
        stamp = datetime.fromisoformat(note.created.replace("Z", "+00:00"))
    except ValueError:
        return float("-inf")
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def _judge(
    llm: StructuredLLM, notes: list[SweepNote], cands: list[Candidate], result: Plan, progress: Progress | None
) -> list[_Judged]:
    pairs, meta = [], {}
    for n, cand in enumerate(cands):
        older, newer = _order(notes[cand.a], notes[cand.b])
        key = f"p{n}"
        meta[key] = (older, newer, cand.cosine)
        pairs.append(PairText(key, _shown(older), _shown(newer), older.created, newer.created))
    verdicts = judge_pairs(llm, pairs, progress=progress)
    for key, why in verdicts.failed.items():
        result.skipped.append(f"{meta[key][0].id} / {meta[key][1].id}: {why}; left as they are")
    out = []
    for key, relation in verdicts.relations.items():
        older, newer, cosine = meta[key]
        result.judged[relation_name(relation)] += 1
        result.judgements.append((older.id, newer.id, relation_name(relation)))
        out.append(_Judged(older, newer, relation, cosine))
    return out


def _shown(note: SweepNote) -> str:
    return f"{note.text}\n{CONTEXT_LABEL} {note.context}" if note.context else note.text


def _actions(judged: list[_Judged], floor: float, skipped: list[str]) -> list[Action]:
    """Duplicates first, then supersessions, then links; each note archived at most once."""
    dups = [j for j in judged if isinstance(j.relation, Duplicate) and not (j.older.edited or j.newer.edited)]
    actions, alias = _duplicate_actions(dups)
    archived = set(alias)
    pending = _Pending()
    for j in sorted(judged, key=lambda j: (j.older.id, j.newer.id)):
        older, newer = _order(alias.get(j.older.id, j.older), alias.get(j.newer.id, j.newer))
        if older.id != newer.id:
            _weigh(j, older, newer, floor, pending)
    actions.extend(_supersessions(pending.supersede, archived))
    actions.extend(_links(pending.relate, archived))
    if pending.loose:
        skipped.append(f"{pending.loose} related pair(s) below the related floor (cosine {floor:.2f}) not linked")
    return actions


@dataclass
class _Pending:
    """What the judged pairs ask for, before each note's one supersession is chosen."""

    supersede: dict[str, list[tuple[SweepNote, SweepNote, str]]] = field(default_factory=dict)
    relate: dict[tuple[str, str], tuple[SweepNote, SweepNote, str]] = field(default_factory=dict)
    loose: int = 0  # judged related, but below the related floor


def _weigh(j: _Judged, older: SweepNote, newer: SweepNote, floor: float, pending: _Pending) -> None:
    """One judged pair (its notes after duplicates collapsed): a supersession, a link, or nothing."""
    relate = pending.relate
    if (older.edited or newer.edited) and isinstance(j.relation, Duplicate | Contradiction):
        # The user changed this note since we wrote it: never archive, supersede or merge it away.
        mine = " and ".join(n.id for n in (older, newer) if n.edited)
        relate[(older.id, newer.id)] = (
            older,
            newer,
            f"edited by you: review ({mine} changed since vault_pipeline wrote it; judged "
            f"{relation_name(j.relation)}, only related): {j.relation.reasoning}",
        )
        return
    match j.relation:
        case Duplicate() | Unrelated():
            return
        case Contradiction(reasoning=why) if "topic" in (older.category, newer.category):
            # A topic names what a conversation is about; it is not a claim a newer one replaces.
            relate.setdefault((older.id, newer.id), (older, newer, f"topics, not claims: {why}"))
        case Contradiction(reasoning=why):
            _contradiction(older, newer, why, pending.supersede, relate)
        case Related(reasoning=why, downgraded=downgraded, was=was):
            if downgraded:
                relate[(older.id, newer.id)] = (
                    older,
                    newer,
                    f"model said {was}, downgraded to related: {downgraded}. {why}",
                )
            elif j.cosine >= floor:
                relate.setdefault((older.id, newer.id), (older, newer, why))
            else:
                pending.loose += 1
        case _:
            assert_never(j.relation)


def _supersessions(supersede: dict[str, list[tuple[SweepNote, SweepNote, str]]], archived: set[str]) -> list[Action]:
    """Each older note superseded once, by its nearest newer contradictor; ``archived`` gains it."""
    actions: list[Action] = []
    for older_id in sorted(supersede):
        newer, older, why = min(supersede[older_id], key=lambda t: (_time(t[0]), t[0].id))
        archived.add(older_id)
        actions.append(Supersede(_ref(newer), _ref(older), f"{newer.id} supersedes {older.id}: {why}"))
    return actions


def _links(relate: dict[tuple[str, str], tuple[SweepNote, SweepNote, str]], archived: set[str]) -> list[Action]:
    """A related link for each pair whose notes both stay active and are not linked yet."""
    actions: list[Action] = []
    for (a_id, b_id), (a, b, why) in sorted(relate.items()):
        if a_id in archived or b_id in archived or _linked(a, b):
            continue
        first, second = sorted([a, b], key=lambda n: n.id)
        actions.append(Relate(_ref(first), _ref(second), why))
    return actions


def _contradiction(older: SweepNote, newer: SweepNote, why: str, supersede: dict, relate: dict) -> None:
    """Plan a supersession unless time or provenance says the older note must stay."""
    if _time(older) == _time(newer):
        relate[(older.id, newer.id)] = (
            older,
            newer,
            f"contradiction, but both notes have the same creation time, so neither can supersede: {why}",
        )
    elif older.provenance > newer.provenance:
        relate[(older.id, newer.id)] = (
            older,
            newer,
            f"contradiction, but {older.id} ({older.tier}, "
            f"{older.status}) outranks the newer {newer.id} "
            f"({newer.tier}, {newer.status}) by provenance; "
            f"not archived, review: {why}",
        )
    else:
        supersede.setdefault(older.id, []).append((newer, older, why))


def _duplicate_actions(dups: list[_Judged]) -> tuple[list[Action], dict[str, SweepNote]]:
    """Union-find clusters of duplicates, one action per cluster, and member -> canonical."""
    parent: dict[str, str] = {}
    by_id: dict[str, SweepNote] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    reasons: dict[str, str] = {}
    for j in dups:
        for note in (j.older, j.newer):
            by_id[note.id] = note
            parent.setdefault(note.id, note.id)
        parent[find(j.newer.id)] = find(j.older.id)
        reasons.setdefault(j.newer.id, j.relation.reasoning)
    clusters: dict[str, list[SweepNote]] = {}
    for note_id in sorted(parent):
        clusters.setdefault(find(note_id), []).append(by_id[note_id])
    actions: list[Action] = []
    alias: dict[str, SweepNote] = {}
    for members in sorted(clusters.values(), key=lambda m: m[0].id):
        canon = min(members, key=_canonical_key)
        others = [m for m in members if m.id != canon.id]
        alias.update({m.id: canon for m in others})
        why = next((reasons[m.id] for m in members if m.id in reasons), "")
        actions.append(
            Collapse(
                _ref(canon),
                tuple(_ref(o) for o in others),
                f"{len(members)} notes state one claim; {canon.id} kept ({_why_canonical(canon, others)}). {why}",
            )
        )
    return actions, alias


def _canonical_key(note: SweepNote) -> tuple:
    weight, kept = note.provenance
    return (-weight, not kept, -len(note.messages), not note.context, -_time(note), note.id)


def _why_canonical(canon: SweepNote, others: list[SweepNote]) -> str:
    if any(o.provenance < canon.provenance for o in others):
        return f"provenance: {canon.tier}, {canon.status}"
    if any(len(o.messages) < len(canon.messages) or (canon.context and not o.context) for o in others):
        return "richer: more source messages or a Context line"
    return "newer" if any(_time(o) < _time(canon) for o in others) else "lowest id"


def _ref(note: SweepNote) -> NoteRef:
    return NoteRef(note.id, note.path, note.sha256, note.text)
