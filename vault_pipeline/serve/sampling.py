"""The connected client's own model, for ``[models] gate = "mcp-sampling"`` (and ``extract``).

MCP sampling lets a server ask the client's model for a completion (the SDK's
``ServerSession.create_message``): the user gets a model-judged gate with no key and no local
model. ``client_model`` gives a tool call a ``SamplingLLM`` bound to the calling session when the
role is configured for it and the client declared the sampling capability; when the client did
not, the offline backend stands in and the tool's answer says so (``FALLBACK``).

The funnel runs in a worker thread and its gate calls on daemon threads of their own, while the
session lives on the server's event loop: a ``BlockingPortal`` carries each request from those
threads to the loop. A request ends by the gate's deadline (``fail_after``), and the portal is
stopped with anything still pending cancelled when the tool call ends, so no request outlives it.
docs/decisions/0082-mcp-sampling.md.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal

from vault_pipeline.errors import VaultError
from vault_pipeline.models.sampling import SamplingLLM, SamplingRequest, Send
from vault_pipeline.serve.tools import VaultTools

FALLBACK = (
    "The client offers no MCP sampling, so the offline {what} answered instead of the client's model "
    '([models] {role} = "mcp-sampling").'
)
_WHAT = {"gate": "fit-gate", "extract": "extractor"}


def offers_sampling(session: Any) -> bool:
    """Whether the client declared the sampling capability when it connected."""
    from mcp_types import ClientCapabilities, SamplingCapability

    try:
        return bool(session.check_client_capability(ClientCapabilities(sampling=SamplingCapability())))
    except (AttributeError, LookupError, ValueError):
        return False


@asynccontextmanager
async def client_model(ctx: Any, tools: VaultTools, role: str) -> AsyncIterator[tuple[SamplingLLM | None, str | None]]:
    """(the client's model for ``role``, or None; a note when the offline backend stands in for it)."""
    if role not in tools.sampling:
        yield None, None
        return
    session = getattr(ctx, "session", None)
    if session is None or not offers_sampling(session):
        yield None, FALLBACK.format(what=_WHAT.get(role, role), role=role)
        return
    async with BlockingPortal() as portal:
        try:
            yield SamplingLLM(_sender(portal, session), log=tools.call_log), None  # type: ignore[arg-type]
        finally:
            await portal.stop(cancel_remaining=True)  # a request still out ends with the tool call


def _sender(portal: BlockingPortal, session: Any) -> Send:
    """A ``Send`` for worker threads: each request runs on the session's event loop."""

    def send(request: SamplingRequest) -> tuple[str, str]:
        return portal.call(_sample, session, request)

    return send


async def _sample(session: Any, request: SamplingRequest) -> tuple[str, str]:
    """One ``sampling/createMessage`` request; (the reply's text, the model the client used)."""
    from mcp_types import SamplingMessage, TextContent

    messages = [
        SamplingMessage(role=m["role"], content=TextContent(type="text", text=m["content"]))  # type: ignore[arg-type]
        for m in request.messages
    ]
    with anyio.fail_after(request.timeout), warnings.catch_warnings():
        # Sampling is deprecated in the 2026-07-28 protocol (SEP-2577) and still what clients offer.
        warnings.simplefilter("ignore")
        result = await session.create_message(
            messages,
            max_tokens=request.max_tokens,
            system_prompt=request.system,
            temperature=request.temperature,
        )
    text = getattr(result.content, "text", None)
    if not isinstance(text, str):
        raise VaultError(f"the client's model answered with {getattr(result.content, 'type', 'no')} content, not text")
    return text, str(result.model or "")
