"""Bad input, generated: only the project's own error escapes, and good records still come through.

Every parser (ChatGPT, Claude, LoCoMo, transcripts, detection, the JSON streamer, ``read_export``)
and the note readers get random JSON shapes, wrong types in every field, truncated files, huge
strings, odd Unicode and NUL bytes; ``vault ingest`` gets a file mixing good and bad records with
hostile titles. Hypothesis runs derandomized with bounded examples, so CI sees the same cases.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fakes import HANG_GUARD
from vault_pipeline.errors import FrontmatterError, ParseError, VaultError
from vault_pipeline.ingest.parse import (
    Conversation,
    ParseIssue,
    chatgpt,
    claude,
    detect_kind,
    iter_json_array,
    locomo,
    read_export,
)
from vault_pipeline.ingest.parse.jsonstream import NotAnArray, TruncatedJSON, Unreadable
from vault_pipeline.ingest.parse.transcript import parse_transcript
from vault_pipeline.ingest.parse.types import RecordError
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import split_frontmatter
from vault_pipeline.vault.note import safe_stem
from vault_pipeline.vault.state import read_note_id

REPO = Path(__file__).resolve().parent.parent


def fixed(max_examples: int) -> settings:
    """Derandomized (the same cases on every run), no deadline, ``max_examples`` cases."""
    return settings(
        derandomize=True,
        deadline=None,
        database=None,
        max_examples=max_examples,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )


MAX_LINE = 400  # an issue line: source, record label, reason; quoted values are cut short


# --------------------------------------------------------------------------- valid records


def chatgpt_record(i: int, title: str = "Fine", text: str = "Hello there.") -> dict:
    return {
        "id": f"good-{i}",
        "title": title,
        "create_time": 1_700_000_000 + i,
        "current_node": "a",
        "mapping": {
            "r": {"id": "r", "parent": None, "children": ["u"], "message": None},
            "u": {
                "id": "u",
                "parent": "r",
                "children": ["a"],
                "message": {
                    "id": "u",
                    "author": {"role": "user"},
                    "content": {"content_type": "text", "parts": [text]},
                },
            },
            "a": {
                "id": "a",
                "parent": "u",
                "children": [],
                "message": {
                    "id": "a",
                    "author": {"role": "assistant"},
                    "recipient": "all",
                    "content": {"content_type": "text", "parts": ["We decided to use SQLite."]},
                },
            },
        },
    }


def claude_record(i: int) -> dict:
    return {
        "uuid": f"good-{i}",
        "name": "Fine",
        "created_at": "2024-01-02T03:04:05Z",
        "chat_messages": [
            {"uuid": f"m{i}-1", "sender": "human", "text": "Hello there.", "created_at": "2024-01-02T03:04:05Z"},
            {
                "uuid": f"m{i}-2",
                "sender": "assistant",
                "created_at": "2024-01-02T03:04:06Z",
                "content": [{"type": "text", "text": "We decided to use SQLite."}],
            },
        ],
    }


def locomo_record(i: int) -> dict:
    return {
        "sample_id": f"good-{i}",
        "qa": [],
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "Hello there."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "We decided to use SQLite."},
            ],
        },
    }


MAKERS = {"chatgpt": chatgpt_record, "claude": claude_record, "locomo": locomo_record}
HANDLERS = {"chatgpt": chatgpt.parse_conversation, "claude": claude.parse_conversation, "locomo": locomo.parse_sample}


def good_ids(items: list) -> list[str]:
    """The good records' ids among conversations (LoCoMo ids carry a session suffix)."""
    return [c.id.split(":")[0] for c in items if isinstance(c, Conversation) and c.id.startswith("good-")]


def assert_well_formed(items: list, source: str) -> None:
    """Conversations and one-line, bounded issues naming the file and the record; writable text."""
    for item in items:
        assert isinstance(item, (Conversation, ParseIssue))
        if isinstance(item, ParseIssue):
            line = str(item)
            assert "\n" not in line and "\r" not in line and len(line) < MAX_LINE + len(item.source)
            assert item.source.startswith(source) and item.record and item.reason
            line.encode("utf-8")
        else:
            for value in (item.id, item.title, *(m.id for m in item.messages), *(m.text for m in item.messages)):
                value.encode("utf-8")  # lone surrogates would fail every later write
                assert "\x00" not in value


def read_all(path: Path) -> list:
    """``read_export`` to the end; a VaultError is allowed, and must be one line naming the file."""
    try:
        return list(read_export(path))
    except VaultError as exc:
        assert isinstance(exc, ParseError) and "\n" not in str(exc) and exc.source in str(exc)
        return []


# --------------------------------------------------------------------------- strategies

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
# Right-to-left overrides, combining marks, zero-width characters, BOM, NUL, lone surrogates.
ODD = "\u202e\u202d\u200f\u0301\u0308\u200b\u200c\u200d\u2060\ufeff\x00\ud800\udfff\ue200\ue201\U0001f600"
odd_text = st.text(alphabet=st.sampled_from(ODD) | st.characters(), max_size=200)
hostile_titles = (
    st.sampled_from(
        [
            "../../etc/passwd",
            "..",
            "/",
            "CON",
            "nul.txt",
            "com1",
            ".hidden",
            "a" * 300,
            "é" * 300,
            "\u202egpj.exe",
            "a\x00b",
            "\ud800",
            "",
            " ",
            "#^[]|",
        ]
    )
    | odd_text
)


def _paths(value, prefix=()):
    """Every (path) to a value inside a JSON document."""
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _paths(inner, (*prefix, i))


def _replaced(record: dict, path: tuple, new) -> dict:
    out = copy.deepcopy(record)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return out


WRONG = [None, True, 0, -1.5, "", "x", [], {}, [None], {"": None}, "\ud800", "\x00", "a" * 5000]


# --------------------------------------------------------------------------- format readers


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_wrong_type_in_every_field_keeps_the_neighbours(tmp_path, kind):
    """Each field of a valid record, replaced by each wrong-typed value, between two good records."""
    base = MAKERS[kind](1)
    bad_records = [_replaced(base, path, wrong) for path in _paths(base) if path for wrong in WRONG]
    for bad in bad_records:
        notes: list[str] = []
        # RecordError is the reader's own verdict on one record; anything else is a bug.
        with contextlib.suppress(RecordError):
            HANDLERS[kind](copy.deepcopy(bad), "x.json", notes)
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([MAKERS[kind](0), *bad_records, MAKERS[kind](2)]), encoding="utf-8")
    items = list(read_export(path))
    assert_well_formed(items, str(path))
    assert good_ids(items)[0] == "good-0" and good_ids(items)[-1] == "good-2"
    assert not any("malformed record (" in i.reason for i in items if isinstance(i, ParseIssue))


@fixed(40)
@pytest.mark.parametrize("kind", sorted(MAKERS))
@given(records=st.lists(json_values, max_size=5))
def test_random_records_beside_good_ones(tmp_path_factory, kind, records):
    path = tmp_path_factory.mktemp("bad") / "conversations.json"
    path.write_text(json.dumps([MAKERS[kind](0), *records, MAKERS[kind](1)]), encoding="utf-8")
    items = list(read_export(path))
    assert_well_formed(items, str(path))
    assert good_ids(items)[0] == "good-0" and good_ids(items)[-1] == "good-1"


@fixed(40)
@pytest.mark.parametrize("kind", sorted(MAKERS))
@given(data=st.data())
def test_random_value_in_a_random_field(tmp_path_factory, kind, data):
    base = MAKERS[kind](1)
    path_in = data.draw(st.sampled_from([p for p in _paths(base) if p]))
    bad = _replaced(base, path_in, data.draw(json_values | odd_text))
    path = tmp_path_factory.mktemp("field") / "conversations.json"
    path.write_text(json.dumps([MAKERS[kind](0), bad, MAKERS[kind](2)]), encoding="utf-8")
    items = list(read_export(path))
    assert_well_formed(items, str(path))
    assert good_ids(items)[0] == "good-0" and good_ids(items)[-1] == "good-2"


@fixed(25)
@pytest.mark.parametrize("kind", sorted(MAKERS))
@given(cut=st.floats(min_value=0.0, max_value=1.0))
def test_truncated_export_keeps_every_complete_record(tmp_path_factory, kind, cut):
    """A file cut at any byte yields exactly the records that ended before the cut, then one issue."""
    records = [json.dumps(MAKERS[kind](i), ensure_ascii=False).encode() for i in range(5)]
    data, ends = b"[", []
    for i, record in enumerate(records):
        data += (b",\n" if i else b"") + record
        ends.append(len(data))
    data += b"]"
    offset = int(cut * len(data))
    path = tmp_path_factory.mktemp("cut") / "conversations.json"
    path.write_bytes(data[:offset])
    items = read_all(path)
    assert_well_formed(items, str(path))
    assert sorted(set(good_ids(items))) == [f"good-{i}" for i, end in enumerate(ends) if end <= offset]
    if offset < len(data) and items:
        assert isinstance(items[-1], ParseIssue)


@fixed(30)
@given(data=st.binary(max_size=3000), cut=st.integers(min_value=0, max_value=4000))
def test_truncated_or_corrupt_zip(tmp_path_factory, data, cut):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("conversations.json", json.dumps([chatgpt_record(0), chatgpt_record(1)]))
        archive.writestr("notes/chat.md", data)
    path = tmp_path_factory.mktemp("zip") / "export.zip"
    path.write_bytes(buffer.getvalue()[:cut])
    assert_well_formed(read_all(path), str(path))


@fixed(60)
@given(data=st.binary(max_size=400))
def test_arbitrary_bytes_give_a_parse_error_or_issues(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("bytes")
    for name in ("conversations.json", "chat.md"):
        (folder / name).write_bytes(data)
        assert_well_formed(read_all(folder / name), str(folder / name))
        try:
            detect_kind(folder / name)
        except ParseError as exc:
            assert "\n" not in str(exc)
    assert_well_formed(read_all(folder), str(folder))


@fixed(80)
@given(text=st.text(alphabet=st.sampled_from('[]{},:"\\ 0123456789.-eEtruefalsn') | st.characters(), max_size=300))
def test_json_streamer_raises_only_its_two_errors(text):
    """Any text: elements (or Unreadable markers) then at most TruncatedJSON / NotAnArray."""
    try:
        for _ in iter_json_array(io.StringIO(text), chunk_size=7):
            pass
    except (TruncatedJSON, NotAnArray) as exc:
        assert "\n" not in str(exc)


@fixed(40)
@given(records=st.lists(json_values, max_size=6), chunk=st.integers(min_value=1, max_value=64))
def test_json_streamer_matches_json_loads(records, chunk):
    text = json.dumps(records, ensure_ascii=False)
    assert list(iter_json_array(io.StringIO(text), chunk_size=chunk)) == records


def test_deep_nesting_is_one_bad_record_not_a_crash(tmp_path):
    deep = '{"mapping": {}, "x": ' + "[" * 100_000 + '"]\\"["' + "]" * 100_000 + "}"
    path = tmp_path / "conversations.json"
    path.write_text(f"[{json.dumps(chatgpt_record(0))}, {deep}, {json.dumps(chatgpt_record(1))}]")
    items = list(read_export(path))
    assert good_ids(items) == ["good-0", "good-1"]
    assert [i.reason for i in items if isinstance(i, ParseIssue)] == ["nested too deeply to decode; skipped"]
    streamed = list(iter_json_array(io.StringIO("[" + "[" * 50_000 + "]" * 50_000 + ", 3]"), chunk_size=100))
    assert isinstance(streamed[0], Unreadable) and streamed[1] == 3


@fixed(40)
@given(text=odd_text, title=hostile_titles)
def test_transcripts_with_odd_text(tmp_path_factory, text, title):
    path = tmp_path_factory.mktemp("md") / "chat.md"
    path.write_text(f"# {title}\n\nUser: {text}\n\nAssistant: ok {text}\n", encoding="utf-8", errors="surrogatepass")
    items = read_all(path)
    assert_well_formed(items, str(path))
    assert [type(i) for i in items] == [Conversation]


def test_huge_strings_and_pathological_lines(tmp_path):
    """MB-sized titles, texts, ids and keys; blank runs and unterminated tokens that would backtrack."""
    huge = "word " * 400_000  # 2 MB
    big_title = chatgpt_record(1, title="t" * 5_000_000)
    big_text = chatgpt_record(2, text=huge)
    bad_key = chatgpt_record(3)
    bad_key["mapping"]["u"]["parent"] = "p" * 3_000_000  # a dangling parent quoted in the issue
    bad_key["mapping"]["u"]["message"]["content"]["parts"] = "x" * 1_000_000
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_record(0), big_title, big_text, bad_key, {"id": "i" * 2_000_000}]))
    items = list(read_export(path))
    assert_well_formed(items, str(path))
    assert good_ids(items) == ["good-0", "good-1", "good-2", "good-3"]  # good-3 keeps its assistant turn
    assert next(c for c in items if isinstance(c, Conversation) and c.id == "good-2").messages[0].text == huge.strip()
    lines = (
        "User: hi\n"
        + " " * 200_000
        + "x\n"
        + "\ue200cite" * 200_000
        + "\n"
        + "\n" * 200_000
        + "Assistant: "
        + "\t" * 200_000
        + "ok\n"
        + " \n" * 200_000
    )
    conv = parse_transcript(lines, "big", "big.md")
    assert [m.role for m in conv.messages] == ["user", "assistant"] and conv.messages[-1].text == "ok"


def test_non_utf8_bytes_and_file_names(tmp_path):
    name = os.fsdecode(b"chat-\xff\xfe.md")
    path = tmp_path / name
    path.write_bytes(b"User: caf\xe9 \xff\x00 ok\nAssistant: fine\n")
    items = read_all(path)
    assert_well_formed(items, str(tmp_path))
    assert [type(i) for i in items] == [Conversation, ParseIssue]
    assert items[0].messages[0].text == "caf\ufffd \ufffd ok"
    # The fallback is reported in one line naming the file, as a warning: the transcript was read.
    assert items[1].warning and "2 byte(s) not valid UTF-8" in str(items[1]) and "chat-" in str(items[1])
    (tmp_path / os.fsdecode(b"bad-\xff.json")).write_bytes(b'[{"mapping": 1}, ' + b"\xff" * 10 + b"]")
    assert_well_formed(list(read_export(tmp_path)), str(tmp_path))


# --------------------------------------------------------------------------- note readers


@fixed(150)
@given(
    text=odd_text
    | st.builds(
        lambda body: f"---\n{body}\n---\nBody.\n",
        st.text(alphabet=st.sampled_from("ab:-[]{}!&*?|>'\"#%@` \n\t\x00\ufeff"), max_size=120),
    )
)
def test_frontmatter_reader_raises_only_its_own_error(text):
    try:
        frontmatter, body = split_frontmatter(text, "inbox/n.md")
    except FrontmatterError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("inbox/n.md: ")
        return
    assert isinstance(frontmatter, dict) and isinstance(body, str)


@pytest.mark.parametrize(
    "block",
    [
        "[" * 50_000,
        "{a: " * 20_000,
        "- " * 20_000 + "x",
        "".join(" " * i + "a:\n" for i in range(3000)),
        "&a [*a, *a]",
        "!!python/object:os.system x",
    ],
)
def test_hostile_frontmatter_is_an_error_not_a_crash(block):
    try:
        split_frontmatter(f"---\n{block}\n---\nBody.\n", "n.md")
    except FrontmatterError as exc:
        assert "\n" not in str(exc)


@fixed(60)
@given(data=st.binary(max_size=600) | st.builds(lambda b: b"---\nid: " + b + b"\n---\n", st.binary(max_size=100)))
def test_note_id_reader_on_arbitrary_files(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("note") / "n.md"
    path.write_bytes(data)
    found = read_note_id(path)
    assert found is None or isinstance(found, str)


@fixed(100)
@given(title=hostile_titles | st.text(max_size=400))
def test_titles_never_escape_the_folder(title):
    stem = safe_stem(title, "a-0123456789ab")
    assert stem and "/" not in stem and "\\" not in stem and ".." not in stem and not stem.startswith(".")
    assert len(stem.encode("utf-8")) <= 120 and "\x00" not in stem
    assert stem.split(".")[0].lower() not in {"con", "prn", "aux", "nul", "com1", "lpt1"}
    stem.encode("utf-8")


# --------------------------------------------------------------------------- the CLI


def _mixed_export(folder: Path) -> tuple[Path, list[str], int]:
    """Good records with hostile titles beside bad records; (path, good titles, bad record count)."""
    titles = [
        "../../etc/passwd",
        "CON",
        ".hidden",
        "x" * 300,
        "\u202eevil\u0301\u200b",
        "nul\x00byte",
        "/abs/path",
        "..\\..\\windows",
        "\ud800 lone",
    ]
    good = [
        chatgpt_record(i, title=t, text=f"Topic {i}: we decided to ship release {i} on Friday.")
        for i, t in enumerate(titles)
    ]
    bad = [
        {"id": "bad-1", "mapping": "nope"},
        7,
        {"id": "bad-2", "mapping": {}},
        {"title": "no id", "mapping": {}},
        {"id": "bad-3", "mapping": {"a": []}, "current_node": "a"},
    ]
    records = [r for pair in zip(good, bad + [None] * len(good)) for r in pair if r is not None]
    path = folder / "conversations.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path, titles, len(bad)


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _outside(top: Path, vault_root: Path) -> set[Path]:
    return {p for p in _files_under(top) if vault_root not in p.parents}


def test_cli_ingest_mixed_file_stays_inside_the_vault(tmp_path):
    vault_root, inputs = tmp_path / "box" / "vault", tmp_path / "in"
    inputs.mkdir()
    Vault.init(vault_root)
    path, titles, bad = _mixed_export(inputs)
    initial = _files_under(vault_root)
    before = _outside(tmp_path, vault_root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_")}
    result = subprocess.run(
        [sys.executable, "-m", "vault_pipeline.cli", "ingest", str(path), "--vault", str(vault_root)],
        capture_output=True,
        text=True,
        cwd=inputs,
        env=env,
        timeout=HANG_GUARD,
    )
    assert result.returncode == 1, result.stderr  # 1: some records were skipped (counted in the last line)
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped: ")]
    assert len(skipped) == bad and all(str(path) in line for line in skipped)
    assert _outside(tmp_path, vault_root) == before  # nothing written outside the vault
    written = _files_under(vault_root) - initial
    sessions = [p for p in written if p.parent == vault_root / "sessions"]
    assert len(sessions) == len(titles)
    for file in written:
        relative = file.resolve().relative_to(vault_root.resolve())
        if relative.parts[0] == ".vault_pipeline":  # state: index, call log, journal
            continue
        assert file.suffix == ".md"
        assert not any(part.startswith(".") or part in ("..", "") for part in relative.parts)
        assert len(file.name.encode()) <= 130 and file.name.split(".")[0].lower() not in ("con", "nul")
        frontmatter, _ = split_frontmatter(file.read_text(encoding="utf-8"), str(file))
        assert frontmatter.get("id")
    ids = {split_frontmatter(p.read_text(encoding="utf-8"))[0]["source_conversation"] for p in sessions}
    assert ids == {f"good-{i}" for i in range(len(titles))}


@fixed(15)
@given(titles=st.lists(hostile_titles, min_size=1, max_size=3), noise=st.lists(json_values, max_size=3))
def test_ingest_writes_every_good_record_under_the_vault(tmp_path_factory, titles, noise):
    from vault_pipeline.models.offline import OfflineBackend
    from vault_pipeline.pipeline import ingest

    root = tmp_path_factory.mktemp("v")
    vault = Vault.init(root / "vault")
    path = root / "conversations.json"
    good = [chatgpt_record(i, title=t, text=f"We decided to ship release {i} on Friday.") for i, t in enumerate(titles)]
    path.write_text(json.dumps([*good, *noise]), encoding="utf-8")
    report = ingest(vault, [path], OfflineBackend())
    assert report.conversations == len(good) and not report.errors
    assert all("\n" not in line for line in report.skipped)
    assert _outside(root, root / "vault") == {path}
    for file in _files_under(root / "vault"):
        file.resolve().relative_to((root / "vault").resolve())
    assert len(list((root / "vault" / "sessions").glob("*.md"))) == len(good)


# --------------------------------------------------------------------------- streaming


@pytest.mark.slow
def test_a_200_mb_export_is_streamed_not_loaded(tmp_path):
    """benchmarks/bench_stream.py writes 200 MB, a child reads it and reports its own peak RSS."""
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_stream.py"), "--mb", "200", "--dir", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["file_mb"] >= 200
    assert figures["conversations"] == figures["written"] > 1000 and figures["issues"] == 0
    assert figures["peak_above_baseline_mb"] < 120  # the whole file would be 200 MB as text, ~1 GB as objects
