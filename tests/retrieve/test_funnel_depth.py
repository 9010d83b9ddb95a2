"""Depth by budget and associative recall: how deep the funnel goes, why it stops, what one hop adds."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pytest

from tests.support.fakes import FakeRetriever, HashEmbedder, fake_row, note_text, stats_of, traced, write_file
from vault_pipeline.ingest.notes import block_id
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.models.offline.relevance import DEFAULT, RelevanceModel
from vault_pipeline.retrieve.blocks import duplicate_key
from vault_pipeline.retrieve.expand import as_turn, asks, feedback_terms, neighbours, turn_excerpts
from vault_pipeline.retrieve.funnel import run_query
from vault_pipeline.retrieve.hop import fused_strongest
from vault_pipeline.retrieve.types import Candidate, FunnelConfig
from vault_pipeline.text import estimate_tokens

CONV = "conv-7:session_1"
TURN = "Then we covered wheels, bowls and firing temperatures."
MESSAGES = [f"D1:{i}" for i in range(1, 9)]


def note(i: int, sentence: str, **fields):
    message = MESSAGES[i - 1]
    body = f"{sentence}\n\nContext: Caroline, 8 May 2023.\n\nSource: [[caroline-session-1#^{block_id(message)}]]"
    return fake_row(
        note_id=f"a-{i}",
        path=f"inbox/a-{i}.md",
        text=body,
        tier="chat",
        status="provisional",
        created="2023-05-08T13:56:00+00:00",
        source_conversation=CONV,
        source_messages=[message],
        **fields,
    )


def session_row():
    turns = "\n\n".join(f"**Caroline:** {TURN} ^{block_id(m)}" for m in MESSAGES)
    return fake_row(
        note_id="s-1",
        chunk_id="s-1:1",
        path="sessions/caroline-session-1.md",
        type="session",
        tier="chat",
        heading="Caroline session 1 > Transcript",
        created="2023-05-08T13:56:00+00:00",
        text=f"Caroline session 1 > Transcript\n\n## Transcript\n\n{turns}",
        source_conversation=CONV,
        source_messages=MESSAGES,
    )


@pytest.fixture
def embedder():
    return HashEmbedder(dim=512)


def run(retriever, embedder, query="pottery class glaze kiln", intent=None, llm_gate=None, **config):
    return run_query(
        query,
        retriever=retriever,
        embedder=embedder,
        llm_plan=OfflineBackend(),
        llm_gate=llm_gate or OfflineBackend(),
        config=FunnelConfig(**{"variants": False, "gate_enabled": False, **config}),
        intent=intent,
    )


def asking_rows(question: str, answer: str, *more):
    """The pottery session: the seed's turn, the teacher's remark, a question, its answer, ``more``."""
    return [
        note(2, "I signed up for a pottery class with a glaze and kiln workshop."),
        note(3, "My teacher says the first bowl is always lopsided."),
        note(5, question),
        note(6, answer),
        *more,
        session_row(),
    ]


def pottery_rows(n: int):
    """``n`` notes that all match the query's words, each about 20 tokens as a block."""
    return [
        fake_row(note_id=f"p-{i:02d}", text=f"Pottery class {i}: the glaze went into the kiln at dawn, batch {i}.")
        for i in range(n)
    ]


# --------------------------------------------------------------------------- depth by budget


def test_depth_widens_until_the_survivors_fill_the_budget(embedder):
    retriever = FakeRetriever(pottery_rows(60), embedder)
    package = run(retriever, embedder, budget=400, wide=10, per_list=60, floor=0.0)
    depth = stats_of(package)["depth"]
    assert depth["stopped"].startswith("budget filled")
    assert depth["survivor_tokens"] >= 400 and depth["candidates"] < 60
    assert depth["steps"] == [10, 20, 40][: len(depth["steps"])] and depth["candidates"] == depth["steps"][-1]
    went_on = [t for t in traced(package) if t["wide"]]
    assert len(went_on) == depth["candidates"] == stats_of(package)["candidates"]
    beyond = [t for t in traced(package) if not t["wide"]]
    assert beyond and all("beyond the depth reached" in t["reason"] for t in beyond)
    assert package.tokens <= 400


def test_a_bigger_budget_goes_deeper_and_says_why_it_stopped(embedder):
    small = run(FakeRetriever(pottery_rows(60), embedder), embedder, budget=200, wide=10, per_list=60, floor=0.0)
    large = run(FakeRetriever(pottery_rows(60), embedder), embedder, budget=5000, wide=10, per_list=60, floor=0.0)
    assert stats_of(small)["depth"]["candidates"] < stats_of(large)["depth"]["candidates"]
    assert stats_of(large)["depth"]["stopped"].startswith("candidates exhausted")
    assert len(large.blocks) == 60 > len(small.blocks)


def test_depth_stops_when_the_next_candidates_fall_below_the_floor(embedder):
    rows = pottery_rows(5) + [fake_row(note_id=f"z-{i:02d}", text=f"Unrelated zebra fact {i}.") for i in range(40)]
    package = run(FakeRetriever(rows, embedder), embedder, budget=5000, wide=5, per_list=45, floor=0.3)
    assert stats_of(package)["depth"]["stopped"].startswith("scores fell off")
    assert stats_of(package)["depth"]["candidates"] == 10  # 5 pottery notes pass, the next 5 all fall below


def test_fixed_depth_when_not_adaptive(embedder):
    package = run(FakeRetriever(pottery_rows(60), embedder), embedder, budget=5000, wide=7, adaptive=False)
    assert stats_of(package)["depth"] == {
        "candidates": 7,
        "steps": [7],
        "stopped": "fixed depth: wide 7",
        "survivor_tokens": stats_of(package)["depth"]["survivor_tokens"],
    }
    assert stats_of(package)["expansion"] == {}


# --------------------------------------------------------------------------- associative recall


def conversation(embedder):
    rows = [
        note(1, "We talked about the weather."),
        note(2, "I signed up for a pottery class with a glaze and kiln workshop."),
        note(3, "My teacher says the first bowl is always lopsided."),
        note(4, "We had lunch afterwards."),
        note(5, "The zebra at the zoo was asleep."),
        note(8, "The bus was late again."),
        session_row(),
    ]
    return FakeRetriever(rows, embedder)


def test_the_funnel_is_a_chain_of_typed_stages_each_reporting_in_its_result(embedder):
    from vault_pipeline.retrieve import funnel
    from vault_pipeline.retrieve.reports import DepthReport, FeedbackReport, HopReport
    from vault_pipeline.retrieve.state import Query, Tools

    tools = Tools(conversation(embedder), embedder, OfflineBackend(), OfflineBackend())
    config = FunnelConfig(variants=False, gate_enabled=False, floor=-1.0, beam=1, radius=1, turns=0, wide=1, per_list=1)
    q = Query(text="pottery class glaze kiln", config=config, tools=tools)
    planned = funnel.plan(q)
    lanes = funnel.retrieve(q, planned)
    absent = funnel.find_absent(q, lanes)
    judged = funnel.deepen(q, lanes)
    assert isinstance(judged.walk.depth, DepthReport) and judged.walk.feedback is None and judged.walk.hop is None
    for stage in (funnel.feedback, funnel.hop, funnel.whole_turns, funnel.drop_superseded):
        judged = stage(q, judged)
    assert isinstance(judged.walk.feedback, FeedbackReport) and isinstance(judged.walk.hop, HopReport)
    assert judged.walk.whole_turns is None and judged.walk.superseded is None
    verdict = funnel.judge_found(q, funnel.rank_survivors(q, judged), absent)
    package = funnel.assemble_package(q, verdict, absent)
    assert package.stats is not None and package.stats.walk.depth == judged.walk.depth
    assert package.to_json() == run(conversation(embedder), embedder, **vars_of(config)).to_json()


def test_the_package_is_rendered_once_and_the_text_counted_is_the_text_returned(embedder, monkeypatch):
    from vault_pipeline.retrieve import package as package_mod
    from vault_pipeline.retrieve.metering import token_counter

    rendered = []
    inner = package_mod._package_markdown

    def counting(*args):
        rendered.append(inner(*args))
        return rendered[-1]

    monkeypatch.setattr(package_mod, "_package_markdown", counting)
    package = run(conversation(embedder), embedder)
    text = package.to_markdown()
    assert package.blocks and len(rendered) == 1 and text is rendered[0]
    assert package.tokens == token_counter(package.tokenizer).count(text) == package.to_dict()["stats"]["tokens"]
    assert package.to_mcp()[0] is text and len(rendered) == 1
    copy = dataclasses.replace(package, blocks=())  # a copy renders its own text
    assert copy.to_markdown() != text and len(rendered) == 2


def vars_of(config: FunnelConfig) -> dict:
    return {k: v for k, v in vars(config).items() if k not in ("variants", "gate")}


def test_the_index_and_the_shared_fake_offer_the_whole_retriever_protocol():
    from vault_pipeline.index.search import Index
    from vault_pipeline.retrieve.types import Retriever

    members = {name for name in vars(Retriever) if not name.startswith("_")}
    assert members == {
        "start_search",
        "read_conversations",
        "superseded_messages",
        "rows_by_stem",
        "related_stems",
        "unknown_words",
    }
    assert all(callable(getattr(Index, n, None)) and callable(getattr(FakeRetriever, n, None)) for n in members)


def test_one_hop_adds_the_neighbouring_turns_through_the_floor_and_gate(embedder):
    retriever = conversation(embedder)
    # Lanes of one hit: the walk sees the pottery note alone, so what else enters came by the hop.
    package = run(retriever, embedder, budget=2000, floor=-1.0, beam=1, radius=1, turns=0, wide=1, per_list=1)
    trace = {t["id"]: t for t in traced(package)}
    # The pottery note is the seed; its session neighbours (turns 1 and 3) join, credited to it.
    assert stats_of(package)["expansion"]["seeds"] == ["a-2"]
    assert trace["a-3"]["expanded_from"] == "a-2" and trace["a-3"]["lanes"] == ["neighbour"]
    assert trace["a-1"]["expanded_from"] == "a-2"
    assert trace["a-3"]["floor"] == "pass" and trace["a-3"]["rank"] is not None
    assert "a-3" in [b.item.note_id for b in package.blocks]
    assert retriever.conversations_read == [(CONV,)]  # one lookup for the beam's conversations
    # A floor above the neighbours' cosine drops them: the same floor as every other candidate.
    strict = run(
        conversation(embedder), embedder, budget=2000, floor=0.2, beam=1, radius=1, turns=0, wide=1, per_list=1
    )
    entry = next(t for t in traced(strict) if t["id"] == "a-3")
    assert entry["floor"] == "drop" and entry["expanded_from"] == "a-2" and entry["rank"] is None


def test_neighbours_follow_the_session_order_within_the_radius(embedder):
    rows = conversation(embedder).rows
    seed = next(r for r in rows if r.note_id == "a-2")
    near = [(r.note_id, s) for r, s in neighbours([seed], rows, 1)]
    assert near == [("a-1", "a-2"), ("a-3", "a-2")]
    wider = [r.note_id for r, _ in neighbours([seed], rows, 3)]
    assert wider == ["a-1", "a-3", "a-4", "a-5"]  # turn 8 is beyond three turns


def test_the_hop_seeds_are_the_survivors_the_lanes_rank_highest_not_the_nearest_by_cosine():
    near = Candidate(fake_row(note_id="a-near"), rrf=1 / 61, lanes=("vector",), variants=("original",), similarity=0.72)
    both = Candidate(
        fake_row(note_id="a-both"), rrf=2 / 62, lanes=("vector", "text"), variants=("original",), similarity=0.51
    )
    tied = Candidate(fake_row(note_id="a-tied"), rrf=2 / 62, lanes=("text",), variants=("concept",), similarity=0.3)
    assert [c.row.note_id for c in fused_strongest([near, tied, both], 2)] == ["a-both", "a-tied"]
    assert [c.row.note_id for c in fused_strongest([near, tied, both], 5)] == ["a-both", "a-tied", "a-near"]


def test_ahead_the_neighbours_are_the_seed_turns_notes_and_the_reply_after_it(embedder):
    rows = conversation(embedder).rows
    seed = next(r for r in rows if r.note_id == "a-3")
    assert [r.note_id for r, _ in neighbours([seed], rows, 1, ahead=True)] == ["a-4"]  # not turn 2 before it
    sibling = replace(next(r for r in rows if r.note_id == "a-4"), note_id="a-3b", chunk_id="a-3b#0")
    sibling = replace(sibling, source_messages=seed.source_messages)
    found = [r.note_id for r, _ in neighbours([seed], [*rows, sibling], 1, ahead=True)]
    assert found == ["a-3b", "a-4"]  # the rest of the question's own turn comes too


def test_asks_reads_the_sentence_of_a_note_and_the_end_of_a_turn():
    question = note(5, "Did the glaze on your pottery crack in the kiln?")
    assert asks(question)  # its Context and Source lines come after the sentence
    assert not asks(note(4, "We had lunch afterwards."))
    turn = fake_row(type="turn", text="Caroline: That bowl is lovely! What gave you the idea for the colours?")
    assert asks(turn)
    assert not asks(replace(turn, text="Caroline: Why? Because I could."))


def test_a_survivor_that_asks_a_question_brings_the_turn_that_answers_it(embedder):
    rows = asking_rows(
        "Did it crack in the kiln?", "No, it came out shiny and smooth.", note(8, "The bus was late again.")
    )
    settings = {"budget": 2000, "floor": -1.0, "beam": 1, "radius": 1, "turns": 0, "wide": 2, "per_list": 2}
    package = run(FakeRetriever(rows, embedder), embedder, **settings)
    trace = {t["id"]: t for t in traced(package)}
    # a-2 is the beam's seed; a-5 survives beyond the beam and asks; turn 6 answers it, out of a-2's radius.
    assert stats_of(package)["expansion"]["seeds"] == ["a-2"] and stats_of(package)["expansion"]["questions"] == 1
    assert trace["a-6"]["expanded_from"] == "a-5" and trace["a-6"]["lanes"] == ["neighbour"]
    assert "a-6" in [b.item.note_id for b in package.blocks]
    assert "a-8" not in trace  # the turn after the reply is not reached
    without = run(FakeRetriever(rows, embedder), embedder, replies=0, **settings)
    assert "a-6" not in {t["id"] for t in traced(without)} and stats_of(without)["expansion"]["questions"] == 0


def test_a_question_that_shares_no_word_with_the_prompt_brings_no_reply(embedder):
    """A question survives on its cosine alone (any Dutch question sits near a Dutch prompt): its
    answer would bring another subject, so only a question holding one of the prompt's terms does."""
    rows = asking_rows(
        "Did you finish the novel you were reading?", "No, I gave up halfway through the second chapter."
    )
    settings = {"budget": 2000, "floor": -1.0, "beam": 1, "radius": 1, "turns": 0, "wide": 10, "per_list": 10}
    package = run(FakeRetriever(rows, embedder), embedder, **settings)
    trace = {t["id"]: t for t in traced(package)}
    assert stats_of(package)["expansion"]["seeds"] == ["a-2"]
    assert trace["a-5"]["floor"] == "pass" and trace["a-5"]["expanded_from"] is None  # it went on, and asks
    assert stats_of(package)["expansion"]["questions"] == 0
    assert trace.get("a-6", {}).get("expanded_from") != "a-5"
    asked = [replace(r, text=r.text.replace("the novel you were reading", "the kiln workshop")) for r in rows]
    again = run(FakeRetriever(asked, embedder), embedder, **settings)
    assert stats_of(again)["expansion"]["questions"] == 1  # the same question with the prompt's "kiln"
    meant = run(FakeRetriever(rows, embedder), embedder, intent="pottery class and the novel I am reading", **settings)
    assert stats_of(meant)["expansion"]["questions"] == 1  # the user's intent names the novel


def test_where_each_message_is_a_chunk_the_neighbouring_turns_themselves_join(embedder):
    """With the index's one chunk per transcript message, a turn is a seed too, and the turns
    within the radius enter as turns (beside the notes citing them)."""

    def message_row(i: int, said: str):
        message = MESSAGES[i - 1]
        text = f"Caroline session 1 > Transcript\n\n**Caroline:** {said} ^{block_id(message)}"
        return replace(session_row(), chunk_id=f"s-1:{i}", text=text)

    said = {1: "Morning.", 2: "I signed up for a pottery class.", 3: "The first bowl is lopsided.", 4: "Lunch now."}
    rows = [
        note(3, "My teacher says the first bowl is always lopsided."),
        *(message_row(i, t) for i, t in said.items()),
    ]
    seed = as_turn(rows[2])
    assert (seed.type, seed.text, seed.source_messages) == (
        "turn",
        "Caroline: I signed up for a pottery class.",
        '["D1:2"]',
    )
    near = [(r.type, r.chunk_id, s) for r, s in neighbours([seed], rows, 1)]
    assert near == [("atomic", "a-3#0", "s-1"), ("turn", "s-1:1@D1:1", "s-1"), ("turn", "s-1:3@D1:3", "s-1")]
    assert [r.text for r, _ in neighbours([seed], rows, 1) if r.type == "turn"] == [
        "Caroline: Morning.",
        "Caroline: The first bowl is lopsided.",
    ]
    # A chunk holding several turns (an index of the older chunking) is no turn of its own.
    assert as_turn(session_row()) == session_row()


def test_a_turn_enters_verbatim_only_when_it_carries_words_its_notes_lack(embedder):
    rows = conversation(embedder).rows
    seed = next(r for r in rows if r.note_id == "a-2")
    (turn, credited), *rest = turn_excerpts([seed], rows)
    assert not rest and credited == "a-2" and turn.type == "turn"
    assert turn.text == f"Caroline: {TURN}" and json.loads(turn.source_messages) == ["D1:2"]
    covered = replace(seed, text=TURN)
    assert turn_excerpts([covered], [covered, *rows[1:]]) == []  # nothing new: the note already says it


def test_feedback_terms_come_from_the_kept_notes_and_skip_the_query_words():
    kept = [
        fake_row(note_id="k1", text="The manuscript draft goes to the reviewer on Monday."),
        fake_row(note_id="k2", text="The reviewer wants the manuscript shorter."),
    ]
    assert feedback_terms("peer review for our paper", kept, 3) == ["manuscript", "reviewer", "draft"]
    assert feedback_terms("peer review", kept, 0) == []


def test_feedback_widens_the_query_when_few_survive(embedder):
    rows = [
        fake_row(note_id="k1", text="The manuscript draft for the paper goes to the reviewer on Monday."),
        fake_row(note_id="k2", text="The reviewer asked for a shorter manuscript and clearer figures."),
        fake_row(note_id="x1", text="Zebras sleep standing up."),
    ]
    package = run(FakeRetriever(rows, embedder), embedder, query="our paper", floor=0.05, feedback_below=3)
    expansion = stats_of(package)["expansion"]
    assert expansion["feedback_terms"] and "manuscript" in expansion["feedback_terms"]
    assert stats_of(package)["variants"][-1]["kind"] == "feedback"
    assert "k2" in [b.item.note_id for b in package.blocks]  # found through the feedback query


def test_expansion_is_deterministic(embedder):
    outputs = {
        run(conversation(HashEmbedder(dim=512)), HashEmbedder(dim=512), floor=-1.0, gate_enabled=True).to_json()
        for _ in range(5)
    }
    assert len(outputs) == 1


def test_the_strongest_survivors_turn_replaces_its_notes_in_the_package(embedder):
    package = run(conversation(embedder), embedder, floor=-1.0, beam=0, turns=1, wide=1, per_list=1)
    turns = [b for b in package.blocks if b.item.type == "turn"]
    assert [b.text for b in turns] == [f"[Caroline, 8 May 2023] {TURN}"]
    assert turns[0].to_dict()["source"]["messages"] == ["D1:2"] and turns[0].level == "core"
    assert turns[0].item.links == (f"caroline-session-1#^{block_id('D1:2')}",)  # the turn's own block
    seed = next(t for t in traced(package) if t["id"] == "a-2")
    assert seed["collapsed_into"] == "s-1" and "a-2" not in [b.item.note_id for b in package.blocks]
    assert stats_of(package)["expansion"]["turns"] == 1


def test_a_surviving_topic_hub_brings_its_members_and_is_no_block_itself(embedder):
    hub = fake_row(
        note_id="h-pottery",
        path="topics/pottery-hub.md",
        type="topic",
        tier="chat",
        source_conversation="",
        source_messages=[],
        text="# Pottery glaze kiln hub\n\n- [[a-4]]\n- [[a-8]]",
    )
    retriever = FakeRetriever([*conversation(embedder).rows, hub], embedder)
    package = run(retriever, embedder, floor=-1.0, beam=2, radius=0, turns=0, wide=2, per_list=2)
    trace = {t["id"]: t for t in traced(package)}
    assert "h-pottery" in stats_of(package)["expansion"]["seeds"]
    assert trace["a-4"]["expanded_from"] == "h-pottery" and trace["a-8"]["expanded_from"] == "h-pottery"
    ids = [b.item.note_id for b in package.blocks]
    assert {"a-4", "a-8"} <= set(ids) and "h-pottery" not in ids


def test_a_turn_not_much_dearer_than_its_notes_enters_whole_with_its_dates(embedder):
    said = "I glazed two bowls yesterday, then the kiln cracked one."
    context = "Context: Caroline, 8 May 2023; “yesterday” is 7 May 2023."
    link = f"Source: [[caroline-session-1#^{block_id('D1:6')}]]"
    parts = ["I glazed two bowls yesterday.", "The kiln cracked one bowl."]
    notes = [
        replace(note(6, p, chunk_id=f"a-6{i}:1"), note_id=f"a-6{i}", text=f"{p}\n\n{context}\n\n{link}")
        for i, p in enumerate(parts)
    ]
    other = note(7, "We glazed mugs with a kiln wash.")
    turns = "\n\n".join(
        f"**Caroline:** {said if m == 'D1:6' else 'Nothing about it.'} ^{block_id(m)}" for m in MESSAGES
    )
    session = replace(session_row(), text=f"Caroline session 1 > Transcript\n\n## Transcript\n\n{turns}")
    # The hop reads the strongest survivor's session (beam 1); its turns are what may enter whole.
    kwargs = {"query": "glazed bowls kiln", "floor": -1.0, "beam": 1, "turns": 0, "radius": 0, "budget": 2000}
    package = run(FakeRetriever([*notes, other, session], embedder), embedder, **kwargs)
    blocks = {b.item.type: b for b in package.blocks}
    # Two notes of one turn repeat its date and speaker; the turn says both for no more tokens.
    assert (
        blocks["turn"].text
        == "[Caroline, 8 May 2023] I glazed two bowls yesterday (7 May 2023), then the kiln cracked one."
    )
    assert blocks["turn"].to_dict()["source"]["messages"] == ["D1:6"]
    assert {t["id"]: t["collapsed_into"] for t in traced(package) if t["id"] in ("a-60", "a-61")} == {
        "a-60": "s-1",
        "a-61": "s-1",
    }
    assert "a-7" in [b.item.note_id for b in package.blocks]  # a lone note stays a note
    assert stats_of(package)["expansion"]["whole_turns"] == 1
    turn_trace = next(t for t in traced(package) if t["lanes"] == ["turn"])
    assert turn_trace["gate"] == "keep" and turn_trace["reason"].startswith("whole turn: its 2 notes passed")
    assert "1 whole turns in place of their notes, 1 kept" in package.stats.walk_line()  # what --explain prints
    notes_only = run(FakeRetriever([*notes, other, session], embedder), embedder, whole_turns=False, **kwargs)
    assert {b.item.note_id for b in notes_only.blocks} == {"a-60", "a-61", "a-7"}
    # No session read by the hop, no lookup of its own: the notes stay notes.
    unread = run(FakeRetriever([*notes, other, session], embedder), embedder, **{**kwargs, "beam": 0})
    assert "turn" not in {b.item.type for b in unread.blocks}
    # A turn somewhat dearer than its notes still enters (up to ``whole_turn_cost`` times their
    # tokens); a turn far dearer stays out: the notes are the cheaper way to say it.
    notes_cost = sum(estimate_tokens(b.text) for b in notes_only.blocks if b.item.note_id != "a-7")

    def turn_costing(share: float) -> object:
        # The session with turn D1:6 padded until its block costs ``share`` times the two notes.
        tail = ""
        while estimate_tokens(f"[Caroline, 8 May 2023] {said}{tail}") < share * notes_cost:
            tail += " busy"
        return replace(session, text=session.text.replace(said, said + tail))

    dearer = turn_costing(1.25)
    package = run(FakeRetriever([*notes, other, dearer], embedder), embedder, **kwargs)
    assert "turn" in {b.item.type for b in package.blocks}
    strict = run(FakeRetriever([*notes, other, dearer], embedder), embedder, whole_turn_cost=1.0, **kwargs)
    assert "turn" not in {b.item.type for b in strict.blocks}
    package = run(FakeRetriever([*notes, other, turn_costing(2.0)], embedder), embedder, **kwargs)
    assert "turn" not in {b.item.type for b in package.blocks}


def test_the_one_hop_follows_the_related_links_of_the_strongest_survivors(embedder):
    rows = [
        fake_row(note_id="e-paper", path="engrams/e-paper.md", text="Our paper goes to peer review in March."),
        fake_row(note_id="e-refs", path="engrams/e-refs.md", text="Zotero holds every citation we used."),
        fake_row(note_id="e-other", path="engrams/e-other.md", text="The office plant needs water."),
    ]
    kwargs = {"query": "paper peer review", "floor": -1.0, "beam": 1, "radius": 0, "turns": 0, "wide": 1, "per_list": 1}
    linked = {"engrams/e-paper.md": ["e-refs"]}
    package = run(FakeRetriever(rows, embedder, related=linked), embedder, **kwargs)
    trace = {t["id"]: t for t in traced(package)}
    assert trace["e-refs"]["expanded_from"] == "e-paper" and trace["e-refs"]["lanes"] == ["neighbour"]
    assert "e-refs" in [b.item.note_id for b in package.blocks] and "e-other" not in trace
    assert stats_of(package)["expansion"]["related"] == 1 and stats_of(package)["expansion"]["seeds"] == ["e-paper"]
    assert "(1 by related links)" in package.stats.walk_line()
    unlinked = run(FakeRetriever(rows, embedder), embedder, **kwargs)
    assert "e-refs" not in [b.item.note_id for b in unlinked.blocks]
    assert stats_of(unlinked)["expansion"]["related"] == 0


def test_the_same_sentence_is_one_block_unless_two_named_people_said_it(embedder):
    said = "Expertise in Waterfall/V-model, Agile/Scrum/Kanban methodologies."
    pasted = [
        fake_row(note_id=f"cv-{i}", text=f"{said}\n\nContext: {day}.\n\nSource: [[cv-{i}#^m-1]]", tier="chat")
        for i, day in enumerate(("7 June 2023", "14 April 2023"))
    ]
    # The same line in two conversations (no person named): one key, so one block.
    assert duplicate_key(pasted[0]) == duplicate_key(pasted[1]) != duplicate_key(note(1, said))
    caroline = note(1, "I moved to Berlin.")
    melanie = replace(caroline, note_id="m-1", text=caroline.text.replace("Caroline", "Melanie"))
    assert duplicate_key(caroline) != duplicate_key(melanie)  # two people, two facts
    package = run(
        FakeRetriever([*pasted, pottery_rows(1)[0]], embedder), embedder, query="Agile Scrum Kanban", floor=-1.0
    )
    kept = [b.item.note_id for b in package.blocks if b.item.note_id.startswith("cv-")]
    assert len(kept) == 1 and stats_of(package)["deduped"] == 1


def test_a_verbatim_turn_is_gated_with_its_seed_notes_vector_not_embedded_again(embedder):
    seen: list[str] = []

    class Counting(HashEmbedder):
        def embed(self, texts):
            seen.extend(texts)
            return super().embed(texts)

    counting = Counting(dim=512)
    retriever = conversation(counting)
    seen.clear()
    # A vault's fitted signal gate (the relevance model reads text, not vectors).
    signal_gate = OfflineBackend(
        relevance=RelevanceModel(DEFAULT.weights, DEFAULT.bias, DEFAULT.threshold, source="a fit")
    )
    package = run(
        retriever, counting, floor=-1.0, beam=0, turns=1, wide=1, per_list=1, gate_enabled=True, llm_gate=signal_gate
    )
    assert [b.item.type for b in package.blocks if b.item.type == "turn"] == ["turn"]
    assert not [t for t in seen if TURN in t]  # the turn's text never went to the embedder


def test_a_transcript_message_found_by_the_lanes_is_a_turn_block_with_its_dates(make_vault, embedder):
    """The index keeps one chunk per transcript message: a turn no atomic note carries is found by
    the lanes themselves and enters as ``[speaker, day] text`` with its relative time resolved."""
    from datetime import UTC, datetime

    from tests.ingest.test_notes import Message, conversation
    from vault_pipeline.index.search import Index
    from vault_pipeline.index.sync import sync
    from vault_pipeline.ingest.notes import session_note

    said = "I ran a charity race for mental health last Saturday, it was rewarding."
    lines = [("Caroline", "Hey Mel, what's new with you?"), ("Melanie", said), ("Caroline", "Great to hear it.")]
    conv = replace(
        conversation(*(Message(f"D2:{i}", "user", who, text) for i, (who, text) in enumerate(lines, 1))),
        kind="locomo",
        id="conv-9:session_2",
        created=datetime(2023, 5, 25, 13, 14, tzinfo=UTC),
    )
    session = session_note(conv, "Caroline and Melanie talked.")
    vault = make_vault(notes={f"sessions/{session.stem}.md": session.text()})
    with vault.lock("index"):
        sync(vault, embedder)
    package = run(Index.open(vault, embedder), embedder, query="When did Melanie run a charity race?", floor=0.05)
    turns = [b for b in package.blocks if b.item.type == "turn"]
    assert [b.text for b in turns] == [
        "[Melanie, 25 May 2023] I ran a charity race for mental health last Saturday (20 May 2023), it was rewarding."
    ]
    assert turns[0].to_dict()["source"]["messages"] == ["D2:2"]
    # Counted as a turn, not as the whole session: one message cited, its own block link.
    assert turns[0].to_dict()["source"]["links"] == [f"{session.stem}#^{block_id('D2:2')}"]
    # Once the clean superseded a note of that turn, the turn is history: it stays out, and says why.
    source = {"kind": "locomo", "conversation": "conv-9:session_2", "messages": ["D2:2"]}
    old = note_text("a-race", "Melanie ran a race.", status="archived", superseded_by="[[a-race-2]]", source=source)
    write_file(vault.root, "archive/a-race.md", old)
    with vault.lock("index"):
        sync(vault, embedder)
    package = run(Index.open(vault, embedder), embedder, query="When did Melanie run a charity race?", floor=0.05)
    assert "turn" not in {b.item.type for b in package.blocks}
    dropped = next(t for t in traced(package) if t["chunk_id"].endswith("@D2:2"))
    assert (
        dropped["gate"] == "drop"
        and dropped["reason"] == "superseded: a note of this turn was superseded by [[a-race-2]]"
    )
    # The turn and the index's statement of it (its one sentence) both go.
    superseded = [t for t in traced(package) if (t.get("reason") or "").startswith("superseded")]
    assert stats_of(package)["expansion"]["superseded_turns"] == len(superseded) == 2

    class NoLookup(Index):
        def superseded_messages(self, conversations):
            raise AssertionError(f"looked up {conversations}: the hop's read of the session had them")

    again = run(NoLookup.open(vault, embedder), embedder, query="When did Melanie run a charity race?", floor=0.05)
    assert again.to_json() == package.to_json()
