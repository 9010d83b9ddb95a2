"""Only the vault's owner gets in over HTTP: a per-vault bearer token, checked before any tool runs.

The token is generated once per vault (``secrets.token_urlsafe``) and kept in
``<vault>/.vault_pipeline/mcp-token``, created owner-only (0600) so another local user cannot read
it even where the vault folder itself is readable; ``vault mcp --http`` prints it once, when it is
made, for the client's configuration (``Authorization: Bearer <token>``). ``BearerGuard`` wraps the
SDK's streamable HTTP app as plain ASGI middleware: an HTTP request without the token, or with
another one, is answered 401 and never reaches the MCP session manager. Loopback binding keeps the
network out; the token keeps other accounts on the same machine out. Stdio needs none (the client
starts the server as its own user).
"""

from __future__ import annotations

import errno
import hmac
import json
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from vault_pipeline.errors import StorageError, VaultError

TOKEN_FILE = "mcp-token"
OWNER_ONLY = 0o600

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def token_path(state_dir: Path) -> Path:
    """Where the vault's MCP token lives."""
    return state_dir / TOKEN_FILE


def vault_token(state_dir: Path) -> tuple[str, bool]:
    """The vault's token and whether it was made just now; the file is (made, or tightened to) owner-only."""
    path = token_path(state_dir)
    try:
        return _read_token(path), False
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_ONLY)
    except FileExistsError:  # another server made it meanwhile: theirs holds
        return _read_token(path), False
    except OSError as exc:
        raise StorageError(path, exc, "make the vault's .vault_pipeline/ folder writable") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token, True


def _read_token(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise VaultError(f"{path}: owned by another user; remove it and start `vault mcp --http` again")
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.fchmod(fd, OWNER_ONLY)  # a copied or restored file: others never read it from now on
        with os.fdopen(os.dup(fd), "r", encoding="utf-8") as handle:
            token = handle.read().strip()
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise
        raise StorageError(path, exc, "check the file's permissions") from None
    finally:
        os.close(fd)
    if len(token) < 16:
        raise VaultError(f"{path}: not a token; remove it and start `vault mcp --http` again to make a new one")
    return token


class BearerGuard:
    """ASGI middleware: HTTP requests need ``Authorization: Bearer <token>``; others get 401, nothing else runs."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self._expected = f"Bearer {token}".encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": "unauthorized: give the vault's MCP token as `Authorization: Bearer ...`"})
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="vault"'),
                    (b"content-length", str(len(body)).encode("ascii")),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body.encode("utf-8")})

    def _allowed(self, scope: Scope) -> bool:
        given = [value for name, value in scope.get("headers", []) if name.lower() == b"authorization"]
        # One header exactly; compare_digest so the answer's timing says nothing about the token.
        return len(given) == 1 and hmac.compare_digest(given[0], self._expected)
