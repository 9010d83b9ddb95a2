"""The `vault` command line: readable help, the default vault, -v, --json everywhere, and exit codes.

Exit codes (README "Exit codes"): 0 the command did what was asked; 1 some records,
conversations, notes or actions failed or were skipped, counted in the last line; 2 a usage or
configuration error. Every --json report carries the same number as ``exit_code``.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.support.fakes import HANG_GUARD
from vault_pipeline.cli import EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE, app

GOOD_TEXT = "We decided to ship the release on Friday after the review."


@pytest.fixture(autouse=True)
def _no_vault_env(monkeypatch, tmp_path):
    """No vault or model setting leaks in from the developer's shell; the working folder is no vault."""
    for name in list(os.environ):
        if name.startswith("VAULT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def hash_embedder(monkeypatch):
    """The CLI builds the fast test embedder instead of MiniLM."""
    import vault_pipeline.models.embed as embed
    from tests.support.fakes import HashEmbedder

    monkeypatch.setattr(embed, "build_embedder", lambda *args, **kwargs: HashEmbedder(dim=64))


def vault(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args], prog_name="vault")


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def chatgpt_record(i: int, text: str = GOOD_TEXT) -> dict:
    """One well-formed ChatGPT conversation (a user turn and an assistant turn)."""

    def node(node_id, parent, child, role, said):
        message = {"id": node_id, "author": {"role": role}, "content": {"content_type": "text", "parts": [said]}}
        return {"id": node_id, "parent": parent, "children": [child] if child else [], "message": message}

    return {
        "id": f"conv-{i}",
        "title": f"Release planning {i}",
        "create_time": 1_700_000_000 + i,
        "current_node": "a",
        "mapping": {
            "r": {"id": "r", "parent": None, "children": ["u"], "message": None},
            "u": node("u", "r", "a", "user", f"When do we ship release {i}?"),
            "a": node("a", "u", None, "assistant", text),
        },
    }


def export(tmp_path: Path, records: list, name: str = "conversations.json") -> Path:
    path = tmp_path / "in" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- help


def commands() -> list[str]:
    import typer

    return [c.name for c in typer.main.get_command(app).commands.values()]


@pytest.mark.parametrize("command", ["init", "ingest", "keep", "index", "query", "status", "clean", "check", "demo"])
def test_every_command_has_readable_help_an_example_and_json(command):
    result = vault(command, "--help")
    assert result.exit_code == 0, result.output
    usage = result.output.splitlines()[0]
    assert usage.startswith(f"Usage: vault {command} [OPTIONS]")
    assert "{" not in usage and "<" not in usage
    for typer_label in ("<list[", "<path>", "<str>", "<int>", "<float>"):
        assert typer_label not in result.output, (command, typer_label)
    assert "Example:" in result.output and "--json" in result.output
    assert "-v, --verbose" in result.output and "-v, --vault" not in result.output


def test_all_registered_commands_have_json():
    missing = [name for name in commands() if "--json" not in vault(name, "--help").output]
    assert missing == []


def test_usage_lines_name_the_arguments_and_show_defaults():
    assert vault("ingest", "--help").output.splitlines()[0] == "Usage: vault ingest [OPTIONS] EXPORT..."
    query = vault("query", "--help").output
    assert query.splitlines()[0] == "Usage: vault query [OPTIONS] [QUERY]"
    from vault_pipeline.config import Settings, setting

    flat = " ".join(query.split())
    assert f"--budget TOKENS {setting('budget').help} [default: (vault.toml [retrieval] budget, else " in flat
    assert f"else {Settings().budget})" in flat and f"else {Settings().wide})" in flat
    assert "--floor COSINE" in flat and "[default: (vault.toml [retrieval] floor, else" in flat


def test_vault_help_does_not_import_the_heavy_libraries():
    code = "import sys; from vault_pipeline.cli import main; sys.argv = ['vault', '--help']\ntry:\n main()\nexcept SystemExit:\n pass\nprint(sorted(m for m in ('litellm', 'lancedb', 'pydantic') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"


# --------------------------------------------------------------------------- the default vault and -v


def test_vault_defaults_to_the_nearest_vault_toml_above_the_working_folder(make_vault, monkeypatch):
    found = make_vault("notes")
    inside = found.root / "inbox"
    monkeypatch.chdir(inside)
    result = vault("status", "--json")
    assert result.exit_code == EXIT_OK, result.output
    assert json.loads(result.stdout)["vault"] == str(found.root)


def test_vault_dir_wins_over_the_working_folder(make_vault, monkeypatch):
    here, there = make_vault("here"), make_vault("there")
    monkeypatch.chdir(here.root)
    monkeypatch.setenv("VAULT_DIR", str(there.root))
    assert json.loads(vault("status", "--json").stdout)["vault"] == str(there.root)
    assert json.loads(vault("status", "--json", "--vault", here.root).stdout)["vault"] == str(here.root)


def test_vault_path_is_no_alias_of_vault_dir(make_vault, monkeypatch):
    monkeypatch.setenv("VAULT_PATH", str(make_vault().root))  # an undocumented alias, removed
    assert vault("status").exit_code == EXIT_USAGE


def test_no_vault_anywhere_is_a_usage_error(tmp_path):
    result = vault("status")
    assert result.exit_code == EXIT_USAGE
    assert "no vault.toml here or in any folder above" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_dash_v_is_verbose_not_the_vault(make_vault, monkeypatch):
    found = make_vault()
    monkeypatch.chdir(found.root)
    assert vault("status", "-v").exit_code == EXIT_OK
    old_habit = vault("status", "-v", str(found.root))  # -v DIR: DIR is now an unexpected argument
    assert old_habit.exit_code == EXIT_USAGE


def test_verbose_shows_the_cause_of_an_error_and_is_gone_after_the_command(make_vault):
    import logging

    found = make_vault()
    (found.root / "vault.toml").write_text("[retrieval\n", encoding="utf-8")
    handlers = list(logging.root.handlers)
    quiet, loud = vault("status", "--vault", found.root), vault("status", "--vault", found.root, "--verbose")
    assert quiet.exit_code == loud.exit_code == EXIT_USAGE
    assert "Traceback" not in quiet.stderr and "Traceback" in loud.stderr
    assert last_line(quiet.stderr) == last_line(loud.stderr) and last_line(loud.stderr).startswith("error: ")
    assert logging.root.handlers == handlers


# --------------------------------------------------------------------------- status


def test_status_prints_titled_tables_and_json(make_vault, write_note):
    found = make_vault()
    write_note(found.root, "inbox/a.md", "a1", "A note about releases.")
    write_note(found.root, "inbox/b.md", "b1", "A note about reviews.")
    text = vault("status", "--vault", found.root)
    assert text.exit_code == EXIT_OK, text.output
    assert f"vault status: {found.root}" in text.stdout and "models" in text.stdout
    assert "folder" in text.stdout and "all notes" in text.stdout
    data = json.loads(vault("status", "--vault", found.root, "--json").stdout)
    assert data["folders"] == {"inbox": 2} and data["exit_code"] == EXIT_OK
    assert {m["role"] for m in data["models"]} == {"extract", "gate", "quality", "embed"}


# --------------------------------------------------------------------------- exit codes


def test_ingest_of_good_records_exits_0(make_vault, tmp_path):
    found = make_vault()
    path = export(tmp_path, [chatgpt_record(0), chatgpt_record(1)])
    result = vault("ingest", path, "--vault", found.root, "--json")
    assert result.exit_code == EXIT_OK, result.output
    report = json.loads(result.stdout)
    assert report["exit_code"] == EXIT_OK and report["conversations"] == 2 and report["skipped"] == []


def test_ingest_where_every_record_is_skipped_exits_1_with_the_count_last(make_vault, tmp_path):
    found = make_vault()
    bad = [{**chatgpt_record(i), "mapping": "garbage"} for i in range(3)]
    path = export(tmp_path, bad)
    result = vault("ingest", path, "--vault", found.root)
    assert result.exit_code == EXIT_INCOMPLETE, result.output
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped: ")]
    assert len(skipped) == len(bad)
    assert last_line(result.stderr) == f"incomplete: {len(bad)} record(s) skipped (exit {EXIT_INCOMPLETE})"
    as_json = vault("ingest", path, "--vault", found.root, "--json")
    assert as_json.exit_code == EXIT_INCOMPLETE
    assert json.loads(as_json.stdout)["exit_code"] == EXIT_INCOMPLETE


def test_ingest_with_some_bad_records_still_writes_the_good_ones_and_exits_1(make_vault, tmp_path):
    found = make_vault()
    path = export(tmp_path, [chatgpt_record(0), {**chatgpt_record(9), "mapping": {}}, chatgpt_record(1)])
    result = vault("ingest", path, "--vault", found.root, "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == EXIT_INCOMPLETE and report["conversations"] == 2 and len(report["skipped"]) == 1
    assert len(list((found.root / "sessions").glob("*.md"))) == 2


@pytest.mark.slow
def test_failed_conversations_exit_1_and_library_banners_stay_off_the_terminal(make_vault, tmp_path):
    """An unreachable model (here a provider LiteLLM does not know: it fails before any network)."""
    found = make_vault()
    path = export(tmp_path, [chatgpt_record(0), chatgpt_record(1)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_")}
    env.update(VAULT_EXTRACT_MODEL="nosuchprovider/model", LITELLM_LOCAL_MODEL_COST_MAP="True")
    result = subprocess.run(
        [sys.executable, "-m", "vault_pipeline.cli", "ingest", str(path), "--vault", str(found.root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_GUARD,
    )
    assert result.returncode == EXIT_INCOMPLETE, result.stderr
    assert last_line(result.stderr) == f"incomplete: 2 conversation(s) failed (exit {EXIT_INCOMPLETE})"
    everything = result.stdout + result.stderr
    for banner in ("Give Feedback", "Provider List", "LiteLLM.Info", "API call failed on attempt", "\x1b[1;31m"):
        assert banner not in everything, banner
    assert sum(line.startswith("skipped: ") for line in result.stderr.splitlines()) == 2  # one line each


def test_a_missing_input_file_is_a_usage_error(make_vault, tmp_path):
    found = make_vault()
    result = vault("ingest", tmp_path / "missing.zip", "--vault", found.root)
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.strip() == f"error: {tmp_path / 'missing.zip'}: no such file or folder"


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[retrieval]\nwide = 10000000000\n", "[retrieval] wide"),
        ("[retrieval]\nfloor = nan\n", "[retrieval] floor"),
        ("models = 5\n", "models = 5"),
    ],
)
def test_a_config_error_exits_2_with_one_line_naming_the_key(make_vault, toml, key):
    found = make_vault()
    (found.root / "vault.toml").write_text(toml, encoding="utf-8")
    result = vault("status", "--vault", found.root)
    assert result.exit_code == EXIT_USAGE
    assert len(result.stderr.strip().splitlines()) == 1 and key in result.stderr


@pytest.mark.parametrize(
    ("option", "value"), [("--wide", "0"), ("--wide", "1001"), ("--floor", "nan"), ("--budget", "0")]
)
def test_query_options_out_of_range_exit_2(make_vault, option, value):
    found = make_vault()
    result = vault("query", "anything", "--vault", found.root, option, value)
    assert result.exit_code == EXIT_USAGE, result.output


def test_an_unknown_option_exits_2():
    assert vault("status", "--no-such-option").exit_code == EXIT_USAGE


def test_index_with_an_unreadable_note_exits_1(make_vault, write_note, hash_embedder):
    found = make_vault()
    write_note(found.root, "inbox/good.md", "g1", "A good note about releases.")
    (found.root / "inbox" / "broken.md").write_bytes(b"---\nid: x\n---\nbody \xff\xfe\n")  # not UTF-8 text
    result = vault("index", "--vault", found.root, "--json")
    report = json.loads(result.stdout)
    assert len(report["skipped"]) == 1 and report["exit_code"] == EXIT_INCOMPLETE
    assert result.exit_code == EXIT_INCOMPLETE
    assert last_line(result.stderr) == f"incomplete: 1 note(s) skipped (exit {EXIT_INCOMPLETE})"


def test_clean_that_succeeds_exits_0(make_vault, write_note, hash_embedder):
    found = make_vault()
    write_note(found.root, "inbox/a.md", "a1", "The release ships on Friday.")
    write_note(found.root, "inbox/b.md", "b1", "Reviews happen on Thursday.")
    plan = vault("clean", "--vault", found.root, "--dry-run", "--json")
    assert plan.exit_code == EXIT_OK, plan.output
    assert isinstance(json.loads(plan.stdout), list)  # the plan's actions
    result = vault("clean", "--vault", found.root, "--json")
    assert result.exit_code == EXIT_OK, result.output
    report = json.loads(result.stdout)
    assert report["exit_code"] == EXIT_OK and report["skipped"] == []


def test_check_exits_1_on_a_problem_and_0_when_clean(make_vault, write_note):
    found = make_vault()
    write_note(found.root, "inbox/a.md", "a1", "A note.")
    assert vault("check", "--vault", found.root).exit_code == EXIT_OK
    write_note(found.root, "inbox/b.md", "b1", "See [[no-such-note]].")
    result = vault("check", "--vault", found.root, "--json")
    assert result.exit_code == EXIT_INCOMPLETE and json.loads(result.stdout)["exit_code"] == EXIT_INCOMPLETE


def test_init_reports_json(tmp_path):
    result = vault("init", tmp_path / "new", "--json")
    assert result.exit_code == EXIT_OK
    assert json.loads(result.stdout) == {"vault": str((tmp_path / "new").resolve()), "exit_code": EXIT_OK}


def test_a_failing_litellm_call_prints_no_banner(capfd):
    """litellm's mock_response failing path: the real exception mapping runs, its banner must not print."""
    import litellm
    from pydantic import BaseModel

    from vault_pipeline.errors import ModelError
    from vault_pipeline.models.litellm_backend import LiteLLMBackend
    from vault_pipeline.models.prompts import Prompt

    class Answer(BaseModel):
        word: str

    def completion(**kwargs):
        return litellm.completion(mock_response=ValueError("the server fell over"), **kwargs)

    litellm.suppress_debug_info = False  # litellm's own default, as on a fresh import
    llm = LiteLLMBackend("openai/gpt-4o-mini", completion=completion, transient_attempts=1, max_reasks=0)
    prompt = Prompt(name="echo", version="1", temperature=0.0, system="Answer in JSON.", template="Say {{ thing }}.")
    with pytest.raises(ModelError, match="the server fell over"):
        llm.call(prompt, {"thing": "ok"}, Answer)
    printed = capfd.readouterr()
    assert "Give Feedback" not in printed.out + printed.err
    assert "LiteLLM.Info" not in printed.out + printed.err


def test_the_ingest_bar_knows_its_total_so_it_can_show_an_eta(tmp_path):
    from rich.progress import Progress

    from vault_pipeline.cli.ingest import count_conversations
    from vault_pipeline.cli.progress import bar_callback

    good = [chatgpt_record(0), chatgpt_record(1), chatgpt_record(2)]
    path = export(tmp_path, [*good, {**chatgpt_record(9), "mapping": {}}])
    total = count_conversations([path])
    assert total == len(good)  # the bad record is not counted
    assert count_conversations([tmp_path / "in" / "missing.json"]) is None
    with Progress(disable=True) as progress:
        task = progress.add_task("ingest", total=None)
        bar_callback(progress, task, total)(1, None, "Release planning 0")  # the pipeline passes no total
        assert progress.tasks[0].total == len(good) and progress.tasks[0].completed == 1


def test_every_status_row_has_a_label(make_vault, write_note, hash_embedder):
    found = make_vault()
    write_note(found.root, "inbox/a.md", "a1", "A note about releases.", status="provisional", category="fact")
    write_note(found.root, "inbox/b.md", "b1", "A note about reviews.", status=None, category=None, tier=None)
    assert vault("index", "--vault", found.root).exit_code == EXIT_OK
    shown = vault("status", "--vault", found.root)
    assert shown.exit_code == EXIT_OK, shown.output
    rows = [line for line in shown.stdout.splitlines() if line.startswith("│")]
    assert len(rows) > 8  # folders, index and models
    labels = [line.split("│")[1].strip() for line in rows]
    assert all(labels) and not {"tier", "status", "category"} & set(labels), shown.stdout  # "status (none)"
    assert "index (derived from the notes" in shown.stdout


# --------------------------------------------------------------------------- the --json shapes

# Every report owns its --json shape (``to_dict()``); the CLI adds one key, ``exit_code``, last.
# These lists pin the shapes users' scripts read: a change here is a change for them.
JSON_KEYS = {
    "init": ["vault"],
    "ingest": [
        "conversations",
        "messages",
        "alternates",
        "notes",
        "notes_by_category",
        "units_skipped",
        "not_written",
        "not_written_reasons",
        "archived",
        "archive_run",
        "topics_named",
        "threads",
        "writes",
        "files_written",
        "skipped",
        "warnings",
        "errors",
        "refused",
        "unwritable",
        "seconds",
        "model",
    ],
    "keep": ["kept", "refused", "skipped", "judge", "dry_run"],
    "index": [
        "embedder",
        "scanned",
        "unchanged",
        "added",
        "changed",
        "moved",
        "removed",
        "repaired",
        "embedded_notes",
        "embedded_chunks",
        "reused_chunks",
        "skipped",
        "repairs",
        "rebuilt",
        "rebuild_reason",
        "damaged_copy",
        "rechunked",
        "integrity",
        "optimized",
        "ann_index_built",
        "rows",
        "seconds",
        "embed_seconds",
        "warnings",
        "cached_chunks",
        "shared_chunks",
        "store_error",
    ],
    "status": ["vault", "folders", "index", "pending", "models", "lint", "broken_frontmatter"],
    "check": [
        "notes",
        "invalid",
        "dangling_links",
        "dangling_blocks",
        "dangling_headings",
        "duplicate_ids",
        "copies",
        "index_mismatches",
        "index_damage",
        "secrets",
        "temp_files",
        "fixed",
        "problems",
    ],
    "clean": ["run_id", "counts", "skipped", "files"],
    "undo": ["undone", "restored", "run_id", "skipped"],
}
PLAN_ACTION_KEYS = ["action", "notes", "reason", "paths", "expected_sha256"]  # and "canonical" for a collapse
PACKAGE_KEYS = ["blocks", "found", "intent", "query", "stats", "tokenizer", "tokens", "trace"]  # extended: tokenizer


def json_of(*args: object) -> dict:
    result = vault(*args, "--json")
    assert result.exit_code in (EXIT_OK, EXIT_INCOMPLETE), result.output
    return json.loads(result.stdout)


def test_every_report_prints_its_own_json_shape_with_the_exit_code_last(make_vault, tmp_path, hash_embedder):
    root = make_vault().root
    path = export(tmp_path, [chatgpt_record(0), chatgpt_record(1)])
    shapes = {
        "init": json_of("init", tmp_path / "another"),
        "ingest": json_of("ingest", path, "--vault", root),
        "keep": json_of("keep", "--all-passing", "--dry-run", "--vault", root),
        "index": json_of("index", "--vault", root),
        "status": json_of("status", "--vault", root),
        "check": json_of("check", "--vault", root),
        "clean": json_of("clean", "--vault", root),
    }
    for command, data in shapes.items():
        assert list(data) == [*JSON_KEYS[command], "exit_code"], command
    assert list(shapes["keep"]["judge"]) == ["by", "model_judged", "errors"]
    assert [list(m) for m in shapes["status"]["models"]] == [
        ["role", "model", "where"]
    ] * 4  # extract, gate, quality, embed


def test_the_clean_plan_and_the_package_keep_their_json_shapes(make_vault, write_note, hash_embedder):
    root = make_vault().root
    write_note(root, "inbox/a.md", "a1", "The release ships on Friday.", created="2024-01-01T10:00:00+00:00")
    write_note(root, "inbox/b.md", "b1", "The release ships on Friday.", created="2024-01-02T10:00:00+00:00")
    plan = vault("clean", "--vault", root, "--dry-run", "--json")
    assert plan.exit_code == EXIT_OK, plan.output
    actions = json.loads(plan.stdout)
    assert actions and all([k for k in a if k != "canonical"] == PLAN_ACTION_KEYS for a in actions), actions
    swept = json_of("clean", "--vault", root)
    assert swept["run_id"] and list(json_of("clean", "--vault", root, "--undo", swept["run_id"])) == [
        *JSON_KEYS["undo"],
        "exit_code",
    ]
    explained = vault("query", "When does the release ship?", "--vault", root, "--json", "--explain")
    assert list(json.loads(explained.stdout)) == PACKAGE_KEYS
    # Without --explain the trace may leave --json (the funnel's package decides); nothing else does.
    plain = list(json.loads(vault("query", "When does the release ship?", "--vault", root, "--json").stdout))
    assert [k for k in PACKAGE_KEYS if k != "trace"] == [k for k in plain if k != "trace"]


def test_the_demo_and_gate_calibrate_summaries_own_their_shapes():
    from vault_pipeline.cli.calibrate import GateCalibration
    from vault_pipeline.cli.demo import DemoReport
    from vault_pipeline.index.sync import IndexReport
    from vault_pipeline.ingest.write import IngestReport

    demo = DemoReport("/tmp/demo", IngestReport(model="offline"), IndexReport(), "0 files written").to_dict()
    assert list(demo) == ["vault", "ingest", "index", "written"]
    assert list(demo["ingest"]) == [*JSON_KEYS["ingest"], "exit_code"] and list(demo["index"]) == JSON_KEYS["index"]

    class Summary:
        def __init__(self, **data):
            self.data = data

        def summary(self) -> dict:
            return self.data

    run = GateCalibration(Summary(model="offline", queries=3), Summary(target_recall=0.9), None)  # type: ignore[arg-type]
    assert run.to_dict() == {"model": "offline", "queries": 3, "fitted_gate": {"target_recall": 0.9}, "stored": None}


# --------------------------------------------------------------------------- reports a person reads


def ref(note_id: str, text: str, folder: str = "inbox"):
    from vault_pipeline.clean.types import NoteRef

    slug = "-".join(text.lower().rstrip(".").split()[:8])  # as note file names are: the first words
    return NoteRef(note_id, f"{folder}/{slug}-{note_id[-6:]}.md", "sha", text)


def test_the_clean_plan_prints_a_summary_then_each_action_wrapped_never_cut():
    from vault_pipeline.clean.types import Collapse, Plan, Relate, Supersede
    from vault_pipeline.cli.clean import plan_lines

    may10, may3 = ref("a-000000955c2f", "The deadline is May 10."), ref("a-000000453d92", "The deadline is May 3.")
    long = ref("a-0000001b1fef", "A very long note " + "that keeps going " * 12 + "\nand has a second line.")
    reason = "a-000000955c2f supersedes a-000000453d92: " + "the value differs " * 20
    plan = Plan(
        actions=[
            Collapse(may10, (ref("a-0000007a7a7a", "The deadline is May 10!"),), "2 notes state one claim"),
            Supersede(may10, may3, reason),
            Relate(long, may3, "one subject"),
        ],
        notes=40,
        candidates=7,
    )
    for width in (80, 120):
        lines = plan_lines(plan, width)
        assert lines[0].startswith("clean plan: 3 action(s) from 7 candidate pair(s) over 40 notes")
        start = lines.index("")
        kinds = [line.split()[:2] for line in lines[1:start] if line.split()[0].isdigit()]
        assert kinds == [["1", "duplicate"], ["1", "supersede"], ["1", "relate"]]
        body = "\n".join(lines[start:])
        assert lines[start + 1] == "1. duplicate: 2 notes state one claim"
        assert "\n2. supersede: " in body and "\n3. relate: one subject" in body
        assert f"   keep     {may10.path}\n            The deadline is May 10." in body
        assert f"   archive  {may3.path}\n            The deadline is May 3." in body
        assert all(len(line) <= width for line in lines), [len(line) for line in lines]
        assert "…" not in body
        flat = " ".join(body.split())
        assert " ".join(reason.split()) in flat and " ".join(long.text.split()) in flat  # whole, in order


def test_clean_dry_run_prints_the_summary_first(make_vault, write_note, hash_embedder):
    root = make_vault().root
    write_note(root, "inbox/a.md", "a1", "The release ships on Friday.", created="2024-01-01T10:00:00+00:00")
    write_note(root, "inbox/b.md", "b1", "The release ships on Friday.", created="2024-01-02T10:00:00+00:00")
    shown = vault("clean", "--vault", root, "--dry-run")
    assert shown.exit_code == EXIT_OK, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("clean plan: 1 action(s)") and lines[1].split()[:2] == ["1", "duplicate"]
    assert "   keep     inbox/" in shown.stdout and "   archive  inbox/" in shown.stdout
    assert shown.stdout.count("            The release ships on Friday.") == 2


def test_the_explain_table_wraps_paths_and_reasons_never_cuts_them(make_vault, write_note, hash_embedder, monkeypatch):
    from vault_pipeline.cli.query import print_package

    root = make_vault().root
    for n in range(6):
        name = f"the-release-of-version-{n}-ships-on-friday-after-the-long-review-{n:06d}.md"
        write_note(root, f"inbox/{name}", f"a{n}", f"The release of version {n} ships on Friday after the review.")
    assert vault("index", "--vault", root).exit_code == EXIT_OK
    shown = vault("query", "When does the release ship?", "--vault", root, "--explain", "--json")
    assert shown.exit_code == EXIT_OK, shown.output
    package = json.loads(shown.stdout)
    table = shown.stderr.splitlines()[:-1]  # the depth line may run on
    assert len(package["trace"]) >= 6 and all(len(line) <= 120 for line in table)
    assert "…" not in "\n".join(table)

    class Shown:  # what print_package reads of a package: its trace, query, intent, walk line and Markdown
        query, intent = "q", "i"
        stats = None

        def to_dict(self, trace: bool = False) -> dict:
            return {"trace": package["trace"]} if trace else {}

        def to_markdown(self) -> str:
            return ""

    narrow = Console(width=80, record=True, file=io.StringIO(), force_terminal=True)
    monkeypatch.setattr("vault_pipeline.cli.query.err", narrow)  # a terminal of 80 columns
    print_package(Shown(), json_out=False, explain=True)
    text = narrow.export_text().splitlines()[:-1]
    assert all(len(line) <= 80 for line in text) and "…" not in "\n".join(text)
    header = next(n for n, line in enumerate(text) if " note " in f" {line} " and "lanes" in line)
    left, right = text[header].index("note"), text[header].index("lanes")
    paths: list[str] = []
    for line in text[header + 2 :]:  # after the header and its rule
        if line[:left].strip():
            paths.append("")  # a new row: its rank stands left of the note column
        if paths:
            paths[-1] += line[left:right].strip()
    assert paths == [e["path"].removesuffix(".md") for e in package["trace"]]  # every path whole


def test_plain_progress_prints_a_line_every_few_seconds_with_rate_and_eta():
    from vault_pipeline.cli.progress import PlainProgress

    now = [100.0]
    console = Console(file=io.StringIO(), width=200)
    tick = PlainProgress(console, "index", "notes", every=5, clock=lambda: now[0])
    now[0] = 108.0
    tick(0, 1000)  # the first report, 8 s in (the step read its notes first): no rate yet
    now[0] = 110.0
    tick(40, 1000)  # under 5 seconds since the last line: nothing
    now[0] = 118.0
    tick(100, 1000)  # 100 notes in the 10 s since the first report
    now[0] = 119.0
    tick(110, 1000)  # one second after the last line: nothing
    now[0] = 3708.0
    tick(36_000, None)  # no total from the library and none known: no ETA
    assert console.file.getvalue().splitlines() == [
        "index: 0/1,000 notes (0%), 0:08 elapsed",
        "index: 100/1,000 notes (10%), 10.0/s, 0:18 elapsed, ETA 1:30",
        "index: 36,000 notes, 10.0/s, 1:00:08 elapsed",
    ]
    batches = PlainProgress(console, "keep", "notes", every=0, clock=lambda: now[0])
    batches(0, 4571)
    now[0] += 7
    batches(1, 4571)  # the first batch done: under 1% of the notes, too few for a rate
    assert console.file.getvalue().splitlines()[-1] == "keep: 1/4,571 notes (0%), 0:07 elapsed"
    known = PlainProgress(console, "ingest", "conversations", 50, every=0, clock=lambda: now[0])
    known(0, None)
    now[0] += 25
    known(5, None)  # the ingest passes no total: the counted one stands in
    assert console.file.getvalue().splitlines()[-1] == "ingest: 5/50 conversations (10%), 0.2/s, 0:25 elapsed, ETA 3:45"


def test_off_a_terminal_long_steps_print_plain_progress_lines(make_vault, write_note, hash_embedder, monkeypatch):
    import vault_pipeline.cli.progress as progress

    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)  # a line at every step, as a long run gives every 5 s
    root = make_vault().root
    for n in range(3):
        write_note(root, f"inbox/n{n}.md", f"n{n}", f"Note number {n} about releases.")
    result = vault("index", "--vault", root)
    assert result.exit_code == EXIT_OK, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("index: ")]
    assert lines and lines[-1].startswith("index: 3/3 rows (100%), ") and " elapsed" in lines[-1]
    assert "\x1b[" not in result.stderr  # plain text, no bar drawn into the log


def test_a_bad_batch_line_is_skipped_and_counted_and_a_missing_batch_file_does_nothing(
    make_vault, write_note, hash_embedder, tmp_path
):
    """One exit code per kind of failure: a bad record (here a batch line) is skipped with a line
    naming it and the rest answered (exit 1); a missing input file does nothing (exit 2)."""
    root = make_vault().root
    write_note(root, "inbox/a.md", "a1", "The release ships on Friday.", created="2024-01-01T10:00:00+00:00")
    assert vault("index", "--vault", root).exit_code == EXIT_OK
    batch = tmp_path / "questions.jsonl"
    batch.write_text(
        '{"query": "When does the release ship?"}\nnot json\n{"query": "Who ships it?"}\n', encoding="utf-8"
    )
    result = vault("query", "--vault", root, "--json", "--batch", batch)
    assert result.exit_code == EXIT_INCOMPLETE, result.output
    assert [json.loads(line)["query"] for line in result.stdout.splitlines()] == [
        "When does the release ship?",
        "Who ships it?",
    ]
    (skipped,) = [line for line in result.stderr.splitlines() if line.startswith("skipped: ")]
    assert f"{batch} [line 2]" in skipped
    assert last_line(result.stderr) == "incomplete: 1 batch line(s) skipped (exit 1)"
    missing = vault("query", "--vault", root, "--batch", tmp_path / "missing.jsonl")
    assert missing.exit_code == EXIT_USAGE and missing.stdout == ""
    assert missing.stderr.strip() == f"error: {tmp_path / 'missing.jsonl'}: no such file"


def test_the_ingest_table_explains_every_candidate_not_written():
    from collections import Counter

    from vault_pipeline.cli.ingest import print_ingest
    from vault_pipeline.ingest.write import IngestReport

    reasons = Counter({f"reason number {n}": 10 * n for n in range(1, 9)})  # more kinds than any cut-off
    console = Console(width=120, record=True, file=io.StringIO())
    print_ingest(IngestReport(not_written=reasons), console)
    shown = console.export_text()
    counts = [int(m) for m in re.findall(r"│\s+reason number \d\s+│\s+(\d+)", shown)]
    assert sorted(counts) == sorted(reasons.values()) and sum(counts) == sum(reasons.values())


def test_a_hand_broken_note_is_found_and_warned_of_in_index_and_status(make_vault, write_note, hash_embedder):
    root = make_vault().root
    write_note(root, "inbox/ok.md", "a1", "The release ships on Friday.")
    (root / "inbox" / "broken.md").write_text(
        "---\nid: a2\ntags: [oops\n---\nThe heron nests by the old mill every spring.\n", encoding="utf-8"
    )
    indexed = vault("index", "--vault", root)
    assert indexed.exit_code == EXIT_OK, indexed.output  # read all the same: nothing skipped
    assert "warning: inbox/broken.md: frontmatter is not valid YAML" in indexed.stderr
    status = vault("status", "--vault", root, "--json")
    assert json.loads(status.stdout)["broken_frontmatter"][0]["path"] == "inbox/broken.md"
    assert "warning: inbox/broken.md" in vault("status", "--vault", root).stderr
    found = vault("query", "Where does the heron nest?", "--vault", root, "--json")
    assert "inbox/broken.md" in found.stdout


def test_the_progress_bar_shows_the_rate_in_its_unit():
    from rich.progress import Progress

    from vault_pipeline.cli.progress import _rate_column

    now = [0.0]
    column = _rate_column("rows")
    bar = Progress(column, console=Console(file=io.StringIO()), get_time=lambda: now[0], auto_refresh=False)
    task = bar.add_task("index", total=1000)
    assert column.render(bar.tasks[0]).plain == "- rows/s"  # no rate before the first samples
    for _ in range(4):
        now[0] += 1.0
        bar.advance(task, 250)
    assert column.render(bar.tasks[0]).plain == "250 rows/s"
