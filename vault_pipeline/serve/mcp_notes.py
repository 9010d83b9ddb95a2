"""The memory-server tools of ``vault mcp`` beyond the first five, its note resource, and the rules
every tool call keeps: unknown arguments refused in one line, and every result within a size bound.

Tools: ``recent``, ``list_notes``, ``neighbours`` (read only); ``edit_note``, ``archive_note``,
``supersede`` and ``undo`` (journaled, undoable, never deleting: ``edit.py``). Resource:
``note://{id}``, a note's first page as Markdown. ``query``'s explain part is cut to fit
``EXPLAIN_BYTES`` (``bound_explain``). Decision 0143.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from vault_pipeline.errors import VaultError
from vault_pipeline.serve.notes import LIST_LIMIT, MAX_LIMIT
from vault_pipeline.vault.files import FOLDERS

EXPLAIN_BYTES = 24 * 1024  # query's result with explain: the stats and the best candidates' trace
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)

RECENT_DOC = (
    "List the notes of the user's memory vault that changed (were written or edited) since a time, newest "
    "first: path, id, title, type, status, tags, when modified. `since` is an ISO date or time "
    "('2026-11-30', '2026-11-30T09:00Z') or a span back from now ('30m', '12h', '7d', '2w')."
)
LIST_DOC = (
    "List notes of the user's memory vault by tag (a tag also matches the tags nested under it: 'topic' "
    "matches 'topic/django'), by folder, by person (their people/ page, the notes it links and the notes "
    "linking it) and/or by type, sorted by path, a page at a time (`offset`, `next_offset`)."
)
NEIGHBOURS_DOC = (
    "The neighbourhood of one note of the user's memory vault: the notes it links, the notes linking it "
    "(backlinks), its session note and the session's other notes. Name the note by `path` or `id`."
)
EDIT_DOC = (
    "Change one note of the user's memory vault: `append` text at its end, replace the text under one "
    "heading (`section` with its new `content`), and/or set `properties` (null removes one; the note's "
    "identity, lifecycle and source keys are refused). Pass the `version` read_note returned so a note the "
    "user changed since is refused, never overwritten. Journaled: the result's `run_id` undoes it (`undo`)."
)
ARCHIVE_DOC = (
    "Archive a note of the user's memory vault that no longer holds: it moves to archive/ with status "
    "archived and an archived_by line giving your `reason` and how to undo it. Nothing is deleted; "
    "archived notes leave query results. Journaled: the result's `run_id` undoes it (`undo`)."
)
SUPERSEDE_DOC = (
    "Record that a newer note replaces an older one (a changed decision or fact): the newer note gains "
    "`supersedes`, the older gets `superseded_by` and is archived. Name each by path or id. Nothing is "
    "deleted; journaled: the result's `run_id` undoes both (`undo`)."
)
UNDO_DOC = (
    "Undo one change made by edit_note, archive_note or supersede, by its `run_id`: every file it touched "
    "goes back byte for byte, unless the user changed it since (then it is left as the user has it)."
)

Path_ = Annotated[str | None, Field(description="Vault-relative path of the note, e.g. 'engrams/some-note.md'.")]
Id_ = Annotated[str | None, Field(description="The note's frontmatter id (instead of `path`).")]
Limit_ = Annotated[int, Field(description=f"How many notes at most (1-{MAX_LIMIT}).", ge=1, le=MAX_LIMIT)]
Version_ = Annotated[
    str | None, Field(description="The `version` read_note returned: refuse the change if the note changed since.")
]


def register_note_tools(server: MCPServer, tools, answer: Callable[[Callable[[], CallToolResult]], CallToolResult]):
    """Add the note tools and the ``note://{id}`` resource to ``server``; ``answer`` turns a VaultError into a tool error."""
    notes = tools.notes

    @server.tool(description=RECENT_DOC, annotations=READ_ONLY)
    def recent(
        since: Annotated[str, Field(description="ISO date/time or a span: '30m', '12h', '7d', '2w'.")] = "7d",
        limit: Limit_ = LIST_LIMIT,
        folder: Annotated[str | None, Field(description=f"Only this folder: {', '.join(FOLDERS)}.")] = None,
    ) -> CallToolResult:
        return answer(lambda: listing(notes.recent(since, limit, folder), f"changed since {since}"))

    @server.tool(description=LIST_DOC, annotations=READ_ONLY)
    def list_notes(
        tag: Annotated[str | None, Field(description="A tag, e.g. 'topic/django' or 'person'.")] = None,
        folder: Annotated[str | None, Field(description=f"A folder: {', '.join(FOLDERS)}.")] = None,
        person: Annotated[str | None, Field(description="A person's name, e.g. 'Caroline'.")] = None,
        type: Annotated[str | None, Field(description="A note type: atomic, session, topic, thread, resource.")] = None,
        limit: Limit_ = LIST_LIMIT,
        offset: Annotated[int, Field(description="Skip this many (the previous page's next_offset).", ge=0)] = 0,
    ) -> CallToolResult:
        found = lambda: notes.list_notes(tag=tag, folder=folder, person=person, type=type, limit=limit, offset=offset)  # noqa: E731
        return answer(lambda: listing(found(), "note(s)"))

    @server.tool(description=NEIGHBOURS_DOC, annotations=READ_ONLY)
    def neighbours(path: Path_ = None, id: Id_ = None, limit: Limit_ = LIST_LIMIT) -> CallToolResult:
        return answer(lambda: neighbourhood(notes.neighbours(path, id, limit)))

    @server.tool(description=EDIT_DOC, annotations=CHANGES)
    def edit_note(
        path: Path_ = None,
        id: Id_ = None,
        append: Annotated[str | None, Field(description="Text to add at the end of the note.")] = None,
        section: Annotated[str | None, Field(description="The heading whose text `content` replaces.")] = None,
        content: Annotated[str | None, Field(description="The section's new text (the heading stays).")] = None,
        properties: Annotated[
            dict[str, Any] | None, Field(description="Properties to set: {key: value}; null removes the key.")
        ] = None,
        version: Version_ = None,
    ) -> CallToolResult:
        change = {"append": append, "section": section, "content": content, "properties": properties}
        change["version"] = version
        return answer(lambda: changed(notes.edit_note(path, id, **change), "edited"))

    @server.tool(description=ARCHIVE_DOC, annotations=CHANGES)
    def archive_note(
        reason: Annotated[str, Field(description="Why the note no longer holds (goes into archived_by).")],
        path: Path_ = None,
        id: Id_ = None,
        version: Version_ = None,
    ) -> CallToolResult:
        return answer(lambda: changed(notes.archive_note(path, id, reason, version), "archived"))

    @server.tool(description=SUPERSEDE_DOC, annotations=CHANGES)
    def supersede(
        older_path: Annotated[str | None, Field(description="Path of the note that no longer holds.")] = None,
        older_id: Annotated[str | None, Field(description="Or its id.")] = None,
        newer_path: Annotated[str | None, Field(description="Path of the note that replaces it.")] = None,
        newer_id: Annotated[str | None, Field(description="Or its id.")] = None,
        reason: Annotated[str, Field(description="Why (optional; goes into archived_by).")] = "",
    ) -> CallToolResult:
        run = lambda: notes.supersede(older_path, older_id, newer_path, newer_id, reason)  # noqa: E731
        return answer(lambda: superseded(run()))

    @server.tool(description=UNDO_DOC, annotations=CHANGES)
    def undo(run_id: Annotated[str, Field(description="The `run_id` an edit, archive or supersede returned.")]):
        return answer(lambda: undone(notes.undo(run_id)))

    @server.resource(
        "note://{id}",
        name="note",
        description="A note of the vault by its id: its first page, as Markdown.",
        mime_type="text/markdown",
    )
    def note_resource(id: str) -> str:
        note = tools.read_note(note_id=id)
        more = (
            f"\n\n[{note['total_chars'] - len(note['text']):,} more characters: read_note with offset]"
            if note["truncated"]
            else ""
        )
        return note["text"] + more


def refuse_unknown_arguments(server: MCPServer):
    """Server middleware: a ``tools/call`` naming an argument its tool does not take is refused in one
    line (the SDK would ignore it silently), before the tool runs."""

    async def check(ctx: Any, call_next: Any) -> Any:
        if getattr(ctx, "method", "") == "tools/call":
            params = ctx.params if isinstance(ctx.params, dict) else {}
            arguments = params.get("arguments") or {}
            if isinstance(arguments, dict) and arguments:
                known = {t.name: t for t in await server.list_tools()}
                tool = known.get(str(params.get("name", "")))
                if tool is not None:
                    allowed = set((tool.input_schema or {}).get("properties", {}))
                    unknown = sorted(str(k) for k in arguments if k not in allowed)
                    if unknown:
                        takes = ", ".join(sorted(allowed)) or "no arguments"
                        text = (
                            f"error: {tool.name} takes no argument {', '.join(map(repr, unknown))} (it takes: {takes})"
                        )
                        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        return await call_next(ctx)

    return check


def bound_explain(data: dict[str, Any], stats: dict[str, Any], trace: list[dict[str, Any]]) -> dict[str, Any]:
    """``data`` with the funnel's stats and as much of the trace (placed candidates first, each whole)
    as keeps the result under ``EXPLAIN_BYTES``; ``trace_total`` and ``trace_left_off`` say what was left."""
    ordered = sorted(trace, key=lambda t: (t.get("rank") is None, t.get("rank") or 0))
    room = EXPLAIN_BYTES - _size({**data, "stats": stats, "trace": [], "trace_total": 0, "trace_left_off": 0})
    kept: list[dict[str, Any]] = []
    for entry in ordered:
        room -= _size(entry) + 1
        if room < 0:
            break
        kept.append(entry)
    return {**data, "stats": stats, "trace": kept, "trace_total": len(trace), "trace_left_off": len(trace) - len(kept)}


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


# --------------------------------------------------------------------------- results


def _result(data: dict[str, Any], text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _line(note: dict[str, Any]) -> str:
    return f"- {note['path']} ({note['type'] or 'note'}, {note['modified']}): {note['title']}"


def listing(data: dict[str, Any], what: str) -> CallToolResult:
    """A listing's result: the notes, and the count of those beyond this page."""
    lines = [f"{data['total']} {what}; showing {len(data['notes'])}"] + [_line(n) for n in data["notes"]]
    if data.get("next_offset") is not None:
        lines.append(f"more: offset {data['next_offset']}")
    return _result(data, "\n".join(lines))


def neighbourhood(data: dict[str, Any]) -> CallToolResult:
    """A neighbourhood's result, one section per relation."""
    lines = [f"{data['note']['path']}: {data['note']['title']}"]
    if data["session"]:
        lines.append(f"session: {data['session']['path']}")
    for part in ("links", "backlinks", "same_session"):
        block = data[part]
        lines.append(f"{part.replace('_', ' ')}: {block['total']}")
        lines += [_line(n) for n in block["notes"]]
    if data["unresolved_links"]:
        lines.append(f"links to no note: {', '.join(data['unresolved_links'])}")
    return _result(data, "\n".join(lines))


def changed(data: dict[str, Any], verb: str) -> CallToolResult:
    """An edit's or an archive's result: where the note is now and how to undo it."""
    text = f"{verb} {data['path']} ({', '.join(data['changed'])}); undo: the undo tool with run_id {data['run_id']}, or `{data['undo']}`"
    return _result(data, text)


def superseded(data: dict[str, Any]) -> CallToolResult:
    """A supersede's result."""
    older, newer = data["older"], data["newer"]
    text = f"{newer['path']} supersedes {older['path']} (archived); undo: run_id {data['run_id']}"
    return _result(data, text)


def undone(data: dict[str, Any]) -> CallToolResult:
    """An undo's result: how many notes went back, and what was left alone and why."""
    lines = [f"undid {data['undone']}: {data['restored']} note(s) restored"] + [
        f"left alone: {s}" for s in data["skipped"]
    ]
    if not data["restored"] and data["skipped"]:
        raise VaultError("; ".join(lines))
    return _result(data, "\n".join(lines))
