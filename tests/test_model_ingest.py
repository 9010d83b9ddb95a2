"""`pipeline.ingest` with a model over HTTP (the scripted server): concurrent extraction that writes
the same vault as one-at-a-time, resume from the answer cache after an interruption, and an
estimate that counts the calls a real ingest then makes."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.support.paths import REPO
from vault_pipeline import pipeline
from vault_pipeline.models.answers import AnswerCache, CachedLLM
from vault_pipeline.models.calllog import CallLog
from vault_pipeline.models.estimate import DryRunLLM, price_calls
from vault_pipeline.models.litellm_backend import LiteLLMBackend
from vault_pipeline.vault.files import STATE_DIR

EXPORTS = sorted((REPO / "vault_example" / "exports").iterdir())  # ten conversations, one line of work
MODEL = "openai/scripted-local"


@pytest.fixture(autouse=True)
def _no_provider_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def model(server, *, answers: AnswerCache | None = None, log: CallLog | None = None):
    llm = LiteLLMBackend(MODEL, api_base=server.url, log=log, sleep=lambda seconds: None)
    return CachedLLM(llm, answers) if answers is not None else llm


def vault_files(root) -> dict[str, str]:
    """Every file of the vault but the derived state, by path."""
    return {
        str(p.relative_to(root)): p.read_text(encoding="utf-8")
        for p in sorted(root.rglob("*"))
        if p.is_file() and STATE_DIR not in p.parts
    }


def summary(report) -> dict:
    data = report.to_dict()
    data.pop("seconds")
    return data


def test_concurrent_extraction_writes_the_same_vault_as_one_at_a_time(openai_server, make_vault):
    openai_server.delay = 0.1
    one, four = make_vault("one"), make_vault("four")
    alone = pipeline.ingest(one, EXPORTS, model(openai_server), concurrency=1)
    assert openai_server.peak == 1
    together = pipeline.ingest(four, EXPORTS, model(openai_server), concurrency=4)
    assert openai_server.peak > 1  # requests overlapped
    assert alone.notes > 10 and alone.threads >= 1 and not alone.errors
    assert summary(alone) == summary(together)
    assert vault_files(one.root) == vault_files(four.root)  # the same files, byte for byte


def test_a_failed_conversation_is_reported_and_the_rest_written(openai_server, make_vault):
    openai_server.script("401")  # the first request: its conversation fails, the others go on
    report = pipeline.ingest(make_vault(), EXPORTS, model(openai_server), concurrency=3)
    assert len(report.errors) == 1 and "authentication failed (HTTP 401" in report.errors[0]
    assert report.conversations == 10 and report.notes > 10


def test_an_interrupted_ingest_does_not_pay_again_for_what_was_answered(openai_server, make_vault, tmp_path):
    reference = make_vault("reference")
    pipeline.ingest(reference, EXPORTS, model(openai_server))
    total = len(openai_server.requests)  # what a whole ingest asks
    openai_server.requests.clear()

    answers = AnswerCache(tmp_path / "answers.sqlite")
    vault = make_vault("resumed")

    def interrupt_after_four(done, total, label):
        if done == 4:
            raise KeyboardInterrupt  # Ctrl-C, or a killed process: the answers so far are stored

    with pytest.raises(KeyboardInterrupt):
        pipeline.ingest(vault, EXPORTS, model(openai_server, answers=answers), progress=interrupt_after_four)
    before = [json.dumps(b, sort_keys=True) for b in openai_server.bodies()]
    assert 0 < len(before) < total and len(answers) == len(before)

    openai_server.requests.clear()
    log = CallLog(None)
    pipeline.ingest(vault, EXPORTS, model(openai_server, answers=answers, log=log), concurrency=4)
    after = [json.dumps(b, sort_keys=True) for b in openai_server.bodies()]
    assert len(before) + len(after) == total
    assert not set(before) & set(after)  # no call made twice
    assert log.usage.cached == len(before) and log.usage.calls == len(after)
    assert vault_files(vault.root) == vault_files(reference.root)  # and the vault is whole


def test_the_estimate_counts_the_calls_an_ingest_then_makes(openai_server, make_vault, tmp_path):
    dry = DryRunLLM(MODEL, api_base=openai_server.url, remote_model=False)
    estimate = pipeline.estimate_ingest(EXPORTS, dry)
    assert openai_server.requests == []  # nothing was asked
    assert estimate.conversations == 10 and estimate.prompt_tokens > 0 and estimate.cost == 0.0

    log_path = tmp_path / "calls.jsonl"
    pipeline.ingest(make_vault(), EXPORTS, model(openai_server, log=CallLog(log_path)))
    made = Counter(json.loads(line)["prompt"] for line in log_path.read_text().splitlines())
    assert estimate.calls == made  # extract windows, summaries, thread maps: the same count
    assert sum(estimate.calls.values()) == len(openai_server.requests)


def test_the_estimate_leaves_out_answered_calls_and_prices_by_the_table(openai_server, make_vault, tmp_path):
    answers = AnswerCache(tmp_path / "answers.sqlite")
    chatgpt, claude = EXPORTS[0], EXPORTS[1]  # six conversations, two
    done = pipeline.ingest(make_vault(), [chatgpt], model(openai_server, answers=answers))
    dry = DryRunLLM(MODEL, api_base=openai_server.url, answers=answers, remote_model=False)
    estimate = pipeline.estimate_ingest([chatgpt, claude], dry)
    # The six conversations' windows and summaries are answered already; a thread map is counted,
    # as its summaries are not known before the ingest writes them.
    assert estimate.cached == len(answers) - done.threads == 12
    assert estimate.calls["summarize"] == 2 and estimate.calls["extract"] == 2

    paid = price_calls(dry.calls, "openai/gpt-4o-mini")
    assert paid.priced and paid.cost > 0  # LiteLLM's price table knows it
    unlisted = price_calls(dry.calls, "openai/some-unlisted-model")
    assert not unlisted.priced and unlisted.cost == 0.0
