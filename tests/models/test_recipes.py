"""The README's model recipes, each over HTTP in its provider's own wire format (the scripted server
speaks OpenAI's, Anthropic's and Ollama's): the request carries the answer's schema the way that
provider enforces it, and the answer validates. What the real services do with it is theirs; what
LiteLLM sends them is checked here."""

from __future__ import annotations

import pytest

from vault_pipeline.models.litellm_backend import LiteLLMBackend
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.retrieve.gate import GateVerdicts

VARIABLES = {
    "intent": "Japanese garden design",
    "query": "What does the empty space mean?",
    "candidates": [{"key": "c01", "title": "ma", "heading": "", "text": "Ma is the interval between things."}],
}


def schema_sent(recipe: str, body: dict) -> dict:
    """The answer schema as each provider's request carries it."""
    if recipe == "anthropic":
        return body["output_format"]["schema"]  # Anthropic's structured outputs
    if recipe == "ollama":
        return body["format"]  # Ollama's own format field
    return body["response_format"]["json_schema"]["schema"]  # OpenAI's, llama.cpp's, vLLM's


@pytest.mark.parametrize(
    ("recipe", "model", "path", "route"),
    [
        ("openai", "openai/gpt-4o-mini", "/v1", "/v1/chat/completions"),
        ("anthropic", "anthropic/claude-haiku-4-5", "", "/v1/messages"),
        ("ollama", "ollama_chat/llama3.1", "", "/api/chat"),
        ("llama.cpp or vLLM", "openai/qwen2.5-1.5b-instruct", "/v1", "/v1/chat/completions"),
    ],
)
def test_each_recipe_sends_the_schema_its_provider_enforces(openai_server, monkeypatch, recipe, model, path, route):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-key-0000")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-0000")
    api_base = f"http://127.0.0.1:{openai_server.port}{path}"
    llm = LiteLLMBackend(model, api_base=api_base, sleep=lambda seconds: None)
    answer = llm.call(load_prompt("gate"), VARIABLES, GateVerdicts, context={"keys": ["c01"]})
    assert [v.key for v in answer.verdicts] == ["c01"]
    request = openai_server.requests[-1]
    assert request.path == route
    assert "verdicts" in schema_sent(recipe, request.body)["properties"]
