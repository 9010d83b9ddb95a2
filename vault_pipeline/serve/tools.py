"""What the MCP server offers, as plain library calls on one vault.

``VaultTools`` takes collaborators already built (``cli/`` is the composition root) and
answers with the same values the CLI prints: a ``ContextPackage`` for ``query``, the index's
rows for ``search``, a note's properties and a page of its text, a ``RememberReport``, the status
counts; ``notes`` (``notes.py``) lists, relates, edits, archives and supersedes notes.
Errors are ``VaultError``s with the CLI's one-line messages. Each call opens its own ``Vault``
(its state database connection belongs to one thread, and calls arrive on worker threads).
A read that finds the index unreadable is repaired by the library call it makes (``pipeline.query``,
``search``, ``status``): the index is rebuilt from the vault, a line goes to the server log, and the
answer comes from the new one.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from vault_pipeline.errors import FrontmatterError, VaultError
from vault_pipeline.models.protocol import CallRecorder, StructuredLLM
from vault_pipeline.serve.notes import NoteTools
from vault_pipeline.serve.remember import RememberReport, remember
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import split_frontmatter
from vault_pipeline.vault.state import sha256_bytes

SEARCH_LIMIT, MAX_SEARCH_LIMIT = 10, 100
READY_WAIT = 120.0  # seconds a query waits for the watcher's first sync (a new vault's first index)
PAGE_CHARS, MAX_PAGE_CHARS = 16_000, 32_000  # read_note's page of a note's text: its default and largest
MAX_PAGE_BYTES = 40 * 1024  # and in UTF-8 bytes (the text is returned twice: as text and structured)
MAX_PROPERTY_CHARS, MAX_PROPERTY_ITEMS, MAX_PROPERTIES_BYTES = 1_000, 50, 16 * 1024
MAX_NOTE_BYTES = 4 * 1024 * 1024  # read_note reads no more of a file than this
MAX_PATH_CHARS = 1024  # no note path is longer (file names are bounded): refused before any lookup
READ_TIMEOUT = 10.0  # seconds read_note waits for a file's bytes (a stuck network mount)

log = logging.getLogger(__name__)


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
        sampling: frozenset[str] = frozenset(),
        call_log: CallRecorder | None = None,
    ):
        opened = Vault.open(root)  # a ConfigError now if ``root`` is not a vault
        self.root = opened.root
        opened.close()
        self.embedder, self.config, self.lock_wait = embedder, config, lock_wait
        self.llm_extract, self.llm_plan, self.llm_gate = llm_extract, llm_plan, llm_gate
        # The roles ("gate", "extract") vault.toml gives to the MCP client's own model
        # (``mcp-sampling``): the server asks it per call where the client offers sampling, and the
        # offline backends above stand in where it does not. ``call_log``: where those calls are recorded.
        self.sampling, self.call_log = sampling, call_log
        self.notes = NoteTools(self.root, embedder=embedder, lock_wait=lock_wait)
        # Set by a live watcher once its first sync is done: reads wait for it rather than
        # answer from an index that is missing or behind the files.
        self.ready: threading.Event | None = None

    def _vault(self) -> Vault:
        return Vault(self.root)

    def _await_index(self) -> None:
        if self.ready is not None:
            self.ready.wait(READY_WAIT)

    def _repaired(self, report) -> None:
        log.warning("%s; rebuilt it from the notes (%d rows)", report.rebuild_reason, report.rows)

    def query(
        self,
        prompt: str,
        intent: str | None = None,
        budget: int | None = None,
        *,
        llm_gate: StructuredLLM | None = None,
    ):
        """The context package for ``prompt`` (the funnel, the gate and the budget included);
        ``llm_gate`` judges instead of the configured gate (the client's model, in ``vault mcp``)."""
        if not (prompt or "").strip():
            raise VaultError("give a prompt to build context for")
        if budget is not None and budget <= 0:
            raise VaultError(f"budget {budget}: give a positive number of tokens")
        config = replace(self.config, structured=True, **({} if budget is None else {"budget": budget}))
        self._await_index()
        return self._query(prompt, intent, config, llm_gate or self.llm_gate)

    def _query(self, prompt: str, intent: str | None, config, llm_gate: StructuredLLM):
        from vault_pipeline.pipeline import query as run_query

        vault = self._vault()
        try:
            packages = run_query(
                vault,
                [(prompt, intent or None)],
                embedder=self.embedder,
                llm_plan=self.llm_plan,
                llm_gate=llm_gate,
                config=config,
                on_repair=self._repaired,
                wait=self.lock_wait,
            )
            return next(iter(packages))
        finally:
            vault.close()

    def search(self, text: str, limit: int = SEARCH_LIMIT) -> list[dict[str, Any]]:
        """Notes matching ``text`` (vector and full text, fused), best first, one entry per note; only
        those whose cosine to ``text`` reaches the funnel's similarity floor, and none when the found
        model says the vault holds nothing on ``text`` (``pipeline.search``)."""
        if not (text or "").strip():
            raise VaultError("give some text to search for")
        if not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise VaultError(f"limit {limit}: give 1 to {MAX_SEARCH_LIMIT}")
        self._await_index()
        from vault_pipeline.pipeline import search as run_search

        vault = self._vault()
        try:
            found = run_search(
                vault,
                text,
                embedder=self.embedder,
                floor=self.config.floor,
                limit=limit,
                on_repair=self._repaired,
                wait=self.lock_wait,
            )
        finally:
            vault.close()
        return [_search_hit(cand) for cand in found]

    def read_note(
        self, path: str = "", note_id: str | None = None, offset: int = 0, limit: int = PAGE_CHARS
    ) -> dict[str, Any]:
        """A note's properties and one page of its text (``offset``, ``limit`` characters); the note is
        named by ``path`` (vault-relative, inside the vault) or by its frontmatter ``id``.

        Only a regular file is opened (a FIFO, device or folder named ``*.md`` is refused), read up
        to ``MAX_NOTE_BYTES`` within ``READ_TIMEOUT`` seconds on a reader thread of its own."""
        if not 1 <= limit <= MAX_PAGE_CHARS:
            raise VaultError(f"limit {limit}: give 1 to {MAX_PAGE_CHARS:,} characters")
        if offset < 0:
            raise VaultError(f"offset {offset}: give 0 or more")
        if note_id is not None and note_id.strip():
            if (path or "").strip():
                raise VaultError("give the note's `path` or its `id`, not both")
            path = self.notes.entry(note_id=note_id).path
        relpath = (path or "").strip()
        if len(relpath) > MAX_PATH_CHARS:
            raise VaultError(
                f"a path of {len(relpath):,} characters: longer than any note's ({MAX_PATH_CHARS:,}); refused"
            )
        vault = self._vault()
        try:
            full = vault.path(relpath, allow_symlink=True)  # refuses ../, absolute paths and escapes through links
        except OSError as exc:  # a name the file system refuses (too long, ...)
            raise VaultError(f"{relpath[:80]}: not a readable path: {exc.strerror or exc}") from None
        finally:
            vault.close()
        if not relpath.endswith(".md"):
            raise VaultError(f"{relpath}: not a Markdown note (give the .md path, as search returns it)")
        data = _read_regular(full, relpath)
        try:
            frontmatter, body = split_frontmatter(data.decode("utf-8", errors="replace"), relpath)
        except FrontmatterError as exc:
            raise VaultError(str(exc)) from None
        page = _page(body, offset, limit)
        end = offset + len(page)
        return {
            "path": relpath,
            "id": str(frontmatter.get("id") or ""),
            "version": sha256_bytes(data),  # what edit_note and archive_note take to refuse a changed file
            "properties": _bounded_properties(_plain(frontmatter)),
            "text": page,
            "offset": offset,
            "next_offset": end if end < len(body) else None,
            "total_chars": len(body),
            "truncated": end < len(body),
        }

    def remember(
        self, text: str, kind: str | None = None, client: str = "", *, llm_extract: StructuredLLM | None = None
    ) -> RememberReport:
        """Provisional notes from ``text`` through extraction and the quality gate, then the index
        re-synced; ``llm_extract`` extracts instead of the configured model (the client's, in ``vault mcp``)."""
        vault = self._vault()
        try:
            return remember(
                vault,
                text,
                llm_extract or self.llm_extract,
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
            result = run_status(vault, embedder=lambda: self.embedder, on_repair=self._repaired, wait=self.lock_wait)
        finally:
            vault.close()
        return {
            "vault": str(self.root),
            "folders": dict(sorted(result.folders.items())),
            "index": _plain(result.index) if result.index is not None else None,
            "waiting_to_index": result.pending,
            "fresh": result.index is not None and not any(result.pending.values()),
        }


def _page(body: str, offset: int, limit: int) -> str:
    """``limit`` characters of ``body`` from ``offset``, fewer where they pass ``MAX_PAGE_BYTES``."""
    page = body[offset : offset + limit]
    if len(page.encode("utf-8", "surrogatepass")) > MAX_PAGE_BYTES:
        page = page.encode("utf-8", "surrogatepass")[:MAX_PAGE_BYTES].decode("utf-8", "ignore")
    return page


def _bounded_properties(props: dict[str, Any]) -> dict[str, Any]:
    """Properties with long values cut ("…") and long lists shortened, then keys left off past
    ``MAX_PROPERTIES_BYTES`` (``_left_off`` names how many): a hand-made frontmatter can be huge."""

    def short(value: Any) -> Any:
        if isinstance(value, str) and len(value) > MAX_PROPERTY_CHARS:
            return value[: MAX_PROPERTY_CHARS - 1] + "…"
        if isinstance(value, list):
            return [short(v) for v in value[:MAX_PROPERTY_ITEMS]] + (["…"] if len(value) > MAX_PROPERTY_ITEMS else [])
        if isinstance(value, dict):
            return {k: short(v) for k, v in list(value.items())[:MAX_PROPERTY_ITEMS]}
        return value

    out: dict[str, Any] = {}
    size = 2
    for key, value in props.items():
        value = short(value)
        size += len(json.dumps({key: value}, ensure_ascii=False).encode("utf-8"))
        if size > MAX_PROPERTIES_BYTES:
            out["_left_off"] = len(props) - len(out)
            break
        out[key] = value
    return out


def _read_regular(full: Path, relpath: str) -> bytes:
    """Up to ``MAX_NOTE_BYTES`` of a regular file, within ``READ_TIMEOUT``; a one-line VaultError otherwise."""
    future = _reader_pool().submit(_read_capped, full)
    try:
        return future.result(timeout=READ_TIMEOUT)
    except FuturesTimeout:
        raise VaultError(f"{relpath}: no answer from the file system in {READ_TIMEOUT:.0f} s; try again") from None
    except FileNotFoundError:
        raise VaultError(f"{relpath}: no such note") from None
    except OSError as exc:
        raise VaultError(f"{relpath}: cannot be read: {exc.strerror or exc}") from None


def _read_capped(full: Path) -> bytes:
    """Open without blocking (a FIFO would), check the open file is regular, read up to the cap."""
    fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a folder, pipe or device); refused")
        chunks, left = [], MAX_NOTE_BYTES
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@cache
def _reader_pool() -> ThreadPoolExecutor:
    """read_note's reader threads: a read stuck past the timeout holds one of these, never a server worker."""
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="vault-read-note")


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
