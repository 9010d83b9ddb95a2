"""The offline gate's inputs: retrieval signals per candidate, and the vault's fitted weights.

``gate_signals`` computes ``relevance.FEATURES`` for a pool of candidates from what any
embedder and index give (see ``models/offline/relevance.py`` for what each signal means);
``gate.gate_rows`` hands them to the gate with each candidate, ``gatefit`` fits on them.
A vault's fitted gate is ``<vault>/.vault_pipeline/gate.json``, written by
``vault gate-calibrate --fit LABELS --vault V`` and read by ``load_relevance``.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vault_pipeline.errors import ConfigError
from vault_pipeline.models.embed import Embedder, embed_rows, l2_normalise
from vault_pipeline.models.offline.relevance import FEATURES, RelevanceModel
from vault_pipeline.text import idf_overlap, query_runs, stem_runs
from vault_pipeline.vault.files import STATE_DIR
from vault_pipeline.vault.state import atomic_write


def title_of(path: str) -> str:
    """A note's title as the gate shows it: the file name without ``.md``."""
    name = path.rsplit("/", 1)[-1]
    return name[:-3] if name.endswith(".md") else name


# --------------------------------------------------------------------------- retrieval signals

ANCHORS = 3  # the pool's strongest candidates a candidate is compared with (``anchor``)
# Where a conversation is one thread the user opened on a subject: the session signals' unit. A
# transcript's or LoCoMo's session is a stretch of a longer talk that passes through many subjects,
# and no labelled set measures the signals there, so their candidates count as of an unknown chat.
CHAT_KINDS = frozenset({"chatgpt", "claude"})


@lru_cache(maxsize=4096)
def _candidate_stems(text: str) -> tuple[tuple[str, ...], ...]:
    """A candidate's runs of content stems (``stem_runs``), kept for the process: the same chunk comes
    back in the steps of one query and in the next query's pool, and tokenizing it is the gate's
    largest CPU cost after the vectors."""
    return tuple(tuple(run) for run in stem_runs(text))


def chat_of(kind: str, conversation: str) -> str:
    """The chat a candidate came from, for the session signals ("" when not a chat export's thread)."""
    return conversation if kind in CHAT_KINDS else ""


def gate_signals(
    rows: Sequence[tuple[str, str, str, str]],
    *,
    query: str,
    intent: str,
    embedder: Embedder,
    variants: Sequence[str] = (),
    vectors: Mapping[str, np.ndarray] | None = None,
    query_vectors: Mapping[str, np.ndarray] | None = None,
    conversations: Mapping[str, str] | None = None,
    context: Sequence[str] = (),
) -> dict[str, dict[str, float]]:
    """The relevance model's signals (``relevance.FEATURES``) for each (chunk_id, path, heading, text) row.

    The prompt, intent and variants come from ``query_vectors`` (text -> unit vector, what the
    funnel already embedded), else one embedding call; candidates reuse ``vectors`` when given
    (the index embeds each row's ``embedding_text``) and are embedded the same way otherwise.
    IDF is taken over this pool of candidates, so words every candidate shares weigh little.
    ``conversations`` (chunk id -> the chat it came from; empty or missing: not known) give the
    session signals, counted over this pool and ``context``: the chats of the candidates that
    passed earlier steps for the same query (the funnel widens and hops in steps).
    """
    queries = _query_vectors(embedder, [query, intent, *variants], query_vectors or {})
    cand = _candidate_vectors(rows, embedder, vectors or {}).astype(np.float64)
    cos = cand @ queries.astype(np.float64).T  # (candidates, queries)
    strength = cos[:, 0] + cos[:, 1]  # to the prompt and the intent
    chats = [(conversations or {}).get(row[0], "") for row in rows]
    known, share = _sessions(chats, context)
    columns = {
        "cos_query": cos[:, 0],
        "cos_intent": cos[:, 1],
        "agreement": np.delete(cos, 1, axis=1).mean(axis=1),  # the prompt and its variants, not the intent
        **_word_signals(rows, query, intent),
        "anchor": _anchor(cand, strength),
        "session_share": share,
        "session_known": known,
        "same_session": _same_chat_as_anchors(chats, strength),
    }
    # Rounded: stable logs and verdicts.
    return {cid: {n: round(float(columns[n][i]), 6) for n in FEATURES} for i, (cid, *_) in enumerate(rows)}


def _word_signals(rows: Sequence[tuple[str, str, str, str]], query: str, intent: str) -> dict[str, list[float]]:
    """``overlap`` (IDF-weighted share of the prompt's and intent's stems) and ``phrase`` (share of
    the prompt's adjacent pairs found adjacent) per row."""
    prompt_runs = query_runs(query) + query_runs(intent, query)  # another language's function words are no terms
    # Each candidate's text is tokenised and stemmed once: its stems weigh the overlap, its pairs the phrases.
    runs = [_candidate_stems(" ".join((title_of(path), heading, text))) for _, path, heading, text in rows]
    overlap = idf_overlap([t for run in prompt_runs for t in run], [{t for run in r for t in run} for r in runs])
    phrases = {pair for run in prompt_runs for pair in itertools.pairwise(run)}
    phrase = [
        len(phrases & {pair for run in r for pair in itertools.pairwise(run)}) / len(phrases) if phrases else 0.0
        for r in runs
    ]
    return {"overlap": list(overlap), "phrase": phrase}


def _query_vectors(embedder: Embedder, texts: list[str], known: Mapping[str, np.ndarray]) -> np.ndarray:
    """Unit vectors of ``texts``: those the caller gave (``known``), the rest embedded in one call."""
    found = {t: known.get(t) for t in texts}
    missing = list(dict.fromkeys(t for t, v in found.items() if v is None))
    if missing:
        found.update(zip(missing, l2_normalise(embedder.embed(missing))))
    return l2_normalise(np.vstack([np.asarray(found[t], np.float32) for t in texts]))


def _candidate_vectors(
    rows: Sequence[tuple[str, str, str, str]], embedder: Embedder, vectors: Mapping[str, np.ndarray]
) -> np.ndarray:
    missing = [i for i, row in enumerate(rows) if vectors.get(row[0]) is None]
    # Embedded as the index embeds a row (without its ids), so a stored vector and this one agree.
    embedded = dict(zip(missing, embed_rows(embedder, [rows[i][3] for i in missing]))) if missing else {}
    out = [embedded[i] if i in embedded else np.asarray(vectors[row[0]], np.float32) for i, row in enumerate(rows)]
    return l2_normalise(np.vstack(out))


def _strongest(strength: np.ndarray) -> list[int]:
    """Positions of the ``ANCHORS`` + 1 strongest candidates (ties by position): each candidate's
    anchors are the first ``ANCHORS`` of these that are not itself."""
    return sorted(range(len(strength)), key=lambda i: (-round(float(strength[i]), 9), i))[: ANCHORS + 1]


def _anchor(vectors: np.ndarray, strength: np.ndarray) -> np.ndarray:
    """Mean cosine to the ``ANCHORS`` strongest other candidates (ties by position)."""
    order = _strongest(strength)
    sims = vectors @ vectors.T
    out = np.zeros(len(strength))
    for i in range(len(strength)):
        others = [j for j in order if j != i][:ANCHORS]
        out[i] = float(np.mean(sims[i, others])) if others else float(strength[i]) / 2
    return out


SESSION_MIN_OTHERS = 5  # a share of fewer other candidates is mostly noise (the labels' pools hold 11)


def _sessions(conversations: Sequence[str], context: Sequence[str] = ()) -> tuple[list[float], list[float]]:
    """(known, share) per candidate: whether its chat is known and there are enough other candidates
    to count (``SESSION_MIN_OTHERS``), and the share of those others from the same chat (0 when
    not known)."""
    counts = Counter(c for c in [*conversations, *context] if c)
    others = len(conversations) + len(context) - 1
    known = [1.0 if c and others >= SESSION_MIN_OTHERS else 0.0 for c in conversations]
    return known, [(counts[c] - 1) / others if k else 0.0 for c, k in zip(conversations, known)]


def _same_chat_as_anchors(conversations: Sequence[str], strength: np.ndarray) -> list[float]:
    """1 when the candidate's chat is the chat of one of the pool's ``ANCHORS`` strongest other candidates."""
    order = _strongest(strength)
    out = []
    for i, chat in enumerate(conversations):
        anchors = [j for j in order if j != i][:ANCHORS]
        out.append(1.0 if chat and any(conversations[j] == chat for j in anchors) else 0.0)
    return out


# --------------------------------------------------------------------------- the vault's fitted weights

GATE_FILE = "gate.json"


def relevance_path(root: str | Path) -> Path:
    """Where a vault keeps its fitted gate: ``<vault>/.vault_pipeline/gate.json``."""
    return Path(root) / STATE_DIR / GATE_FILE


def load_relevance(root: str | Path) -> RelevanceModel | None:
    """The vault's fitted gate, or None when it has none; a bad file raises ConfigError naming it."""
    path = relevance_path(root)
    if not path.is_file():
        return None
    try:
        return RelevanceModel.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a fitted gate ({exc})") from None


def save_relevance(root: str | Path, model: RelevanceModel) -> Path:
    """Write the fitted gate atomically into the vault's state folder; returns the path."""
    path = relevance_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (json.dumps(model.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return path
