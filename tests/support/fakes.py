"""Test fakes for the project's outside-service Protocols (others may append here)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vault_pipeline.ingest.select import Selector

_WORD = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=65536)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    """A stable (bucket, sign) for a feature; Python's hash() is salted per process."""
    digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")
    return digest % dim, (1.0 if (digest >> 63) & 1 else -1.0)


class HashEmbedder:
    """Deterministic bag-of-words feature hashing (+ char trigrams), L2-normalised.

    Fast and offline: shared words give high cosine, near-words (plural,
    tense) relate through their trigrams, unrelated texts sit near zero.
    """

    def __init__(self, dim: int = 64, trigram_weight: float = 0.5):
        self.dim = dim
        self.name = f"hash-{dim}"
        self.trigram_weight = trigram_weight
        self.calls: list[list[str]] = []

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = _WORD.findall(text.lower())
        feats = [("w:" + w, 1.0) for w in words]
        for word in words:
            padded = f"#{word}#"
            feats.extend(("t:" + padded[i : i + 3], self.trigram_weight) for i in range(len(padded) - 2))
        return feats or [("<empty>", 1.0)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into (n, dim) float32 unit rows."""
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in self._features(text):
                bucket, sign = _bucket(feature, self.dim)
                out[row, bucket] += sign * weight
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.clip(norms, 1e-12, None)


def queued_completion(answers: list[str]):
    """A completion callable answering through litellm's ``mock_response``, one queued answer a call.

    The real instructor parsing and re-ask path runs on it with no network; ``calls`` records
    every request so tests can read what was asked (and the validation error of a re-ask).
    """
    import litellm

    calls: list[dict] = []
    queue = iter(answers)

    def completion(**kwargs):
        calls.append(kwargs)
        return litellm.completion(mock_response=next(queue), **kwargs)

    return completion, calls


# --------------------------------------------------------------------------- StructuredLLM fakes


def structured_llm_protocol():
    """The StructuredLLM Protocol class wherever it lives now (models.protocol, formerly models.llm); None if gone."""
    import importlib

    for module in ("vault_pipeline.models.protocol", "vault_pipeline.models.llm"):
        try:
            return importlib.import_module(module).StructuredLLM
        except (ImportError, AttributeError):
            continue
    return None


def late_drop_all(prompt_name: str, variables) -> dict:
    """A gate answer dropping every candidate as ``late`` (what SleepingLLM answers by default)."""
    return {
        "verdicts": [
            {"key": c["key"], "reasoning": "late", "verdict": "drop", "reason": "late"} for c in variables["candidates"]
        ]
    }


class ScriptedLLM:
    """A StructuredLLM whose answer is ``fn(prompt_name, variables)``, or the next of a list; records calls.

    The answer is validated through the caller's ``response_model`` with the caller's context,
    exactly as a real backend's would be.
    """

    remote = False

    def __init__(self, fn=None, model: str = "scripted", *, answers=None, remote: bool = False):
        if (fn is None) == (answers is None):
            raise TypeError("ScriptedLLM takes either fn(prompt_name, variables) or answers=[...]")
        self._queue = iter(list(answers)) if answers is not None else None
        self.fn = fn
        self.model = model
        self.remote = remote
        self.calls: list[tuple[str, dict]] = []

    def call(self, prompt, variables, response_model, *, context=None):
        self.calls.append((prompt.name, dict(variables)))
        if self._queue is not None:
            try:
                answer = next(self._queue)
            except StopIteration:
                raise AssertionError(
                    f"ScriptedLLM: no answer left for call {len(self.calls)} (prompt {prompt.name!r})"
                ) from None
        else:
            answer = self.fn(prompt.name, variables)
        return response_model.model_validate(answer, context=dict(context or {}))


class RaisingLLM:
    """A StructuredLLM that always fails for good (ModelError unless another error is given); records calls."""

    remote = False

    def __init__(self, error: BaseException | None = None, model: str = "broken"):
        self.error = error
        self.model = model
        self.calls: list[tuple[str, dict]] = []

    def call(self, prompt, variables, response_model, *, context=None):
        self.calls.append((prompt.name, dict(variables)))
        if self.error is not None:
            raise self.error
        from vault_pipeline.errors import ModelError

        raise ModelError(prompt.name, self.model, "connection refused", 4)


class SleepingLLM:
    """A StructuredLLM that answers only once the test sets ``release`` (or ``timeout`` seconds pass).

    For deadlines: the caller should have given up before the answer comes. ``fn`` computes the
    late answer (default: drop every gate candidate as late).
    """

    remote = False

    def __init__(self, fn=late_drop_all, model: str = "slow", timeout: float = 5.0):
        import threading

        self.release = threading.Event()
        self.fn = fn
        self.model = model
        self.timeout = timeout
        self.calls: list[tuple[str, dict]] = []

    def call(self, prompt, variables, response_model, *, context=None):
        self.calls.append((prompt.name, dict(variables)))
        self.release.wait(self.timeout)
        return response_model.model_validate(self.fn(prompt.name, variables), context=dict(context or {}))


def litellm_backend_class():
    """The LiteLLM backend class: models/litellm_backend.py, else the one models/*litellm*.py module."""
    import importlib
    from pathlib import Path

    import vault_pipeline.models as models

    names = ["vault_pipeline.models.litellm_backend"] + [
        "vault_pipeline.models." + p.stem for p in sorted(Path(models.__file__).parent.glob("*litellm*.py"))
    ]
    for name in dict.fromkeys(names):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "LiteLLMBackend"):
            return module.LiteLLMBackend
    raise ImportError("no LiteLLMBackend in vault_pipeline/models/*litellm*.py")


# --------------------------------------------------------------------------- index rows


def row_type():
    """The index's real Row dataclass (index.search, formerly index.store)."""
    try:
        from vault_pipeline.index.search import Row
    except ImportError:
        from vault_pipeline.index.store import Row  # type: ignore[no-redef]
    return Row


# Defaults for Row's required fields; a new required field without an entry here and of a type
# with no obvious empty value makes fake_row fail loudly instead of drifting from Row.
_ROW_DEFAULTS = {
    "note_id": "n-1",
    "type": "atomic",
    "tier": "engram",
    "status": "kept",
    "category": "fact",
    "speaker": "user",
    "created": "2024-05-01T00:00:00+00:00",
    "source_kind": "chatgpt",
    "source_conversation": "conv-1",
    "source_messages": '["m-1"]',
    "heading": "",
    "level": 0,
    "ordinal": 0,
    "synopsis": False,
    "text": "",
    "superseded_by": "",
    "duplicate_of": "",
    "active": True,
}
_EMPTY_BY_TYPE = {"str": "", "int": 0, "bool": False, "float": 0.0}


def fake_row(**fields):
    """A real index Row with a default for every field; ``fields`` override (unknown names raise TypeError).

    ``chunk_id`` defaults to ``<note_id>#<ordinal>``, ``path`` to ``engrams/<note_id>.md``, ``tokens``
    and ``sha256`` to the text's estimate and digest; ``source_messages`` may be given as a list.
    """
    import dataclasses
    import json

    from vault_pipeline.text import estimate_tokens

    row_cls = row_type()
    if isinstance(fields.get("source_messages"), (list, tuple)):
        fields["source_messages"] = json.dumps(list(fields["source_messages"]))
    values = {**_ROW_DEFAULTS, **fields}
    values.setdefault("chunk_id", f"{values['note_id']}#{values['ordinal']}")
    values.setdefault("path", f"engrams/{values['note_id']}.md")
    values.setdefault("tokens", estimate_tokens(values["text"]))
    values.setdefault("sha256", hashlib.sha256(values["text"].encode("utf-8")).hexdigest())
    names = {f.name for f in dataclasses.fields(row_cls)}
    for f in dataclasses.fields(row_cls):
        if f.name in values or f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        if type_name not in _EMPTY_BY_TYPE:
            raise TypeError(
                f"fake_row: Row has a new required field {f.name}: {type_name}; add a default to "
                "tests/support/fakes.py _ROW_DEFAULTS"
            )
        values[f.name] = _EMPTY_BY_TYPE[type_name]
    # Our own defaults only for fields Row still has; a caller's unknown field still raises.
    values = {k: v for k, v in values.items() if k in names or k in fields}
    return row_cls(**values)


# --------------------------------------------------------------------------- the funnel's Retriever


class FakeRetriever:
    """An in-memory index over ``rows``: the funnel's whole ``Retriever`` protocol, recording what it
    was asked (``searches``, ``conversations_read``, ``words_asked``).

    Rows carry their stored vectors (``embedder``'s). The vector lane ranks every row by cosine; the
    full-text lane ranks the rows sharing words of four letters or more with the query by how many
    they share (its hits carry no cosine, as the index's do not). Session rows give the one hop its
    turn order and are not searched. ``related`` maps a note's path to the file names its
    ``related`` property links to; a word is unknown when no row's text holds it.
    """

    def __init__(self, rows, embedder, *, related=None):
        from dataclasses import replace

        vectors = embedder.embed([r.text for r in rows])
        self.rows = [replace(r, vector=v) for r, v in zip(rows, vectors)]
        self.vectors = vectors
        self.related = dict(related or {})
        self.searches: list[tuple[str, str]] = []  # (lane, query text)
        self.conversations_read: list[tuple[str, ...]] = []
        self.words_asked: list[list[str]] = []

    def _hits(self, scores, k: int, lane: str, vector=None) -> list:
        from dataclasses import replace

        sims = self.vectors @ vector if vector is not None else np.full(len(self.rows), np.nan)
        order = sorted(
            (i for i in range(len(self.rows)) if scores[i] > 0 and self.rows[i].type != "session"),
            key=lambda i: (-round(float(scores[i]), 9), self.rows[i].chunk_id),
        )[:k]
        return [replace(self.rows[i], similarity=float(sims[i]), lane=lane) for i in order]

    def _vector_lane(self, text: str, vector, k: int) -> list:
        self.searches.append(("vector", text))
        return self._hits(self.vectors @ vector + 2.0, k, "vector", vector)

    def _text_lane(self, text: str, k: int) -> list:
        self.searches.append(("text", text))
        terms = {w for w in _WORD.findall(text.lower()) if len(w) > 3}
        return self._hits([len(terms & set(_WORD.findall(r.text.lower()))) for r in self.rows], k, "text")

    def start_search(self, texts, k, *, include_archived=False):
        return _FakeSearch(self, list(texts), k)

    def read_conversations(self, conversations, *, include_archived=False):
        self.conversations_read.append(tuple(conversations))
        rows = sorted((r for r in self.rows if r.source_conversation in conversations), key=lambda r: r.chunk_id)
        return rows, self.superseded_messages(conversations)

    def superseded_messages(self, conversations):
        return {}

    def rows_by_stem(self, stems, *, include_archived=False):
        return sorted((r for r in self.rows if r.path.rsplit("/", 1)[-1][:-3] in stems), key=lambda r: r.chunk_id)

    def related_stems(self, paths):
        return {p: self.related[p] for p in paths if p in self.related}

    def unknown_words(self, words):
        self.words_asked.append(list(words))
        held = {w for r in self.rows for w in _WORD.findall(r.text.lower())}
        return [w for w in words if w not in held]


def stats_of(package) -> dict:
    """A package's stats as ``vault query --json`` prints them."""
    return package.to_dict()["stats"]


def traced(package) -> list[dict]:
    """A package's trace as ``vault query --json --explain`` prints it: one entry per candidate."""
    return package.to_dict(trace=True)["trace"]


class _FakeSearch:
    """``FakeRetriever.start_search``'s pending lanes."""

    def __init__(self, retriever: FakeRetriever, texts: list[str], k: int):
        self.retriever, self.texts, self.k = retriever, texts, k

    def finish(self, vectors):
        nearest = [self.retriever._vector_lane(t, v, self.k) for t, v in zip(self.texts, vectors)]
        return nearest, [self.retriever._text_lane(t, self.k) for t in self.texts]

    def cancel(self) -> None:
        pass


# --------------------------------------------------------------------------- vault notes

NOTE_DEFAULTS = {
    "type": "atomic",
    "category": "fact",
    "status": "provisional",
    "tier": "chat",
    "speaker": "user",
    "source": {"kind": "chatgpt", "conversation": "conv-1", "messages": ["m-1"]},
    "created": "2024-05-01T10:00:00",
}


def note_frontmatter(note_id: str, **frontmatter) -> dict:
    """``id`` plus NOTE_DEFAULTS, overridden by ``frontmatter``; a value of None drops the key."""
    fm = {"id": note_id, **NOTE_DEFAULTS, **frontmatter}
    return {k: v for k, v in fm.items() if v is not None}


def note_text(note_id: str, body: str, **frontmatter) -> str:
    """A note file's text: note_frontmatter rendered by vault.frontmatter.render_note, then ``body``."""
    from vault_pipeline.vault.frontmatter import render_note

    return render_note(note_frontmatter(note_id, **frontmatter), body)


def note_value(note_id: str, body: str, *, folder: str = "inbox", stem: str | None = None, **frontmatter):
    """A vault.note.Note value (for ``Vault.write``) with note_frontmatter; ``stem`` defaults to the id."""
    from vault_pipeline.vault.note import Note

    fm = note_frontmatter(note_id, **frontmatter)
    return Note(note_id, fm.get("type", "atomic"), folder, stem or note_id, fm, body)


def write_file(vault, relpath: str, text: str):
    """Write ``text`` verbatim at ``vault.root/relpath`` (``vault`` is a Vault or its root), folders made. Returns the path."""
    from pathlib import Path, PurePath

    # A Vault or its root folder (not getattr(x, "root"): every Path has a .root too, "/").
    root = Path(vault) if isinstance(vault, (str, PurePath)) else Path(vault.root)
    if Path(relpath).is_absolute() or ".." in Path(relpath).parts:
        raise ValueError(f"write_file: {relpath!r} is not a vault-relative path")
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_note(vault, relpath: str, note_id: str, body: str, **frontmatter):
    """Write a real note file (real frontmatter via vault.frontmatter.render_note) at ``vault.root/relpath``.

    ``vault`` is a Vault or the vault's root folder; ``relpath`` must stay inside it.

    Frontmatter is ``id`` plus NOTE_DEFAULTS, overridden by ``frontmatter``; a value of None drops
    the key. The file is written as a user would write it, not through the Vault API (so no state
    record). Returns the path.
    """
    return write_file(vault, relpath, note_text(note_id, body, **frontmatter))


# Seconds a test waits for a process before calling it stuck: a guard against a hang, never a
# measure of speed (a loaded 2-core machine made a 300 s bound fail a healthy run).
HANG_GUARD = 3600.0


def run_vault(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``vault ARGS`` in a fresh process run from ``cwd``, this checkout first on the path and no
    ``VAULT_*`` setting of the caller's environment leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_")}
    repo = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "vault_pipeline.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=HANG_GUARD,
    )


# A selector that writes and keeps every candidate (probability 0.5 against thresholds of 0): for tests
# of what ingest and keep do with notes, not of which notes they choose.
EVERY_CANDIDATE = Selector({}, 0.0, write=0.0, keep=0.0)


def locomo_conversation(tmp_path: Path, turns: Sequence[tuple[str, str, str]], sample_id: str = "conv-x"):
    """One Conversation read, as an ingest reads it, from a LoCoMo-shaped sample of one session on 8 May
    2023 between Ada and Ben: ``turns`` are (speaker, dia_id, text), written for the test."""
    import json

    from vault_pipeline.ingest.parse import read_export

    sample = {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ada",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": s, "dia_id": i, "text": t} for s, i, t in turns],
        },
    }
    path = tmp_path / f"{sample_id}.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    (conv,) = list(read_export(path))
    return conv
