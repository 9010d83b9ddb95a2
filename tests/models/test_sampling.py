"""The client's model as a StructuredLLM (MCP sampling), with a scripted ``send`` standing in for the client."""

from __future__ import annotations

import json
import time

import pytest

from vault_pipeline.errors import NEVER_VALIDATED, ModelError
from vault_pipeline.models.calllog import CallLog
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import deadline
from vault_pipeline.models.sampling import SamplingLLM, SamplingRequest
from vault_pipeline.retrieve.gate import GateVerdicts

VARIABLES = {
    "intent": "gardens",
    "query": "empty space",
    "candidates": [{"key": "c01", "title": "ma", "heading": "", "text": "Ma is the interval."}],
}
GOOD = {"verdicts": [{"key": "c01", "reasoning": "fits", "verdict": "keep", "reason": "ma"}]}


class Client:
    """Replies in turn; records every request."""

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.requests: list[SamplingRequest] = []

    def __call__(self, request: SamplingRequest) -> tuple[str, str]:
        self.requests.append(request)
        return self.replies.pop(0), "client-model"


def ask(llm: SamplingLLM) -> GateVerdicts:
    return llm.call(load_prompt("gate"), VARIABLES, GateVerdicts, context={"keys": ["c01"]})


def test_a_fenced_reply_is_parsed_and_the_schema_was_in_the_system_prompt(tmp_path):
    client = Client(f"Here you go:\n```json\n{json.dumps(GOOD)}\n```")
    llm = SamplingLLM(client, log=CallLog(tmp_path / "calls.jsonl"))
    assert ask(llm).verdicts[0].verdict == "keep"
    request = client.requests[0]
    assert request.system.startswith("You are the relevance gate") and '"GateVerdict"' in request.system
    assert [m["role"] for m in request.messages] == ["user"] and request.temperature == 0.0
    entry = json.loads((tmp_path / "calls.jsonl").read_text())
    assert entry["model"] == "mcp-sampling" and entry["served_by"] == "client-model" and entry["outcome"] == "ok"


def test_an_invalid_reply_is_reasked_with_what_was_wrong():
    client = Client('{"verdicts": [{"key": "c01"}]}', json.dumps(GOOD))
    assert ask(SamplingLLM(client)).verdicts[0].key == "c01"
    reask = client.requests[1].messages
    assert [m["role"] for m in reask] == ["user", "assistant", "user"]
    assert "does not validate" in reask[-1]["content"] and "verdict" in reask[-1]["content"]


def test_a_reply_that_never_validates_is_a_model_error():
    with pytest.raises(ModelError) as info:
        ask(SamplingLLM(Client("no", "still no"), max_reasks=1))
    assert info.value.reason == NEVER_VALIDATED and info.value.attempts == 2


def test_a_client_that_fails_is_a_model_error_naming_it():
    def refuse(request):
        raise RuntimeError("Sampling not supported")

    with pytest.raises(ModelError, match="the client's model failed: RuntimeError: Sampling not supported"):
        ask(SamplingLLM(refuse))


def test_the_request_carries_what_the_deadline_leaves():
    client = Client(json.dumps(GOOD))
    with deadline(time.monotonic() + 30):
        ask(SamplingLLM(client))
    timeout = client.requests[0].timeout
    assert timeout is not None and 0 < timeout <= 30
