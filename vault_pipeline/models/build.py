"""Pick the backend for a model string: ``offline``, ``mcp-sampling`` or any LiteLLM model string."""

from __future__ import annotations

from vault_pipeline.errors import ConfigError
from vault_pipeline.models.calllog import CallLog
from vault_pipeline.models.litellm_backend import LiteLLMBackend
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.models.offline.crossencoder import RELEVANCE_GATE
from vault_pipeline.models.offline.relevance import RelevanceModel
from vault_pipeline.models.protocol import MCP_SAMPLING, OFFLINE_MODEL, StructuredLLM


def build_llm(
    model: str,
    *,
    api_base: str | None = None,
    log: CallLog | None = None,
    api_key: str | None = None,
    relevance: RelevanceModel | None = None,
    timeout: float = 60.0,
    output: str = "auto",
) -> StructuredLLM:
    """The backend for a model string: ``offline`` or any LiteLLM model string.

    ``relevance``: a vault's fitted gate weights, for the offline backend's fit-gate (a model
    judges by itself and has no use for them). ``mcp-sampling`` asks the MCP client's model, which
    only ``vault mcp`` can reach: anywhere else the offline backend stands in (the caller says so).
    ``timeout``: seconds per request; ``output``: ``[models] output`` (see ``litellm_backend``)."""
    if not model:
        raise ConfigError("empty model string")
    if model in (OFFLINE_MODEL, MCP_SAMPLING):
        return OfflineBackend(log=log, relevance=relevance)
    if model == RELEVANCE_GATE:  # the offline backend, gating with the trained relevance model
        return OfflineBackend(log=log, relevance_model=True)
    if "/" not in model:
        raise ConfigError(
            f"model {model!r}: use a LiteLLM model string such as 'openai/gpt-4o-mini', "
            "'anthropic/claude-haiku-4-5' or 'ollama/llama3.1', 'offline', 'offline-relevance' or 'mcp-sampling'"
        )
    return LiteLLMBackend(model, api_base=api_base, api_key=api_key, log=log, timeout=timeout, output=output)
