"""Hostile input at test scale: bombs with the limit lowered, undecodable bytes, dead writers' temp files.

The full-scale bombs (a 1 GB member, a 1 GB string) and their peak RSS are in
``benchmarks/bench_hostile.py``; here the same shapes run in milliseconds against a small limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
import zipfile
from pathlib import Path

from tests.ingest.test_rename import FIRST, chatgpt_export
from tests.support.fakes import HANG_GUARD
from vault_pipeline import pipeline
from vault_pipeline.ingest.parse import iter_json_array, read_export
from vault_pipeline.ingest.parse.jsonstream import Unreadable
from vault_pipeline.models.calllog import CallLog
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.vault.files import Vault

LIMIT = 64 * 1024  # the record limit these tests lower the default to


def good_record(conv_id: str) -> dict:
    """The one conversation of ``test_rename``'s export, under another id."""
    with tempfile.TemporaryDirectory() as folder:
        (record,) = json.loads(chatgpt_export(Path(folder) / "x.json", FIRST).read_text(encoding="utf-8"))
    record["id"] = conv_id
    return record


def bomb_record(size: int) -> dict:
    """A conversation whose one user message is a ``size``-character string."""
    record = good_record("conv-bomb")
    record["title"] = "The bomb"
    record["mapping"]["m0"]["message"]["content"]["parts"] = ["a" * size]
    return record


def ingest(tmp_path: Path, source: Path):
    vault = Vault.init(tmp_path / "v")
    return vault, pipeline.ingest(vault, [source], OfflineBackend(), max_record=LIMIT)


def test_a_zip_with_a_huge_text_member_skips_it_and_ingests_the_good_member(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb.md", "User: " + "a" * (LIMIT * 16) + "\nAssistant: ok\n")
        zf.writestr("conversations.json", json.dumps([good_record("conv-good")]))
    assert archive.stat().st_size < LIMIT  # highly compressible, like the 1 MB zip holding 1 GB
    vault, report = ingest(tmp_path, archive)
    assert report.conversations == 1 and len(list((vault.root / "sessions").glob("*.md"))) == 1
    (line,) = report.skipped
    assert f"{archive}!bomb.md" in line and f"{LIMIT:,}-byte limit" in line and "\n" not in line


def test_a_record_with_a_huge_string_is_skipped_by_name_and_its_neighbours_ingested(tmp_path):
    archive = tmp_path / "export.zip"
    records = [good_record("conv-before"), bomb_record(LIMIT * 16), good_record("conv-after")]
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("conversations.json", json.dumps(records))
    vault, report = ingest(tmp_path, archive)
    assert report.conversations == 2
    (line,) = report.skipped
    assert "[record 1 (id conv-bomb)]" in line and f"the {LIMIT:,}-character limit; skipped" in line
    assert "\n" not in line and len(line) < 400
    biggest = max(p.stat().st_size for p in vault.root.rglob("*.md"))
    assert biggest < LIMIT  # nothing of the bomb reached the vault


def test_the_default_limit_reads_a_large_but_legitimate_record(tmp_path):
    records = [bomb_record(LIMIT * 16)]  # 1 MiB of text: well under the default limit
    (conv,) = list(read_export(chatgpt_like(tmp_path / "c.json", records)))
    assert len(conv.messages[0].text) == LIMIT * 16


def chatgpt_like(path: Path, records: list) -> Path:
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


class LazyJSON:
    """A text stream of ``[good, {"title": ..., "text": "aaaa...<size>"}, good]`` produced as it is read."""

    def __init__(self, size: int):
        self.parts = iter(['[{"id": "a"}, {"title": "big", "text": "', *self._body(size), '"}, {"id": "b"}]'])
        self.pending = ""

    @staticmethod
    def _body(size: int):
        block = "a" * (1 << 16)
        for _ in range(size // len(block)):
            yield block

    def read(self, n: int = -1) -> str:
        while len(self.pending) < n:
            try:
                self.pending += next(self.parts)
            except StopIteration:
                break
        out, self.pending = self.pending[:n], self.pending[n:]
        return out


def test_the_stream_reader_skips_an_oversized_record_in_bounded_memory():
    size = 32 * 1024 * 1024
    tracemalloc.start()
    try:
        items = list(iter_json_array(LazyJSON(size), max_chars=LIMIT))  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert items[0] == {"id": "a"} and items[2] == {"id": "b"}
    assert isinstance(items[1], Unreadable) and items[1].label == "title 'big'"
    wrapper = len('{"title": "big", "text": ""}')
    assert f"record of {size + wrapper:,} characters" in items[1].reason
    assert peak < size // 20, f"peak {peak:,} bytes while skipping {size:,} characters"


def test_undecodable_bytes_are_read_and_reported_as_a_warning(tmp_path):
    transcript = tmp_path / "chat.md"
    transcript.write_bytes(b"User: caf\xe9 au lait is what we decided.\nAssistant: fine\n")
    vault, report = ingest(tmp_path, transcript)
    assert report.conversations == 1 and report.skipped == []
    (line,) = report.warnings
    assert str(transcript) in line and "1 byte(s) not valid UTF-8, shown as U+FFFD" in line
    (session,) = (vault.root / "sessions").glob("*.md")
    assert "caf\ufffd au lait" in session.read_text(encoding="utf-8")


def test_undecodable_bytes_in_a_json_export_are_reported_once_for_the_file(tmp_path):
    path = tmp_path / "conversations.json"
    text = json.dumps([good_record("c1")], ensure_ascii=False).replace("Asimov", "Asi\udcffmov", 1)
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    items = list(read_export(path))
    assert [type(i).__name__ for i in items] == ["Conversation", "ParseIssue"]
    assert "Asi\ufffdmov" in items[0].messages[0].text
    assert (
        items[1].warning and str(items[1]) == f"{path} [record whole file]: 1 byte(s) not valid UTF-8, shown as U+FFFD"
    )


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_next_write_command_removes_temp_files_of_dead_writers_only(tmp_path):
    vault, _ = ingest(tmp_path, chatgpt_export(tmp_path / "first.json", FIRST))
    dead = vault.root / "inbox" / f".x.md.vp-tmp-{dead_pid()}"
    live = vault.root / "sessions" / f".y.md.vp-tmp-{os.getpid()}"
    lookalike = vault.root / "inbox" / "x.md.vp-tmp-1.md"  # a note, not a temp file
    obsidian = vault.root / ".obsidian" / f".z.md.vp-tmp-{dead_pid()}"
    obsidian.parent.mkdir()
    for path in (dead, live, lookalike, obsidian):
        path.write_text("partial", encoding="utf-8")
    again = Vault.open(vault.root)
    pipeline.ingest(again, [tmp_path / "first.json"], OfflineBackend())
    assert not dead.exists() and again.swept == [dead.relative_to(vault.root).as_posix()]
    assert live.exists() and lookalike.exists() and obsidian.exists()


def test_the_call_log_stores_bounded_excerpts(tmp_path):
    log = CallLog(tmp_path / "calls.jsonl", max_chars=1000)
    huge = "b" * 3_000_000
    log.record({"prompt": "extract", "variables": {"messages": [huge] * 3, "ids": list(range(10_000))}, "output": huge})
    (line,) = (tmp_path / "calls.jsonl").read_text(encoding="utf-8").splitlines()
    entry = json.loads(line)
    assert len(line) < 20_000
    assert entry["output"] == "b" * 1000 + f"... [{len(huge) - 1000} more characters not logged]"
    assert entry["variables"]["ids"][-1] == "... [9800 more items not logged]"
    assert entry["prompt"] == "extract"


def test_a_lone_top_level_object_above_the_limit_is_skipped_by_name(tmp_path):
    """A LoCoMo sample (one object per file) whose members add up past the limit: one line, its id."""
    sample = {"sample_id": "s9", "qa": ["q" * (LIMIT // 2)], "conversation": {"session_1": ["t" * LIMIT]}}
    path = tmp_path / "sample.json"
    path.write_text(json.dumps(sample), encoding="utf-8")
    (issue,) = list(read_export(path, kind="locomo", max_record=LIMIT))
    assert issue.record == "0 (id s9)" and "-character limit; skipped" in issue.reason and not issue.warning


def test_a_huge_transcript_file_is_skipped_without_reading_it_whole(tmp_path):
    big = tmp_path / "big.md"
    with big.open("w", encoding="utf-8") as fh:
        fh.write("User: hello\n")
        fh.write("a" * (LIMIT * 8))
    good = tmp_path / "good.md"
    good.write_text("User: hello\nAssistant: hi\n", encoding="utf-8")
    items = list(read_export(tmp_path, max_record=LIMIT))
    assert [type(i).__name__ for i in items] == ["ParseIssue", "Conversation"]
    assert (
        str(items[0]) == f"{big} [record whole file]: larger than the {LIMIT:,}-byte limit for one transcript; skipped"
    )


def test_a_huge_first_record_does_not_hide_the_format_of_the_records_after_it(tmp_path):
    """A 9 MB title runs past the detector's head (8 MiB): the kind comes from the records that fit."""
    bomb = good_record("conv-bomb")
    bomb["title"] = "t" * (9 * 1024 * 1024)
    records = [bomb, good_record("conv-after")]
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("conversations.json", json.dumps(records))
    issue, conv = list(read_export(archive, max_record=LIMIT))
    assert issue.record.startswith("0 (title 'ttt") and "-character limit; skipped" in issue.reason
    assert conv.id == "conv-after"


def test_the_cli_takes_the_record_limit_from_vault_toml(tmp_path):
    source = chatgpt_like(tmp_path / "c.json", [good_record("conv-good"), bomb_record(LIMIT * 16)])
    vault = Vault.init(tmp_path / "v")
    config = vault.root / "vault.toml"
    config.write_text(config.read_text(encoding="utf-8").replace("max_record_mb = 5\n", "max_record_mb = 0.5\n"))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    command = [sys.executable, "-m", "vault_pipeline.cli", "ingest", str(source), "--vault", str(vault.root), "--json"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=HANG_GUARD)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["conversations"] == 1, proc.stderr
    (line,) = report["skipped"]
    assert "(id conv-bomb)" in line and f"{2**19:,}-character limit" in line
