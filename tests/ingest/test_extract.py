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
    MAX_WORDS,
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
from vault_pipeline.models.offline.extraction import extract_units, summarize, thread_map, truncation_rate
from vault_pipeline.models.offline.text import compress, compress_units, finish, sentences
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
    batch = UnitBatch.model_validate(data, context={"message_ids": ["m1"], "roles": {"m1": role}})
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


def test_offline_extraction_follows_the_rules():
    result = extract_conversation(PAPER, OfflineBackend())
    by_text = {u.text: u for u in result.units}
    assert all(count_words(u.text) <= 15 for u in result.units)
    decisions = [u for u in result.units if u.category == "decision"]
    assert decisions and all(u.speaker == "user" for u in decisions)
    lance = by_text["I'll use LanceDB for the prototype."]
    assert lance.category == "decision" and lance.source_ids == ["u1", "u2"]  # repetition collapsed
    assert by_text["Maybe we could add a reranker later."].category == "provisional"
    assert by_text["Should we submit to the workshop track?"].category == "open-question"
    assert by_text["The submission deadline is May 3."].category == "constraint"
    assert by_text["You should run the benchmark before the deadline."].category == "action-item"
    assert by_text["I recommend a small fit-gate model."].category == "idea"
    assert by_text["The conversation is about Paper planning."].category == "topic"
    assert not any(u.text.startswith("Sure") for u in result.units)
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
        ("user", "Which embedder is fastest?", "open-question"),
        ("assistant", "What is your target latency?", "open-question"),
        ("user", "LanceDB stores vectors on disk.", "fact"),
    ],
)
def test_category_cues(role, text, expected):
    assert [u.category for u in units_of(role, text)] == [expected]


def test_hedged_ideas_stay_provisional_and_keep_their_hedge():
    [idea] = units_of("user", "Maybe we could basically cluster the notes by topic?")
    assert (idea.category, idea.text) == ("provisional", "Maybe we could cluster the notes by topic.")
    long = units_of(
        "user",
        "We might later move the whole index to object storage on S3, and then serve "
        "several laptops from that single shared copy of the vault.",
    )
    assert len(long) == 2 and all(u.category == "provisional" for u in long)
    assert all(("might" in u.text) or u.text.startswith("Possibly,") for u in long)


def test_pleasantries_offers_and_rhetorical_questions_are_skipped():
    text = (
        "Sure! Certainly, here is the plan: I hope this helps. Thanks! Let me know if you need more. "
        "Would you like me to write the tests? Why does this matter? It matters for recall."
    )
    assert [u.text for u in units_of("assistant", text)] == ["It matters for recall."]


def test_segmentation_keeps_abbreviations_decimals_and_lists():
    text = (
        "Use e.g. SQLite, i.e. a file. Dr. Li said so vs. Postgres. Version 3.5 works.\n\n"
        "- first item here\n- second item here\n\n```python\nprint('x. Y')\n```\n| a | b |\n|---|---|\n"
        "# Heading line\n**Bold** and *italic* words."
    )
    assert sentences(text) == [
        "Use e.g. SQLite, i.e. a file.",
        "Dr. Li said so vs. Postgres.",
        "Version 3.5 works.",
        "first item here",
        "second item here",
        "Heading line",
        "Bold and italic words.",
    ]


def test_compression_strips_fillers_and_splits_clauses_without_dropping_them():
    assert compress("So, I think that we basically need to store it in order to index it.", limit=MAX_WORDS)[0] == [
        "We need to store it to index it."
    ]
    text = (
        "The index keeps vectors and text in one embedded database, and it rebuilds incrementally "
        "when a single note changes, but it needs a compaction step after large imports."
    )
    pieces, cuts = compress(text, limit=MAX_WORDS)
    assert len(pieces) >= 2 and cuts == 0 and all(count_words(p) <= 15 for p in pieces)
    assert "compaction" in " ".join(pieces) and "incrementally" in " ".join(pieces)
    units, _ = compress_units(
        "If the export is larger than two gigabytes on a laptop with little memory, "
        "the parser streams the JSON array element by element.",
        limit=MAX_WORDS,
        context_limit=12,
    )
    assert units == [
        (
            "The parser streams the JSON array element by element.",
            "if export is larger than two gigabytes on laptop with little memory",
        )
    ]


@pytest.mark.parametrize(
    "sentence",
    [
        "You can install the package with pip, which keeps every dependency pinned in one lock file for the team.",
        "Docker Compose is the usual choice for local stacks because it defines and runs multi-container apps.",
        "The worker retries the upload three times before giving up, if the storage bucket is unreachable.",
        "Ask a user experience expert on the team for recommendations on what customers expect in tracking.",
    ],
)
def test_split_off_clauses_are_never_invented_sentences(sentence):
    units, _ = compress_units(sentence, limit=12, context_limit=12)
    for text, context in units:
        assert not text.startswith(("This is", "This applies", "This works", "This uses", "By contrast"))
        assert context is None or context.split()[0].lower() in ("which", "because", "before", "if", "for")


def test_a_dependent_clause_stays_as_context_or_goes_with_its_sentence():
    # fits: the condition is the main clause's context, not a note of its own
    units, skipped = compress_units(
        "The worker retries the upload three times, if the storage bucket is unreachable.", limit=8, context_limit=8
    )
    assert units == [("The worker retries the upload three times.", "if the storage bucket is unreachable")]
    assert skipped == 0
    # a condition too long for the context: the claim would not hold without it, so the sentence is skipped
    units, skipped = compress_units(
        "The worker retries the upload three times, if the storage bucket in the other region is unreachable.",
        limit=8,
        context_limit=5,
    )
    assert (units, skipped) == ([], 1)
    # a relative or 'because' clause that does not fit is dropped; its main clause still holds
    units, skipped = compress_units(
        "The worker retries the upload three times, which usually clears a short outage of the bucket.",
        limit=8,
        context_limit=5,
    )
    assert units == [("The worker retries the upload three times.", None)]


@pytest.mark.parametrize(
    ("sentence", "main", "context"),
    [
        (
            "For a single node graph, the adjacency matrix (A) will be a 1x1 matrix with a single entry of 0, "
            "as there are no connections between nodes.",
            "The adjacency matrix (A) will be a 1x1 matrix with a single entry of 0.",
            "for a single node graph",
        ),
        (
            "In this case, the Laplacian centrality values for all nodes would be 0, indicating that their "
            "removal will not affect the graph structure at all.",
            "In this case, the Laplacian centrality values for all nodes would be 0.",
            "indicating that their removal will not affect the graph structure at all",
        ),
        (
            "Meltano is an open-source convention-over-configuration product for the entire data lifecycle, "
            "rather than a Python library to be used within a Python script or application.",
            "Meltano is an open-source convention-over-configuration product for the entire data lifecycle.",
            "rather than a Python library to be used within a Python script or application",
        ),
        (
            "As of my knowledge cutoff in September 2021, this is an accurate explanation of how the service "
            "works in practice.",
            "This is an accurate explanation of how the service works in practice.",
            "as of my knowledge cutoff in September 2021",
        ),
        (
            "These laws aim to ensure the harmonious coexistence of humans and AI, with the primary focus on "
            "human welfare, safety, and ethical considerations.",
            "These laws aim to ensure the harmonious coexistence of humans and AI.",
            "with the primary focus on human welfare, safety, and ethical considerations",
        ),
        (
            "This configuration file specifies the parameters that control the cluster autoscaler, such as how "
            "long to wait before scaling down a node.",
            "This configuration file specifies the parameters that control the cluster autoscaler.",
            "such as how long to wait before scaling down a node",
        ),
    ],
)
def test_a_qualifier_split_off_is_context_never_a_note(sentence, main, context):
    # Written alone, "As there are no connections between nodes." and "Making it a valuable tool." were
    # fragments in the real export's inbox: a causal "as", a participle, a lead phrase qualify a clause.
    units, skipped = compress_units(sentence, limit=MAX_WORDS, context_limit=MAX_WORDS)
    assert (units, skipped) == ([(main, context)], 0)


@pytest.mark.parametrize(
    ("sentence", "main", "context"),
    [
        # The condition went into a note of its own ("Let op: Als je ... Facebook-account.") and the claim,
        # "Kun je je Google-account niet gebruiken ...", said the opposite of its source without it.
        (
            "Let op: Als je een Spotify-account hebt gemaakt met je Facebook-account, kun je je Google-account "
            "niet gebruiken om je Spotify-account te koppelen.",
            "Je kunt je Google-account niet gebruiken om je Spotify-account te koppelen.",
            "als je een Spotify-account hebt gemaakt met je Facebook-account",
        ),
        (
            "Maak een Steam-account: Om je game op Steam te verkopen, moet je je aanmelden voor een "
            "Steamworks-account en de eenmalige vergoeding van $100 betalen.",
            "Je moet je aanmelden voor een Steamworks-account en de eenmalige vergoeding van $100 betalen.",
            "om je game op Steam te verkopen",
        ),
        (
            "Verhoog je eiwitinname: Omdat spiermassa afneemt met de leeftijd, is het belangrijk om voldoende "
            "eiwitten binnen te krijgen.",
            "Het is belangrijk om voldoende eiwitten binnen te krijgen.",
            "omdat spiermassa afneemt met de leeftijd",
        ),
        (
            "Als je pijn of ongemak ervaart, neem dan een stapje terug en pas de intensiteit of oefeningen aan.",
            "Neem dan een stapje terug en pas de intensiteit of oefeningen aan.",
            "als je pijn of ongemak ervaart",
        ),
        # A Dutch qualifier split off after a comma ("Waarbij je kracht ... komt." was a note).
        (
            "Voer snelle, kleine opwaartse en neerwaartse bewegingen uit, waarbij je kracht voornamelijk vanuit "
            "je heupen en bovenbenen komt.",
            "Voer snelle, kleine opwaartse en neerwaartse bewegingen uit.",
            "waarbij je kracht voornamelijk vanuit je heupen en bovenbenen komt",
        ),
        (
            "Circular reasoning: Het gebruiken van een conclusie als bewijs voor zichzelf, waardoor een "
            "oneindige lus van redeneren ontstaat.",
            "Circular reasoning: Het gebruiken van een conclusie als bewijs voor zichzelf.",
            "waardoor een oneindige lus van redeneren ontstaat",
        ),
    ],
)
def test_a_dutch_opening_clause_is_context_and_its_main_clause_is_said_in_subject_verb_order(sentence, main, context):
    units, skipped = compress_units(sentence, limit=MAX_WORDS, context_limit=MAX_WORDS)
    assert (units, skipped) == ([(main, context)], 0)


def test_a_dutch_main_clause_that_cannot_be_reordered_is_skipped_and_one_with_its_own_main_clause_stays_whole():
    # The verb before a noun subject ("wordt de tegenrekening ..."): no safe reordering, so no note at all
    # (it had been "Als je ... wilt boeken." and "Wordt de tegenrekening ...": two fragments).
    assert compress_units(
        "Als je de kosten van de auto van de zaak wilt boeken in e-boekhouden, wordt de tegenrekening "
        "meestal bepaald door het soort kosten.",
        limit=MAX_WORDS,
    ) == ([], 1)
    # "het" after a verb is an article here, not the subject: not reordered into "Het wordt lege formulier ...".
    units, _ = compress_units(
        "Als de gebruiker op de knop voor een nieuw adres klikt, wordt het lege formulier weergegeven samen "
        "met de lijst van bestaande adressen.",
        limit=MAX_WORDS,
    )
    assert not any(text.startswith("Het wordt") for text, _ in units)
    # "door X, zul je Y" after "maar" holds its own main clause: a note of its own, not the first one's context.
    units, _ = compress_units(
        "Het kan enige tijd en geduld vergen om je borstcrawl te verbeteren, maar door je techniek en "
        "uithoudingsvermogen geleidelijk op te bouwen, zul je zeker vooruitgang boeken.",
        limit=MAX_WORDS,
    )
    assert [text for text, _ in units] == [
        "Het kan enige tijd en geduld vergen om je borstcrawl te verbeteren.",
        "Door je techniek en uithoudingsvermogen geleidelijk op te bouwen, zul je zeker vooruitgang boeken.",
    ]
    # An opening clause whose first part holds the main clause too is a sentence as it stands.
    units, _ = compress_units(
        "Hoewel C# minder gebruikelijk is in de Data Science-wereld, wordt het inderdaad steeds populairder, "
        "vooral met de introductie van ML.NET, een machine learning-bibliotheek voor .NET-ontwikkelaars.",
        limit=MAX_WORDS,
    )
    assert units[0][0] == (
        "Hoewel C# minder gebruikelijk is in de Data Science-wereld, wordt het inderdaad steeds populairder."
    )


def test_a_qualifier_is_dropped_when_the_context_is_taken_and_a_gerund_object_is_never_split_off():
    units, _ = compress_units(
        "For a single node graph, the adjacency matrix (A) will be a 1x1 matrix with a single entry of 0, "
        "as there are no connections between nodes.",
        limit=MAX_WORDS,
    )
    assert [text for text, _ in units] == ["The adjacency matrix (A) will be a 1x1 matrix with a single entry of 0."]
    # At a sentence's start a participle is a subject, not a qualifier.
    assert compress_units("Making a backup of your database is important.", limit=MAX_WORDS)[0] == [
        ("Making a backup of your database is important.", None)
    ]
    # "I recommend." without "using X" is cut before its point: too long with it, the sentence is skipped.
    units, skipped = compress_units(
        "Based on your description, I recommend using a deep shade of blue (such as #1E3452) for the logo background.",
        limit=MAX_WORDS,
    )
    assert (units, skipped) == ([], 1)


@pytest.mark.parametrize(
    "sentence",
    [
        "Explanation: Bartlett's test of sphericity is used to determine if sufficient correlations exist "
        "among the variables to proceed with an exploratory factor analysis.",
        "Het doel van unsupervised learning is om patronen, relaties of structuren in de gegevens te ontdekken "
        "zonder voorafgaande kennis van de uitkomsten.",
        "Voorbeelden van dergelijke bedrijven kunnen zijn: grote voedselproductie- of verwerkingsbedrijven, "
        "voedseltechnologie bedrijven, of grote supermarktketens met hoofdkantoren in het gebied.",
        "You should always check whether the migration has finished on every replica of the cluster before the switch.",
    ],
)
def test_complements_are_never_split_off(sentence):
    units, skipped = compress_units(sentence, limit=MAX_WORDS, context_limit=12)
    assert (units, skipped) == ([], 1)  # too long with its complement: skipped and counted, never cut


def test_a_complement_that_fits_stays_in_its_sentence():
    units, _ = compress_units("Het doel is om patronen in de gegevens te ontdekken.", limit=MAX_WORDS)
    assert units == [("Het doel is om patronen in de gegevens te ontdekken.", None)]
    units, _ = compress_units("Examples are: pandas, numpy and scipy.", limit=MAX_WORDS)
    assert units == [("Examples are: pandas, numpy and scipy.", None)]


def test_long_sentences_split_into_units_without_dropping_clauses():
    text = (
        "The index keeps vectors and text in one embedded database, and it rebuilds incrementally "
        "when a single note changes, but it needs a compaction step after large imports."
    )
    units = extract_units(
        {"title": "t", "messages": [{"id": "a1", "role": "assistant", "text": text}], **PROMPT_LIMITS}
    )["units"]
    body = [u["text"] for u in units if u["category"] != "topic"]
    assert len(body) >= 2 and all(count_words(t) <= 15 for t in body)
    assert "compaction" in " ".join(body)


def test_split_questions_ask_once_and_keep_their_condition_as_context():
    [question] = units_of(
        "user", "What should I do with the configuration of the webshop if the customer id is not provided by the user?"
    )
    assert (question.text, question.category) == (
        "What should I do with the configuration of the webshop?",
        "open-question",
    )
    assert question.context == "if the customer id is not provided by the user"
    two = units_of(
        "user",
        "How do I build and tag the docker images in GitHub actions, and how do I push "
        "them to the Google Container Registry automatically?",
    )
    assert [u.text.endswith("?") for u in two] == [True, True]
    [decision, rest] = units_of(
        "user",
        "If you'd like me to do so, I will generate clear, concise questions with "
        "a single answer, accompanied by an explanation for the correct answer.",
    )
    assert decision.text == "I will generate clear, concise questions with a single answer."
    assert decision.context == "if you'd like me to do so" and "explanation" in rest.text


@pytest.mark.parametrize(
    "raw, finished",
    [
        ('Tag it with both the Git SHA and "latest".', 'Tag it with both the Git SHA and "latest".'),
        (
            "Click on the 'Font Color' button and select 'White'.",
            "Click on the 'Font Color' button and select 'White'.",
        ),
        ('Press "OK."', 'Press "OK."'),
        ('transforming ideas into software through code."', "Transforming ideas into software through code."),
        ("'A quoted sentence.'", "A quoted sentence."),
        ("I don’t split apostrophes...", "I don’t split apostrophes."),
    ],
)
def test_finish_keeps_paired_quotes_and_ends_once(raw, finished):
    assert finish(raw) == finished


def test_compression_rewords_and_skips_what_it_cannot_say_without_cutting():
    pieces, cuts = compress(
        "Otherwise, we will have to ask the customer to fill in this information via a form.", limit=MAX_WORDS
    )
    assert (pieces, cuts) == (["Otherwise, we must ask the customer to fill in this information via a form."], 0)
    pieces, cuts = compress(
        "Our tiny green robot quietly sweeps the dusty kitchen floor every single morning "
        "near the big old iron oven there.",
        limit=MAX_WORDS,
    )
    assert (pieces, cuts) == ([], 1)  # 19 words, no clause or aside to drop: skipped and counted, never cut


def test_code_pasted_without_a_fence_and_sign_offs_are_skipped():
    text = (
        "Return $mail->send();\nINSERT INTO t VALUES (1, 'pin', 'y');\nfrom django.db import models\n"
        "icon varchar(255) null,\nSelf::returnError(5, 'Wrong password.');\n"
        "Kind regards.\nMet vriendelijke groet.\nI would be happy to help you with your request.\n"
        "The webshop rents out payment terminals."
    )
    assert [u.text for u in units_of("user", text)] == ["The webshop rents out payment terminals."]
    assert [u.category for u in units_of("user", "I guess the index fits in memory.")] == ["provisional"]


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
    llm, counts, cuts, total = OfflineBackend(), Counter(), 0, 0
    started = time.perf_counter()
    extractions = [extract_conversation(c, llm) for c in convs]
    seconds = time.perf_counter() - started
    for c, e in zip(convs, extractions):
        counts.update(u.category for u in e.units)
        n, t = truncation_rate(
            {"messages": [{"id": m.id, "role": m.role, "text": m.text} for m in c.messages], **PROMPT_LIMITS}
        )
        cuts, total = cuts + n, total + t
    units = sum(counts.values())
    print(
        f"\n{len(convs)} conversations, {sum(len(c.messages) for c in convs)} turns: {units} units in "
        f"{seconds:.1f}s ({units / seconds * 60:,.0f} units/minute); {dict(sorted(counts.items()))}; "
        f"skipped (not sayable in {MAX_WORDS} words) {cuts}/{total} = {cuts / max(total, 1):.1%}"
    )
    assert counts["decision"] > 0 and units > 1000 and seconds < 60
    assert all(u.speaker == "user" for e in extractions for u in e.units if u.category == "decision")
    assert all(count_words(e.summary) <= 400 for e in extractions)


def test_a_leading_clause_put_after_its_main_clause_leaves_no_full_stop_between_them():
    # "for X, creating A, adding B, and compiling them." had become "Creating A, ... them. for X."
    units, _ = compress_units(
        "Make sure that you've followed the steps outlined in the previous answer for setting up "
        "internationalization, creating message files, adding translations, and compiling them.",
        limit=MAX_WORDS,
    )
    assert all(". " not in text for text, _ in units)
    units, _ = compress_units(
        "After the migration has finished on every replica of the cluster, I will ask the team to switch traffic over.",
        limit=MAX_WORDS,
    )
    assert units == [
        (
            "I will ask the team to switch traffic over.",
            "after the migration has finished on every replica of the cluster",
        )
    ]
    # "until X, at which point Y": Y is no main clause to put first; the condition cannot be dropped.
    assert compress_units(
        "In the context of a shopping website, it's common to store the order or cart data in the session "
        "until the user checks out, at which point it would be saved to a database.",
        limit=MAX_WORDS,
    ) == ([], 1)
