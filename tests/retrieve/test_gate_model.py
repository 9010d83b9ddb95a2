"""The fit-gate on a model served over HTTP: one deadline a query, no thread left behind, no call
made once the model proved out of reach (the scripted server of tests/support/openai_server.py)."""

from __future__ import annotations

import threading

import pytest

from vault_pipeline.models.litellm_backend import LiteLLMBackend
from vault_pipeline.retrieve.gate import FailOpen, GateClock, GateItem, run_gate

ITEMS = [GateItem(f"c{i:02d}", f"note {i}", "", f"Candidate text {i}.") for i in range(1, 6)]


@pytest.fixture(autouse=True)
def _no_provider_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def gate(llm, clock: GateClock | None = None, timeout: float = 30.0):
    return run_gate(ITEMS, llm=llm, intent="gardens", query="empty space", batch_size=2, timeout=timeout, clock=clock)


def test_a_hung_model_fails_open_at_the_deadline_and_holds_no_thread(openai_server):
    openai_server.default = "slow"  # answers after a minute, or when the test ends
    llm = LiteLLMBackend("openai/local", api_base=openai_server.url, timeout=600)
    outcomes = gate(llm, timeout=1.0)
    assert set(outcomes) == {i.key for i in ITEMS}
    assert all(isinstance(o, FailOpen) and "no answer" in o.error for o in outcomes.values())
    # Calls still waiting on the server run on daemon threads: they cannot keep `vault query` alive.
    waiting = [t for t in threading.enumerate() if t.name.startswith("vault-gate")]
    assert all(t.daemon for t in waiting)


def test_once_the_model_is_out_of_reach_the_query_asks_no_more(openai_server):
    openai_server.default = "401"
    llm = LiteLLMBackend("openai/local", api_base=openai_server.url)
    clock = GateClock.starting(30.0)
    first = gate(llm, clock)
    asked = len(openai_server.requests)
    assert 1 <= asked <= 3  # the batches already on their way; none retried
    assert clock.down is not None and "authentication failed (HTTP 401" in clock.down
    later = gate(llm, clock)  # the depth walk's next step, the one hop: the same query
    assert len(openai_server.requests) == asked
    assert {o.error for o in later.values()} == {clock.down} and all(isinstance(o, FailOpen) for o in first.values())


def test_a_query_past_its_gate_deadline_fails_open_at_once(openai_server):
    llm = LiteLLMBackend("openai/local", api_base=openai_server.url)
    clock = GateClock.starting(0.0)
    outcomes = gate(llm, clock)
    assert openai_server.requests == []
    assert {o.error for o in outcomes.values()} == {"no answer within 0s"}


def test_an_invalid_answer_does_not_stop_the_queries_other_calls(openai_server):
    openai_server.default = "invalid"
    llm = LiteLLMBackend("openai/local", api_base=openai_server.url, max_reasks=0)
    clock = GateClock.starting(30.0)
    gate(llm, clock)
    assert clock.down is None  # the model answered, badly: the next batch may answer well
    openai_server.default = "valid"
    assert not any(isinstance(o, FailOpen) for o in gate(llm, clock).values())
