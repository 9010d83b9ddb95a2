"""`vault mcp` as a client sees it: started as a subprocess, spoken to with the MCP SDK's own client.

The same conversation runs over stdio and over streamable HTTP on 127.0.0.1: list the tools, get a
context package whose blocks cite the test vault's notes, remember a sentence and find it with
search, and get a tool error (not a crash) for a path outside the vault. The server runs on the
offline default with HOME and the XDG folders in empty temporary folders: nothing may land there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from tests.support.fakes import HANG_GUARD
from vault_pipeline.retrieve.metering import token_counter
from vault_pipeline.vault.files import STATE_DIR, Vault
from vault_pipeline.vault.frontmatter import split_frontmatter

TOOLS = {"query", "search", "read_note", "remember", "status"} | {
    "recent",
    "list_notes",
    "neighbours",
    "edit_note",
    "archive_note",
    "supersede",
    "undo",
}
PROMPT = "What does the empty space between the stones mean?"
MEMORY = "Invoices for the billing service are stored in PostgreSQL."
CLIENT = "vault-test-client"
START_TIMEOUT = HANG_GUARD  # for the server to come up: it returns as soon as the port answers


@pytest.fixture
def served(indexed_example, tmp_path):
    """(vault root, env, cwd, the folders nothing may be written to) for one server."""
    root = tmp_path / "vault"
    shutil.copytree(indexed_example, root)
    home, tmp, cwd = tmp_path / "home", tmp_path / "tmp", tmp_path / "cwd"
    for folder in (home, tmp, cwd):
        folder.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "TMPDIR": str(tmp),
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},  # a worktree's code, where it is set
    }
    yield root, env, cwd, (home, tmp, cwd)
    assert sorted(str(p) for folder in (home, tmp, cwd) for p in folder.rglob("*")) == []


def _vault_args(root: Path) -> list[str]:
    return [sys.executable, "-m", "vault_pipeline.cli", "mcp", "--vault", str(root)]


# --------------------------------------------------------------------------- the conversation


async def converse(session, root: Path) -> dict:
    """The Done-means conversation; returns what it saw for the transport-specific checks."""
    await session.initialize()
    listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert len(tool.description or "") > 80, tool.name  # written for a model to choose by

    answer = await session.call_tool("query", {"prompt": PROMPT})
    assert not answer.is_error, answer.content
    package = answer.structured_content
    assert package["blocks"] and package["found"] is True, package
    assert set(package) == {"found", "tokens", "blocks"}  # small: no stats, no trace unless asked
    text = answer.content[0].text
    assert text.startswith(f"# Context: {PROMPT}")  # the Markdown rendering beside it
    count = token_counter("cl100k_base").count  # the offline default's tokenizer
    returned = count(text) + count(json.dumps(package, ensure_ascii=False, separators=(",", ":")))
    assert package["tokens"] == returned <= 2000  # text and structured result together keep to the budget
    for number, block in enumerate(package["blocks"], 1):
        assert block["n"] == number and f" [{number}]\n" in text and block["id"]  # each block cited by its note
    nothing = await session.call_tool("query", {"prompt": "How do I descale a Zyxwvut espresso machine?"})
    assert nothing.structured_content["found"] is False and not nothing.structured_content["blocks"]
    assert "Nothing on this in the vault" in nothing.content[0].text
    explained = await session.call_tool("query", {"prompt": PROMPT, "explain": True})
    assert explained.structured_content["trace"]

    remembered = await session.call_tool("remember", {"text": MEMORY})
    assert not remembered.is_error, remembered.content
    written = remembered.structured_content["written"]
    assert len(written) == 1 and written[0].startswith("inbox/"), written
    frontmatter, body = split_frontmatter((root / written[0]).read_text(encoding="utf-8"))
    assert MEMORY in body
    assert (frontmatter["source_kind"], frontmatter["source_client"], frontmatter["status"]) == (
        "mcp",
        CLIENT,
        "provisional",
    )

    found = await session.call_tool("search", {"text": "PostgreSQL invoices billing", "limit": 5})
    assert not found.is_error, found.content
    assert written[0] in [hit["path"] for hit in found.structured_content["notes"]]
    absent = await session.call_tool("search", {"text": "ossenhaas zyxwvut"})  # nothing on it: no look-alikes
    assert not absent.is_error and absent.structured_content["notes"] == []

    opened = await session.call_tool("read_note", {"path": written[0]})
    assert not opened.is_error and opened.structured_content["properties"]["source_kind"] == "mcp"
    before = (root / written[0]).read_bytes()
    edited = await session.call_tool(
        "edit_note",
        {
            "id": opened.structured_content["id"],
            "append": "Checked by the client.",
            "version": opened.structured_content["version"],
        },
    )
    assert not edited.is_error, edited.content
    recent = await session.call_tool("recent", {"since": "1h", "folder": "inbox"})
    assert [n["path"] for n in recent.structured_content["notes"]] == written
    undone = await session.call_tool("undo", {"run_id": edited.structured_content["run_id"]})
    assert not undone.is_error and (root / written[0]).read_bytes() == before
    unknown = await session.call_tool("status", {"verbose": True})
    assert unknown.is_error and "'verbose'" in unknown.content[0].text

    refused = await session.call_tool("read_note", {"path": "../../etc/passwd"})
    assert refused.is_error
    message = refused.content[0].text
    assert message.startswith("error: ") and "refused" in message and "Traceback" not in message
    assert "root:" not in message  # nothing of the file

    again = await session.call_tool("remember", {"text": MEMORY})  # the same memory: kept once, not rewritten
    assert not again.is_error and again.structured_content["written"] == []
    assert again.structured_content["already_present"] == written

    vague = await session.call_tool("remember", {"text": "It is great."})
    assert vague.is_error and "nothing remembered" in vague.content[0].text

    status = await session.call_tool("status", {})
    assert not status.is_error
    assert status.structured_content["folders"]["inbox"] == 1
    return {"package": package}


async def through(transport, root: Path) -> dict:
    """``converse`` over a client transport (the SDK's stdio or streamable HTTP client)."""
    from mcp.client.session import ClientSession
    from mcp_types import Implementation

    async with (
        transport as (read, write),
        ClientSession(read, write, client_info=Implementation(name=CLIENT, version="1")) as session,
    ):
        with anyio.fail_after(600):
            return await converse(session, root)


# --------------------------------------------------------------------------- stdio


@pytest.mark.slow
def test_vault_mcp_over_stdio(served, indexed_example, tmp_path):
    from mcp.client.stdio import StdioServerParameters, stdio_client

    root, env, cwd, _ = served
    params = StdioServerParameters(command=sys.executable, args=_vault_args(root)[1:], env=env, cwd=cwd)

    async def talk() -> dict:
        with (tmp_path / "server.log").open("w") as log:
            return await through(stdio_client(params, errlog=log), root)

    seen = anyio.run(talk)
    assert "Traceback" not in (tmp_path / "server.log").read_text(encoding="utf-8")
    # The package's blocks are those `vault query --json` prints on the same vault (before the memory was
    # added), less what the structured result's own cost leaves no room for.
    fresh = tmp_path / "fresh"
    shutil.copytree(indexed_example, fresh)
    cli = subprocess.run(
        [sys.executable, "-m", "vault_pipeline.cli", "query", PROMPT, "--vault", str(fresh), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=HANG_GUARD,
    )
    assert cli.returncode == 0, cli.stderr
    cli_ids = [block["id"] for block in json.loads(cli.stdout)["blocks"]]
    assert {block["id"] for block in seen["package"]["blocks"]} <= set(cli_ids)


# --------------------------------------------------------------------------- streamable HTTP


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text(encoding="utf-8")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"server did not listen on {port}: {log.read_text(encoding='utf-8')}")


@contextmanager
def serving_http(root: Path, env: dict[str, str], cwd: Path, log: Path) -> Iterator[tuple[int, subprocess.Popen]]:
    """(port, process) of `vault mcp --http` on ``root``, listening; stopped on the way out."""
    port = _free_port()
    with log.open("w") as errlog:
        server = subprocess.Popen(
            [*_vault_args(root), "--http", str(port), "--no-watch"],
            stdin=subprocess.DEVNULL,
            stdout=errlog,
            stderr=errlog,
            env=env,
            cwd=cwd,
        )
    try:
        _wait_for_port(port, server, log)
        yield port, server
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)


@pytest.mark.slow
def test_vault_mcp_over_streamable_http_on_loopback(served, tmp_path):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    root, env, cwd, _ = served
    log = tmp_path / "server.log"
    with serving_http(root, env, cwd, log) as (port, server):
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True)
        if listening.returncode == 0:  # where `ss` exists: bound to loopback only
            local_addresses = {line.split()[3] for line in listening.stdout.splitlines() if line.strip()}
            assert local_addresses == {f"127.0.0.1:{port}"}, listening.stdout

        token = (root / STATE_DIR / "mcp-token").read_text(encoding="utf-8").strip()  # the owner's (auth.py)
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        anyio.run(through, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client), root)
        assert server.poll() is None  # the tool error did not take the server down
    assert "Traceback" not in log.read_text(encoding="utf-8")
    assert (root / STATE_DIR).is_dir()


# --------------------------------------------------------------------------- in process: errors and remember's rules


@pytest.fixture
def tools(make_vault):
    """VaultTools on a small indexed vault, with the offline models and a fast hash embedder."""
    from tests.support.fakes import HashEmbedder
    from vault_pipeline import pipeline
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.retrieve.types import FunnelConfig
    from vault_pipeline.serve.tools import VaultTools

    vault = make_vault(
        notes={"engrams/gravel.md": ("e-gravel", "Raked gravel in a dry garden stands for water.", {"tier": "engram"})}
    )
    embedder = HashEmbedder(dim=64)
    pipeline.index(vault, embedder)
    llm = build_llm("offline")
    return VaultTools(
        vault.root, embedder=embedder, llm_extract=llm, llm_plan=llm, llm_gate=llm, config=FunnelConfig(), lock_wait=0.2
    )


def call(tools, name: str, arguments: dict):
    """One tool call through the real MCPServer, in process (the SDK's in-memory transport)."""
    from mcp.client import Client
    from mcp_types import Implementation

    from vault_pipeline.serve.mcp import build_server

    async def go():
        async with Client(build_server(tools), client_info=Implementation(name=CLIENT, version="1")) as client:
            return await client.call_tool(name, arguments)

    return anyio.run(go)


def test_a_held_lock_is_a_one_line_tool_error(tools):
    vault = Vault(tools.root)
    try:
        with vault.lock("clean"):
            result = call(tools, "remember", {"text": MEMORY})
    finally:
        vault.close()
    text = result.content[0].text
    assert result.is_error and text.startswith("error: vault is locked by `clean`") and "\n" not in text
    assert not list((tools.root / "inbox").glob("*.md"))  # nothing written without the lock


def test_remember_never_overwrites_a_note_the_user_edited(tools):
    first = call(tools, "remember", {"text": MEMORY})
    (path,) = [tools.root / p for p in first.structured_content["written"]]
    edited = path.read_text(encoding="utf-8").replace("PostgreSQL", "PostgreSQL 16")
    path.write_text(edited, encoding="utf-8")
    again = call(tools, "remember", {"text": MEMORY})
    assert not again.is_error and again.structured_content["written"] == []
    assert path.read_text(encoding="utf-8") == edited


def test_remember_takes_a_kind_and_refuses_an_unknown_one(tools):
    kept = call(tools, "remember", {"text": MEMORY, "kind": "decision"})
    (path,) = [tools.root / p for p in kept.structured_content["written"]]
    frontmatter, _ = split_frontmatter(path.read_text(encoding="utf-8"))
    assert frontmatter["category"] == "decision"
    wrong = call(tools, "remember", {"text": MEMORY, "kind": "gossip"})
    assert wrong.is_error and "kind 'gossip' is not one of" in wrong.content[0].text


def test_read_note_refuses_every_way_out_of_the_vault(tools, tmp_path):
    outside = tmp_path / "secret.md"
    outside.write_text("---\nid: s\n---\nThe secret.\n", encoding="utf-8")
    (tools.root / "engrams" / "link.md").symlink_to(outside)
    for path in ("../../etc/passwd", str(outside), "engrams/../../secret.md", "engrams/link.md", ""):
        result = call(tools, "read_note", {"path": path})
        assert result.is_error, path
        assert "The secret." not in result.content[0].text and "Traceback" not in result.content[0].text
    inside = call(tools, "read_note", {"path": "engrams/gravel.md"})
    assert not inside.is_error and "Raked gravel" in inside.structured_content["text"]


@pytest.mark.parametrize("kind", ["truncated data", "truncated manifests"])
def test_tools_rebuild_an_unreadable_index_and_answer(tools, kind):
    from tests.support.damage import damage_index

    damage_index(tools.root, kind)
    assert [hit["path"] for hit in tools.search("raked gravel water")] == ["engrams/gravel.md"]
    assert tools.status()["index"]["notes"] == 1
    damage_index(tools.root, kind)
    result = call(tools, "query", {"prompt": "what does raked gravel stand for?"})
    assert not result.is_error and "gravel" in result.content[0].text


def test_search_lists_a_written_sentence_once_not_again_as_its_sessions_statement(make_vault, tmp_path):
    from tests.index.test_statements import _session
    from tests.support.fakes import HashEmbedder
    from vault_pipeline import pipeline
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.retrieve.types import FunnelConfig
    from vault_pipeline.serve.tools import VaultTools

    _, session = _session(tmp_path)
    sentence = "My manager approved the transfer to Lisbon."
    vault = make_vault(notes={session.relpath: session.text(), "engrams/lisbon.md": ("e-lisbon", sentence, {})})
    embedder = HashEmbedder(dim=64)
    pipeline.index(vault, embedder)
    llm = build_llm("offline")
    tools = VaultTools(
        vault.root, embedder=embedder, llm_extract=llm, llm_plan=llm, llm_gate=llm, config=FunnelConfig()
    )

    hits = tools.search("manager approved the transfer to Lisbon")
    firsts = [hit["text"].split("\n")[0] for hit in hits]
    assert hits[0]["path"] == "engrams/lisbon.md"
    assert firsts.count(sentence) == 1 and len(set(firsts)) == len(firsts)
