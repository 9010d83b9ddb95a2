"""The extraction operator: validators, the re-ask path, windows, and the offline baseline."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from tests.support.fakes import queued_completion
from tests.support.paths import shared_data
from vault_pipeline.errors import ModelError
from vault_pipeline.ingest.extract import (
    PROMPT_LIMITS,
    SUMMARY_INPUT_CHARS,
    AtomicUnit,
    SessionSummary,
    ThreadMap,
    UnitBatch,
    estimate_tokens,
    extract_conversation,
    group_threads,
    map_thread,
    shorten,
    windows,
)
from vault_pipeline.ingest.parse import Conversation, Message, read_export
from vault_pipeline.models.litellm_backend import LiteLLMBackend
from vault_pipeline.models.offline import HANDLERS, OfflineBackend
from vault_pipeline.models.offline.extraction import extract_units, summarize, thread_map
from vault_pipeline.models.offline.statements import is_verbatim
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.text import word_count as count_words

CTX = {"message_ids": ["u1", "a1"], "roles": {"u1": "user", "a1": "assistant"}}


def msg(mid, role, text):
    return Message(mid, role, role, text, datetime(2024, 5, 1, tzinfo=UTC))


def conv(messages, cid="c1", title="Paper planning", thread=None, day=1):
    return Conversation(
        "chatgpt", cid, title, datetime(2024, 5, day, tzinfo=UTC), None, tuple(messages), "test.json", thread
    )


PAPER = conv(
    [
        msg(
            "u1",
            "user",
            "I'll use LanceDB for the prototype. Maybe we could add a reranker later? "
            "The submission deadline is May 3.",
        ),
        msg(
            "a1",
            "assistant",
            "Sure! LanceDB stores vectors and a full-text index in one embedded database. "
            "You should run the benchmark before the deadline. I recommend a small fit-gate model.",
        ),
        msg("u2", "user", "I'll use LanceDB for the prototype. Should we submit to the workshop track?"),
    ]
)


def unit(**changes):
    data = {"text": "The deadline is May 3.", "category": "fact", "source_ids": ["u1"], "speaker": "user"}
    return AtomicUnit.model_validate({**data, **changes}, context=CTX)


def units_of(role, text, title="t"):
    """Offline units of one message, validated like a model's answer."""
    data = extract_units(
        {"title": title, "messages": [{"id": "m1", "role": role, "speaker": role, "text": text}], **PROMPT_LIMITS}
    )
    batch = UnitBatch.model_validate(
        data, context={"message_ids": ["m1"], "roles": {"m1": role}, "texts": {"m1": text}}
    )
    return [u for u in batch.units if u.category != "topic"]


# --------------------------------------------------------------------------- validators


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"text": " ".join(["word"] * 20) + "."}, "20 words, at most 15 allowed"),
        ({"category": "misc"}, "category 'misc' is not allowed"),
        ({"category": "decision", "source_ids": ["a1"], "speaker": "assistant"}, "decision must come from the user"),
        ({"source_ids": ["zz"]}, "not message ids"),
        ({"text": "We chose Postgres. It is faster."}, "one sentence per unit"),
        ({"text": "I use Go. It is fast."}, "one sentence per unit"),
        ({"speaker": "assistant"}, "does not match its source"),
        ({"text": "Is it May 3?"}, "only an open-question"),
        ({"text": "**LanceDB** is embedded."}, "no Markdown"),
        ({"text": "- LanceDB is embedded."}, "no Markdown"),
        ({"text": "```LanceDB``` is embedded."}, "no Markdown"),
        ({"text": "LanceDB is embedded"}, "ending in '.'"),
        ({"context": " ".join(["word"] * 13)}, "context has 13 words, at most 12"),
        ({"source_ids": []}, "at least 1"),
    ],
)
def test_validators_reject_broken_units(changes, message):
    with pytest.raises(ValidationError, match=message):
        unit(**changes)


def test_valid_units_pass():
    assert unit(text="Prof. Motto prefers e.g. SQLite for tests.").text.startswith("Prof.")
    assert unit(text="Dr. Li compared v3.5 vs. v4, i.e. two releases.")
    assert unit(text="The exponent 10 ** i and `__init__` are plain text.")
    assert unit(text="Could a reranker help?", category="open-question")
    assert unit(text="LanceDB works!", context="for the prototype only").context == "for the prototype only"
    assert unit(text="Shared.", source_ids=["u1", "a1"]).source_ids == ["u1", "a1"]


def test_word_count_ignores_pure_punctuation():
    assert count_words("Use LanceDB — not Chroma — for v3.5 .") == 6


def test_batch_collapses_repetitions_and_merges_sources():
    batch = UnitBatch.model_validate(
        {
            "units": [
                {"text": "LanceDB is embedded.", "category": "fact", "source_ids": ["u1"], "speaker": "user"},
                {"text": "Chroma is a server.", "category": "fact", "source_ids": ["a1"], "speaker": "assistant"},
                {"text": "lanceDB is  embedded!", "category": "idea", "source_ids": ["a1"], "speaker": "assistant"},
            ]
        },
        context=CTX,
    )
    assert [(u.text, u.category, u.source_ids) for u in batch.units] == [
        ("LanceDB is embedded.", "fact", ["u1", "a1"]),
        ("Chroma is a server.", "fact", ["a1"]),
    ]


def test_thread_map_rejects_unknown_sessions_and_long_steps():
    data = {"title": "t", "steps": [{"session_id": "s9", "step": "Moved on."}]}
    with pytest.raises(ValidationError, match="unknown session ids"):
        ThreadMap.model_validate(data, context={"session_ids": ["s1"]})
    data = {"title": "t", "steps": [{"session_id": "s1", "step": "word " * 26}]}
    with pytest.raises(ValidationError, match="1-25 words, got 26"):
        ThreadMap.model_validate(data, context={"session_ids": ["s1"]})


# --------------------------------------------------------------------------- re-ask through instructor


GOOD = {"units": [{"text": "LanceDB is embedded.", "category": "fact", "source_ids": ["u1"], "speaker": "user"}]}


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"units": [{**GOOD["units"][0], "text": " ".join(["word"] * 20) + "."}]}, "20 words, at most 15 allowed"),
        ({"units": [{**GOOD["units"][0], "category": "misc"}]}, "category 'misc' is not allowed"),
        (
            {"units": [{**GOOD["units"][0], "category": "decision", "source_ids": ["a1"], "speaker": "assistant"}]},
            "a decision must come from the user",
        ),
    ],
)
def test_invalid_answer_is_reasked_with_the_error(bad, error):
    completion, calls = queued_completion([json.dumps(bad), json.dumps(GOOD)])
    llm = LiteLLMBackend("openai/gpt-4o-mini", completion=completion)
    batch = llm.call(load_prompt("extract"), {"title": "t", "messages": [], **PROMPT_LIMITS}, UnitBatch, context=CTX)
    assert [u.text for u in batch.units] == ["LanceDB is embedded."]
    assert len(calls) == 2
    assert error in json.dumps(calls[1]["messages"])


def test_conversation_reasks_until_valid_then_summarises():
    long = {"units": [{**GOOD["units"][0], "text": " ".join(["word"] * 20) + "."}]}
    bad_category = {"units": [{**GOOD["units"][0], "category": "misc"}]}
    summary = {"summary": " ".join(["word"] * 30) + "."}
    one = conv([msg("u1", "user", "LanceDB is embedded.")])
    completion, calls = queued_completion(
        [json.dumps(long), json.dumps(bad_category), json.dumps(GOOD), json.dumps(summary)]
    )
    result = extract_conversation(one, LiteLLMBackend("openai/gpt-4o-mini", completion=completion))
    assert [u.text for u in result.units] == ["LanceDB is embedded."]
    assert len(calls) == 4
    assert "20 words, at most 15 allowed" in json.dumps(calls[1]["messages"])
    assert "category 'misc' is not allowed" in json.dumps(calls[2]["messages"])
    assert "[u1] (user) LanceDB is embedded." in calls[0]["messages"][1]["content"]


def test_an_answer_that_never_validates_raises_model_error():
    bad = json.dumps({"units": [{"text": "x", "category": "misc", "source_ids": ["u1"], "speaker": "user"}]})
    completion, _ = queued_completion([bad] * 3)
    one = conv([msg("u1", "user", "LanceDB is embedded.")])
    with pytest.raises(ModelError) as info:
        extract_conversation(one, LiteLLMBackend("openai/gpt-4o-mini", completion=completion))
    assert info.value.attempts == 3


# --------------------------------------------------------------------------- windows


def test_windows_respect_message_boundaries_and_split_huge_messages():
    messages = [msg(f"m{i}", "user", "A sentence of moderate length here. " * 40) for i in range(6)]
    wins = windows(messages, max_tokens=800)
    assert sum(len(w) for w in wins) == 6 and len(wins) > 1
    assert [m.id for w in wins for m in w] == [m.id for m in messages]
    huge = msg("big", "assistant", "One more sentence for the pile. " * 600)
    parts = windows([huge], max_tokens=500)
    assert len(parts) > 1 and all(p.id == "big" for w in parts for p in w)
    assert "".join(p.text for w in parts for p in w) == huge.text  # nothing lost, punctuation kept


def test_windows_never_exceed_the_budget_even_for_one_long_word():
    blob = msg("b", "user", "x" * 30_000 + " tail.\n\nNext paragraph. " + "é" * 5000)
    wins = windows([msg("a", "user", "hello"), blob], max_tokens=1000)
    assert all(sum(estimate_tokens(m.text) for m in w) <= 1000 for w in wins)
    assert "".join(m.text for w in wins for m in w if m.id == "b") == blob.text


def test_long_conversation_keeps_source_ids_across_windows():
    messages = [
        msg(f"m{i}", "user" if i % 2 == 0 else "assistant", f"Fact number {i} concerns topic {i}. " * 30)
        for i in range(20)
    ]
    result = extract_conversation(conv(messages), OfflineBackend())
    assert len(windows(messages)) > 1
    assert {i for u in result.units for i in u.source_ids} <= {m.id for m in messages}
    assert len({i for u in result.units for i in u.source_ids}) == 20
    assert len([u for u in result.units if u.text == "Fact number 4 concerns topic 4."]) == 1


# --------------------------------------------------------------------------- offline extractor


def test_offline_extraction_selects_sentences_as_they_were_said():
    result = extract_conversation(PAPER, OfflineBackend())
    by_text = {u.text: u for u in result.units}
    texts = {m.id: m.text for m in PAPER.messages}
    assert all(is_verbatim(u.text, texts[u.source_ids[0]]) for u in result.units if u.category != "topic")
    decisions = [u for u in result.units if u.category == "decision"]
    assert decisions and all(u.speaker == "user" for u in decisions)
    lance = by_text["I'll use LanceDB for the prototype."]
    assert lance.category == "decision" and lance.source_ids == ["u1", "u2"]  # repetition collapsed
    assert by_text["Maybe we could add a reranker later?"].category == "open-question"
    assert by_text["Should we submit to the workshop track?"].category == "open-question"
    assert by_text["The submission deadline is May 3."].category == "constraint"
    assert by_text["You should run the benchmark before the deadline."].category == "action-item"
    assert by_text["I recommend a small fit-gate model."].category == "idea"
    assert by_text["LanceDB stores vectors and a full-text index in one embedded database."].category == "fact"
    assert by_text["The conversation is about Paper planning."].category == "topic"
    assert "Sure!" not in by_text  # too few words to say anything
    assert extract_conversation(PAPER, OfflineBackend()) == result  # deterministic


@pytest.mark.parametrize(
    "role, text, expected",
    [
        ("user", "Let's go with Postgres for the index.", "decision"),
        ("user", "We chose SQLite for tests.", "decision"),
        ("assistant", "Let's go with Postgres for the index.", "idea"),
        ("assistant", "I decided to use Postgres for the index.", "idea"),
        ("user", "Remember to back up the vault first.", "action-item"),
        ("assistant", "You need to rebuild the index after the upgrade.", "action-item"),
        ("user", "The note must never exceed fifteen words.", "constraint"),
        ("user", "Perhaps the gate could run on a smaller model.", "provisional"),
        ("user", "I'll maybe switch to Qdrant later.", "provisional"),
        ("user", "I wonder whether topics need their own folder.", "provisional"),
        ("user", "One option is a nightly sweep.", "idea"),
        ("user", "Which embedder is the fastest one?", "open-question"),
        ("assistant", "What is your target latency here?", "open-question"),
        ("user", "LanceDB stores vectors on disk.", "fact"),
        ("user", "As a customer, I want to see all shipments of my order.", "constraint"),
        ("assistant", "Definition of Done:\n\n- [ ] Magic links expire after seven days.", "constraint"),
        ("assistant", "Feature: Send the magic link by email or SMS.", "constraint"),
    ],
)
def test_category_cues(role, text, expected):
    assert [u.category for u in units_of(role, text)] == [expected]


def test_code_pasted_without_a_fence_and_sign_offs_are_skipped():
    text = (
        "Return $mail->send();\nINSERT INTO t VALUES (1, 'pin', 'y');\nfrom django.db import models\n"
        "icon varchar(255) null,\nSelf::returnError(5, 'Wrong password.');\n"
        "Kind regards.\nMet vriendelijke groet.\nI would be happy to help you with your request.\n"
        "The webshop rents out payment terminals."
    )
    kept = [u.text for u in units_of("user", text)]
    assert "The webshop rents out payment terminals." in kept
    assert not any(t.startswith(("Return", "INSERT", "from django", "icon", "Self::")) for t in kept)
    assert [u.category for u in units_of("user", "I guess the index fits in memory.")] == ["provisional"]


def test_a_list_item_is_a_unit_with_its_lead_in_as_context():
    text = "The plans compare like this:\n\n- Unity Pro costs forty dollars per month per seat.\n"
    [item] = units_of("assistant", text)
    assert item.text == "Unity Pro costs forty dollars per month per seat."
    assert item.context == "The plans compare like this"


def test_a_sentence_longer_than_the_note_limit_is_a_unit_only_as_said():
    long = (
        "If you run the Django app under Docker Compose, set HOST to the name of the database service "
        "in the settings file so that the app finds its database."
    )
    [unit] = units_of("assistant", long)
    assert unit.text.startswith("Set HOST to the name of the database service")
    assert unit.context is not None and unit.context.startswith("If you run the Django app under Docker Compose")
    assert is_verbatim(unit.text, long)


def test_a_pointing_sentence_without_what_it_points_at_is_no_unit():
    assert units_of("assistant", "This makes the whole thing much faster than before.") == []
    [first, second] = units_of(
        "assistant",
        "Django's get_or_create looks up an object by its fields. This method creates one when none exists.",
    )
    assert second.context == first.text


def test_topics_name_the_title_and_never_list_recurring_terms():
    text = "The gravel garden uses raked gravel. Gravel stands for water. Raked gravel needs care."
    data = extract_units(
        {"title": "Karesansui notes", "messages": [{"id": "m1", "role": "user", "text": text}], **PROMPT_LIMITS}
    )
    topics = [u["text"] for u in data["units"] if u["category"] == "topic"]
    assert topics == ["The conversation is about Karesansui notes."]


# --------------------------------------------------------------------------- summaries and threads


def test_topics_come_once_per_long_conversation_and_the_prompt_names_the_part():
    seen = []
    handlers = {name: HANDLERS[name] for name in ("summarize", "thread_map")}
    handlers["extract"] = lambda variables: seen.append(variables) or extract_units(variables)
    terms = ["gravel", "moss", "lantern", "bridge", "maple"]  # each window recurs on another word
    messages = [
        msg(
            f"m{i}",
            "user" if i % 2 == 0 else "assistant",
            f"The garden {i} needs {terms[i // 8]} and more {terms[i // 8]} paths. " * 25,
        )
        for i in range(40)
    ]
    result = extract_conversation(conv(messages, title="Gravel gardens"), OfflineBackend(handlers=handlers))
    assert len(seen) > 2
    assert [(v["part"], v["parts"]) for v in seen] == [(i, len(seen)) for i in range(1, len(seen) + 1)]
    assert 1 <= len([u for u in result.units if u.category == "topic"]) <= 2
    rendered = load_prompt("extract").render(seen[1])[1]["content"]
    assert f"This is part 2 of {len(seen)}" in rendered
    empty = {"title": "t", "messages": [], **PROMPT_LIMITS}
    assert "part 1 of" not in load_prompt("extract").render(empty)[1]["content"]


@pytest.mark.slow
def test_a_long_session_is_shown_to_the_summary_prompt_within_a_budget():
    seen = []
    handlers = {name: HANDLERS[name] for name in ("extract", "thread_map")}
    handlers["summarize"] = lambda variables: seen.append(variables) or summarize(variables)
    messages = [
        msg(f"m{i}", "user" if i % 2 == 0 else "assistant", "A long sentence about the vault index. " * 60)
        for i in range(120)
    ]
    extract_conversation(conv(messages), OfflineBackend(handlers=handlers))
    texts = [m["text"] for m in seen[0]["messages"]]
    assert len(texts) == 120 and sum(map(len, texts)) <= SUMMARY_INPUT_CHARS + 120 * 2
    assert all(t.endswith("index. …") for t in texts)  # cut at a sentence end, marked
    assert shorten("Short.", 100) == "Short." and shorten("word " * 50, 40).endswith("word …")


def test_summary_bounds():
    with pytest.raises(ValidationError, match="at most 400"):
        SessionSummary.model_validate({"summary": "word " * 401}, context={"source_words": 5000})
    with pytest.raises(ValidationError, match="at least 200"):
        SessionSummary.model_validate({"summary": "word " * 50}, context={"source_words": 5000})
    with pytest.raises(ValidationError, match="at least 8"):
        SessionSummary.model_validate({"summary": "short talk"}, context={"source_words": 8})
    assert SessionSummary.model_validate({"summary": "short talk"}, context={"source_words": 2})
    summary = extract_conversation(PAPER, OfflineBackend()).summary
    assert summary.startswith("Session “Paper planning”: 3 turns") and count_words(summary) <= 400


def test_offline_summary_of_a_long_session_stays_within_200_to_400_words():
    messages = [
        {
            "id": f"m{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "text": f"Turn {i} explains point {i} about the vault in plain words. " * 12,
        }
        for i in range(60)
    ]
    text = summarize({"title": "Vault design", "messages": messages})["summary"]
    assert 200 <= count_words(text) <= 400
    late = [i for i in range(60) if f"Turn {i} explains" in text]
    assert late[0] == 0 and late[-1] >= 50 and late == sorted(late)  # spread over the session, in turn order


def test_threads_group_by_thread_id_and_by_title():
    a = conv([msg("x", "user", "hi there friend")], cid="a", title="Django settings for the webshop")
    b = conv([msg("y", "user", "hi there friend")], cid="b", title="Django webshop settings, part two", day=2)
    c = conv([msg("z", "user", "hi there friend")], cid="c", title="Sourdough schedule")
    d = conv([msg("w", "user", "hi there friend")], cid="d", title="Fix Django error")  # 'fix', 'error' are generic
    l1 = conv([msg("D1:1", "user", "hello")], cid="s:1", title="A and B, session 1", thread="s")
    l2 = conv([msg("D2:1", "user", "hello")], cid="s:2", title="A and B, session 2", thread="s", day=2)
    groups = dict(group_threads([b, a, c, d, l2, l1]))
    assert sorted(sorted(c.id for c in g) for g in groups.values()) == [["a", "b"], ["s:1", "s:2"]]
    assert [c.id for c in groups["thread:s"]] == ["s:1", "s:2"]
    later = conv([msg("v", "user", "hi")], cid="e", title="Webshop settings in Django, part three", day=9)
    assert dict(group_threads([a, b, later])).keys() == {k for k in groups if k.startswith("title:")}
    thread = map_thread("thread:s", [(l1, "They met. They talked."), (l2, "They met again.")], OfflineBackend())
    assert [s.session_id for s in thread.steps] == ["s:1", "s:2"]


@pytest.mark.parametrize(
    "first, second, together",
    [
        ("Planning the retrieval paper", "Peer review for the retrieval paper", True),  # shared phrase
        ("Phone charger challenge", "Sustainable phone charger challenge", True),  # Jaccard 0.75
        ("Python Path Linked List", "Flatten Lists in Python", False),  # 2 shared words, Jaccard 0.4, no phrase
        ("Fix RabbitMQ connection error", "Fix Flask error", False),  # only generic words shared
    ],
)
def test_title_rule(first, second, together):
    a, b = conv([], cid="a", title=first), conv([], cid="b", title=second, day=2)
    assert bool(group_threads([a, b])) is together


def test_offline_thread_map_steps_are_short_and_questions_collected():
    sessions = [
        {
            "id": f"s{i}",
            "date": f"2024-05-0{i}",
            "title": f"Session {i}",
            "summary": f"Session “x”: 2 turns.\n\nUser: How do we scale step {i}? " + "More words here. " * 30,
        }
        for i in range(1, 4)
    ]
    data = thread_map({"title": "Scaling", "sessions": sessions})
    result = ThreadMap.model_validate(data, context={"session_ids": ["s1", "s2", "s3"]})
    assert [s.session_id for s in result.steps] == ["s1", "s2", "s3"]
    assert result.open_questions == [f"How do we scale step {i}?" for i in range(1, 4)]


# --------------------------------------------------------------------------- the real export (optional)


@pytest.mark.slow
def test_offline_extraction_of_the_real_export():
    path = shared_data() / "exports" / "chatgpt-pkuppens-2023.json"
    if not path.exists():
        pytest.skip(f"real export not found at {path}")
    convs = [c for c in read_export(path) if isinstance(c, Conversation)]
    llm, counts = OfflineBackend(), Counter()
    started = time.perf_counter()
    extractions = [extract_conversation(c, llm) for c in convs]
    seconds = time.perf_counter() - started
    for e in extractions:
        counts.update(u.category for u in e.units)
    units = sum(counts.values())
    skipped = sum(e.skipped for e in extractions)
    print(
        f"\n{len(convs)} conversations, {sum(len(c.messages) for c in convs)} turns: {units} candidate units in "
        f"{seconds:.1f}s; {dict(sorted(counts.items()))}; sentences too long for a unit {skipped}"
    )
    assert counts["decision"] > 0 and units > 1000
    assert all(u.speaker == "user" for e in extractions for u in e.units if u.category == "decision")
    assert all(count_words(e.summary) <= 400 for e in extractions)
    texts = {(c.id, m.id): m.text for c in convs for m in c.messages}
    assert all(
        is_verbatim(u.text, texts[(e.conversation.id, u.source_ids[0])])
        for e in extractions
        for u in e.units
        if u.category != "topic"
    )
