"""What the MCP server reads, bounded: stdio lines capped in size, and tool errors as one line.

The SDK's stdio transport reads a whole line before it parses it, so one long line cost gigabytes.
``FrameReader`` hands it lines of at most ``MAX_FRAME_BYTES``: a longer one is read past in
bounded pieces (never held), and answered with a JSON-RPC error through the server's own write
stream. Over HTTP the SDK's ``max_request_body_size`` does the same (413 before the body is read
whole). ``one_line_errors`` is server middleware that flattens a tool error (the SDK's argument
validation message is several lines with a documentation URL) into one line. Decision 0092.
"""

from __future__ import annotations

import re
from typing import IO, Any

import anyio
import anyio.to_thread
from mcp_types import INVALID_REQUEST, CallToolResult, ErrorData, JSONRPCError, TextContent

MAX_FRAME_BYTES = 8 * 1024 * 1024  # one JSON-RPC message; the tools' own answers are far smaller
_PIECE = 1 << 16  # bytes read at a time while skipping an oversized line
_TYPE_NOTE = re.compile(r"\s*\[type=[^\]]*\]")


class FrameReader:
    """stdin as text lines of at most ``limit`` bytes (the SDK's stdio transport iterates it).

    A longer line is skipped as it streams and ``answer``ed with a JSON-RPC error (id null)."""

    def __init__(self, raw: IO[bytes], limit: int = MAX_FRAME_BYTES):
        self.raw, self.limit = raw, limit
        self.write_stream: Any = None  # the server's write stream, set once the transport is up
        self.skipped = 0

    def __aiter__(self) -> FrameReader:
        return self

    async def __anext__(self) -> str:
        while True:
            line, size = await anyio.to_thread.run_sync(self._next_line, abandon_on_cancel=True)
            if line is not None:
                return line
            if size is None:
                raise StopAsyncIteration
            self.skipped += 1
            await self._answer(size)

    def _next_line(self) -> tuple[str | None, int | None]:
        """(the next line, None); (None, its size at least) for an oversized one; (None, None) at the end."""
        data = self.raw.readline(self.limit + 1)
        if not data:
            return None, None
        if len(data) <= self.limit or data.endswith(b"\n"):
            return data.decode("utf-8", errors="replace"), None
        size = len(data)
        while data and not data.endswith(b"\n"):  # read past the rest of the line, one piece at a time
            data = self.raw.readline(_PIECE)
            size += len(data)
        return None, size

    async def _answer(self, size: int) -> None:
        from mcp.shared.message import SessionMessage

        message = f"message of {size:,} bytes or more is larger than the {self.limit:,}-byte limit; not read"
        if self.write_stream is not None:
            error = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=message))
            await self.write_stream.send(SessionMessage(error))


async def serve_stdio(server: Any, limit: int = MAX_FRAME_BYTES, raw: IO[bytes] | None = None) -> None:
    """``MCPServer.run_stdio_async`` with stdin read through a ``FrameReader``."""
    import sys

    from mcp.server.stdio import stdio_server

    reader = FrameReader(raw if raw is not None else sys.stdin.buffer, limit)
    lowlevel = server._lowlevel_server  # what run_stdio_async runs; the SDK exposes no other handle
    async with stdio_server(stdin=reader) as (read_stream, write_stream):  # type: ignore[arg-type]
        reader.write_stream = write_stream
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


async def one_line_errors(ctx: Any, call_next: Any) -> Any:
    """Server middleware: a tool error's text as one line (validation errors included, no URL).

    The result reaches middleware as a model or, serialised, as a dict (``isError``, ``content``)."""
    result = await call_next(ctx)
    if getattr(ctx, "method", "") != "tools/call":
        return result
    if isinstance(result, CallToolResult) and result.is_error:
        texts = [c.text for c in result.content if isinstance(c, TextContent)]
        return result.model_copy(update={"content": [TextContent(type="text", text=one_line("\n".join(texts)))]})
    if isinstance(result, dict) and result.get("isError"):
        texts = [
            c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict) and c.get("type") == "text"
        ]
        return {**result, "content": [{"type": "text", "text": one_line("\n".join(texts))}]}
    return result


def one_line(text: str) -> str:
    """An error message on one line: pydantic's field/message pairs joined, its URL and type notes gone."""
    lines = [_TYPE_NOTE.sub("", line).strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("For further information")]
    if not lines:
        return "error"
    head, rest = lines[0], lines[1:]
    if "validation error" in head and rest:
        pairs = [f"{field}: {why}" for field, why in zip(rest[0::2], rest[1::2], strict=False)]
        tool = head.split(" for ", 1)[-1].removesuffix("Arguments")
        head = f"error: invalid arguments for {tool}: " + "; ".join(pairs)
        return head
    flat = " ".join(lines)
    return flat if flat.startswith("error") else f"error: {flat}"
