"""The `vault` command line: readable help, the default vault, -v, --json everywhere, and exit codes.

Exit codes (README "When things go wrong"): 0 the command did what was asked; 1 some records,
conversations, notes or actions failed or were skipped, counted in the last line; 2 a usage or
configuration error. Every --json report carries the same number as ``exit_code``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

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
    from vault_pipeline.config import Settings

    flat = " ".join(query.split())
    assert "--budget TOKENS Token budget of the package. [default: (vault.toml [retrieval] budget, else " in flat
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
    assert {m["role"] for m in data["models"]} == {"extract", "gate", "embed"}


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
        timeout=300,
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
    (found.root / "inbox" / "broken.md").write_text("---\nid: [unclosed\n---\nbody\n", encoding="utf-8")
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

    from vault_pipeline.cli import _callback, _count_conversations

    good = [chatgpt_record(0), chatgpt_record(1), chatgpt_record(2)]
    path = export(tmp_path, [*good, {**chatgpt_record(9), "mapping": {}}])
    total = _count_conversations([path])
    assert total == len(good)  # the bad record is not counted
    assert _count_conversations([tmp_path / "in" / "missing.json"]) is None
    with Progress(disable=True) as progress:
        task = progress.add_task("ingest", total=None)
        _callback(progress, task, total)(1, None, "Release planning 0")  # the pipeline passes no total
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
