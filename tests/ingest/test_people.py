"""People pages: a hub note per named person, written by ingest, idempotent, and read by the funnel."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.fakes import HashEmbedder
from vault_pipeline import pipeline
from vault_pipeline.index.check import check
from vault_pipeline.ingest.parse import Conversation, Message
from vault_pipeline.ingest.people import People, named_people, people_in, person_id, write_people
from vault_pipeline.ingest.select import Selector
from vault_pipeline.ingest.write import IngestReport
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.types import FunnelConfig
from vault_pipeline.serve.remember import remember

DATA = Path(__file__).resolve().parents[1] / "data"

EVERY = Selector({}, 0.0, write=0.0, keep=0.0)  # writes every candidate: a small fixture, many notes

SESSIONS = [
    ("D1", "7:00 pm on 8 May, 2023", [
        ("Caroline", "I went to a support group yesterday and it was so powerful."),
        ("Melanie", "That is great, Caroline! I painted a lake at sunrise last week."),
    ]),
    ("D2", "1:00 pm on 25 May, 2023", [
        ("Melanie", "I signed up for a pottery class with my friend Jolene."),
        ("Caroline", "I am researching adoption agencies because I want to give a child a home."),
    ]),
]  # fmt: skip


def locomo_file(tmp_path):
    conversation = {"speaker_a": "Caroline", "speaker_b": "Melanie"}
    for n, (session, when, turns) in enumerate(SESSIONS, 1):
        conversation[f"session_{n}_date_time"] = when
        conversation[f"session_{n}"] = [
            {"speaker": who, "dia_id": f"{session}:{i}", "text": text} for i, (who, text) in enumerate(turns, 1)
        ]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{"sample_id": "conv-t", "conversation": conversation, "qa": []}]), encoding="utf-8")
    return path


def test_named_people_are_speakers_and_people_the_user_names_with_a_relation():
    def conv(*messages):
        return Conversation("chatgpt", "c1", "t", None, None, tuple(messages), "x")

    said = Message("m1", "user", "user", "My colleague Jan asked me; mijn zus Eva too. Then Python said so.", None)
    assert named_people(conv(said, Message("m2", "assistant", "assistant", "my friend Bob is here", None))) == {
        "Jan",
        "Eva",
    }
    assert named_people(conv(Message("m1", "user", "Caroline", "Hi.", None))) == {"Caroline"}
    assert named_people(conv(Message("m1", "user", "speaker", "my boss. My Friend", None))) == set()


def test_ingest_writes_a_page_per_person_and_nothing_the_second_time(make_vault, tmp_path):
    vault = make_vault()
    source = locomo_file(tmp_path)
    pipeline.ingest(vault, [source], OfflineBackend(), selector=EVERY)
    pages = {p.stem.rsplit("-", 1)[0]: p for p in (vault.root / "people").glob("*.md")}
    assert set(pages) == {"caroline", "melanie", "jolene"}
    caroline = pages["caroline"].read_text(encoding="utf-8")
    assert f"id: {person_id('Caroline')}" in caroline and "type: topic" in caroline and "- person" in caroline
    sessions = sorted(p.stem for p in (vault.root / "sessions").glob("*.md"))
    assert all(f"[[{stem}]]" in caroline for stem in sessions)  # she speaks in both
    jolene = pages["jolene"].read_text(encoding="utf-8")
    assert sum(f"[[{stem}]]" in jolene for stem in sessions) == 1  # named in one
    again = pipeline.ingest(vault, [source], OfflineBackend(), selector=EVERY)
    assert again.writes.get("written", 0) == 0 and again.writes.get("updated", 0) == 0
    embedder = HashEmbedder()
    pipeline.index(vault, embedder)
    assert check(vault, embedder=embedder).problems == 0  # the new folder breaks nothing


def test_a_question_about_a_person_draws_on_their_page(make_vault, tmp_path):
    vault = make_vault()
    pipeline.ingest(vault, [locomo_file(tmp_path)], OfflineBackend(), selector=EVERY)
    embedder = HashEmbedder()
    pipeline.index(vault, embedder)
    (package,) = pipeline.query(
        vault,
        [("What is Caroline researching for her future family?", None)],
        embedder=embedder,
        llm_plan=OfflineBackend(),
        llm_gate=OfflineBackend(),
        config=FunnelConfig(floor=0.0, stop=0.0),
    )
    page = person_id("Caroline")
    from_page = [t for t in package.to_dict(trace=True)["trace"] if t["expanded_from"] == page]
    assert from_page, "the page's conversations joined the hop"
    assert {t["path"].split("/")[0] for t in from_page} == {"sessions"}  # her conversations' turns
    assert not any(b.item.note_id == page for b in package.blocks)  # a hub is no block


LABELS = [json.loads(line) for line in (DATA / "people_labels.jsonl").read_text(encoding="utf-8").splitlines() if line]


def test_the_labelled_sentences_name_exactly_their_people():
    """Every labelled test sentence: its person found, and no page for a labelled non-person."""
    for row in (r for r in LABELS if r["source"] == "tests"):
        found = people_in(row["text"])
        if row["person"]:
            assert row["name"] in found, row
        else:
            assert row["name"] not in found and not found, row


def test_cues_in_english_and_dutch_and_no_page_for_things():
    assert people_in("Caroline from finance asked. Dear Marja, thanks.") == {"Caroline", "Marja"}
    assert people_in("Mijn buurman Gerrit en collega Anne-Marie. Een mail naar Marja Janssen.") == {
        "Gerrit",
        "Anne-Marie",
        "Marja Janssen",
    }
    assert people_in("We use Python, Django and LanceDB. Data from sensors. Thankfully, my son is fine.") == set()
    assert people_in("I will ask Google. May I? Python says no. The model of Schulz von Thun.") == {"Schulz von Thun"}


def test_a_signature_a_credit_and_a_style_name_a_person_and_a_team_or_product_does_not():
    # Sentences of this test's own, shaped as the export's were (a sign-off glued to the text, a
    # testimonial's credit in a template, a style named after an author).
    assert people_in("Tot snel.Met vriendelijke groet,Eva Mooren - Opruimcoach") == {"Eva Mooren"}
    assert people_in("Thanks for your time.\n\nKind regards,\nJan de Vries") == {"Jan de Vries"}
    assert people_in("<div class='q'>{'Best shop ever':'Sanne Wieringa, Rabobank'}</div>") == {"Sanne Wieringa"}
    assert people_in("Write it in Tolkien style, and then in Pratchett's style.") == {"Tolkien", "Pratchett"}
    assert people_in("Kind regards, Support Team. Met vriendelijke groet, [Uw naam]. Regards, The team") == set()
    assert people_in("Remember Jon, Caroline? Use 'Unity Personal, Unity Plus' and 'Cloud Run, Kubernetes'.") == set()
    assert people_in("Write it in Python style, in a formal style.") == set()


def test_a_page_quotes_the_users_sentences_and_links_later_mentions_whichever_chat_came_first(make_vault):
    vault = make_vault()
    later = Conversation(
        "chatgpt",
        "c2",
        "Deadline",
        None,
        None,
        (Message("m2", "user", "user", "Marta's review came back.", None),),
        "x",
    )
    named = Conversation(
        "chatgpt",
        "c1",
        "Review",
        None,
        None,
        (Message("m1", "user", "user", "I'll ask Marta to review it.", None),),
        "x",
    )
    people = People()
    people.add(later, "deadline")
    people.add(named, "review", [("marta-asked", "Marta reviews the draft.")])
    assert set(people.pages()) == {"Marta"}
    report = IngestReport()
    (path,) = write_people(vault, people, report)
    text = (vault.root / path).read_text(encoding="utf-8")
    assert "- Marta's review came back. ([[deadline#^m-m2]])" in text
    assert "- I'll ask Marta to review it. ([[review#^m-m1]])" in text
    assert all(f"[[{s}]]" in text for s in ("deadline", "review", "marta-asked"))
    assert write_people(vault, people, report) and report.writes["unchanged"] == 1  # re-ingest: nothing new


def test_remember_naming_a_person_links_their_page(make_vault):
    vault = make_vault()
    report = remember(
        vault, "My colleague Jan prefers PostgreSQL over MySQL for the billing service.", OfflineBackend()
    )
    assert report.written
    (page,) = (vault.root / "people").glob("*.md")
    text = page.read_text(encoding="utf-8")
    assert "# Jan" in text and f"[[{Path(report.written[0]).stem}]]" in text
    again = remember(vault, "Jan wants the billing service moved to Kubernetes next quarter.", OfflineBackend())
    text = page.read_text(encoding="utf-8")
    assert all(f"[[{Path(p).stem}]]" in text for p in again.written)  # a known person: no cue needed
