"""Notes worth keeping: the offline extractor selects its source's own words, never cuts, makes no notes of noise.

Fidelity: identifiers, code spans (with their backticks), paths, numbers and URLs reach a note as
written; a sentence is a unit whole or as its main clause with the rest as context; what cannot be
said in the word limit is skipped and counted. Noise: headings and labels, salutations, quiz options,
program output, introductions ending in ':', bracketed asides and short fragments make no note.
"""

from __future__ import annotations

import random
import re

import pytest
import yaml

from tests.support.paths import shared_data
from vault_pipeline.ingest.extract import MAX_VERBATIM_WORDS, PROMPT_LIMITS, UnitBatch
from vault_pipeline.ingest.select import locate
from vault_pipeline.models.offline.extraction import extract_units
from vault_pipeline.models.offline.statements import is_verbatim
from vault_pipeline.text import FUNCTION_WORDS, word_count

EXPORT = "chatgpt-pkuppens-2023.json"
_EMPTY_BRACKETS = re.compile(r"(?:^|\s)(?:\(\s*\)|\[\s*\]|\{\s*\})")
_CODE_SPAN = re.compile(r"`[^`]+`")


def extracted(text: str, role: str = "assistant") -> tuple[list[str], int]:
    """(unit texts, pieces skipped) of one message, the units validated like a model's answer."""
    data = extract_units(
        {"title": "t", "messages": [{"id": "m1", "role": role, "speaker": role, "text": text}], **PROMPT_LIMITS}
    )
    context = {"message_ids": ["m1"], "roles": {"m1": role}, "texts": {"m1": text}}
    batch = UnitBatch.model_validate(data, context=context)
    return [u.text for u in batch.units if u.category != "topic"], data["skipped"]


def ends_on_function_word(sentence: str) -> bool:
    words = sentence.rstrip(".!?…\"'”’)] ").split()
    return bool(words) and words[-1].lower().rstrip(".,;:") in FUNCTION_WORDS


def literal_tokens(sentence: str) -> list[str]:
    """Code spans, and tokens holding '_', '.', '/' or a digit: what a note must keep character for character."""
    spans = _CODE_SPAN.findall(sentence)
    rest = [t.strip(".,;:!?()\"'“”‘’") for t in _CODE_SPAN.sub(" ", sentence).split()]
    return spans + [t for t in rest if re.search(r"[_./\d]", t)]


# --------------------------------------------------------------------------- fidelity


def test_identifiers_and_code_spans_keep_every_character():
    [unit], _ = extracted("Set `GCP_PROJECT_ID` in the workflow and compare expiration_date with `utf8_unicode_ci`.")
    assert unit == "Set `GCP_PROJECT_ID` in the workflow and compare expiration_date with `utf8_unicode_ci`."
    [unit], _ = extracted("Override __init__ and call `Flask.__call__()` from the app factory.")
    assert "__init__" in unit and "`Flask.__call__()`" in unit


def test_markdown_emphasis_is_removed_but_never_inside_a_name():
    [unit], _ = extracted("The **settings** live in config/base_settings.py and the *_id_* column is v2.5.")
    assert unit == "The settings live in config/base_settings.py and the _id_ column is v2.5."


def test_a_long_code_span_stays_whole_and_leaves_no_empty_brackets():
    text = "Call `linkage(normalized_movements, method='complete')` to cluster the stocks."
    [unit], _ = extracted(text)
    assert unit == text and not _EMPTY_BRACKETS.search(unit)


def test_a_name_opening_a_sentence_is_not_capitalised():
    [unit], _ = extracted("self.root holds the root node of the tree.")
    assert unit.startswith("self.root ")


def test_a_sentence_within_the_limit_is_a_unit_whole():
    sentence = (
        "De aanbevolen lengte van een Agile Scrum Sprint is typisch tussen één en vier weken, "
        "afhankelijk van de complexiteit van het project."
    )
    assert extracted(sentence)[0] == [sentence]
    sentence = (
        "However, if you absolutely need to parse `request.body` yourself, you can use `json.loads` "
        "on it in the view function."
    )
    assert extracted(sentence)[0] == [sentence]


def test_what_cannot_be_said_in_the_limit_is_skipped_and_counted_never_cut():
    long = (
        "Our tiny green robot quietly sweeps the dusty kitchen floor every single morning near the big old "
        "iron oven there while the family sleeps upstairs in their warm beds."
    )
    assert word_count(long) > MAX_VERBATIM_WORDS
    units, skipped = extracted(long + " The robot runs on two batteries.")
    assert units == ["The robot runs on two batteries."] and skipped == 1


def test_no_unit_ends_on_a_function_word():
    text = (
        "The gateway forwards every request to the service that was registered most recently by "
        "the operator and. Alleen als je het digitale DNA begrijpt, kun je ermee werken "
        "en het naar een hoger niveau tillen dat past bij de ambities van."
    )
    units, _ = extracted(text)
    assert not any(ends_on_function_word(u) for u in units)
    assert all(is_verbatim(u, text) for u in units)


# --------------------------------------------------------------------------- noise


@pytest.mark.parametrize(
    "text",
    [
        "## Expected Problems",
        "**Expected Problems**",
        "Here are the steps you need to follow:",
        "(e.g., clustering problems)",
        "Beste Marja,",
        "Dear John,",
        "Checkout your code.",
        "Then break.",
        "This is.",
        "A. To find ways to group customers\nB. To reduce the error of a model\nC. To plot the data",
        "Answer: B. To reduce the measurement error.\nA) Cluster it\nB) Plot it",
        "#8 7.804 Error: pg_config executable not found.",
        "2023-05-01 12:00:01 INFO Starting the worker process now.",
        "ERROR: Could not build wheels for psycopg2, which is required.",
        "D:\\repos\\app\\manage.py:105: RuntimeWarning: Got error checking consistent migration history.",
    ],
)
def test_structure_and_noise_make_no_note(text):
    assert extracted(text) == ([], 0)


def test_short_complete_sentences_and_list_items_that_say_something_stay():
    assert extracted("It works.")[0] == []  # too few words to find again
    assert extracted("LanceDB is an embedded database.")[0] == ["LanceDB is an embedded database."]
    units, _ = extracted("What changed:\n\n- The index rebuilds incrementally after each import.\n- Fast startup")
    assert units == ["The index rebuilds incrementally after each import."]
    # A list item without its lead-in or a heading is no note, however whole it reads.
    assert extracted("- The index rebuilds incrementally after each import.")[0] == []


def test_topic_is_the_title_or_nothing_never_recurring_terms():
    text = "The gravel garden uses raked gravel. Gravel stands for water. Raked gravel needs care."
    data = extract_units(
        {"title": "Karesansui notes", "messages": [{"id": "m1", "role": "user", "text": text}], **PROMPT_LIMITS}
    )
    assert [u["text"] for u in data["units"] if u["category"] == "topic"] == [
        "The conversation is about Karesansui notes."
    ]
    data = extract_units({"title": "", "messages": [{"id": "m1", "role": "user", "text": text}], **PROMPT_LIMITS})
    assert not [u for u in data["units"] if u["category"] == "topic"]


# --------------------------------------------------------------------------- the real export (optional)


def _export_messages(path) -> dict[str, str]:
    from vault_pipeline.ingest.parse import Conversation, read_export

    texts: dict[str, str] = {}
    for conv in read_export(path):
        if isinstance(conv, Conversation):
            for m in conv.messages:
                texts[m.id] = texts.get(m.id, "") + m.text
    return texts


def _atomic_notes(vault_root):
    for path in sorted((vault_root / "inbox").glob("*.md")):
        _, frontmatter, body = path.read_text(encoding="utf-8").split("---\n", 2)
        meta = yaml.safe_load(frontmatter)
        ids = meta.get("source_messages") or (meta.get("source") or {}).get("messages") or []
        yield meta, body.strip().splitlines()[0], [str(i) for i in ids]


@pytest.mark.slow
def test_real_export_notes_are_faithful_and_whole(tmp_path):
    path = shared_data() / "exports" / EXPORT
    if not path.exists():
        pytest.skip(f"real export not found at {path}")
    from vault_pipeline.models.offline import OfflineBackend
    from vault_pipeline.pipeline import ingest
    from vault_pipeline.vault.files import Vault

    Vault.init(tmp_path / "vault").close()
    vault = Vault.open(tmp_path / "vault")
    try:
        report = ingest(vault, [path], OfflineBackend())
    finally:
        vault.close()
    assert not report.errors and report.notes > 500
    messages = _export_messages(path)
    violations, dangling, brackets, short, reworded, alone = [], [], [], [], [], []
    notes = list(_atomic_notes(tmp_path / "vault"))
    for meta, sentence, ids in notes:
        if meta["category"] == "topic":
            continue  # a topic sentence names the conversation's title, not a message
        source = "".join(messages.get(i, "") for i in ids)
        violations += [(sentence, t) for t in literal_tokens(sentence) if t not in source]
        dangling += [sentence] if ends_on_function_word(sentence) else []
        brackets += [sentence] if _EMPTY_BRACKETS.search(_CODE_SPAN.sub("code", sentence)) else []
        short += [sentence] if len(sentence.split()) <= 3 else []
        # Selected, never rewritten: the sentence is a run of its source's own words, and a list item
        # is a note only with its lead-in or heading (its context).
        reworded += [] if is_verbatim(sentence, source) else [sentence]
        statement, _ = locate(sentence, source)
        alone += (
            [sentence] if statement and statement.kind == "item" and not (statement.lead or statement.heading) else []
        )
    print(f"\n{len(notes)} notes; {len(violations)} verbatim violations; {len(short)} of <= 3 words")
    assert not violations, random.Random(0).sample(violations, min(10, len(violations)))
    assert not reworded, reworded[:10]
    assert not alone, alone[:10]
    assert not dangling, dangling[:10]
    assert not brackets, brackets[:10]
    assert not any(s.startswith(("Recurring terms here are", "A recurring term here is")) for _, s, _ in notes)
