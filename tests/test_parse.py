"""Parsers: ChatGPT branches, Claude blocks, transcripts, LoCoMo, streaming, broken records."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from conftest import shared_data
from vault_pipeline.errors import ParseError
from vault_pipeline.parse import Conversation, ParseIssue, detect_kind, iter_json_array, read_export
from vault_pipeline.parse.jsonstream import TruncatedJSON


def split(items):
    items = list(items)
    convs = [i for i in items if isinstance(i, Conversation)]
    issues = [i for i in items if isinstance(i, ParseIssue)]
    return convs, issues


def node(node_id, parent, children, role=None, text=None, *, ctype="text", hidden=False, t=0.0, parts=None):
    message = None
    if role:
        message = {"id": node_id, "author": {"role": role, "name": None}, "create_time": 1_700_000_000 + t,
                   "content": {"content_type": ctype, "parts": parts if parts is not None else [text]},
                   "metadata": {"is_visually_hidden_from_conversation": hidden}}
    return {"id": node_id, "parent": parent, "children": children, "message": message}


def chatgpt_branchy(conv_id="c1"):
    """root -> sys(hidden) -> u1 -> a1(old) / a1b(regenerated, current) -> u2(edited: u2old abandoned) -> a2."""
    mapping = {
        "root": node("root", None, ["sys"]),
        "sys": node("sys", "root", ["u1"], "system", "You are ChatGPT", hidden=True, t=1),
        "u1": node("u1", "sys", ["a1", "a1b"], "user", "Should I use SQLite for tests?", t=2),
        "a1": node("a1", "u1", [], "assistant", "OLD ANSWER that was regenerated.", t=3),
        "a1b": node("a1b", "u1", ["u2old", "u2"], "assistant", "Use PostgreSQL in a container.", t=4),
        "u2old": node("u2old", "a1b", [], "user", "ABANDONED EDIT of my question", t=5),
        "u2": node("u2", "a1b", ["tool", "code"], "user", "I'll use PostgreSQL for tests.", t=6),
        "tool": node("tool", "u2", ["a2"], "tool", "browsing result", ctype="tether_browsing_display", t=7),
        "code": node("code", "u2", [], "assistant", "print(1)", ctype="code", t=7.5),
        "a2": node("a2", "tool", [], "assistant", None, ctype="multimodal_text", t=8,
                   parts=[{"content_type": "image_asset_pointer"}, "Here is the diagram."]),
    }
    return {"id": conv_id, "title": "Test DBs", "create_time": 1_700_000_000.0, "update_time": None,
            "current_node": "a2", "mapping": mapping}


def write(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_chatgpt_follows_current_node_not_a_tree_walk(tmp_path):
    convs, issues = split(read_export(write(tmp_path / "conversations.json", [chatgpt_branchy()])))
    assert not issues
    (conv,) = convs
    assert [m.id for m in conv.messages] == ["u1", "a1b", "u2", "a2"]
    texts = " ".join(m.text for m in conv.messages)
    assert "OLD ANSWER" not in texts and "ABANDONED" not in texts and "print(1)" not in texts
    assert conv.alternates == 3  # a1, u2old, code: off the main path
    assert conv.messages[-1].text == "Here is the diagram.\n\n[image]"
    assert conv.created.tzinfo is not None and conv.kind == "chatgpt"


def test_chatgpt_wrapper_object_zip_folder_and_split_files(tmp_path):
    write(tmp_path / "wrapped.json", {"conversations": [chatgpt_branchy("w1")]})
    assert [c.id for c in split(read_export(tmp_path / "wrapped.json"))[0]] == ["w1"]
    folder = tmp_path / "export"
    folder.mkdir()
    write(folder / "conversations-000.json", [chatgpt_branchy("s0")])
    write(folder / "conversations-001.json", [chatgpt_branchy("s1")])
    write(folder / "users.json", {"id": "someone"})
    assert [c.id for c in split(read_export(folder))[0]] == ["s0", "s1"]
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("conversations.json", json.dumps([chatgpt_branchy("z1")]))
        zf.writestr("user.json", "{}")
    convs, issues = split(read_export(archive))
    assert [c.id for c in convs] == ["z1"] and not issues
    assert convs[0].source.endswith("export.zip!conversations.json")


def test_broken_records_are_reported_and_neighbours_survive(tmp_path):
    records = [chatgpt_branchy("good1"), {"id": "bad1", "mapping": "not a dict"}, {"title": "no mapping"},
               "a string", {"id": "empty", "mapping": {"r": node("r", None, [])}, "current_node": "r"},
               chatgpt_branchy("good2")]
    convs, issues = split(read_export(write(tmp_path / "conversations.json", records)))
    assert [c.id for c in convs] == ["good1", "good2"]
    assert len(issues) == 4
    assert str(issues[0]).startswith(f"{tmp_path / 'conversations.json'} [record 1 (id bad1)]: ")
    assert "no user or assistant messages" in str(issues[3])


def test_truncated_file_keeps_earlier_records(tmp_path):
    text = json.dumps([chatgpt_branchy("a"), chatgpt_branchy("b")])
    path = tmp_path / "conversations.json"
    path.write_text(text[: int(len(text) * 0.75)], encoding="utf-8")
    convs, issues = split(read_export(path))
    assert [c.id for c in convs] == ["a"]
    assert len(issues) == 1 and "truncated" in issues[0].reason


def test_unknown_and_unreadable_files_raise_parse_error(tmp_path):
    with pytest.raises(ParseError, match="unknown shape"):
        list(read_export(write(tmp_path / "x.json", [{"hello": 1}])))
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01garbage")
    with pytest.raises(ParseError, match="not a recognised export"):
        list(read_export(tmp_path / "bin.dat"))
    with pytest.raises(ParseError, match="no such file"):
        list(read_export(tmp_path / "missing.json"))


def test_stream_reader_handles_split_reads_and_tricky_strings():
    items = [{"s": "a],[b,\"c\"}{"}, [1, 2, {"x": "]"}], 12345678901234567890, "é ✓ 間", None, 3.25]
    text = "  " + json.dumps(items, ensure_ascii=False)
    for size in (1, 2, 3, 7, 64):
        assert list(iter_json_array(io.StringIO(text), chunk_size=size)) == items
    assert list(iter_json_array(io.StringIO("[]"))) == []
    with pytest.raises(TruncatedJSON):
        list(iter_json_array(io.StringIO('[{"a": 1}, {"b": ')))


def claude_conv(uuid="k1", branches=True):
    root = "00000000-0000-4000-8000-000000000000"
    msgs = [
        {"uuid": "h1", "sender": "human", "text": "How should I structure the essay?", "created_at": "2024-03-01T10:00:00Z",
         "content": [{"type": "text", "text": "How should I structure the essay?"}], "parent_message_uuid": root},
        {"uuid": "a1", "sender": "assistant", "created_at": "2024-03-01T10:00:05Z",
         "text": "THINKING glued. Start with ma.",
         "content": [{"type": "thinking", "thinking": "THINKING"}, {"type": "text", "text": "Start with ma."},
                     {"type": "tool_use", "name": "x", "input": {}}], "parent_message_uuid": "h1"},
        {"uuid": "a1old", "sender": "assistant", "created_at": "2024-03-01T10:00:03Z", "text": "OLD",
         "content": [{"type": "text", "text": "OLD BRANCH"}], "parent_message_uuid": "h1"},
    ]
    if not branches:
        msgs = [{k: v for k, v in m.items() if k != "parent_message_uuid"} for m in msgs[:2]]
    return {"uuid": uuid, "name": "Garden essay", "created_at": "2024-03-01T10:00:00Z",
            "updated_at": "2024-03-01T11:00:00Z", "chat_messages": msgs}


def test_claude_reads_text_blocks_and_the_main_branch(tmp_path):
    convs, issues = split(read_export(write(tmp_path / "conversations.json", [claude_conv(), claude_conv("k2", False)])))
    assert not issues
    assert [m.id for m in convs[0].messages] == ["h1", "a1"]
    assert convs[0].messages[1].text == "Start with ma."  # never the glued top-level text
    assert convs[0].alternates == 1
    assert [m.role for m in convs[1].messages] == ["user", "assistant"]
    archive = tmp_path / "claude.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("conversations.json", json.dumps([claude_conv()]))
        zf.writestr("projects.json", "[]")
        zf.writestr("memories.json", "[]")
    assert [c.id for c in split(read_export(archive))[0]] == ["k1"]


@pytest.mark.parametrize("text", [
    "# Title here\n\nUser: Hello there\nsecond line\n\nAssistant: Hi!\n",
    "# Title here\n\n**You:** Hello there\nsecond line\n\n**ChatGPT:** Hi!\n",
    "# Title here\n\n### Human\nHello there\nsecond line\n\n### Assistant\nHi!\n",
    "# Title here\n\n> **User**: Hello there\nsecond line\n\n> **Assistant**: Hi!\n",
    "# Title here\n\nHuman: Hello there\nsecond line\n\nAI: Hi!\n",
])
def test_transcript_label_styles(tmp_path, text):
    path = tmp_path / "chat.md"
    path.write_text(text, encoding="utf-8")
    (conv,) = split(read_export(path))[0]
    assert conv.title == "Title here" and conv.id == "transcript:chat"
    assert [(m.id, m.role) for m in conv.messages] == [("t1", "user"), ("t2", "assistant")]
    assert conv.messages[0].text.replace("> ", "") == "Hello there\nsecond line"


def test_transcript_without_labels(tmp_path):
    (tmp_path / "notes.md").write_text("# Just notes\n\nNothing to see.\n")
    with pytest.raises(ParseError, match="no speaker labels"):
        list(read_export(tmp_path / "notes.md"))
    convs, issues = split(read_export(tmp_path))
    assert not convs and len(issues) == 1


def locomo_sample():
    conv = {"speaker_a": "Ann", "speaker_b": "Bo", "session_10_date_time": "2:00 pm on 9 June, 2023",
            "session_10": [{"speaker": "Bo", "dia_id": "D10:1", "text": "Later chat."}],
            "session_2_date_time": "1:56 pm on 8 May, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "Hi Bo!"},
                          {"speaker": "Bo", "dia_id": "D2:2", "text": "Look", "img_url": ["x"], "blip_caption": "a dog"}]}
    return {"sample_id": "conv-1", "conversation": conv, "qa": []}


def test_locomo_sessions_in_order_with_dia_ids(tmp_path):
    convs, _ = split(read_export(write(tmp_path / "locomo.json", [locomo_sample()])))
    assert [c.id for c in convs] == ["conv-1:session_2", "conv-1:session_10"]
    assert [m.id for m in convs[0].messages] == ["D2:1", "D2:2"]
    assert convs[0].messages[1].text == "Look [shares a photo: a dog]"
    assert {m.role for c in convs for m in c.messages} == {"user"} and convs[0].thread == "conv-1"
    assert convs[0].created.isoformat() == "2023-05-08T13:56:00+00:00"
    assert detect_kind(tmp_path / "locomo.json") == "locomo"


def test_real_chatgpt_export_parses_and_follows_current_node():
    path = shared_data() / "exports" / "chatgpt-pkuppens-2023.json"
    if not path.exists():
        pytest.skip(f"real export not found at {path}")
    convs, issues = split(read_export(path))
    assert len(convs) + len(issues) == 192 and len(convs) >= 190
    raw = {c["id"]: c for c in json.loads(path.read_text())}
    for conv in convs:
        mapping, node_id, path_ids = raw[conv.id]["mapping"], raw[conv.id]["current_node"], set()
        while node_id:
            path_ids.add(node_id)
            node_id = mapping[node_id]["parent"]
        assert all(any(mapping[n]["message"] and mapping[n]["message"]["id"] == m.id for n in path_ids)
                   for m in conv.messages)


def test_real_locomo_keeps_every_dia_id():
    path = shared_data() / "locomo" / "locomo-dev.json"
    if not path.exists():
        pytest.skip(f"LoCoMo not found at {path}")
    convs, issues = split(read_export(path))
    raw = json.loads(path.read_text())
    expected = {t["dia_id"] for s in raw for k, v in s["conversation"].items()
                if k.startswith("session_") and isinstance(v, list) for t in v}
    assert not issues and {m.id for c in convs for m in c.messages} == expected
