"""The five things the MCP server offers, as plain library calls on one vault.

``VaultTools`` takes collaborators already built (``cli.py`` is the composition root) and
answers with the same values the CLI prints: a ``ContextPackage`` for ``query``, the index's
rows for ``search``, a note's properties and text, a ``RememberReport``, the status counts.
Errors are ``VaultError``s with the CLI's one-line messages. Each call opens its own ``Vault``
(its state database connection belongs to one thread, and calls arrive on worker threads).
"""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from vault_pipeline.errors import FrontmatterError, VaultError
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.serve.remember import RememberReport, remember
from vault_pipeline.vault.files import Vault

SEARCH_LIMIT, MAX_SEARCH_LIMIT = 10, 100
READY_WAIT = 120.0  # seconds a query waits for the watcher's first sync (a new vault's first index)
MAX_NOTE_CHARS = 100_000  # a note longer than this is returned cut, and says so


class VaultTools:
    """query, search, read_note, remember and status on the vault at ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        embedder,
        llm_extract: StructuredLLM,
        llm_plan: StructuredLLM,
        llm_gate: StructuredLLM,
        config,
        lock_wait: float = 30.0,
    ):
        opened = Vault.open(root)  # a ConfigError now if ``root`` is not a vault
        self.root = opened.root
        opened.close()
        self.embedder, self.config, self.lock_wait = embedder, config, lock_wait
        self.llm_extract, self.llm_plan, self.llm_gate = llm_extract, llm_plan, llm_gate
        # Set by a live watcher once its first sync is done: reads wait for it rather than
        # answer from an index that is missing or behind the files.
        self.ready: threading.Event | None = None

    def _vault(self) -> Vault:
        return Vault(self.root)

    def _await_index(self) -> None:
        if self.ready is not None:
            self.ready.wait(READY_WAIT)

    def query(self, prompt: str, intent: str | None = None, budget: int | None = None):
        """The context package for ``prompt`` (the funnel, the gate and the budget included), built to
        go back over MCP: its text and its structured result together keep to the budget."""
        from vault_pipeline.pipeline import query as run_query

        if not (prompt or "").strip():
            raise VaultError("give a prompt to build context for")
        if budget is not None and budget <= 0:
            raise VaultError(f"budget {budget}: give a positive number of tokens")
        config = replace(self.config, structured=True, **({} if budget is None else {"budget": budget}))
        self._await_index()
        vault = self._vault()
        try:
            packages = run_query(
                vault,
                [(prompt, intent or None)],
                embedder=self.embedder,
                llm_plan=self.llm_plan,
                llm_gate=self.llm_gate,
                config=config,
            )
            return next(iter(packages))
        finally:
            vault.close()

    def search(self, text: str, limit: int = SEARCH_LIMIT) -> list[dict[str, Any]]:
        """Notes matching ``text`` (vector and full text, fused), best first, one entry per note; only
        those whose cosine to ``text`` reaches the funnel's similarity floor, and none when the found
        model says the vault holds nothing on ``text`` (``search_finds``)."""
        from vault_pipeline.index.search import Index
        from vault_pipeline.models.embed import l2_normalise
        from vault_pipeline.retrieve.judge import with_original_similarity
        from vault_pipeline.retrieve.lanes import fuse

        if not (text or "").strip():
            raise VaultError("give some text to search for")
        if not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise VaultError(f"limit {limit}: give 1 to {MAX_SEARCH_LIMIT}")
        self._await_index()
        vault = self._vault()
        try:
            index = Index.open(vault, self.embedder)
        finally:
            vault.close()
        vector = self.embedder.embed([text])[0]
        depth = limit * 3  # a long note can fill a lane with its chunks: look deeper, keep one per note
        lists = [
            ("original", "vector", index.vector_search(vector, depth)),
            ("original", "text", index.text_search(text, depth, vector=vector)),
        ]
        found: dict[str, dict[str, Any]] = {}
        fused = [
            c
            for c in with_original_similarity(fuse(lists), l2_normalise(vector[None, :])[0], self.embedder)
            if c.similarity >= self.config.floor
        ]
        if not fused or not search_finds(text, fused, index):
            return []
        for cand in fused:
            if cand.row.note_id not in found:
                found[cand.row.note_id] = _search_hit(cand)
            if len(found) == limit:
                break
        return list(found.values())

    def read_note(self, path: str) -> dict[str, Any]:
        """A note's properties and text; ``path`` is vault-relative and must stay inside the vault."""
        relpath = (path or "").strip()
        vault = self._vault()
        try:
            vault.path(relpath, allow_symlink=True)  # refuses ../, absolute paths and escapes through links
            if not relpath.endswith(".md"):
                raise VaultError(f"{relpath}: not a Markdown note (give the .md path, as search returns it)")
            try:
                frontmatter, body, _ = vault.read(relpath)
            except FrontmatterError as exc:
                raise VaultError(str(exc)) from None
        finally:
            vault.close()
        cut = len(body) > MAX_NOTE_CHARS
        return {
            "path": relpath,
            "properties": _plain(frontmatter),
            "text": body[:MAX_NOTE_CHARS],
            "truncated": cut,
        }

    def remember(self, text: str, kind: str | None = None, client: str = "") -> RememberReport:
        """Provisional notes from ``text`` through extraction and the quality gate, then the index re-synced."""
        vault = self._vault()
        try:
            return remember(
                vault,
                text,
                self.llm_extract,
                kind=kind or None,
                client=client,
                embedder=self.embedder,
                wait=self.lock_wait,
            )
        finally:
            vault.close()

    def status(self) -> dict[str, Any]:
        """Notes per folder, the index's counts, and how far it lags the files."""
        from vault_pipeline.pipeline import status as run_status

        vault = self._vault()
        try:
            result = run_status(vault)
        finally:
            vault.close()
        return {
            "vault": str(self.root),
            "folders": dict(sorted(result.folders.items())),
            "index": _plain(result.index) if result.index is not None else None,
            "waiting_to_index": result.pending,
            "fresh": result.index is not None and not any(result.pending.values()),
        }


def search_finds(text: str, hits, index) -> bool:
    """Whether the vault holds anything on ``text``: the funnel's found model (``evidence.py``) over
    the hits' best cosine and the text's words no note holds. No gate runs for a search, so its
    best relevance counts as certain: only the words and the cosine can say "nothing"."""
    from vault_pipeline.models.offline.relevance import FOUND
    from vault_pipeline.retrieve.evidence import content_words, names

    words = content_words(text)
    texts = [c.row.text.casefold() for c in hits]
    missing = [w for w in words if not any(w in t for t in texts)]
    absent = set(index.unknown_words(missing)) if missing else set()
    features = {
        "best": 1.0,
        "best_cosine": max(c.similarity for c in hits),
        "absent_share": sum(w in absent for w in words) / len(words) if words else 0.0,
        "name_absent": float(any(n in absent for n in names(text))),
    }
    return FOUND.probability(features) >= FOUND.threshold


def _search_hit(cand) -> dict[str, Any]:
    row = cand.row
    return {
        "path": row.path,
        "id": row.note_id,
        "type": row.type,
        "tier": row.tier,
        "category": row.category,
        "status": row.status,
        "source": {"kind": row.source_kind, "conversation": row.source_conversation},
        "created": row.created,
        "heading": row.heading,
        "text": row.text,
        "similarity": round(float(cand.similarity), 4) if math.isfinite(cand.similarity) else None,
        "found_by": list(cand.lanes),
    }


def _plain(value: Any) -> Any:
    """Frontmatter and statistics as JSON-ready values (YAML gives dates and other non-JSON types)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
