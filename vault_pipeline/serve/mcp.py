"""``vault mcp``: the vault's tools on the Model Context Protocol (the official SDK's ``MCPServer``).

Tools described for a model choosing between them: ``query`` (the context package),
``search``, ``read_note``, ``remember`` and ``status``, and the note tools of ``mcp_notes.py``
(``recent``, ``list_notes``, ``neighbours``, ``edit_note``, ``archive_note``, ``supersede``, ``undo``). Each returns a ``CallToolResult`` built
here: structured content (the same JSON the CLI's ``--json`` prints) beside a text rendering,
and, for an error the user could cause, ``isError`` with the CLI's one-line message, so no
traceback ever reaches the client. Served over stdio (the default; the SDK keeps stray prints
off the protocol stream) or streamable HTTP bound to 127.0.0.1 (with the SDK's DNS-rebinding
protection), where every request carries the vault's bearer token (``auth.py``) or is refused 401. A ``Watcher`` keeps the index live while the server runs, unless turned off.
``query`` and ``remember`` can ask the client's own model through MCP sampling (``sampling.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from vault_pipeline.config import BUDGET_RANGE
from vault_pipeline.errors import VaultError, storage_fault
from vault_pipeline.ingest.extract import CATEGORIES
from vault_pipeline.serve.auth import BearerGuard, token_path, vault_token
from vault_pipeline.serve.frames import MAX_FRAME_BYTES, one_line_errors, serve_stdio
from vault_pipeline.serve.mcp_notes import bound_explain, refuse_unknown_arguments, register_note_tools
from vault_pipeline.serve.notes import bounded
from vault_pipeline.serve.sampling import client_model
from vault_pipeline.serve.tools import MAX_PAGE_CHARS, MAX_SEARCH_LIMIT, PAGE_CHARS, SEARCH_LIMIT, VaultTools
from vault_pipeline.serve.watch import Watcher
from vault_pipeline.vault.files import STATE_DIR

HOST = "127.0.0.1"  # loopback only: the vault is the user's, not the network's
PATH = "/mcp"

INSTRUCTIONS = (
    "A personal memory vault: atomic, cited notes distilled from the user's past conversations with "
    "LLMs, plus documents they filed, in an Obsidian vault. Call `query` before answering anything that "
    "may depend on the user's earlier decisions, constraints, open questions or work; cite the notes it "
    "returns. Use `search` to look notes up by words, `read_note` to open one, `remember` to keep a "
    "new decision or fact the user states, `status` to see what the vault holds; `recent`, `list_notes` and "
    "`neighbours` to browse; `edit_note`, `archive_note` and `supersede` to maintain notes (each undoable "
    "with `undo`)."
)

QUERY_DOC = (
    "Build a small, precise context package from the user's memory vault for a prompt: the vault's notes "
    "relevant to it, each a block marked [n] with a reference line naming its note, already filtered for "
    "fit; it stops where the evidence stops and never exceeds the token budget. When the vault holds "
    "nothing on the prompt, the text says so and there are no blocks (`found` is false): answer without "
    "the vault then, and do not present other notes as being about it. Call it before answering a question "
    "that may depend on what the user decided, said, planned or filed earlier. Pass the user's request as "
    "`prompt`; set `intent` to the subject domain when the prompt alone is ambiguous (e.g. prompt 'can we "
    "talk about peer review for our paper?', intent 'our paper on fit-gating')."
)
SEARCH_DOC = (
    "Find notes in the user's memory vault by words or meaning, best first, one entry per note: path, "
    "type, tier (engram = kept by the user, resource, chat, web), category (decision, fact, ...), status, "
    "source and the matching text. Use it to look something up or to find a note to open with "
    "`read_note`; use `query` instead to gather context for answering a prompt."
)
READ_NOTE_DOC = (
    "Open one note of the user's memory vault: its properties (frontmatter) and a page of its Markdown "
    "text (`offset`, `limit` characters; `next_offset` reads on). Name it by `path`, vault-relative exactly "
    "as `search` or `query` return it (e.g. 'engrams/some-note.md'; paths outside the vault are refused), "
    "or by `id`. `version` identifies what you read, for `edit_note` and `archive_note`."
)
REMEMBER_DOC = (
    "Keep something new in the user's memory vault: a decision, fact, constraint, idea, action item or "
    "open question the user stated or agreed to in this conversation. Write it as plain declarative "
    "sentences that stand on their own (name the subject; no 'this' or 'it' pointing outside the text; "
    "at most 15 words each). Each sentence becomes a provisional note in inbox/ for the user to review; "
    "sentences that fail the vault's quality gate are returned with the reasons, not written, so you can "
    "rephrase them. Nothing existing is changed or deleted. Do not store secrets."
)
STATUS_DOC = (
    "How much the user's memory vault holds: notes per folder, the index's counts by tier, status and "
    "category, when it was last synced, and whether any files are waiting to be indexed."
)

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def build_server(tools: VaultTools) -> MCPServer:
    """An ``MCPServer`` named ``vault`` with the tools on ``tools``."""
    server: MCPServer = MCPServer("vault", instructions=INSTRUCTIONS, log_level="WARNING")
    server.middleware.append(one_line_errors)  # argument validation errors too: one line, no URL
    server.middleware.append(refuse_unknown_arguments(server))

    @server.tool(description=QUERY_DOC, annotations=READ_ONLY)
    async def query(
        prompt: Annotated[str, Field(description="The user's request or question to gather context for.")],
        ctx: Context,
        intent: Annotated[
            str | None, Field(description="The subject domain the notes must fit (optional; default: the prompt's).")
        ] = None,
        budget: Annotated[
            int | None,
            Field(
                description="Token budget of the package (optional; default: the vault's).", gt=0, le=BUDGET_RANGE[1]
            ),
        ] = None,
        explain: Annotated[
            bool,
            Field(
                description="Also return the funnel's stats and every candidate's path through it (large; for debugging)."
            ),
        ] = False,
    ) -> CallToolResult:
        async with client_model(ctx, tools, "gate") as (model, note):
            return await anyio.to_thread.run_sync(
                lambda: _answer(
                    lambda: _package_result(tools.query(prompt, intent, budget, llm_gate=model), explain, note)
                )
            )

    @server.tool(description=SEARCH_DOC, annotations=READ_ONLY)
    def search(
        text: Annotated[str, Field(description="Words or a phrase to look for.")],
        limit: Annotated[
            int, Field(description=f"How many notes at most (1-{MAX_SEARCH_LIMIT}).", ge=1, le=MAX_SEARCH_LIMIT)
        ] = SEARCH_LIMIT,
    ) -> CallToolResult:
        return _answer(lambda: _search_result(tools.search(text, limit)))

    @server.tool(description=READ_NOTE_DOC, annotations=READ_ONLY)
    def read_note(
        path: Annotated[str, Field(description="Vault-relative path of the note, e.g. 'inbox/some-note.md'.")] = "",
        id: Annotated[str | None, Field(description="The note's frontmatter id (instead of `path`).")] = None,
        offset: Annotated[int, Field(description="Character of the text to start at (0: the start).", ge=0)] = 0,
        limit: Annotated[
            int, Field(description=f"Characters of text at most (1-{MAX_PAGE_CHARS}).", ge=1, le=MAX_PAGE_CHARS)
        ] = PAGE_CHARS,
    ) -> CallToolResult:
        return _answer(lambda: _note_result(tools.read_note(path, id, offset, limit)))

    @server.tool(description=REMEMBER_DOC, annotations=ADDITIVE)
    async def remember(
        text: Annotated[str, Field(description="One or more standalone declarative sentences to keep.")],
        ctx: Context,
        kind: Annotated[
            str | None,
            Field(
                description=f"Category for every note (optional; else each is categorised): {', '.join(CATEGORIES)}."
            ),
        ] = None,
    ) -> CallToolResult:
        client = _client_name(ctx)
        async with client_model(ctx, tools, "extract") as (model, note):
            return await anyio.to_thread.run_sync(
                lambda: _answer(lambda: _remember_result(tools.remember(text, kind, client, llm_extract=model), note))
            )

    @server.tool(description=STATUS_DOC, annotations=READ_ONLY)
    def status() -> CallToolResult:
        return _answer(lambda: _status_result(tools.status()))

    register_note_tools(server, tools, _answer)
    return server


def serve(
    tools: VaultTools,
    *,
    port: int | None = None,
    watch: bool = True,
    listener: Callable[..., None] | None = None,
    on_ready: Callable[[str], None] | None = None,
    max_frame: int = MAX_FRAME_BYTES,
) -> None:
    """Serve ``tools`` over stdio, or streamable HTTP on 127.0.0.1:``port``; keep the index live meanwhile.

    A message (stdio line, HTTP body) above ``max_frame`` bytes is answered with an error, never read whole."""
    server = build_server(tools)
    if port is not None:
        _check_port(port)
    watcher = Watcher(tools.root, tools.embedder, listener=listener) if watch else None
    if watcher is not None:
        tools.ready = watcher.ready
        watcher.start()
    try:
        if port is None:
            if on_ready:
                on_ready(f"serving {tools.root} over stdio")
            anyio.run(serve_stdio, server, max_frame)
        else:
            token, made = vault_token(tools.root / STATE_DIR)
            if on_ready:
                on_ready(f"serving {tools.root} at http://{HOST}:{port}{PATH} (streamable HTTP)")
                on_ready(_token_line(tools.root, token, made))
            anyio.run(_serve_http, server, port, token, max_frame)
    finally:
        if watcher is not None:
            watcher.stop()


async def _serve_http(server: MCPServer, port: int, token: str, max_frame: int) -> None:
    """The SDK's streamable HTTP app behind the bearer-token guard, served by uvicorn on loopback."""
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=PATH, max_request_body_size=max_frame, host=HOST)
    config = uvicorn.Config(BearerGuard(app, token), host=HOST, port=port, log_level="warning")
    await uvicorn.Server(config).serve()


def _token_line(root, token: str, made: bool) -> str:
    """The token once, when it is made (for the client's config); afterwards only where it is kept."""
    where = token_path(root / STATE_DIR)
    if made:
        return f"new token for this vault (kept owner-only in {where}); clients send: Authorization: Bearer {token}"
    return f"clients send the token in {where} as: Authorization: Bearer <token>"


def _check_port(port: int) -> None:
    """A one-line error now, rather than the server's after it said it was serving."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            raise VaultError(f"{HOST}:{port}: {exc.strerror or exc}; pick another --http PORT") from None


# --------------------------------------------------------------------------- results


def _answer(make: Callable[[], CallToolResult]) -> CallToolResult:
    """The tool's result, or its VaultError as an MCP tool error with the CLI's one-line message."""
    try:
        return make()
    except VaultError as exc:
        return CallToolResult(content=[TextContent(type="text", text=f"error: {exc}")], is_error=True)
    except Exception as exc:
        fault = storage_fault(exc)  # a full disk or a read-only file: the same one line, the server lives on
        if fault is None:
            raise
        return CallToolResult(content=[TextContent(type="text", text=f"error: {fault}")], is_error=True)


def _result(data: dict[str, Any], text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _package_result(package, explain: bool = False, note: str | None = None) -> CallToolResult:
    # The package's text and its small structured result (found, tokens, each block's citation); the
    # funnel's stats and trace only when asked for; a note (the client's model was asked for but not
    # offered) beside both.
    text, data = package.to_mcp()
    if explain:
        full = json.loads(package.to_json(indent=None, trace=True))
        data = bound_explain(data, full["stats"], full["trace"])  # the trace as far as the size bound allows
    if note is None:
        return _result(data, text)
    return _result({**data, "notes": [note]}, f"> {note}\n\n{text}")


def _search_result(hits: list[dict[str, Any]]) -> CallToolResult:
    lines = [f"{len(hits)} note(s)"]
    lines += [f"- {h['path']} ({h['tier']}, {h['category'] or h['type']}): {_one_line(h['text'])}" for h in hits]
    return _result(bounded(hits), "\n".join(lines))  # whole hits up to the size bound; `left_off` counts the rest


def _note_result(note: dict[str, Any]) -> CallToolResult:
    props = json.dumps(note["properties"], ensure_ascii=False, indent=1)
    more = note["total_chars"] - note["offset"] - len(note["text"])
    tail = f"\n\n[{more:,} more characters: read_note with offset {note['next_offset']}]" if note["truncated"] else ""
    return _result(note, f"{note['path']}\n\nproperties: {props}\n\n{note['text']}{tail}")


def _remember_result(report, note: str | None = None) -> CallToolResult:
    data = report.to_dict() | ({"notes": [note]} if note else {})
    lines = [f"remembered {len(report.written)} new note(s) in inbox/ (provisional, for the user to review)"]
    lines += [f"- {path}" for path in report.written]
    lines += [f"already in the vault: {path}" for path in report.present]
    lines += [f"not written: {sentence!r}: {'; '.join(reasons)}" for sentence, reasons in report.refused]
    if not report.written and not report.present:
        # Nothing kept: an error the model can act on (rephrase), not a silent success.
        why = "\n".join(lines[1:]) or "the text holds no statement to keep; write standalone declarative sentences"
        return CallToolResult(
            content=[TextContent(type="text", text=f"error: nothing remembered; {why}")],
            structured_content=data,
            is_error=True,
        )
    return _result(data, "\n".join([*lines, *([note] if note else [])]))


def _status_result(data: dict[str, Any]) -> CallToolResult:
    index = data["index"]
    lines = [f"vault {data['vault']}"]
    lines += [f"{folder}: {count} note(s)" for folder, count in data["folders"].items()]
    if index is None:
        lines.append("index: none yet")
    else:
        lines.append(
            f"index: {index.get('notes')} notes, {index.get('rows')} chunks, last sync {index.get('last_sync')}"
        )
        waiting = ", ".join(f"{k} {v}" for k, v in data["waiting_to_index"].items() if v) or "nothing"
        lines.append(f"waiting to index: {waiting}")
    return _result(data, "\n".join(lines))


def _one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _client_name(ctx: Context) -> str:
    """The calling client's name as it introduced itself (``clientInfo``), or ''."""
    try:
        params = ctx.session.client_params
    except (AttributeError, LookupError, ValueError):
        return ""
    info = getattr(params, "client_info", None)
    return str(getattr(info, "name", "") or "")
