"""The model path as users run it: real HTTP to a scripted OpenAI-compatible server, LiteLLM, instructor.

Every model role (extract, summarize, thread map, quality, gate, clean judge, decompose) answers
through the LiteLLM backend in each output mode; then each failure a user meets: a schema the
server refuses, invalid and unparsable answers, a slow server, 401, 404, 429 with Retry-After,
500, a closed port, and a deadline. Nothing here sleeps for real: retries sleep through a recorder.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from vault_pipeline.clean.judge import PairText, Related, judge_pairs
from vault_pipeline.errors import NEVER_VALIDATED, ModelError
from vault_pipeline.ingest.extract import extract_conversation, map_thread
from vault_pipeline.ingest.parse.types import Conversation, Message
from vault_pipeline.ingest.quality_model import QualityItem, judge_notes
from vault_pipeline.models.calllog import CallLog
from vault_pipeline.models.litellm_backend import LOCAL_KEY, LiteLLMBackend, output_mode
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import deadline
from vault_pipeline.retrieve.gate import GateVerdicts, Keep, gate_rows
from vault_pipeline.retrieve.types import QueryPlan

MODEL = "openai/scripted-local"
GATE_VARIABLES = {
    "intent": "Japanese garden design",
    "query": "What does the empty space mean?",
    "candidates": [
        {"key": "c01", "title": "ma", "heading": "", "text": "Ma is the interval between things."},
        {"key": "c02", "title": "voids", "heading": "", "text": "Cosmic voids are nearly empty."},
    ],
}
GATE_CONTEXT = {"keys": ["c01", "c02"]}


@pytest.fixture(autouse=True)
def _no_provider_key(monkeypatch):
    """A user with no OPENAI_API_KEY: the local server must work without one."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def backend(server, **kwargs) -> LiteLLMBackend:
    """The LiteLLM backend on the scripted server; retries sleep into ``kwargs['sleep']`` (default: not at all)."""
    kwargs.setdefault("sleep", lambda seconds: None)
    return LiteLLMBackend(MODEL, api_base=server.url, **kwargs)


def conversation(conv_id: str = "c1", title: str = "Garden essay planning") -> Conversation:
    when = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
    messages = (
        Message("m1", "user", "user", "I decided the essay will focus on the dry garden at Ryoan-ji.", when),
        Message("m2", "assistant", "assistant", "The fifteen stones are placed so one is always hidden.", when),
    )
    return Conversation("chatgpt", conv_id, title, when, when, messages, "export.json")


def ask_gate(llm) -> GateVerdicts:
    return llm.call(load_prompt("gate"), GATE_VARIABLES, GateVerdicts, context=GATE_CONTEXT)


# --------------------------------------------------------------------------- every role, every output mode


@pytest.mark.parametrize("output", ["json_schema", "tools", "json"])
def test_every_model_role_answers_over_http(openai_server, tmp_path, output):
    log = CallLog(tmp_path / "calls.jsonl")
    llm = backend(openai_server, output=output, log=log)

    extraction = extract_conversation(conversation(), llm)  # extract, then summarize
    assert extraction.units and {u.source_ids[0] for u in extraction.units} <= {"m1", "m2"}
    assert len(extraction.summary.split()) >= 10

    sessions = [
        (conversation("c1"), extraction.summary),
        (conversation("c2", "Garden essay draft"), extraction.summary),
    ]
    thread = map_thread("title:x", sessions, llm)
    assert [step.session_id for step in thread.steps] == ["c1", "c2"]

    items = [QualityItem("n01", "The essay focuses on Ryoan-ji.", "decision", "I decided the essay ...")]
    assert set(judge_notes(items, llm).verdicts) == {"n01"}

    rows = [("ma#0", "engrams/ma.md", "", "Ma is the interval."), ("void#0", "engrams/void.md", "", "Voids.")]
    outcomes = gate_rows(
        rows, llm=llm, intent="gardens", query="empty space", batch_size=10, timeout=30, text_chars=500
    )
    assert all(isinstance(o, Keep) for o in outcomes.values()) and set(outcomes) == {"ma#0", "void#0"}

    pairs = [PairText("p01", "The deadline is May 3.", "The deadline is May 3 at noon.", "2024-01-01", "2024-02-01")]
    verdicts = judge_pairs(llm, pairs)
    assert isinstance(verdicts.relations["p01"], Related) and not verdicts.failed

    plan = llm.call(load_prompt("decompose"), {"query": "empty space in gardens", "intent": ""}, QueryPlan)
    assert plan.intent

    prompts = [json.loads(line)["prompt"] for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert prompts == ["extract", "summarize", "thread_map", "quality", "gate", "judge", "decompose"]
    assert len(openai_server.requests) == 7  # every role over HTTP, each answered at the first attempt


# --------------------------------------------------------------------------- schema-enforced output


def test_the_request_carries_the_answer_schema(openai_server):
    ask_gate(backend(openai_server))  # a self-hosted server: given the schema
    sent = openai_server.bodies()[-1]
    schema = sent["response_format"]["json_schema"]["schema"]
    assert sent["response_format"]["type"] == "json_schema"
    assert "verdicts" in schema["properties"] and "GateVerdict" in json.dumps(schema)

    ask_gate(backend(openai_server, output="tools"))
    tool = openai_server.bodies()[-1]["tools"][0]["function"]
    assert "verdicts" in tool["parameters"]["properties"]

    ask_gate(backend(openai_server, output="json"))  # JSON mode: the schema is in the prompt, re-asks enforce it
    sent = openai_server.bodies()[-1]
    assert sent["response_format"] == {"type": "json_object"}
    assert '"verdicts"' in sent["messages"][0]["content"]


def test_output_mode_follows_litellm_capability_flags():
    assert output_mode("openai/gpt-4o-mini") == "json_schema"  # flagged: response schema
    assert output_mode("anthropic/claude-haiku-4-5") == "json_schema"
    assert output_mode("deepseek/deepseek-v3") == "tools"  # flagged: function calling only
    assert output_mode("openai/some-unlisted-model") == "json"  # nothing known: JSON mode and re-asks
    assert output_mode("openai/qwen2.5-0.5b", "http://127.0.0.1:8080/v1") == "json_schema"  # llama.cpp, vLLM
    assert output_mode("ollama/llama3.1") == "json_schema"  # LiteLLM passes the schema as Ollama's format
    assert output_mode("openai/gpt-4o-mini", choice="json") == "json"  # [models] output forces one


def test_a_server_that_refuses_the_schema_is_asked_in_json_mode(openai_server, tmp_path):
    llm = backend(openai_server, log=CallLog(tmp_path / "calls.jsonl"))
    openai_server.script("400")
    assert [v.key for v in ask_gate(llm).verdicts] == ["c01", "c02"]
    first, second = openai_server.bodies()
    assert first["response_format"]["type"] == "json_schema"
    assert second["response_format"] == {"type": "json_object"}
    assert llm.mode == "json"  # and from then on
    outcomes = [json.loads(line)["outcome"] for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert outcomes == ["error", "ok"]


# --------------------------------------------------------------------------- keys


def test_a_local_server_needs_no_key(openai_server):
    ask_gate(backend(openai_server))  # no OPENAI_API_KEY, no api_key: a placeholder, not "Missing credentials"
    assert openai_server.requests[-1].headers["authorization"] == f"Bearer {LOCAL_KEY}"


def test_a_configured_key_is_sent_and_never_logged(openai_server, tmp_path):
    ask_gate(backend(openai_server, api_key="sk-test-abcdefghijklmnop", log=CallLog(tmp_path / "calls.jsonl")))
    assert openai_server.requests[-1].headers["authorization"] == "Bearer sk-test-abcdefghijklmnop"
    assert "abcdefghijklmnop" not in (tmp_path / "calls.jsonl").read_text()


def test_a_remote_provider_without_a_key_says_so_in_one_line(monkeypatch):
    llm = LiteLLMBackend("openai/gpt-4o-mini", api_base="https://api.example.org/v1")  # no key anywhere
    with pytest.raises(ModelError) as info:
        ask_gate(llm)
    message = str(info.value)
    assert "openai/gpt-4o-mini" in message and "authentication failed" in message and "api_key_env" in message
    assert "\n" not in message


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("status", "cause"), [("401", "authentication failed (HTTP 401"), ("404", "not found at http://127.0.0.1")]
)
def test_auth_and_not_found_fail_at_once_in_one_line(openai_server, status, cause):
    openai_server.script(status, status, status)
    with pytest.raises(ModelError) as info:
        ask_gate(backend(openai_server))
    message = str(info.value)
    assert MODEL in message and cause in message and "\n" not in message
    assert len(openai_server.requests) == 1  # not retried


def test_a_model_the_server_does_not_serve_is_named(openai_server):
    openai_server.unknown_models = frozenset({"scripted-local"})
    with pytest.raises(ModelError, match=r"The model `scripted-local` does not exist"):
        ask_gate(backend(openai_server))


def test_rate_limits_wait_what_retry_after_says(openai_server):
    openai_server.retry_after = 7
    openai_server.script("429", "429")
    slept: list[float] = []
    answer = ask_gate(backend(openai_server, sleep=slept.append))
    assert [v.key for v in answer.verdicts] == ["c01", "c02"]
    assert slept == [7.0, 7.0]  # the header's seconds, not the exponential back-off
    assert len(openai_server.requests) == 3


def test_server_errors_are_retried_with_back_off_then_named(openai_server):
    openai_server.script("500", "500", "500", "500")
    slept: list[float] = []
    with pytest.raises(ModelError, match=r"server error \(HTTP 500") as info:
        ask_gate(backend(openai_server, sleep=slept.append, transient_attempts=4))
    assert slept == [0.5, 1.0, 2.0] and len(openai_server.requests) == 4
    assert info.value.attempts == 4


def test_a_closed_port_is_named(closed_api_base):
    llm = LiteLLMBackend(MODEL, api_base=closed_api_base, sleep=lambda s: None, transient_attempts=2)
    with pytest.raises(ModelError, match=f"cannot connect to {closed_api_base}"):
        ask_gate(llm)


def test_invalid_answers_are_reasked_with_the_validation_error(openai_server):
    openai_server.script("invalid", "garbage")
    assert [v.key for v in ask_gate(backend(openai_server)).verdicts] == ["c01", "c02"]
    assert len(openai_server.requests) == 3
    reask = json.dumps(openai_server.bodies()[1]["messages"])
    assert "verdicts" in reask and "Field required" in reask  # the model is told what was wrong


def test_answers_that_never_validate_end_as_model_error(openai_server):
    openai_server.default = "invalid"
    with pytest.raises(ModelError) as info:
        ask_gate(backend(openai_server, max_reasks=1))
    assert info.value.reason == NEVER_VALIDATED and info.value.attempts == 2
    assert "leaves out every field" in (info.value.last_output or "")


def test_a_slow_server_times_out_and_is_named(openai_server):
    openai_server.script("slow")
    with pytest.raises(ModelError, match=r"no answer within 0.5s"):
        ask_gate(backend(openai_server, timeout=0.5, transient_attempts=1))


def test_a_deadline_ends_the_call_whatever_the_request_timeout(openai_server):
    openai_server.default = "slow"
    llm = backend(openai_server, timeout=600)  # a request alone could wait ten minutes
    with deadline(time.monotonic() + 1.0), pytest.raises(ModelError, match="no answer before the deadline"):
        ask_gate(llm)


def test_the_call_log_counts_tokens_and_prices_local_calls_at_zero(openai_server, tmp_path):
    log = CallLog(tmp_path / "calls.jsonl")
    ask_gate(backend(openai_server, log=log))
    entry = json.loads((tmp_path / "calls.jsonl").read_text())
    assert entry["tokens"]["prompt"] > 0 and entry["cost"] == 0.0 and entry["output_mode"] == "json_schema"
    assert log.usage.calls == 1 and log.usage.prompt_tokens == entry["tokens"]["prompt"]
