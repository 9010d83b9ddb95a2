"""Reasons a person reads: the notes' own words (no stems), scores that tell apart, no trivial relates."""

from __future__ import annotations

from vault_pipeline.models.offline.claims import parse_claim
from vault_pipeline.models.offline.judging import decide
from vault_pipeline.text import apart, stem


def test_a_reason_shows_the_notes_words_never_their_stems():
    a = "The staging server runs Debian on available hardware for the community."
    b = "The staging server runs Ubuntu to establish the baseline."
    relation, why = decide(parse_claim(a), parse_claim(b), a, b)
    assert relation == "related"
    assert "available" in why and "community" in why and "establish" in why
    assert stem("available") != "available" and f"{stem('available')}," not in why


def test_a_subject_of_closed_class_words_relates_nothing():
    a, b = "It may be available in the community edition.", "It may establish a link to the wiki."
    relation, why = decide(parse_claim(a), parse_claim(b), a, b)
    assert relation == "unrelated" and "no word that names a thing" in why


def test_scores_are_printed_with_the_places_that_separate_them():
    assert apart(0.6793, 0.68) == ("0.679", "0.680")
    assert apart(0.5, 0.68) == ("0.50", "0.68")
    assert apart(0.68, 0.68) == ("0.680000", "0.680000")  # equal: as many places as there are
