"""Blocks that carry their own context, cheaply: one dated line per note, citations in the references."""

from __future__ import annotations

import dataclasses

from tests.support.fakes import fake_row, locomo_conversation
from vault_pipeline.ingest.extract import extract_conversation
from vault_pipeline.ingest.notes import atomic_note, session_note
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.blocks import (
    atomic_text,
    block_content,
    header,
    parse_atomic,
    pick_parts,
    structural_text,
    transcript_content,
    transcript_parts,
)
from vault_pipeline.retrieve.items import Part
from vault_pipeline.retrieve.package import (
    REFERENCES,
    ContextPackage,
    Selected,
    assemble,
    block_overhead,
)
from vault_pipeline.text import estimate_tokens

# A made-up two-person chat in LoCoMo's shape (LoCoMo's own text is never committed).
TURNS = [
    ("Ada", "D1:1", "I went to a ceramics workshop yesterday and made two small bowls for my sister."),
    ("Ben", "D1:2", "That sounds lovely, did the glaze come out the way you hoped it would?"),
    ("Ada", "D1:3", "Mostly, the blue one cracked in the kiln but the green one survived the firing."),
    ("Ben", "D1:4", "I started training for the city half marathon last week with my running club."),
    ("Ada", "D1:5", "My manager approved the transfer to the Lisbon office starting in September."),
    ("Ben", "D1:6", "We adopted a rescue dog called Pepper from the shelter two weeks ago."),
]


def _notes(tmp_path):
    conv = locomo_conversation(tmp_path, TURNS)
    extraction = extract_conversation(conv, OfflineBackend())
    session = session_note(conv, extraction.summary)
    atomic = [atomic_note(u, conv, session.stem, "2023-05-08T13:56:00+00:00") for u in extraction.units]
    return conv, session, atomic


def _row(note):
    fm = note.frontmatter
    return fake_row(
        note_id=fm["id"],
        path=note.relpath,
        text=note.body.strip(),
        tier="chat",
        created=str(fm["created"]),
        speaker=str(fm.get("speaker", "")),
        source_conversation=fm["source_conversation"],
        source_messages=[str(m) for m in fm["source_messages"]],
        source_position=int(fm.get("source_position", 0)),
    )


def _selected(note, score: float, rank: int) -> Selected:
    """A note as the funnel hands it to assembly (``rank.selection``'s fields), with this score and rank."""
    row = _row(note)
    text, messages, links = block_content(row)
    return Selected(
        row.chunk_id,
        row.note_id,
        row.path,
        row.tier,
        row.type,
        score,
        rank,
        text,
        "",
        row.source_conversation,
        messages,
        links,
        position=row.source_position,
    )


def test_an_atomic_block_reads_as_one_dated_line_with_its_speaker(tmp_path):
    _, session, atomic = _notes(tmp_path)
    note = next(n for n in atomic if n.body.startswith("I went to a ceramics workshop yesterday"))
    text, messages, links = block_content(_row(note))
    assert text.startswith("[Ada, 8 May 2023] I went to a ceramics workshop yesterday (7 May 2023)")
    assert "Context:" not in text and "Source:" not in text and "[[" not in text
    assert messages == ("D1:1",) and links and links[0].startswith(session.stem + "#^")


def test_atomic_blocks_cost_at_most_one_and_a_half_times_their_sentence(tmp_path):
    _, _, atomic = _notes(tmp_path)
    rows = [_row(n) for n in atomic]
    assert len(rows) >= 5  # the turns' notes (a LoCoMo session's made-up title gives no topic note)
    sentence = sum(estimate_tokens(parse_atomic(r.text).sentence) for r in rows)
    block = sum(estimate_tokens(block_content(r)[0]) for r in rows)
    stored = sum(estimate_tokens(r.text) for r in rows)
    assert block <= 1.5 * sentence, (block, sentence)
    assert stored > 2 * sentence  # what a block cost when it was the note's stored text


def test_the_context_line_parts_survive_the_compaction():
    body = (
        "It made me reflect on how far I've come.\n\n"
        "Context: since I started transitioning three years ago. Caroline, 9 June 2023; "
        "\u201cthree years ago\u201d is 9 June 2020.\n\n"
        "Source: [[caroline-session-3#^m-D3-1]]"
    )
    parsed = parse_atomic(body)
    assert parsed.who == "Caroline" and parsed.own == "since I started transitioning three years ago"
    assert parsed.times == (("three years ago", "9 June 2020"),) and parsed.links == ("caroline-session-3#^m-D3-1",)
    text, _ = atomic_text(body, "2023-06-09T19:55:00+00:00", "user")
    assert text == (
        "[Caroline, 9 Jun 2023] It made me reflect on how far I've come "
        "(since I started transitioning three years ago; three years ago: 9 June 2020)."
    )
    # A role-only export names no one: the role stands in.
    assert atomic_text("It works.", "2024-03-01", "assistant")[0] == "[assistant, 1 Mar 2024] It works."
    # The header's day costs what ISO 8601's digits do, whatever the month ("16 Sep 2023", "2023-09-16").
    assert all(len(header(f"2023-{month:02d}-16", "")) <= len("[2023-09-16]") + 1 for month in range(1, 13))
    assert header("2023-09-16", "Maria") == "[Maria, 16 Sep 2023]" and header("", "Maria") == "[Maria]"


def test_a_transcript_chunk_cites_only_the_turns_it_holds(tmp_path):
    conv, session, _ = _notes(tmp_path)
    transcript = session.body[session.body.index("## Transcript") :]
    part = transcript[: transcript.index("**Ada:** Mostly")]  # a chunk holding the first two turns
    heading = f"{conv.title} > Transcript"
    text, held = structural_text(f"{heading}\n\n{part}", heading, "2023-05-08T13:56:00+00:00", ["D1:1", "D1:2", "D1:3"])
    assert held == ("D1:1", "D1:2")
    assert text.startswith(f"[{conv.title}, 8 May 2023] Ada: I went to a ceramics workshop")
    assert "^m-" not in text and "**" not in text and "##" not in text
    summary_text, summary_held = structural_text("A summary of the talk.", "", "", ["D1:1"])
    assert summary_held == () and summary_text == "A summary of the talk."


def _transcript_row(tmp_path):
    conv, session, _ = _notes(tmp_path)
    heading = f"{conv.title} > Transcript"
    transcript = session.body[session.body.index("## Transcript") :]
    return fake_row(
        note_id="s-1",
        chunk_id="s-1:2",
        path=session.relpath,
        type="session",
        heading=heading,
        text=f"{heading}\n\n{transcript}",
        tier="chat",
        created="2023-05-08T13:56:00+00:00",
        source_conversation="conv-x:session_1",
        source_messages=[i for _, i, _ in TURNS],
    )


def test_a_transcript_keeps_its_turns_apart_as_parts(tmp_path):
    row = _transcript_row(tmp_path)
    text, held = block_content(row)[:2]
    # One blank line between turns (the block id at a turn's end used to swallow it), one part per turn.
    assert text.count("\n\n") == len(TURNS) - 1 and held == tuple(i for _, i, _ in TURNS)
    parts = transcript_parts(row.text, row.heading, held, "When did Ben adopt the rescue dog Pepper?")
    assert [p.messages for p in parts] == [(i,) for _, i, _ in TURNS]
    assert [p.text.split(":")[0] for p in parts] == [who for who, _, _ in TURNS]
    assert max(parts, key=lambda p: p.share).messages == ("D1:6",)
    assert all(p.share == 0.0 for p in transcript_parts(row.text, row.heading, held))
    # Paragraphs before a turn's block id belong to that turn; a summary is cut by paragraph.
    two = "**Ada:** First paragraph.\n\nSecond paragraph. ^m-D1-1-x\n\n**Ben:** Reply. ^m-D1-2-y"
    assert [p.text for p in transcript_parts(two, "", [])] == [
        "Ada: First paragraph.\n\nSecond paragraph.",
        "Ben: Reply.",
    ]
    assert [p.text for p in transcript_parts("One.\n\nTwo.", "", [])] == ["One.", "Two."]
    # A turn the chunk cuts off before its block id is still one part.
    cut = "**Ada:** Done. ^m-D1-1-x\n\n**Ben:** Start of a long reply.\n\nMore of it."
    assert [p.text for p in transcript_parts(cut, "", [])] == [
        "Ada: Done.",
        "Ben: Start of a long reply.\n\nMore of it.",
    ]
    # Words of the chunk's title, which its lead always shows, earn a part no share.
    summary = "Session “Pottery class”: 2 turns.\n\nAda: I glazed a bowl.\n\nBen: Nice."
    shares = [p.share for p in transcript_parts(summary, "Pottery class > Summary", [], "pottery class bowl")]
    assert shares[1] > 0 and shares[0] == shares[2] == 0
    # With no word beyond the title, the cut keeps the first turn, not the summary's opening line.
    parts = transcript_parts(summary, "Pottery class > Summary", [], "pottery class")
    assert [p.turn for p in parts] == [False, True, True]
    assert pick_parts("[Pottery class]", parts, 0)[0] == "[Pottery class] Ada: I glazed a bowl."


def test_a_cut_keeps_the_run_of_turns_around_the_best_match_and_cites_only_it():
    parts = [Part(f"turn {i} " + "w" * 36, (f"D1:{i}",), share) for i, share in enumerate((0.0, 0.1, 0.9, 0.3, 0.0))]
    alone, cited = pick_parts("[S]", parts, 0)  # no room: the best turn alone, over the room
    assert alone == f"[S] {parts[2].text}" and cited == ("D1:2",)
    two, cited = pick_parts("[S]", parts, 25)  # room for two turns: the neighbour carrying more of the query
    assert two == f"[S] {parts[2].text}\n\n{parts[3].text}" and cited == ("D1:2", "D1:3")
    tie = [Part(p.text, p.messages, 0.0) for p in parts]
    assert pick_parts("", tie, 25)[1] == ("D1:0", "D1:1")  # no match: the head, by whole turns
    everything, cited = pick_parts("[S]", parts, 1000)
    assert cited == tuple(p.messages[0] for p in parts) and everything.count("\n\n") == len(parts) - 1


def _transcript_item(tmp_path, query: str = "", score: float = 0.5, rank: int = 1):
    """The transcript row and the package item ``rank.selection`` makes of it for ``query``."""
    row = _transcript_row(tmp_path)
    text, messages, _ = block_content(row)
    lead, parts = transcript_content(row, query)
    item = Selected(row.chunk_id, row.note_id, row.path, "chat", "session", score, rank, text, row.heading,
                    row.source_conversation, messages, (), lead, parts)  # fmt: skip
    return row, item


def test_assembly_cuts_a_transcript_to_the_turns_the_query_matches(tmp_path):
    _, item = _transcript_item(tmp_path, "When did Ben adopt the rescue dog Pepper?")
    text, messages, lead = item.text, item.messages, item.lead
    room = estimate_tokens(text) - 20
    (block,) = assemble(
        [item], budget=room + block_overhead(item, 1) + estimate_tokens(REFERENCES), window=8000, window_share=0.78
    ).blocks
    assert block.truncated and block.tokens <= room
    source = block.to_dict()["source"]
    assert "D1:6" in source["messages"] and len(source["messages"]) < len(TURNS)
    assert block.text.startswith(lead) and "Pepper" in block.text
    # Each kept turn is whole, and cited; a turn left out is not.
    for _, turn_id, said in TURNS:
        assert (said in block.text) == (turn_id in source["messages"])
    # The full block, when it fits, cites every turn as before.
    (whole,) = assemble(
        [item],
        budget=estimate_tokens(text) + block_overhead(item, 1) + estimate_tokens(REFERENCES),
        window=8000,
        window_share=0.78,
    ).blocks
    assert not whole.truncated and whole.to_dict()["source"]["messages"] == list(messages)


def test_a_transcript_cut_to_its_speaker_label_is_left_out():
    parts = (Part("assistant: " + "A long answer sentence that goes on. " * 20, ("m1",), 1.0),)
    text = f"[T, 4 May 2023] {parts[0].text}"
    item = Selected("c1", "n1", "sessions/t.md", "chat", "session", 0.5, 1, text, "T > Transcript",
                    "conv", ("m1",), (), "[T, 4 May 2023]", parts)  # fmt: skip
    assembly = assemble([item], budget=12, window=8000, window_share=0.78)
    assert assembly.blocks == () and [d["chunk_id"] for d in assembly.dropped] == ["c1"]
    # A lead that ends a sentence ("Length., ...") is no place to cut to either.
    dotted = dataclasses.replace(item, lead="[Longest String Length., 31 March 2023]",
                                 text=f"[Longest String Length., 31 March 2023] {parts[0].text}")  # fmt: skip
    assert assemble([dotted], budget=14, window=8000, window_share=0.78).blocks == ()
    (kept,) = assemble([item], budget=40, window=8000, window_share=0.78).blocks  # a sentence fits: kept
    assert kept.truncated and kept.text.startswith("[T, 4 May 2023] assistant: A long answer")


def test_a_summary_leaves_out_the_turns_another_block_holds():
    summary = "Session “Pottery”: 2 turns.\n\nAda: I glazed a bowl.\n\nBen: Nice work on the glaze."
    parts = transcript_parts(summary, "Pottery > Summary", [])
    lead = "[Pottery, 8 May 2023]"
    item = Selected("s#0", "s", "sessions/s.md", "chat", "session", 0.4, 2, f"{lead} {summary}",
                    "Pottery > Summary", "conv:1", (), (), lead, parts)  # fmt: skip
    turn = Selected("t#1", "t", "sessions/s.md", "chat", "turn", 0.5, 1, "[Ada, 8 May 2023] I glazed a bowl.", "",
                    "conv:1", ("D1:1",), ())  # fmt: skip
    blocks = {b.item.chunk_id: b for b in assemble([item, turn], budget=500, window=8000, window_share=0.78).blocks}
    assert blocks["s#0"].text == f"{lead} Session “Pottery”: 2 turns.\n\nBen: Nice work on the glaze."
    # Another conversation's words, or another summary's, hold nothing for it.
    elsewhere = dataclasses.replace(turn, conversation="conv:2")
    alone = assemble([item, elsewhere], budget=500, window=8000, window_share=0.78).blocks
    assert any(b.item.chunk_id == "s#0" and "Ada: I glazed a bowl." in b.text for b in alone)
    # A summary whose every turn another block holds is left out, and says which block holds them.
    reply = Selected("t#2", "t2", "sessions/s.md", "chat", "turn", 0.45, 3, "[Ben, 8 May 2023] Nice work on the glaze.",
                     "", "conv:1", ("D1:2",), ())  # fmt: skip
    assembly = assemble([item, turn, reply], budget=500, window=8000, window_share=0.78)
    assert "s#0" not in {b.item.chunk_id for b in assembly.blocks}
    assert [(d["chunk_id"], d["repeats"]) for d in assembly.dropped] == [("s#0", "t#1")]


def test_no_block_twice_a_transcript_leaves_out_the_turns_its_notes_carry(tmp_path):
    row, item = _transcript_item(tmp_path, score=0.4, rank=2)
    *rest, (who, turn_id, said) = TURNS
    note = Selected("a#0", "a", "inbox/a.md", "chat", "atomic", 0.5, 1, f"[{who}, 8 May 2023] {said}", "",
                    row.source_conversation, (turn_id,), ())  # fmt: skip
    blocks = {b.item.chunk_id: b for b in assemble([item, note], budget=2000, window=8000, window_share=0.78).blocks}
    chunk = blocks[row.chunk_id]
    assert said not in chunk.text and turn_id not in chunk.to_dict()["source"]["messages"]
    assert all(t in chunk.text for _, _, t in rest)
    # A transcript every turn of which a note carries is left out, naming a note that holds them.
    notes = [
        Selected(
            f"a#{i}",
            f"a{i}",
            f"inbox/a{i}.md",
            "chat",
            "atomic",
            0.5,
            1,
            f"[{w}, 8 May 2023] {t}",
            "",
            row.source_conversation,
            (m,),
            (),
        )
        for i, (w, m, t) in enumerate(TURNS)
    ]
    assembly = assemble([item, *notes], budget=2000, window=8000, window_share=0.78)
    assert row.chunk_id not in {b.item.chunk_id for b in assembly.blocks}
    assert [d["chunk_id"] for d in assembly.dropped if d.get("repeats")] == [row.chunk_id]


def test_a_transcript_leaves_out_a_turn_a_verbatim_turn_block_shows(tmp_path):
    row, item = _transcript_item(tmp_path, score=0.4, rank=2)
    who, turn_id, said = TURNS[-1]
    turn = Selected("t#1", "t", row.path, "chat", "turn", 0.5, 1, f"[{who}, 8 May 2023] {said}", "",
                    row.source_conversation, (turn_id,), ())  # fmt: skip
    blocks = {b.item.chunk_id: b for b in assemble([item, turn], budget=2000, window=8000, window_share=0.78).blocks}
    chunk = blocks[row.chunk_id]
    assert said not in chunk.text and chunk.to_dict()["source"]["messages"] == [i for _, i, _ in TURNS[:-1]]
    assert all(t in chunk.text for _, _, t in TURNS[:-1]) and blocks["t#1"].text.endswith(said)


def test_markdown_puts_citations_in_a_numbered_reference_list(tmp_path):
    _, _, atomic = _notes(tmp_path)

    items = [_selected(note, 1.0 / rank, rank) for rank, note in enumerate(atomic[:3], 1)]
    assembly = assemble(items, budget=1000, window=8000, window_share=0.78)
    package = ContextPackage("q", "i", assembly.blocks, assembly.tokens)
    markdown = package.to_markdown()
    body, _, references = markdown.partition("References:")
    for number, block in enumerate(package.blocks, 1):
        assert f"{block.text} [{number}]" in body
        assert f"\n[[{block.item.stem}]] {number}\n" in references  # one short line: the note's link
    source = package.blocks[0].to_dict()["source"]
    assert source["links"] == list(package.blocks[0].item.links) and source["path"] == package.blocks[0].item.path


# A made-up procedure in one assistant answer: its notes must read in the answer's order.
STEPS = (
    "Open the photo in the editor and duplicate the background layer first. "
    "Select the ellipse tool and draw an ellipse around the licence plate. "
    "Open the filters menu and apply a Gaussian blur with a radius of 20 pixels. "
    "Export the result as a new PNG file next to the original photo."
)


def _procedure_notes():
    from datetime import UTC, datetime

    from vault_pipeline.ingest.notes import positions
    from vault_pipeline.ingest.parse.types import Conversation, Message

    when = datetime(2023, 5, 25, 10, 0, tzinfo=UTC)
    conv = Conversation(
        "chatgpt",
        "c-steps",
        "Blur a licence plate",
        when,
        when,
        (
            Message("q1", "user", "user", "How do I blur a licence plate in a photo?", when),
            Message("a1", "assistant", "assistant", STEPS, when),
        ),
        "test",
    )
    extraction = extract_conversation(conv, OfflineBackend())
    session = session_note(conv, extraction.summary)
    units = extraction.units
    return [
        atomic_note(u, conv, session.stem, "2023-05-25T10:00:00+00:00", (), n) for u, n in zip(units, positions(units))
    ]


def test_each_note_records_its_place_in_its_message():
    notes = _procedure_notes()
    steps = [n for n in notes if n.frontmatter["source_messages"] == ["a1"]]
    assert len(steps) == 4, [n.body for n in notes]
    assert [n.frontmatter["source_position"] for n in steps] == [1, 2, 3, 4]
    assert [n.body.split()[0] for n in steps] == ["Open", "Select", "Open", "Export"]


def test_a_procedure_reads_in_its_source_order_at_its_best_steps_place():
    steps = [n for n in _procedure_notes() if n.frontmatter["source_messages"] == ["a1"]]
    other = fake_row(
        note_id="a-other",
        text="[user, 1 May 2023] Blurring hides personal data in shared photos.",
        tier="chat",
        type="atomic",
    )
    lone = Selected(other.chunk_id, other.note_id, other.path, "chat", "atomic", 0.95, 1, other.text)
    # The unrelated note first, then the steps out of order: third, first, fourth, second.
    ranked = [lone, *(_selected(steps[i], 0.9 - r / 10, r + 2) for r, i in enumerate((2, 0, 3, 1)))]
    assembly = assemble(ranked, budget=1000, window=8000, window_share=0.78)
    order = [b.item.note_id for b in assembly.blocks]
    assert order == ["a-other", *(s.frontmatter["id"] for s in steps)]
    assert [b.item.rank for b in assembly.blocks] == [1, 3, 5, 2, 4]  # ranks kept: a script can sort by them


def test_notes_without_a_place_keep_their_rank_order():
    steps = [n for n in _procedure_notes() if n.frontmatter["source_messages"] == ["a1"]]
    ranked = [dataclasses.replace(_selected(s, 1.0 - i / 10, i + 1), position=0) for i, s in enumerate(reversed(steps))]
    assembly = assemble(ranked, budget=1000, window=8000, window_share=0.78)
    assert [b.item.note_id for b in assembly.blocks] == [s.frontmatter["id"] for s in reversed(steps)]


def test_turns_of_one_session_share_one_reference_line_and_the_whole_keeps_to_the_budget():
    from vault_pipeline.retrieve.package import markdown_head, returned_tokens

    turns = [
        Selected(
            f"s#{i}",
            "s",
            "sessions/ada-and-ben-session-1-9fc068.md",
            "chat",
            "turn",
            1.0 - i / 10,
            i,
            f"[Ada, 8 May 2023] Turn number {i} says something about pottery and glaze.",
            "",
            "conv:1",
            (f"D1:{i}",),
            (f"ada-and-ben-session-1-9fc068#^m-D1-{i}",),
        )
        for i in range(1, 7)
    ]
    head = markdown_head("pottery", [])
    whole = assemble(turns, budget=1000, window=8000, window_share=0.78, head=head)
    package = ContextPackage("pottery", "i", whole.blocks, 0)
    assert package.to_markdown().endswith("References:\n[[ada-and-ben-session-1-9fc068]] 1, 2, 3, 4, 5, 6\n")
    for budget in range(40, 160, 7):
        for structured in (False, True):
            cut = assemble(turns, budget=budget, window=8000, window_share=0.78, head=head, structured=structured)
            assert returned_tokens(head, cut.blocks, structured) <= budget
            kept = {b.item.chunk_id for b in cut.blocks}
            assert kept | {d["chunk_id"] for d in cut.dropped} == {t.chunk_id for t in turns}


def test_a_sessions_statement_links_its_message_and_keeps_to_the_budget():
    from vault_pipeline.retrieve.package import markdown_head, returned_tokens

    def statement(i: int) -> Selected:
        return Selected(
            f"s:{10 + i}",
            "s-1",
            "sessions/ada-and-ben-session-1-9fc068.md",
            "chat",
            "atomic",
            1.0 - i / 10,
            i,
            f"[Ada, 8 May 2023] Sentence {i} of the session says something about pottery.",
            "",
            "conv:1",
            (f"D1:{i}",),
            (f"ada-and-ben-session-1-9fc068#^m-D1-{i}",),
        )

    head = markdown_head("pottery", [])
    whole = assemble([statement(1), statement(2)], budget=1000, window=8000, window_share=0.78, head=head)
    package = ContextPackage("pottery", "i", whole.blocks, 0)
    assert package.to_markdown().endswith(
        "References:\n[[ada-and-ben-session-1-9fc068#^m-D1-1]] 1\n[[ada-and-ben-session-1-9fc068#^m-D1-2]] 2\n"
    )
    for budget in range(40, 120, 9):
        cut = assemble([statement(1), statement(2)], budget=budget, window=8000, window_share=0.78, head=head)
        assert returned_tokens(head, cut.blocks, False) <= budget


def test_a_sessions_statement_another_block_shows_is_left_out_as_a_repeat():
    path = "sessions/ada-and-ben-session-1-9fc068.md"

    def item(chunk_id: str, kind: str, score: float, text: str, message: str) -> Selected:
        link = f"ada-and-ben-session-1-9fc068#^m-{message}"
        return Selected(chunk_id, "s-1", path, "chat", kind, score, 1, text, "", "conv:1", (message,), (link,))

    turn = item(
        "s-1:3", "turn", 0.8, "[Ada, 8 May 2023] I finished the course. My manager approved the move to Lisbon.", "D1:3"
    )
    said = item("s-1:12", "atomic", 0.9, "[Ada, 8 May 2023] My manager approved the move to Lisbon (a job).", "D1:3")
    own = item("s-1:13", "atomic", 0.7, "[Ben, 8 May 2023] We adopted a rescue dog called Pepper.", "D1:6")
    whole = assemble([said, turn, own], budget=1000, window=8000, window_share=0.78)
    assert [b.item.chunk_id for b in whole.blocks] == ["s-1:3", "s-1:13"]
    (left,) = whole.dropped
    assert left["chunk_id"] == "s-1:12" and left["repeats"] == "s-1:3"


def test_the_room_a_repeat_frees_takes_back_a_block_left_out_for_the_budget():
    from vault_pipeline.retrieve.items import Block
    from vault_pipeline.retrieve.package import markdown_head, returned_tokens

    path = "sessions/ada-and-ben-session-1-9fc068.md"

    def item(chunk_id: str, kind: str, score: float, text: str, message: str) -> Selected:
        link = f"ada-and-ben-session-1-9fc068#^m-{message}"
        return Selected(chunk_id, "s-1", path, "chat", kind, score, 1, text, "", "conv:1", (message,), (link,))

    said = item("s-1:12", "atomic", 0.9, "[Ada, 8 May 2023] My manager approved the move to Lisbon in June.", "D1:3")
    turn = item(
        "s-1:3",
        "turn",
        0.8,
        "[Ada, 8 May 2023] I finished the course. My manager approved the move to Lisbon in June.",
        "D1:3",
    )
    own = item(
        "s-1:13",
        "atomic",
        0.7,
        "[Ben, 8 May 2023] We adopted a rescue dog called Pepper from the shelter by the harbour last spring.",
        "D1:6",
    )
    head = markdown_head("Lisbon", [])
    everything = assemble([said, turn, own], budget=5000, window=100000, window_share=0.78, head=head)
    wanted = [b for b in everything.blocks if b.item.chunk_id != "s-1:12"]
    budget = returned_tokens(head, wanted, False) + 4  # the cuts estimate each block's share with some slack
    shown = (*everything.blocks, Block(said, "core", said.text, False))
    assert budget < returned_tokens(head, shown, False)  # all three do not fit
    fitted = assemble([said, turn, own], budget=budget, window=100000, window_share=0.78, head=head)
    assert [b.item.chunk_id for b in fitted.blocks] == ["s-1:3", "s-1:13"]
    assert [d.get("repeats") for d in fitted.dropped] == ["s-1:3"]
