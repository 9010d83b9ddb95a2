"""Only the vault's owner gets in over HTTP: no token, a wrong token or another OS user get 401, no tool runs.

The guard alone (ASGI calls, no network), then `vault mcp --http` as a subprocess: the token file is
owner-only, printed once, a request without it or with another one is refused before the MCP session
manager sees it, and the SDK's own client with the token gets in. Where the test runs as root, the same
requests are made as the unprivileged `nobody` account, which can read neither the vault nor the token.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from tests.serve.test_mcp import serving_http
from vault_pipeline.serve.auth import BearerGuard, token_path, vault_token
from vault_pipeline.vault.files import STATE_DIR

MEMORY = "Invoices for the billing service are stored in PostgreSQL."


# --------------------------------------------------------------------------- the guard alone


def _call(headers: list[tuple[bytes, bytes]]) -> tuple[int, list[str]]:
    """(status, what reached the app) for one HTTP request through the guard."""
    reached: list[str] = []
    sent: list[dict] = []

    async def app(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/mcp", "method": "POST", "headers": headers}
    anyio.run(BearerGuard(app, "s3cret-token-of-this-vault").__call__, scope, receive, send)
    return sent[0]["status"], reached


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer wrong-token-of-another-vault")],
        [(b"authorization", b"s3cret-token-of-this-vault")],  # no scheme
        [(b"authorization", b"Bearer s3cret-token-of-this-vaul")],  # a prefix
        [(b"authorization", b"Bearer s3cret-token-of-this-vault"), (b"authorization", b"Bearer x")],
        [(b"x-token", b"Bearer s3cret-token-of-this-vault")],
    ],
)
def test_the_guard_refuses_a_missing_or_wrong_token_before_the_app_runs(headers):
    assert _call(headers) == (401, [])


def test_the_guard_lets_the_right_token_through():
    assert _call([(b"Authorization", b"Bearer s3cret-token-of-this-vault")]) == (200, ["/mcp"])


def test_the_token_is_made_once_owner_only_and_tightened_if_loosened(tmp_path):
    state = tmp_path / STATE_DIR
    token, made = vault_token(state)
    assert made and len(token) >= 32
    assert stat.S_IMODE(token_path(state).stat().st_mode) == 0o600
    assert vault_token(state) == (token, False)
    token_path(state).chmod(0o644)
    assert vault_token(state) == (token, False)
    assert stat.S_IMODE(token_path(state).stat().st_mode) == 0o600


# --------------------------------------------------------------------------- the server


@pytest.fixture
def http_server(indexed_example, tmp_path):
    """(root, port, server log) of `vault mcp --http` on a copy of the example vault, mode 700."""
    root = tmp_path / "vault"
    shutil.copytree(indexed_example, root)
    root.chmod(0o700)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    env["HOME"] = str(tmp_path)
    log = tmp_path / "server.log"
    with serving_http(root, env, tmp_path, log) as (port, _):
        yield root, port, log


# A JSON-RPC call of `remember` straight away (no session): what another user would try first.
PROBE = textwrap.dedent(
    """
    import json, sys, urllib.error, urllib.request
    port, token = sys.argv[1], sys.argv[2]
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "remember", "arguments": {"text": sys.argv[3]}}}).encode()
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if token:
        headers["authorization"] = "Bearer " + token
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", body, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            print(answer.status)
    except urllib.error.HTTPError as refused:
        print(refused.code)
    """
)


SYSTEM_PYTHON = "/usr/bin/python3"  # the test's own interpreter may sit in a folder only root can enter


def _probe(port: int, token: str, user: str | None = None) -> int:
    done = subprocess.run(
        [SYSTEM_PYTHON if user else sys.executable, "-I", "-S", "-c", PROBE, str(port), token, MEMORY],
        capture_output=True,
        text=True,
        timeout=120,
        user=user,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def _inbox(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "inbox").glob("*.md"))


def test_http_refuses_a_missing_or_wrong_token_and_the_owner_gets_in(http_server):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    root, port, log = http_server
    path = token_path(root / STATE_DIR)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = path.read_text(encoding="utf-8").strip()
    assert log.read_text(encoding="utf-8").count(token) == 1  # printed once, for the client's config
    before = _inbox(root)
    assert _probe(port, "") == 401
    assert _probe(port, "not-the-token-" + token[:8]) == 401
    assert _inbox(root) == before  # no tool ran

    async def talk() -> list[str]:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with (
            client,
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(600):
                await session.initialize()
                listed = await session.list_tools()
                return [tool.name for tool in listed.tools]

    assert "remember" in anyio.run(talk)
    assert "Traceback" not in log.read_text(encoding="utf-8")


def test_another_os_user_reads_no_token_and_is_refused(http_server):
    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second OS user")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no `nobody` account to act as a second user")
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip(f"no {SYSTEM_PYTHON} for the second user to run")
    root, port, _ = http_server
    path = token_path(root / STATE_DIR)
    reader = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-S", "-c", f"open({str(path)!r}).read()"], capture_output=True, user="nobody", cwd="/"
    )
    assert reader.returncode != 0 and b"PermissionError" in reader.stderr
    before = _inbox(root)
    assert _probe(port, "", user="nobody") == 401
    assert _probe(port, "guessed-" + "x" * 40, user="nobody") == 401

    assert _inbox(root) == before
