"""The shared text rules (vault_pipeline.text), and the stages that apply them agreeing on them."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from vault_pipeline.ingest.extract import MAX_VERBATIM_WORDS, MAX_WORDS, PROMPT_LIMITS, AtomicUnit
from vault_pipeline.ingest.quality import hard_problems
from vault_pipeline.models.offline.extraction import extract_units
from vault_pipeline.models.offline.statements import sentences
from vault_pipeline.text import (
    ABBREVIATIONS,
    QUERY_STOPWORDS,
    TITLE_STOPWORDS,
    exact_key,
    grapheme_safe,
    head_words,
    is_abbreviation,
    link_target,
    normalise_text,
    sentence_count,
    split_sentences,
    wikilinks,
    word_count,
    words,
)

POSTGRES = "We chose Postgres—not MySQL—for the main store since the whole team already knows it well."
FRONTMATTER = {"category": "fact", "source": {"messages": ["m1"]}}
CONTEXT = {"message_ids": ["m1"], "roles": {"m1": "user"}}


def validator(sentence: str) -> str | None:
    """The extraction validator's verdict on a unit sentence: None, or why it refuses it."""
    try:
        AtomicUnit.model_validate(
            {"text": sentence, "category": "fact", "source_ids": ["m1"], "speaker": "user"}, context=CONTEXT
        )
    except ValidationError as exc:
        return str(exc)
    return None


def gate(sentence: str) -> list[str]:
    """The keep gate's hard rules on a note holding the sentence: its form only (the word limit, one
    sentence, its type), the part of the two verdicts that has to agree."""
    return hard_problems(sentence, "fact")


def counted(reason: str | None) -> int | None:
    """The word count a refusal names ('17 words, at most 15' / '17 words (at most 15)')."""
    match = re.search(r"(\d+) words[,( ]+at most", " ".join(reason) if isinstance(reason, list) else reason or "")
    return int(match.group(1)) if match else None


# Complete sentences (the gate also wants a subject and a finite verb), 15 and 16 words.
FIFTEEN = "We keep one short note per decision and link each note to the source message."
SIXTEEN = FIFTEEN.replace("source message", "exact source message")


# --------------------------------------------------------------------------- the stages agree


@pytest.mark.parametrize(
    "sentence, words_counted, passes",
    [
        (POSTGRES, 17, False),
        ("We store notes in Postgres, e.g. for full-text search, i.e. fast lookups.", 12, True),
        ("Our state-of-the-art pipeline uses a well-known open-source vector store.", 9, True),
        (FIFTEEN, 15, True),
        (SIXTEEN, 16, False),
        ("The docs are at https://example.com/docs/getting-started?lang=en for everyone.", 7, True),
        ("Dr. J. Li met Prof. Motto at 3 p.m. in the U.S. office.", 13, True),
        ("We chose Postgres -- not MySQL -- for the main store.", 9, True),
        ("We chose Postgres. It is fast.", 6, False),
        ("Use it. Élan follows.", 4, False),
    ],
)
def test_extraction_validator_and_keep_gate_agree(sentence, words_counted, passes):
    assert word_count(sentence) == words_counted
    refused, problems = validator(sentence), gate(sentence)
    assert (refused is None) == (problems == []) == passes, (refused, problems)
    if words_counted > MAX_WORDS:
        assert counted(refused) == counted(problems) == words_counted


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["fast", "Postgres", "state-of-the-art", "e.g.", "v3.5", "don't", "https://x.org/a-b", "—", "&"]
            ),
            st.sampled_from([" ", "—", " — ", "--", ", ", "-", "…"]),
        ),
        min_size=1,
        max_size=24,
    )
)
def test_validator_and_gate_count_every_sentence_alike(parts):
    sentence = "We say " + "".join(word + sep for word, sep in parts).strip(" ,-—…") + " now."
    refused, problems = validator(sentence), gate(sentence)
    assert (counted(refused) is None) == (counted(problems) is None)
    if counted(refused) is not None:
        assert counted(refused) == counted(problems) == word_count(sentence)
    else:
        assert word_count(sentence) <= MAX_WORDS


def test_offline_units_of_a_dashed_sentence_pass_both_rules():
    data = extract_units({"title": "t", "messages": [{"id": "m1", "role": "user", "text": POSTGRES}], **PROMPT_LIMITS})
    texts = [u["text"] for u in data["units"] if u["category"] != "topic"]
    assert texts == [POSTGRES]  # the user's own sentence, whole: 17 words, within the verbatim limit
    context = {**CONTEXT, "texts": {"m1": POSTGRES}}
    AtomicUnit.model_validate(
        {"text": POSTGRES, "category": "fact", "source_ids": ["m1"], "speaker": "user"}, context=context
    )
    assert not hard_problems(POSTGRES, "fact", limit=MAX_VERBATIM_WORDS)


def test_the_limit_reaches_the_prompt_and_the_offline_backend():
    from vault_pipeline.models.prompts import load_prompt

    system = load_prompt("extract").render({"title": "t", "messages": [], **PROMPT_LIMITS})[0]["content"]
    assert f"at most {MAX_WORDS} words" in system
    long = " ".join(["word"] * 12) + "."
    limits = {**PROMPT_LIMITS, "max_verbatim_words": 8, "max_verbatim_context_words": 6}
    data = extract_units({"title": "t", "messages": [{"id": "m1", "role": "user", "text": long}], **limits})
    assert [u for u in data["units"] if u["category"] != "topic"] == [] and data["skipped"] == 1


# --------------------------------------------------------------------------- words


@pytest.mark.parametrize(
    "text, n",
    [
        ("", 0),
        ("We don't use state-of-the-art tools, e.g. Postgres 16.", 8),
        ("Use LanceDB — not Chroma — for v3.5 .", 6),
        (POSTGRES, 17),
        ("wait...what", 2),
        ("1990–2000", 2),
        ("see https://example.com/a-b?c=d.", 2),
        ("and/or I/O 10:30", 3),
        ("— & …", 0),
        ("日本語のテキスト", 1),
    ],
)
def test_word_count(text, n):
    assert word_count(text) == n == len(words(text))


def test_head_words_keeps_the_text_up_to_the_nth_word():
    assert head_words(POSTGRES, 3) == "We chose Postgres"
    assert head_words(POSTGRES, 4) == "We chose Postgres—not"
    assert head_words("a b", 5) == "a b" and head_words("a b", 0) == ""


# --------------------------------------------------------------------------- sentences


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "Use e.g. SQLite, i.e. a file. Dr. Li said so vs. Postgres. Version 3.5 works.",
            ["Use e.g. SQLite, i.e. a file.", "Dr. Li said so vs. Postgres.", "Version 3.5 works."],
        ),
        ('He said "no." Then he left.', ['He said "no."', "Then he left."]),
        ("I said no. 5 people agreed.", ["I said no.", "5 people agreed."]),
        ("Stop! why now?", ["Stop! why now?"]),
        ("J. R. R. Tolkien wrote it.", ["J. R. R. Tolkien wrote it."]),
        ("Use it. Élan follows.", ["Use it.", "Élan follows."]),
        ("我们用Postgres。团队熟悉它。", ["我们用Postgres。", "团队熟悉它。"]),
        ("他说：「好。」然后走了。", ["他说：「好。」", "然后走了。"]),
    ],
)
def test_sentence_splitting(text, expected):
    assert split_sentences(text) == expected
    assert sentence_count(text) == len(expected)


def test_offline_sentences_use_the_shared_splitter():
    assert sentences("Use e.g. SQLite. It is small.") == ["Use e.g. SQLite.", "It is small."]


def test_abbreviations():
    assert {"e.g", "i.e", "dr", "prof", "vs", "u.s"} <= ABBREVIATIONS and "no" not in ABBREVIATIONS
    assert is_abbreviation("(e.g") and is_abbreviation("J") and is_abbreviation("U.S.A")
    assert not is_abbreviation("Postgres") and not is_abbreviation("no")


# --------------------------------------------------------------------------- normalisation, stopwords


def test_normalisation():
    assert normalise_text("LanceDB is  embedded!") == normalise_text("lancedb IS embedded.") == "lancedb is embedded"
    assert normalise_text("Don’t") == normalise_text("dont") and normalise_text("ＡＢＣ") == "abc"
    assert exact_key("  Use X.  ") == exact_key("use x") and exact_key("a = b + c") != exact_key("a b c")


def test_stopword_lists_are_named_for_their_purpose():
    assert {"fix", "error", "chat"} <= TITLE_STOPWORDS
    assert {"please", "talk", "explain"} <= QUERY_STOPWORDS and "garden" not in QUERY_STOPWORDS


# --------------------------------------------------------------------------- cutting


@pytest.mark.parametrize(
    "text, pos, safe",
    [
        ("cafe\u0301!", 4, 3),  # combining acute
        ("x\U0001f469\u200d\U0001f4bb", 3, 1),  # ZWJ sequence
        ("x\U0001f44d\U0001f3fd", 2, 1),  # skin tone modifier
        ("x\U0001f1f3\U0001f1f1\U0001f1e7\U0001f1ea", 2, 1),  # inside a flag
        ("x\U0001f1f3\U0001f1f1\U0001f1e7\U0001f1ea", 3, 3),  # between two flags
        ("abc", 2, 2),
    ],
)
def test_grapheme_safe(text, pos, safe):
    assert grapheme_safe(text, pos) == safe


# --------------------------------------------------------------------------- wikilinks


def test_wikilinks_and_link_target():
    text = "See [[note-a]], [[note-b#^m-1|the source]], ![[diagram.png]], [[#^local]], `[[code]]` and [[c#Heading]]."
    assert [(w.target, w.anchor, w.alias) for w in wikilinks(text)] == [
        ("note-a", "", ""),
        ("note-b", "^m-1", "the source"),
        ("diagram.png", "", ""),
        ("", "^local", ""),
        ("c", "Heading", ""),
    ]
    assert link_target("[[stem|alias]]") == link_target("[[stem#heading]]") == link_target(" stem ") == "stem"
    assert link_target(None) == "" and link_target("[[#x]]") == "[[#x]]"


def test_prompt_language_is_the_one_whose_function_words_cover_most_of_the_prompt():
    from vault_pipeline.text import prompt_languages, prompt_stopwords

    assert prompt_languages("Hoe ruim ik mijn huis op?") == ("dutch",)
    assert prompt_languages("Was ist das Problem mit der Datenbank?") == ("german",)
    # English wins whenever it covers as many words; one shared word makes no language.
    assert prompt_languages("What is the capital of Australia?") == ()
    assert prompt_languages("Die Hard sequel plot") == ()
    assert prompt_stopwords("What is the capital of Australia?") == frozenset()
    dutch = prompt_stopwords("Hoe schrijf ik een subsidieaanvraag?")
    assert {"hoe", "ik", "een"} <= dutch and "subsidieaanvraag" not in dutch


def test_stem_runs_break_at_the_extra_function_words_given():
    from vault_pipeline.text import prompt_stopwords, query_runs, stem_runs

    query = "Hoe verbeter ik mijn beenslag bij zwemmen?"
    assert len(stem_runs(query)) == 1  # English lists alone: one run, "hoe" to "zwemmen"
    assert [len(run) for run in stem_runs(query, prompt_stopwords(query))] == [1, 1, 1]
    assert query_runs(query) == stem_runs(query, prompt_stopwords(query))
