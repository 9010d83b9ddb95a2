"""The extraction operator: validators, the re-ask path, windows, and the offline baseline."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from conftest import shared_data
from vault_pipeline.errors import ModelError
from vault_pipeline.extract import (
    AtomicUnit,
    SessionSummary,
    UnitBatch,
    count_words,
    extract_conversation,
    group_threads,
    map_thread,
    windows,
)
from vault_pipeline.llm import LiteLLMBackend, OfflineBackend
from vault_pipeline.offline.extraction import extract_units, truncation_rate
from vault_pipeline.parse import Conversation, Message, read_export

CTX = {"message_ids": ["u1", "a1"], "roles": {"u1": "user", "a1": "assistant"}}


def msg(mid, role, text):
    return Message(mid, role, role, text, datetime(2024, 5, 1, tzinfo=timezone.utc))


def conv(messages, cid="c1", title="Paper planning", thread=None):
    return Conversation("chatgpt", cid, title, datetime(2024, 5, 1, tzinfo=timezone.utc), None,
                        tuple(messages), "test.json", thread)


PAPER = conv([
    msg("u1", "user", "I'll use LanceDB for the prototype. Maybe we could add a reranker later? "
                      "The submission deadline is May 3."),
    msg("a1", "assistant", "Sure! LanceDB stores vectors and a full-text index in one embedded database. "
                           "You should run the benchmark before the deadline. I recommend a small fit-gate model."),
    msg("u2", "user", "I'll use LanceDB for the prototype. Should we submit to the workshop track?"),
])


def unit(**changes):
    data = {"text": "The deadline is May 3.", "category": "fact", "source_ids": ["u1"], "speaker": "user"}
    return AtomicUnit.model_validate({**data, **changes}, context=CTX)


@pytest.mark.parametrize("changes, message", [
    ({"text": " ".join(["word"] * 20) + "."}, "20 words, at most 15 allowed"),
    ({"category": "misc"}, "category"),
    ({"category": "decision", "source_ids": ["a1"], "speaker": "assistant"}, "decision must come from the user"),
    ({"source_ids": ["zz"]}, "not message ids"),
    ({"text": "We chose Postgres. It is faster."}, "one sentence per unit"),
    ({"speaker": "assistant"}, "does not match its source"),
    ({"text": "Is it May 3?"}, "only an open-question"),
])
def test_validators_reject_broken_units(changes, message):
    with pytest.raises(ValidationError, match=message):
        unit(**changes)


def test_abbreviations_are_not_sentence_breaks():
    assert unit(text="Prof. Motto prefers e.g. SQLite for tests.").text.startswith("Prof.")


def test_batch_collapses_repetitions_and_merges_sources():
    batch = UnitBatch.model_validate({"units": [
        {"text": "LanceDB is embedded.", "category": "fact", "source_ids": ["u1"], "speaker": "user"},
        {"text": "lanceDB is  embedded!", "category": "fact", "source_ids": ["u1"], "speaker": "user"},
    ]}, context=CTX)
    assert len(batch.units) == 1


def queued(answers):
    import litellm

    calls = []
    queue = iter(answers)

    def completion(**kwargs):
        calls.append(kwargs)
        return litellm.completion(mock_response=next(queue), **kwargs)

    return completion, calls


def test_too_long_unit_is_reasked_through_instructor():
    long = {"units": [{"text": " ".join(["word"] * 20) + ".", "category": "fact", "source_ids": ["u1"],
                       "speaker": "user"}]}
    bad_category = {"units": [{"text": "LanceDB is embedded.", "category": "misc", "source_ids": ["u1"],
                               "speaker": "user"}]}
    good = {"units": [{"text": "LanceDB is embedded.", "category": "fact", "source_ids": ["u1"], "speaker": "user"}]}
    summary = {"summary": " ".join(["word"] * 30) + "."}
    one = conv([msg("u1", "user", "LanceDB is embedded.")])
    completion, calls = queued([json.dumps(long), json.dumps(bad_category), json.dumps(good), json.dumps(summary)])
    result = extract_conversation(one, LiteLLMBackend("openai/gpt-4o-mini", completion=completion))
    assert [u.text for u in result.units] == ["LanceDB is embedded."]
    assert len(calls) == 4
    assert "20 words, at most 15 allowed" in json.dumps(calls[1]["messages"])
    assert "category" in json.dumps(calls[2]["messages"])


def test_an_answer_that_never_validates_raises_model_error():
    bad = json.dumps({"units": [{"text": "x", "category": "misc", "source_ids": ["u1"], "speaker": "user"}]})
    completion, _ = queued([bad] * 3)
    one = conv([msg("u1", "user", "LanceDB is embedded.")])
    with pytest.raises(ModelError) as info:
        extract_conversation(one, LiteLLMBackend("openai/gpt-4o-mini", completion=completion))
    assert info.value.attempts == 3


def test_offline_extraction_follows_the_rules():
    result = extract_conversation(PAPER, OfflineBackend())
    by_text = {u.text: u for u in result.units}
    assert all(count_words(u.text) <= 15 for u in result.units)
    decisions = [u for u in result.units if u.category == "decision"]
    assert decisions and all(u.speaker == "user" for u in decisions)
    lance = by_text["I'll use LanceDB for the prototype."]
    assert lance.category == "decision" and lance.source_ids == ["u1", "u2"]  # repetition collapsed
    assert any(u.category == "provisional" and "aybe" in u.text for u in result.units)
    assert any(u.category == "open-question" and u.text.endswith("?") for u in result.units)
    assert any(u.category == "topic" for u in result.units)
    assert not any(u.text.startswith("Sure") for u in result.units)
    assert not any(u.category == "decision" and u.speaker == "assistant" for u in result.units)
    assert extract_conversation(PAPER, OfflineBackend()) == result  # deterministic


def test_long_sentences_split_into_units_without_dropping_clauses():
    text = ("The index keeps vectors and text in one embedded database, and it rebuilds incrementally "
            "when a single note changes, but it needs a compaction step after large imports.")
    units = extract_units({"title": "t", "messages": [{"id": "a1", "role": "assistant", "text": text}]})["units"]
    body = [u["text"] for u in units if u["category"] != "topic"]
    assert len(body) >= 2 and all(count_words(t) <= 15 for t in body)
    assert "compaction" in " ".join(body)


def test_windows_respect_message_boundaries_and_split_huge_messages():
    messages = [msg(f"m{i}", "user", "A sentence of moderate length here. " * 40) for i in range(6)]
    wins = windows(messages, max_tokens=800)
    assert sum(len(w) for w in wins) == 6 and len(wins) > 1
    huge = msg("big", "assistant", "One more sentence for the pile. " * 600)
    parts = windows([huge], max_tokens=500)
    assert len(parts) > 1 and all(p.id == "big" for w in parts for p in w)
    assert "".join(p.text for w in parts for p in w).count("pile") == 600


def test_long_conversation_keeps_source_ids_across_windows():
    messages = [msg(f"m{i}", "user" if i % 2 == 0 else "assistant", f"Fact number {i} concerns topic {i}. " * 30)
                for i in range(20)]
    result = extract_conversation(conv(messages), OfflineBackend())
    assert {i for u in result.units for i in u.source_ids} <= {m.id for m in messages}
    assert len({i for u in result.units for i in u.source_ids}) == 20


def test_summary_bounds():
    with pytest.raises(ValidationError, match="at most 400"):
        SessionSummary.model_validate({"summary": "word " * 401}, context={"source_words": 5000})
    with pytest.raises(ValidationError, match="at least 200"):
        SessionSummary.model_validate({"summary": "word " * 50}, context={"source_words": 5000})
    assert SessionSummary.model_validate({"summary": "short talk"}, context={"source_words": 8})
    summary = extract_conversation(PAPER, OfflineBackend()).summary
    assert 1 <= count_words(summary) <= 400 and "Paper planning" in summary


def test_threads_group_by_thread_id_and_by_title():
    a = conv([msg("x", "user", "hi there friend")], cid="a", title="Django settings for the webshop")
    b = conv([msg("y", "user", "hi there friend")], cid="b", title="Django webshop settings, part two")
    c = conv([msg("z", "user", "hi there friend")], cid="c", title="Sourdough schedule")
    l1 = conv([msg("D1:1", "user", "hello")], cid="s:1", title="A and B, session 1", thread="s")
    l2 = conv([msg("D2:1", "user", "hello")], cid="s:2", title="A and B, session 2", thread="s")
    groups = dict(group_threads([a, b, c, l1, l2]))
    assert sorted(sorted(c.id for c in g) for g in groups.values()) == [["a", "b"], ["s:1", "s:2"]]
    thread = map_thread("thread:s", [(l1, "They met. They talked."), (l2, "They met again.")], OfflineBackend())
    assert [s.session_id for s in thread.steps] == ["s:1", "s:2"]


def test_offline_extraction_of_the_real_export():
    path = shared_data() / "exports" / "chatgpt-pkuppens-2023.json"
    if not path.exists():
        pytest.skip(f"real export not found at {path}")
    convs = [c for c in read_export(path) if isinstance(c, Conversation)]
    llm, started, counts, cuts, total = OfflineBackend(), time.perf_counter(), Counter(), 0, 0
    for c in convs:
        counts.update(u.category for u in extract_conversation(c, llm).units)
        n, t = truncation_rate({"messages": [{"id": m.id, "role": m.role, "text": m.text} for m in c.messages]})
        cuts, total = cuts + n, total + t
    seconds = time.perf_counter() - started
    print(f"\nunits {sum(counts.values())} in {seconds:.1f}s; {dict(sorted(counts.items()))}; "
          f"hard cuts {cuts}/{total} = {cuts / max(total, 1):.1%}")
    assert counts["decision"] > 0 and sum(counts.values()) > 1000
