"""The MCP server bounds what it reads: capped stdio frames, regular files only, one-line errors (issue 42)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading

import anyio
import pytest

from tests.serve.test_mcp import call, tools  # noqa: F401  (the fixture)
from vault_pipeline.serve.frames import FrameReader, one_line


class CountingStream(io.BytesIO):
    """A byte stream that remembers the largest read asked of it."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.largest = 0

    def readline(self, size: int | None = -1) -> bytes:
        self.largest = max(self.largest, size if size is not None and size >= 0 else len(self.getvalue()))
        return super().readline(size)


def test_an_oversized_line_is_skipped_in_pieces_and_answered_with_an_error():
    raw = CountingStream(b'{"first": 1}\n' + b"x" * 5_000_000 + b'\n{"second": 2}\n')
    reader = FrameReader(raw, limit=1000)
    sent, receive = anyio.create_memory_object_stream(10)

    async def read_all() -> list[str]:
        reader.write_stream = sent
        return [line async for line in reader]

    lines = anyio.run(read_all)
    assert [json.loads(line) for line in lines] == [{"first": 1}, {"second": 2}]
    assert raw.largest <= 1 << 16  # never more than a piece at a time, never the whole line
    error = receive.receive_nowait().message
    assert error.id is None and error.error.code == -32600
    assert "5,000,001 bytes or more" in error.error.message and "1,000-byte limit" in error.error.message


@pytest.mark.slow
def test_vault_mcp_answers_a_huge_stdio_line_with_an_error_and_goes_on(indexed_example, tmp_path):
    import shutil

    root = tmp_path / "vault"
    shutil.copytree(indexed_example, root)
    cli = [sys.executable, "-m", "vault_pipeline.cli", "mcp", "--vault", str(root), "--no-watch"]
    server = subprocess.Popen(cli, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        huge = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "a" * 9_000_000}})
        init = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write((huge + "\n" + json.dumps(init) + "\n").encode())
        server.stdin.flush()
        first, second = json.loads(server.stdout.readline()), json.loads(server.stdout.readline())
    finally:
        server.kill()
        server.wait()
    assert first["id"] is None and "limit" in first["error"]["message"]
    assert second["id"] == 2 and second["result"]["serverInfo"]["name"] == "vault"


def test_argument_validation_errors_are_one_line_without_a_url(tools):  # noqa: F811
    for name, arguments in (("search", {"text": "gravel", "limit": 0}), ("query", {"prompt": "x", "budget": -5})):
        result = call(tools, name, arguments)
        (text,) = [c.text for c in result.content]
        assert result.is_error and "\n" not in text and "pydantic" not in text and "http" not in text
        assert text.startswith(f"error: invalid arguments for {name}: ")


def test_one_line_keeps_the_field_and_the_reason():
    text = (
        "Error executing tool search: 1 validation error for searchArguments\nlimit\n  Input should be greater "
        "than or equal to 1 [type=greater_than_equal, input_value=0, input_type=int]\n    For further "
        "information visit https://errors.pydantic.dev/2.14/v/greater_than_equal"
    )
    assert one_line(text) == "error: invalid arguments for search: limit: Input should be greater than or equal to 1"


def test_read_note_refuses_a_fifo_a_folder_and_a_huge_name_in_one_line(tools):  # noqa: F811
    os.mkfifo(tools.root / "inbox" / "x.md")
    (tools.root / "inbox" / "folder.md").mkdir()
    results = {}

    def read_all():
        for path in ("inbox/x.md", "inbox/folder.md", "inbox/" + "n" * 5000 + ".md", "inbox/" + "n" * 300 + ".md"):
            results[path] = call(tools, "read_note", {"path": path})

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(60)  # the FIFO blocked a worker forever before; refused at once now
    assert not reader.is_alive()
    for path, result in results.items():
        (text,) = [c.text for c in result.content]
        assert result.is_error and "\n" not in text and "Error executing tool" not in text, path
    assert "not a regular file" in results["inbox/x.md"].content[0].text
    assert "not a regular file" in results["inbox/folder.md"].content[0].text


def test_read_note_reads_no_more_than_the_cap(tools, monkeypatch):  # noqa: F811
    from vault_pipeline.serve import tools as module

    monkeypatch.setattr(module, "MAX_NOTE_BYTES", 64)
    note = tools.root / "inbox" / "long.md"
    note.write_text("---\nid: long\n---\n" + "word " * 1000, encoding="utf-8")
    result = call(tools, "read_note", {"path": "inbox/long.md"})
    assert not result.is_error and len(result.structured_content["text"]) < 64
