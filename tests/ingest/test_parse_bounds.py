"""Parsing stays linear and bounded on hostile input: deep nesting, unsafe and bomb zip members,
a record limit raised past what one machine should hold (issue 42)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest

from tests.support.paths import REPO
from vault_pipeline.errors import ParseError
from vault_pipeline.ingest.parse import Conversation, ParseIssue, jsonstream, read, read_export
from vault_pipeline.ingest.parse.detect import detect_kind

DEPTH = 100_000
# A CPU-time ceiling for one parse of a 200 KB file, many times what a linear scan needs (under a
# second); the quadratic scan ran for 584 s. CPU time, not wall time: other work on the machine
# does not count against it.
CPU_SECONDS = 60


def chatgpt_record(conv_id: str) -> dict:
    """The first conversation of the example ChatGPT export, under another id."""
    path = REPO / "vault_example" / "exports" / "chatgpt" / "conversations.json"
    record = json.loads(path.read_text(encoding="utf-8"))[0]
    record["id"] = conv_id
    return record


def split(items):
    items = list(items)
    return [i for i in items if isinstance(i, Conversation)], [i for i in items if isinstance(i, ParseIssue)]


def test_format_detection_is_linear_in_nesting_depth(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * DEPTH + "]" * DEPTH, encoding="utf-8")
    script = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_CPU, ({CPU_SECONDS}, {CPU_SECONDS}))\n"
        "from vault_pipeline.errors import ParseError\n"
        "from vault_pipeline.ingest.parse.detect import detect_kind\n"
        "try:\n"
        "    detect_kind(sys.argv[1])\n"
        "except ParseError as exc:\n"
        "    print(exc.reason)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(deep)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-500:]  # SIGXCPU kills a scan that is not linear
    assert "unknown shape" in done.stdout
    with pytest.raises(ParseError, match="unknown shape"):
        detect_kind(deep)


def test_a_deeply_nested_record_is_one_skip_line_and_its_neighbours_are_read(tmp_path):
    before, after = json.dumps(chatgpt_record("conv-before")), json.dumps(chatgpt_record("conv-after"))
    deep = '{"id": "conv-deep", "mapping": ' + "[" * DEPTH + "]" * DEPTH + "}"
    path = tmp_path / "conversations.json"
    path.write_text(f"[{before},{deep},{after}]", encoding="utf-8")
    conversations, issues = split(read_export(path))
    assert [c.id for c in conversations] == ["conv-before", "conv-after"]
    (issue,) = issues
    assert "[record 1" in str(issue) and "nested too deeply" in str(issue) and "\n" not in str(issue)


@pytest.mark.parametrize(
    "name",
    ["..\\..\\win\\conversations.json", "../up/conversations.json", "/abs/conversations.json", "C:/conversations.json"],
)
def test_an_unsafe_member_name_is_one_skip_line(tmp_path, name):
    archive = tmp_path / "export.zip"
    good = json.dumps([chatgpt_record("conv-good")])
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(name, good)
        zf.writestr("export/conversations.json", good)
    conversations, issues = split(read_export(archive))
    assert [c.id for c in conversations] == ["conv-good"]
    (issue,) = issues
    assert name in str(issue) and "unsafe member name" in str(issue)


def test_a_zip_bomb_is_refused_by_its_declared_sizes_unread(tmp_path, monkeypatch):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("conversations.json", "[" + " " * (read.BOMB_MIN_BYTES + 1) + "]")
        zf.writestr("other/conversations.json", json.dumps([chatgpt_record("conv-good")]))
    opened = []
    real_open = zipfile.ZipFile.open

    def spy(self, name, *args, **kwargs):
        opened.append(getattr(name, "filename", name))
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    conversations, issues = split(read_export(archive))
    assert [c.id for c in conversations] == ["conv-good"]
    (issue,) = issues
    assert "zip bomb" in str(issue) and "conversations.json" in str(issue)
    assert "conversations.json" not in opened  # refused before a byte of it was inflated


def test_a_member_declaring_more_than_the_member_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(read, "MAX_MEMBER_BYTES", 1000)
    archive = tmp_path / "big.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("conversations.json", json.dumps([chatgpt_record("conv-big")]))
    _, issues = split(read_export(archive))
    (issue,) = issues
    assert "1,000-byte limit for a member" in str(issue)


def test_no_setting_lifts_the_record_limit_past_the_ceiling(tmp_path, monkeypatch):
    ceiling = 64 * 1024
    monkeypatch.setattr(read, "RECORD_CEILING", ceiling)
    monkeypatch.setattr(jsonstream, "RECORD_CEILING", ceiling)
    big = chatgpt_record("conv-big")
    big["title"] = "t" * (ceiling * 2)
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([big, chatgpt_record("conv-small")]), encoding="utf-8")
    conversations, issues = split(read_export(path, max_record=1024 * 2**20))  # max_record_mb = 1024
    assert [c.id for c in conversations] == ["conv-small"]
    (issue,) = issues
    assert f"the {ceiling:,}-character limit" in str(issue)
    transcript = tmp_path / "long.md"
    transcript.write_text("User: " + "a" * (ceiling * 2) + "\nAssistant: ok\n", encoding="utf-8")
    (issue,) = split(read_export(transcript, max_record=1024 * 2**20))[1]
    assert f"the {ceiling:,}-byte limit" in str(issue)
