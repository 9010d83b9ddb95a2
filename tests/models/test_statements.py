"""A message's statements: verbatim runs of its text, with the structure they need as context."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vault_pipeline.models.offline.statements import blocks, points_back, read_message, tidy

LIMITS = (25, 25)


def texts(markdown: str) -> list[str]:
    return [s.text for s in read_message(markdown, *LIMITS).statements]


def plain_of(markdown: str) -> str:
    """The message as its statements are cut from it: the blocks' text, markup gone."""
    found, _, _ = blocks(markdown)
    return " ".join(tidy(b.text) for b in found)


def run_of(statement: str, plain: str) -> bool:
    """Whether a statement is a contiguous run of the plain text (a first capital and a closing stop aside)."""
    core = statement.rstrip(".")
    return core in plain or (core[:1].lower() + core[1:]) in plain


def test_a_list_item_carries_its_lead_in_as_context() -> None:
    message = "Enkele populaire extensies zijn:\n\n1. Pydantic: Dit is een bibliotheek voor validatie van data.\n"
    (item,) = read_message(message, *LIMITS).statements
    assert item.kind == "item"
    assert item.label == "Pydantic"
    assert item.full_context(25) == "Enkele populaire extensies zijn"


def test_a_nested_item_stands_under_its_parent_item() -> None:
    message = "- Unity Pro plan for studios.\n  - It costs forty dollars per month.\n"
    nested = read_message(message, *LIMITS).statements[-1]
    assert nested.depth == 2
    assert nested.lead == "Unity Pro plan for studios."


def test_code_blocks_and_tables_are_left_to_the_transcript() -> None:
    message = "Run this first:\n\n```python\nprint('Set HOST to db in settings.')\n```\n\n| a | b |\n|---|---|\n| one two three four five | x |\n"
    reading = read_message(message, *LIMITS)
    assert reading.code_blocks == 1 and reading.tables == 1
    assert reading.statements == ()


def test_browsing_citation_markers_never_reach_a_statement() -> None:
    message = "Terraform is open-source infrastructure as code software by HashiCorp【5†source】."
    assert texts(message) == ["Terraform is open-source infrastructure as code software by HashiCorp."]


def test_a_long_sentence_gives_its_condition_to_the_context() -> None:
    message = (
        "If you run the Django app under Docker Compose with a separate database service, "
        "set HOST to the name of the database service in the settings file."
    )
    (s,) = read_message(message, 15, 20).statements
    assert s.text == "Set HOST to the name of the database service in the settings file."
    assert s.clause == "main"
    assert s.context is not None and s.context.startswith("If you run the Django app under Docker Compose")


def test_a_sentence_too_long_to_split_is_no_statement() -> None:
    message = " ".join(["word"] * 30) + "."
    reading = read_message(message, 15, 15)
    assert reading.statements == () and reading.long == 1


def test_a_pointing_opener_takes_the_sentence_before_it_as_context() -> None:
    message = (
        "Django's get_or_create looks up an object by its fields. This method creates the object when none is found."
    )
    second = read_message(message, *LIMITS).statements[1]
    assert second.points_back
    assert second.full_context(25) == "Django's get_or_create looks up an object by its fields."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("It works on every platform.", True),
        ("This method tries to fetch an object.", True),
        ("Also, these values are cached.", True),
        ("Het biedt een eenvoudige manier.", True),
        ("Het rapport maakt gebruik van data.", False),
        ("Pydantic: Dit is een bibliotheek.", False),
        ("Django ships an ORM.", False),
    ],
)
def test_points_back(text: str, expected: bool) -> None:
    assert points_back(text) is expected


def test_glyph_bullets_read_as_list_items() -> None:
    message = "Mijn taken voor vandaag:\n• Het contract met Rentapin verlengen.\n• De btw-administratie bijwerken.\n"
    reading = read_message(message, *LIMITS)
    assert [s.kind for s in reading.statements] == ["item", "item"]
    assert all(s.full_context(25) == "Mijn taken voor vandaag" for s in reading.statements)


_WORDS = st.lists(
    st.sampled_from("the cache holds each key for one hour and then drops it".split()), min_size=3, max_size=12
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_WORDS, min_size=1, max_size=4), st.booleans())
def test_every_statement_is_a_run_of_its_message(sentences: list[list[str]], as_list: bool) -> None:
    lines = [" ".join(words).capitalize() + "." for words in sentences]
    message = "\n".join(f"- {line}" for line in lines) if as_list else " ".join(lines)
    plain = plain_of(message)
    for text in texts(message):
        assert run_of(text, plain), (text, plain)
    assert all(re.search(r"[.!?]$", t) for t in texts(message))


def test_each_items_nested_list_stands_under_that_item_not_the_first():
    message = (
        "1. Feature: Track unfinished orders.\n    - Hint: Keep a status code on every order object.\n\n"
        "2. Feature: Record notification preferences.\n    - Hint: Add a settings page for the user's preferences.\n"
    )
    hints = [s for s in read_message(message, *LIMITS).statements if s.text.startswith("Hint")]
    assert [s.lead for s in hints] == ["Feature: Track unfinished orders.", "Feature: Record notification preferences."]
