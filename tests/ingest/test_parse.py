"""Parsers: ChatGPT branches, Claude blocks, transcripts, LoCoMo, streaming, detection, broken records."""

from __future__ import annotations

import io
import json
import zipfile
from collections import Counter

import pytest

from tests.support.paths import shared_data

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # the property tests are extra; the example tests below cover the same ground
    given = None
from vault_pipeline.errors import ParseError
from vault_pipeline.ingest.parse import (
    Conversation,
    Message,
    ParseIssue,
    TruncatedJSON,
    detect_kind,
    iter_json_array,
    read_export,
)

ROOT = "00000000-0000-4000-8000-000000000000"


def split(items):
    items = list(items)
    convs = [i for i in items if isinstance(i, Conversation)]
    issues = [i for i in items if isinstance(i, ParseIssue)]
    assert len(convs) + len(issues) == len(items)
    return convs, issues


def write(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# --- ChatGPT -------------------------------------------------------------------------------------


def node(
    node_id,
    parent,
    children,
    role=None,
    text=None,
    *,
    ctype="text",
    hidden=False,
    t=0.0,
    parts=None,
    recipient="all",
    name=None,
):
    message = None
    if role:
        message = {
            "id": node_id,
            "author": {"role": role, "name": name},
            "create_time": 1_700_000_000 + t,
            "content": {"content_type": ctype, "parts": parts if parts is not None else [text]},
            "recipient": recipient,
            "metadata": {"is_visually_hidden_from_conversation": hidden},
        }
    return {"id": node_id, "parent": parent, "children": children, "message": message}


def chatgpt_branchy(conv_id="c1", current="a2"):
    """root -> sys(hidden) -> u1 -> a1(old) / a1b(regenerated, current) -> u2old(abandoned edit) / u2 -> tool -> a2."""
    mapping = {
        "root": node("root", None, ["sys"]),
        "sys": node("sys", "root", ["u1"], "system", "You are ChatGPT", hidden=True, t=1),
        "u1": node("u1", "sys", ["a1", "a1b"], "user", "Should I use SQLite for tests?", t=2),
        "a1": node("a1", "u1", [], "assistant", "OLD ANSWER that was regenerated.", t=3),
        "a1b": node("a1b", "u1", ["u2old", "u2"], "assistant", "Use PostgreSQL in a container.", t=4),
        "u2old": node("u2old", "a1b", [], "user", "ABANDONED EDIT of my question", t=5),
        "u2": node("u2", "a1b", ["call", "code"], "user", "I'll use PostgreSQL for tests.", t=6),
        "call": node("call", "u2", ["tool"], "assistant", "search('pg')", ctype="code", recipient="browser", t=6.5),
        "tool": node(
            "tool", "call", ["a2"], "tool", "browsing result", ctype="tether_browsing_display", t=7, name="browser"
        ),
        "code": node("code", "u2", [], "assistant", "print(1)", ctype="code", t=7.5),
        "a2": node(
            "a2",
            "tool",
            [],
            "assistant",
            None,
            ctype="multimodal_text",
            t=8,
            parts=[{"content_type": "image_asset_pointer"}, "Here is the diagram."],
        ),
    }
    return {
        "id": conv_id,
        "title": "Test DBs",
        "create_time": 1_700_000_000.0,
        "update_time": 1_700_000_100.5,
        "current_node": current,
        "mapping": mapping,
    }


def test_chatgpt_follows_current_node_not_a_tree_walk(tmp_path):
    convs, issues = split(read_export(write(tmp_path / "conversations.json", [chatgpt_branchy()])))
    assert not issues
    (conv,) = convs
    assert [m.id for m in conv.messages] == ["u1", "a1b", "u2", "a2"]
    assert [m.role for m in conv.messages] == ["user", "assistant", "user", "assistant"]
    texts = " ".join(m.text for m in conv.messages)
    assert "OLD ANSWER" not in texts and "ABANDONED" not in texts and "print(1)" not in texts
    assert conv.alternates == 2  # a1 (regenerated) and u2old (edited); code cells are not turns
    assert conv.messages[-1].text == "[image]\n\nHere is the diagram."
    assert conv.created.isoformat() == "2023-11-14T22:13:20+00:00" and conv.updated.tzinfo is not None
    assert conv.messages[0].created.tzinfo is not None and conv.kind == "chatgpt" and conv.thread is None
    assert conv.source == str(tmp_path / "conversations.json") and conv.title == "Test DBs"


def test_chatgpt_other_current_node_shows_the_other_branch(tmp_path):
    convs, _ = split(read_export(write(tmp_path / "c.json", [chatgpt_branchy(current="u2old")])))
    assert [m.id for m in convs[0].messages] == ["u1", "a1b", "u2old"]
    assert convs[0].alternates == 3  # a1, u2, a2


@pytest.mark.parametrize("current", [None, "gone", 42])
def test_chatgpt_missing_current_node_falls_back_to_newest_leaf(tmp_path, current):
    record = chatgpt_branchy(current=current)
    if current is None:
        del record["current_node"]
    convs, _ = split(read_export(write(tmp_path / "c.json", [record])))
    assert [m.id for m in convs[0].messages] == ["u1", "a1b", "u2", "a2"]  # a2 (t=8) is the newest leaf


def test_chatgpt_excludes_hidden_system_tool_plugin_and_non_text(tmp_path):
    kinds = [
        "code",
        "execution_output",
        "thoughts",
        "reasoning_recap",
        "tether_quote",
        "tether_browsing_display",
        "sonic_webpage",
        "system_error",
        "user_editable_context",
    ]
    chain = [node("root", None, [])]
    chain.append(node("sys", "root", [], "system", "SYSTEM PROMPT", t=1))
    chain.append(node("ctx", "sys", [], "user", "HIDDEN CONTEXT", hidden=True, t=2))
    chain.append(node("u", "ctx", [], "user", "  Visible question  ", t=3))
    for i, ctype in enumerate(kinds):
        chain.append(node(f"x{i}", chain[-1]["id"], [], "assistant", f"NOT A TURN {ctype}", ctype=ctype, t=4 + i))
    chain.append(node("tool", chain[-1]["id"], [], "tool", "TOOL OUTPUT", name="python", t=20))
    chain.append(node("plug", "tool", [], "assistant", '{"PLUGIN": 1}', recipient="show_me.get_Route", t=21))
    chain.append(node("empty", "plug", [], "assistant", None, parts=["", "   "], t=22))
    chain.append(
        node(
            "img",
            "empty",
            [],
            "user",
            None,
            ctype="multimodal_text",
            t=23,
            parts=[{"content_type": "image_asset_pointer", "asset_pointer": "file-1"}],
        )
    )
    chain.append(
        node(
            "voice",
            "img",
            [],
            "user",
            None,
            ctype="multimodal_text",
            t=24,
            parts=[
                {"content_type": "audio_transcription", "text": "Spoken words"},
                {"content_type": "audio_asset_pointer"},
            ],
        )
    )
    chain.append(node("a", "voice", [], "assistant", "Visible \ue200cite\ue202turn0search1\ue201answer", t=25))
    record = {
        "conversation_id": "cid",
        "title": "",
        "create_time": None,
        "current_node": "a",
        "mapping": {n["id"]: n for n in chain},
    }
    convs, issues = split(read_export(write(tmp_path / "conversations.json", [record])))
    assert not issues
    (conv,) = convs
    assert [(m.id, m.text) for m in conv.messages] == [
        ("u", "Visible question"),
        ("voice", "Spoken words"),
        ("a", "Visible answer"),
    ]
    assert conv.id == "cid" and conv.title == "Untitled conversation" and conv.created is None
    assert conv.alternates == 0


def test_chatgpt_wrapper_object_zip_folder_and_split_files(tmp_path):
    write(tmp_path / "wrapped.json", {"conversations": [chatgpt_branchy("w1"), chatgpt_branchy("w2")]})
    assert [c.id for c in split(read_export(tmp_path / "wrapped.json"))[0]] == ["w1", "w2"]
    folder = tmp_path / "export"
    (folder / "sub").mkdir(parents=True)
    write(folder / "conversations-001.json", [chatgpt_branchy("s1")])
    write(folder / "conversations-000.json", [chatgpt_branchy("s0"), chatgpt_branchy("s0b")])
    write(folder / "sub" / "conversations.json", [chatgpt_branchy("s2")])
    write(folder / "users.json", {"id": "someone"})
    write(folder / "message_feedback.json", [])
    (folder / "chat.html").write_text("<html></html>")
    (folder / "file-abc.png").write_bytes(b"\x89PNG")
    (folder / ".DS_Store").write_bytes(b"\x00")
    convs, issues = split(read_export(folder))
    assert [c.id for c in convs] == ["s0", "s0b", "s1", "s2"] and not issues
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("conversations.json", json.dumps([chatgpt_branchy("z1")]))
        zf.writestr("user.json", "{}")
        zf.writestr("chat.html", "<html/>")
        zf.writestr("dalle-generations/x.webp", b"RIFF")
        zf.writestr("file-AbC123-report.docx", b"PK")
        zf.writestr("file-XyZ-notes.json", "{}")
        zf.writestr("6482-conv/audio/file_0001.wav", b"RIFF")
    convs, issues = split(read_export(archive))
    assert [c.id for c in convs] == ["z1"] and not issues
    assert convs[0].source == f"{archive}!conversations.json"
    assert detect_kind(tmp_path / "wrapped.json") == "chatgpt" and detect_kind(archive) == "chatgpt"
    assert detect_kind(folder) == "chatgpt"


def test_broken_records_are_reported_and_neighbours_survive(tmp_path):
    bad_parts = chatgpt_branchy("badparts")
    bad_parts["mapping"]["u2"]["message"]["content"]["parts"] = "not a list"
    bad_node = chatgpt_branchy("badnode")
    bad_node["mapping"]["a1b"] = ["not", "a", "node"]
    records = [
        chatgpt_branchy("good1"),
        {"id": "bad1", "mapping": "not a dict"},
        {"title": "no mapping"},
        "a string",
        {"id": "empty", "mapping": {"r": node("r", None, [])}, "current_node": "r"},
        {"mapping": {}},
        bad_parts,
        bad_node,
        chatgpt_branchy("good2"),
    ]
    path = write(tmp_path / "conversations.json", records)
    convs, issues = split(read_export(path))
    assert [c.id for c in convs] == ["good1", "badparts", "good2"]
    assert [m.id for m in convs[1].messages] == ["u1", "a1b", "a2"]  # the bad message alone is skipped
    by_record = {i.record: i.reason for i in issues}
    assert list(by_record) == ["1 (id bad1)", "2", "3", "4 (id empty)", "5", "6 (id badparts)", "7 (id badnode)"]
    assert by_record["1 (id bad1)"] == "'mapping' is a string, expected an object"
    assert by_record["2"] == "missing 'mapping'"
    assert by_record["3"] == "conversation is a string, not an object"
    assert by_record["4 (id empty)"] == "no user or assistant messages"
    assert "expected a list" in by_record["6 (id badparts)"] and "u2" in by_record["6 (id badparts)"]
    assert "'a1b' is a list" in by_record["7 (id badnode)"]
    assert str(issues[0]) == f"{path} [record 1 (id bad1)]: 'mapping' is a string, expected an object"


def test_broken_first_records_do_not_hide_the_format(tmp_path):
    chatgpt = [{"title": "no mapping"}, "a string", chatgpt_branchy("g")]
    convs, issues = split(read_export(write(tmp_path / "conversations.json", chatgpt)))
    assert [c.id for c in convs] == ["g"] and [i.record for i in issues] == ["0", "1"]
    assert detect_kind(tmp_path / "conversations.json") == "chatgpt"
    claude = [{"uuid": "x", "name": "no messages"}, claude_conv()]
    convs, issues = split(read_export(write(tmp_path / "claude.json", {"conversations": claude})))
    assert [c.id for c in convs] == ["k1"] and issues[0].reason == "missing 'chat_messages'"
    with pytest.raises(ParseError, match="unknown shape"):  # many records, none telling: give up early
        detect_kind(write(tmp_path / "many.json", [{"title": i} for i in range(5000)]))


def test_truncated_file_keeps_earlier_records(tmp_path):
    text = json.dumps([chatgpt_branchy("a"), chatgpt_branchy("b"), chatgpt_branchy("c")])
    path = tmp_path / "conversations.json"
    path.write_text(text[: int(len(text) * 0.5)], encoding="utf-8")
    convs, issues = split(read_export(path))
    assert [c.id for c in convs] == ["a"]
    (issue,) = issues
    assert issue.record == "1" and "truncated" in issue.reason and issue.source == str(path)
    path.write_text(text[:-1], encoding="utf-8")  # only the closing bracket is missing
    convs, issues = split(read_export(path))
    assert [c.id for c in convs] == ["a", "b", "c"] and issues[0].record == "3"


def test_unknown_and_unreadable_files_raise_parse_error(tmp_path):
    with pytest.raises(ParseError, match="unknown shape"):
        list(read_export(write(tmp_path / "x.json", [{"hello": 1}])))
    with pytest.raises(ParseError, match="unknown shape"):
        list(read_export(write(tmp_path / "nums.json", [1, 2])))
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01garbage")
    with pytest.raises(ParseError, match="not a recognised export") as err:
        list(read_export(tmp_path / "bin.dat"))
    assert err.value.source == str(tmp_path / "bin.dat")
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ParseError, match="not a readable zip"):
        list(read_export(tmp_path / "broken.zip"))
    with pytest.raises(ParseError, match="no such file"):
        list(read_export(tmp_path / "missing.json"))
    with pytest.raises(ParseError, match="unknown shape"):
        detect_kind(tmp_path / "x.json")
    assert list(read_export(write(tmp_path / "empty.json", []))) == []


def test_bad_files_inside_folder_and_zip_are_issues_not_errors(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    write(folder / "a.json", [chatgpt_branchy("a")])
    write(folder / "b.json", [{"hello": 1}])
    (folder / "c.json").write_text("not json at all")
    (folder / "d.csv").write_text("x,y\n")
    (folder / "e.md").write_text("# Just notes\n\nNo labels here.\n")
    (folder / "f.zip").write_bytes(b"garbage")
    write(folder / "g.json", [chatgpt_branchy("g")])
    convs, issues = split(read_export(folder))
    assert [c.id for c in convs] == ["a", "g"]
    assert [i.source.rsplit("/", 1)[-1] for i in issues] == ["b.json", "c.json", "d.csv", "e.md", "f.zip"]
    assert all(i.record == "whole file" for i in issues)
    archive = tmp_path / "mixed.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("b.json", "{{{")
        zf.writestr("conversations.json", json.dumps([chatgpt_branchy("z")]))
    convs, issues = split(read_export(archive))
    assert [c.id for c in convs] == ["z"] and issues[0].source == f"{archive}!b.json"


# --- streaming and detection ----------------------------------------------------------------------


def test_stream_reader_handles_split_reads_and_tricky_strings():
    items = [
        {"s": 'a],[b,"c"}{\\', "t": '\\"'},
        [1, 2, {"x": "]"}],
        12345678901234567890,
        "é ✓ 間 😀",
        None,
        3.25,
        -1e-5,
        True,
        {"conversations": []},
    ]
    text = "\ufeff  " + json.dumps(items, ensure_ascii=False)
    for size in (1, 2, 3, 7, 64, 1 << 16):
        assert list(iter_json_array(io.StringIO(text), chunk_size=size)) == items
        assert (
            list(
                iter_json_array(
                    io.StringIO(json.dumps({"meta": [1, {"a": "]"}], "conversations": items})), chunk_size=size
                )
            )
            == items
        )
    assert list(iter_json_array(io.StringIO("[]"))) == []
    assert list(iter_json_array(io.StringIO('  {"mapping": {}}'))) == [{"mapping": {}}]  # a lone record


def test_stream_reader_reports_truncation_after_yielding_earlier_elements():
    stream = iter_json_array(io.StringIO('[{"a": 1}, {"b": "x,]'), chunk_size=4)
    assert next(stream) == {"a": 1}
    with pytest.raises(TruncatedJSON):
        next(stream)
    with pytest.raises(TruncatedJSON):
        list(iter_json_array(io.StringIO('[{"a": 1} {"b": 2}]')))
    with pytest.raises(ValueError, match="not JSON"):
        list(iter_json_array(io.StringIO("hello")))


class CountingReader(io.StringIO):
    """A text stream that remembers how much has been read."""

    def __init__(self, text):
        super().__init__(text)
        self.consumed = 0

    def read(self, size=-1):
        data = super().read(size)
        self.consumed += len(data)
        return data


def test_stream_reader_does_not_load_the_whole_file():
    big = [{"id": i, "text": "x" * 5000} for i in range(400)]  # ~2 MB
    fp = CountingReader(json.dumps(big))
    stream = iter_json_array(fp, chunk_size=1 << 14)
    assert next(stream)["id"] == 0
    assert fp.consumed < 100_000
    huge = [{"id": "h", "text": "y" * 3_000_000}, {"id": "after"}]  # one element far bigger than a read
    assert [e["id"] for e in iter_json_array(io.StringIO(json.dumps(huge)), chunk_size=1024)] == ["h", "after"]


if given is not None:
    _scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(alphabet=st.characters(), max_size=8)
        | st.sampled_from(['"', "\\", "]", "[,{}:", '\\"'])
    )
    _values = st.recursive(
        _scalars,
        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4),
        max_leaves=12,
    )
    _records = st.lists(
        st.dictionaries(st.text(max_size=4), _values, max_size=4) | st.lists(_values, max_size=3), max_size=6
    )

    @settings(max_examples=200, deadline=None)
    @given(st.lists(_values, max_size=8), st.integers(1, 40), st.sampled_from([None, 0, 2]), st.booleans())
    def test_stream_reader_agrees_with_json_loads(items, chunk, indent, wrapped):
        text = json.dumps({"conversations": items} if wrapped else items, indent=indent, ensure_ascii=chunk % 2 == 0)
        assert list(iter_json_array(io.StringIO(text), chunk_size=chunk)) == items

    @settings(max_examples=200, deadline=None)
    @given(_records, st.integers(1, 40), st.data())
    def test_stream_reader_on_any_truncation_yields_a_prefix_then_raises(items, chunk, data):
        text = json.dumps(items)
        cut = data.draw(st.integers(1, len(text)))
        got = []
        try:
            for element in iter_json_array(io.StringIO(text[:cut]), chunk_size=chunk):
                got.append(element)  # noqa: PERF402 - keeps the prefix read before the error
        except TruncatedJSON:
            assert cut < len(text)
        else:
            assert cut == len(text)
        assert got == items[: len(got)]


def test_stream_reader_stops_at_a_syntax_error_without_reading_on():
    fp = CountingReader('[{"a": 1}, {"b": nope}, ' + ", ".join(['{"c": "' + "z" * 1000 + '"}'] * 2000) + "]")
    stream = iter_json_array(fp, chunk_size=1 << 12)
    assert next(stream) == {"a": 1}
    with pytest.raises(TruncatedJSON, match="malformed JSON"):
        next(stream)
    assert fp.consumed < 20_000


def test_detection_peeks_past_a_long_locomo_qa_list(tmp_path):
    sample = locomo_sample()
    sample = {
        "qa": [{"question": f"q{i} [{{", "answer": "a" * 50} for i in range(3000)],
        **{k: v for k, v in sample.items() if k != "qa"},
    }
    path = write(tmp_path / "bench.json", [sample])
    assert path.stat().st_size > 200_000
    assert detect_kind(path) == "locomo"
    assert detect_kind(write(tmp_path / "k.json", [claude_conv()])) == "claude"
    (tmp_path / "t.txt").write_text("User: hi")
    assert detect_kind(tmp_path / "t.txt") == "transcript"


# --- Claude ---------------------------------------------------------------------------------------


def claude_conv(uuid="k1", branches=True):
    msgs = [
        {
            "uuid": "h1",
            "sender": "human",
            "text": "How should I structure the essay?",
            "created_at": "2024-03-01T10:00:00.000000Z",
            "content": [{"type": "text", "text": "How should I structure the essay?"}],
            "parent_message_uuid": ROOT,
        },
        {
            "uuid": "a1old",
            "sender": "assistant",
            "created_at": "2024-03-01T10:00:03Z",
            "text": "OLD",
            "content": [{"type": "text", "text": "OLD BRANCH"}],
            "parent_message_uuid": "h1",
        },
        {
            "uuid": "a1",
            "sender": "assistant",
            "created_at": "2024-03-01T11:00:05+01:00",  # 10:00:05 UTC
            "text": "THINKING glued. Start with ma.",
            "content": [
                {"type": "thinking", "thinking": "THINKING"},
                {"type": "text", "text": "Start with ma."},
                {"type": "tool_use", "name": "x", "input": {}},
                {"type": "tool_result", "content": [{"type": "text", "text": "TOOL RESULT"}]},
                {"type": "text", "text": "Then the garden."},
            ],
            "parent_message_uuid": "h1",
        },
    ]
    if not branches:
        msgs = [{k: v for k, v in m.items() if k != "parent_message_uuid"} for m in (msgs[0], msgs[2])]
    return {
        "uuid": uuid,
        "name": "Garden essay",
        "summary": "",
        "created_at": "2024-03-01T10:00:00Z",
        "updated_at": "2024-03-01T11:00:00Z",
        "account": {"uuid": "acc"},
        "chat_messages": msgs,
    }


def test_claude_reads_text_blocks_and_the_main_branch(tmp_path):
    plain = claude_conv("k2", False)
    plain["chat_messages"].append({"uuid": "h2", "sender": "human", "text": "fallback text", "created_at": None})
    plain["project_uuid"] = "proj-1"
    records = [claude_conv(), plain, {"uuid": "k3", "chat_messages": "nope"}, {"uuid": "k4", "chat_messages": []}]
    convs, issues = split(read_export(write(tmp_path / "conversations.json", records)))
    assert [m.id for m in convs[0].messages] == ["h1", "a1"]
    assert convs[0].messages[1].text == "Start with ma.\n\nThen the garden."  # never the glued top-level text
    assert convs[0].alternates == 1 and convs[0].thread is None and convs[0].kind == "claude"
    assert convs[0].messages[1].created.isoformat() == "2024-03-01T10:00:05+00:00"
    assert [(m.role, m.text) for m in convs[1].messages][-1] == ("user", "fallback text")
    assert convs[1].thread == "proj-1" and convs[1].alternates == 0
    assert [(i.record, i.reason) for i in issues] == [
        ("2 (id k3)", "'chat_messages' is a string, expected a list"),
        ("3 (id k4)", "no messages in 'chat_messages'"),
    ]


def test_claude_messages_without_uuid_get_the_true_reason(tmp_path):
    """Messages lacking ``uuid`` are skipped for that reason, never as "no user or assistant messages"."""
    none = claude_conv("k5", False)
    for message in none["chat_messages"]:
        del message["uuid"]
    some = claude_conv("k6", False)
    del some["chat_messages"][1]["uuid"]
    convs, issues = split(read_export(write(tmp_path / "conversations.json", [none, some])))
    assert [c.id for c in convs] == ["k6"] and len(convs[0].messages) == 1
    assert [(i.record, i.reason) for i in issues] == [
        ("0 (id k5)", "no usable message: 2 message(s) lack a 'uuid' (needed to link notes to them)"),
        ("1 (id k6)", "1 message(s) without a 'uuid' (needed to link notes to them); skipped"),
    ]


def test_claude_null_parents_mean_a_linear_list(tmp_path):
    conv = claude_conv(branches=False)
    for item in conv["chat_messages"]:
        item["parent_message_uuid"] = None
    convs, _ = split(read_export(write(tmp_path / "c.json", [conv])))
    assert [m.id for m in convs[0].messages] == ["h1", "a1"]


def test_claude_branch_picks_latest_leaf_even_when_listed_first(tmp_path):
    conv = claude_conv()
    conv["chat_messages"][1]["created_at"] = "2024-03-02T09:00:00Z"  # the "old" answer is now the newest leaf
    convs, _ = split(read_export(write(tmp_path / "c.json", [conv])))
    assert [m.text for m in convs[0].messages] == ["How should I structure the essay?", "OLD BRANCH"]


def test_claude_zip_ignores_companion_files(tmp_path):
    archive = tmp_path / "claude.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("conversations.json", json.dumps([claude_conv()]))
        zf.writestr("projects.json", json.dumps([{"uuid": "p", "docs": []}]))
        zf.writestr("memories.json", "[]")
        zf.writestr("users.json", json.dumps([{"uuid": "u"}]))
    convs, issues = split(read_export(archive))
    assert [c.id for c in convs] == ["k1"]
    # projects.json holds the user's documents: not read yet, and said so in one warning line
    assert [(i.source, i.warning) for i in issues] == [(f"{archive}!projects.json", True)]
    assert "not ingested" in issues[0].reason
    assert convs[0].source == f"{archive}!conversations.json" and detect_kind(archive) == "claude"


# --- transcripts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "# Title here\n\nUser: Hello there\nsecond line\n\nAssistant: Hi!\n",
        "# Title here\n\n**You:** Hello there\nsecond line\n\n**ChatGPT:** Hi!\n",
        "# Title here\n\n**User:**\nHello there\nsecond line\n\n---\n\n**ChatGPT:**\nHi!\n\n---\n",
        "# Title here\n\n### Human\nHello there\nsecond line\n\n### Assistant\nHi!\n",
        "# Title here\n\n## User\n\nHello there\nsecond line\n\n## Assistant\n\nHi!\n",
        "# Title here\n\n> **User**: Hello there\n> second line\n\n> **Assistant**: Hi!\n",
        "# Title here\n\nHuman: Hello there\nsecond line\n\nAI: Hi!\n",
        "# Title here\n\nhuman: Hello there\nsecond line\n\nCLAUDE: Hi!\n",
        "\ufeff# Title here\n\nYou said:\nHello there\nsecond line\nChatGPT said:\nHi!\n",
        "# Title here\n\n## User: Hello there\nsecond line\n\n## Assistant: Hi!\n",
        "# Title here\n\n__User__: Hello there\nsecond line\n__Assistant__: Hi!\n",
    ],
)
def test_transcript_label_styles(tmp_path, text):
    path = tmp_path / "chat.md"
    path.write_text(text, encoding="utf-8")
    convs, issues = split(read_export(path))
    assert not issues
    (conv,) = convs
    assert conv.title == "Title here" and conv.id == "transcript:chat" and conv.kind == "transcript"
    assert [(m.id, m.role, m.speaker) for m in conv.messages] == [
        ("t1", "user", "user"),
        ("t2", "assistant", "assistant"),
    ]
    assert [m.text for m in conv.messages] == ["Hello there\nsecond line", "Hi!"]


def test_transcript_multiline_code_fence_and_title_fallback(tmp_path):
    text = (
        "User: Show me a config\n\nAssistant: Here:\n\n```yaml\nUser: not a label inside code\n```\n\n"
        "# A heading in the answer\nDone.\nUser: Thanks\n"
    )
    path = tmp_path / "session-7.txt"
    path.write_text(text)
    (conv,) = split(read_export(path))[0]
    assert conv.title == "session-7" and [m.role for m in conv.messages] == ["user", "assistant", "user"]
    assert "User: not a label inside code" in conv.messages[1].text
    assert conv.messages[1].text.endswith("# A heading in the answer\nDone.")
    assert detect_kind(path) == "transcript"


def test_transcript_ignores_lookalike_lines(tmp_path):
    text = "User: What is a user guide?\n## User guide\n**User guide** is a document.\nUsers: many\nAI: ok\n"
    (tmp_path / "t.md").write_text(text)
    (conv,) = split(read_export(tmp_path / "t.md"))[0]
    assert [m.role for m in conv.messages] == ["user", "assistant"]
    assert conv.messages[0].text.count("\n") == 3


def test_transcript_without_labels(tmp_path):
    (tmp_path / "notes.md").write_text("# Just notes\n\nNothing to see.\n")
    with pytest.raises(ParseError, match="no speaker labels"):
        list(read_export(tmp_path / "notes.md"))
    convs, issues = split(read_export(tmp_path))
    assert not convs and len(issues) == 1 and "no speaker labels" in issues[0].reason


def test_transcripts_in_a_zip(tmp_path):
    archive = tmp_path / "chats.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("b/second.md", "User: two\nAssistant: 2\n")
        zf.writestr("a/first.txt", "User: one\nAssistant: 1\n")
    convs, _ = split(read_export(archive))
    assert [c.id for c in convs] == ["transcript:first", "transcript:second"]
    assert convs[0].source == f"{archive}!a/first.txt"


# --- LoCoMo ---------------------------------------------------------------------------------------


def locomo_sample(sample_id="conv-1"):
    conv = {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_10_date_time": "2:00 pm on 9 June, 2023",
        "session_10": [{"speaker": "Bo", "dia_id": "D10:1", "text": "Later chat."}],
        "session_9_date_time": "10:37 am on 27 May, 2023",
        "session_9": [{"speaker": "Ann", "dia_id": "D9:1", "text": "Ninth."}],
        "session_2_date_time": "1:56 pm on 8 May, 2023",
        "session_2": [
            {"speaker": "Ann", "dia_id": "D2:1", "text": "Hi Bo!"},
            {"speaker": "Bo", "dia_id": "D2:2", "text": "Look", "img_url": ["x"], "blip_caption": "a dog"},
        ],
    }
    return {"sample_id": sample_id, "conversation": conv, "qa": [], "observation": {}, "session_summary": {}}


def test_locomo_sessions_in_order_with_dia_ids(tmp_path):
    convs, issues = split(read_export(write(tmp_path / "locomo.json", [locomo_sample(), locomo_sample("conv-2")])))
    assert not issues
    assert [c.id for c in convs][:3] == ["conv-1:session_2", "conv-1:session_9", "conv-1:session_10"]
    assert len(convs) == 6 and convs[3].id == "conv-2:session_2"
    assert [m.id for m in convs[0].messages] == ["D2:1", "D2:2"]
    assert [m.speaker for m in convs[0].messages] == ["Ann", "Bo"]
    assert convs[0].messages[1].text == "Look [shares a photo: a dog]"
    assert {m.role for c in convs for m in c.messages} == {"user"} and convs[0].thread == "conv-1"
    assert convs[0].title == "Ann and Bo, session 2" and convs[0].kind == "locomo"
    assert convs[0].created.isoformat() == "2023-05-08T13:56:00+00:00"
    assert convs[1].created.isoformat() == "2023-05-27T10:37:00+00:00"
    assert detect_kind(tmp_path / "locomo.json") == "locomo"


def test_locomo_bad_turns_and_sessions_are_reported(tmp_path):
    sample = locomo_sample()
    sample["conversation"]["session_2"].append({"speaker": "Ann", "text": "no id"})
    sample["conversation"]["session_9"] = []
    sample["conversation"]["session_10_date_time"] = "sometime"
    convs, issues = split(read_export(write(tmp_path / "l.json", [sample, {"sample_id": "x", "qa": []}])))
    assert [c.id for c in convs] == ["conv-1:session_2", "conv-1:session_10"] and convs[1].created is None
    assert [i.record for i in issues] == ["0 (id conv-1)"] * 3 + ["1 (id x)"]
    assert "session_2 turn 2: missing 'dia_id'" in issues[0].reason
    assert issues[1].reason == "session_9: no user or assistant messages"
    assert "not understood" in issues[2].reason and issues[3].reason == "missing 'conversation'"


# --- real data (skipped when ../shared/data is absent) -----------------------------------------------


def test_real_chatgpt_export_parses_and_follows_current_node():
    path = shared_data() / "exports" / "chatgpt-pkuppens-2023.json"
    if not path.exists():
        pytest.skip(f"real export not found at {path}")
    convs, issues = split(read_export(path))
    raw = {c["id"]: c for c in json.loads(path.read_text(encoding="utf-8"))}
    roles = Counter(m.role for conv in convs for m in conv.messages)
    print(
        f"\n{path.name}: {len(convs)} conversations, {sum(roles.values())} messages {dict(roles)}, "
        f"{sum(c.alternates for c in convs)} alternates, {len(issues)} issues"
    )
    assert len(convs) + len({i.record for i in issues if "no user or assistant" in i.reason}) == len(raw) == 192
    for conv in convs:
        mapping, node_id, path_ids = raw[conv.id]["mapping"], raw[conv.id]["current_node"], []
        while node_id:
            path_ids.append(node_id)
            node_id = mapping[node_id]["parent"]
        path_ids.reverse()
        positions = [path_ids.index(m.id) for m in conv.messages]  # every message is on the path ...
        assert positions == sorted(positions)  # ... in path order
        visible = [
            n
            for n in path_ids
            if (mapping[n]["message"] or {}).get("author", {}).get("role") in ("user", "assistant")
            and mapping[n]["message"]["content"]["content_type"] == "text"
            and mapping[n]["message"].get("recipient") == "all"
            and "".join(mapping[n]["message"]["content"]["parts"]).strip()
        ]
        assert [m.id for m in conv.messages] == visible
        assert all(m.text and m.text == m.text.strip() for m in conv.messages)


def test_real_locomo_keeps_every_dia_id():
    path = shared_data() / "locomo" / "locomo-dev.json"
    if not path.exists():
        pytest.skip(f"LoCoMo not found at {path}")
    convs, issues = split(read_export(path))
    raw = json.loads(path.read_text(encoding="utf-8"))
    print(
        f"\n{path.name}: {len(convs)} conversations, {sum(len(c.messages) for c in convs)} messages, "
        f"{len(issues)} issues"
    )
    expected = Counter(
        t["dia_id"]
        for s in raw
        for k, v in s["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    )
    got = Counter(f"{c.thread}/{m.id}" for c in convs for m in c.messages)
    assert not issues and sum(got.values()) == sum(expected.values()) and max(got.values()) == 1
    assert {m.id for c in convs for m in c.messages} == set(expected)
    assert all(c.created is not None for c in convs)
    assert all(isinstance(m, Message) and m.speaker in c.title for c in convs for m in c.messages)
