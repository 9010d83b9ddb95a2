"""vault.toml and VAULT_* are checked against one schema: types, ranges, unknown keys, and no plain-text key."""

from __future__ import annotations

import pytest

from vault_pipeline.config import (
    DEFAULT_TOML,
    Settings,
    check_overrides,
    load_settings,
    setting,
)
from vault_pipeline.errors import ConfigError

WIDE_RANGE = setting("wide").bounds
BUDGET_RANGE = setting("budget").bounds
WINDOW_RANGE = setting("window").bounds


def settings_from(tmp_path, toml: str, env: dict | None = None) -> Settings:
    (tmp_path / "vault.toml").write_text(toml, encoding="utf-8")
    return load_settings(tmp_path, env or {})


def refused(tmp_path, toml: str, env: dict | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        settings_from(tmp_path, toml, env)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_default_file_gives_the_default_settings(tmp_path):
    assert settings_from(tmp_path, DEFAULT_TOML) == Settings()
    assert load_settings(None, {}) == Settings()


@pytest.mark.parametrize("wide", [WIDE_RANGE[0], WIDE_RANGE[1]])
def test_wide_accepts_its_bounds(tmp_path, wide):
    assert settings_from(tmp_path, f"[retrieval]\nwide = {wide}\n").wide == wide


@pytest.mark.parametrize("wide", [WIDE_RANGE[0] - 1, WIDE_RANGE[1] + 1, 10_000_000_000, -5])
def test_wide_out_of_range_is_refused_naming_the_key(tmp_path, wide):
    message = refused(tmp_path, f"[retrieval]\nwide = {wide}\n")
    assert f"[retrieval] wide = {wide}" in message and str(tmp_path / "vault.toml") in message
    assert f"an integer from {WIDE_RANGE[0]:,} to {WIDE_RANGE[1]:,}" in message


@pytest.mark.parametrize("floor", ["5.0", "-0.1", "nan", "inf", "-inf"])
def test_floor_must_be_a_finite_number_from_0_to_1(tmp_path, floor):
    message = refused(tmp_path, f"[retrieval]\nfloor = {floor}\n")
    assert "[retrieval] floor" in message and "a number from 0 to 1" in message


@pytest.mark.parametrize(("floor", "expected"), [("0", 0.0), ("1", 1.0), ("0.35", 0.35)])
def test_floor_in_range_is_kept(tmp_path, floor, expected):
    assert settings_from(tmp_path, f"[retrieval]\nfloor = {floor}\n").floor == expected


@pytest.mark.parametrize("budget", ["1.9", "2000.0", '"2000"', "true", "0", str(BUDGET_RANGE[1] + 1)])
def test_budget_is_a_positive_integer_never_truncated(tmp_path, budget):
    assert "[retrieval] budget" in refused(tmp_path, f"[retrieval]\nbudget = {budget}\n")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("window", "0"),
        ("window", str(WINDOW_RANGE[0] - 1)),
        ("window", "8000.5"),
        ("variants", '"yes"'),
        ("gate_enabled", "1"),
    ],
)
def test_other_retrieval_keys_are_typed(tmp_path, key, value):
    assert f"[retrieval] {key} = " in refused(tmp_path, f"[retrieval]\n{key} = {value}\n")


def test_log_switches_are_booleans(tmp_path):
    assert "[log] calls" in refused(tmp_path, '[log]\ncalls = "no"\n')
    assert settings_from(tmp_path, "[log]\ncalls = false\n").log_calls is False


def test_a_section_that_is_not_a_table_is_refused(tmp_path):
    message = refused(tmp_path, "models = 5\n")
    assert "models = 5" in message and "expected a table" in message


def test_unknown_tables_and_keys_are_refused_with_the_known_ones(tmp_path):
    assert "[retreival]: unknown table" in refused(tmp_path, "[retreival]\nwide = 5\n")
    message = refused(tmp_path, "[retrieval]\nwidth = 5\n")
    assert "[retrieval] width: unknown setting" in message and "wide" in message


def test_model_strings_and_api_base_are_checked(tmp_path):
    assert "[models] extract" in refused(tmp_path, '[models]\nextract = ""\n')
    assert "[models] extract" in refused(tmp_path, "[models]\nextract = 3\n")
    assert "http(s)://" in refused(tmp_path, '[models]\napi_base = "localhost:8080"\n')
    assert settings_from(tmp_path, '[models]\napi_base = ""\n').api_base is None
    assert settings_from(tmp_path, '[models]\napi_base = "http://127.0.0.1:8080/v1"\n').api_base.endswith("/v1")


def test_an_api_key_in_vault_toml_is_refused_without_echoing_it(tmp_path):
    key = "sk-plaintextsecret0123456789"
    message = refused(tmp_path, f'[models]\napi_key = "{key}"\n')
    assert key not in message
    assert "[models] api_key" in message and "api_key_env" in message


def test_api_key_env_names_the_variable_the_key_is_read_from(tmp_path):
    key = "sk-fromtheenvironment0123456789"
    loaded = settings_from(tmp_path, '[models]\napi_key_env = "MY_LLM_KEY"\n', {"MY_LLM_KEY": key})
    assert loaded.api_key == key and loaded.api_key_env == "MY_LLM_KEY"
    assert key not in repr(loaded)  # never printed with the settings


def test_api_key_env_naming_an_unset_variable_is_refused(tmp_path):
    message = refused(tmp_path, '[models]\napi_key_env = "MY_LLM_KEY"\n', {})
    assert "MY_LLM_KEY is not set" in message
    assert "environment variable name" in refused(tmp_path, '[models]\napi_key_env = "not a name"\n')


def test_the_key_reaches_the_litellm_call(tmp_path):
    """The backend passes the key read from the named variable to the completion call."""
    from pydantic import BaseModel

    from vault_pipeline.models.build import build_llm
    from vault_pipeline.models.prompts import Prompt

    class Answer(BaseModel):
        word: str

    seen = {}

    def completion(**kwargs):
        import litellm

        seen.update(kwargs)
        return litellm.completion(mock_response='{"word": "ok"}', **kwargs)

    loaded = settings_from(tmp_path, '[models]\napi_key_env = "MY_LLM_KEY"\n', {"MY_LLM_KEY": "sk-abc123abc123"})
    llm = build_llm("openai/gpt-4o-mini", api_key=loaded.api_key)
    llm._completion = completion
    prompt = Prompt(name="echo", version="1", temperature=0.0, system="Answer in JSON.", template="Say {{ thing }}.")
    assert llm.call(prompt, {"thing": "ok"}, Answer).word == "ok"
    assert seen["api_key"] == "sk-abc123abc123"


def test_environment_overrides_are_checked_too(tmp_path):
    assert settings_from(tmp_path, DEFAULT_TOML, {"VAULT_FLOOR": "0.25"}).floor == 0.25
    for value in ("nan", "2", "abc"):
        message = refused(tmp_path, DEFAULT_TOML, {"VAULT_FLOOR": value})
        assert "VAULT_FLOOR" in message
    assert "VAULT_EXTRACT_MODEL" not in str(settings_from(tmp_path, DEFAULT_TOML, {"VAULT_EXTRACT_MODEL": "o/x"}))
    assert settings_from(tmp_path, DEFAULT_TOML, {"VAULT_EXTRACT_MODEL": "o/x"}).extract_model == "o/x"


def test_invalid_toml_is_one_line(tmp_path):
    assert "not valid TOML" in refused(tmp_path, "[retrieval\nwide = 5\n")


@pytest.mark.parametrize(
    "overrides",
    [{"wide": 0}, {"wide": WIDE_RANGE[1] + 1}, {"floor": float("nan")}, {"floor": 1.5}, {"budget": 0}],
)
def test_cli_overrides_use_the_same_ranges(overrides):
    with pytest.raises(ConfigError) as caught:
        check_overrides(**overrides)
    assert str(caught.value).startswith(f"--{next(iter(overrides))} ")
    with pytest.raises(ConfigError):
        Settings().with_overrides(**overrides)


def test_cli_overrides_in_range_pass():
    check_overrides(wide=WIDE_RANGE[1], floor=0.0, budget=1)
    assert Settings().with_overrides(wide=7, floor=None).wide == 7


# --------------------------------------------------------------------------- one schema


def test_the_default_file_holds_every_setting_with_its_help_and_the_environment_names():
    from vault_pipeline.config import env_names, settings_schema

    for s in settings_schema():
        assert s.help.split()[0] in DEFAULT_TOML
        assert f"\n{s.key} = " in DEFAULT_TOML or f"\n# {s.key} = " in DEFAULT_TOML, s.name
    assert set(env_names()) == {
        "VAULT_EXTRACT_MODEL",
        "VAULT_GATE_MODEL",
        "VAULT_QUALITY_MODEL",
        "VAULT_EMBED_MODEL",
        "VAULT_API_BASE",
        "VAULT_FLOOR",
        "VAULT_MODEL_OUTPUT",
        "VAULT_MODEL_TIMEOUT",
        "VAULT_MODEL_CONCURRENCY",
        "VAULT_GATE_BATCH",
        "VAULT_GATE_TIMEOUT",
    }
    assert all(name in DEFAULT_TOML for name in env_names())
    assert all(len(line) <= 100 for line in DEFAULT_TOML.splitlines())


def test_the_cli_reads_defaults_help_and_bounds_by_name():
    from vault_pipeline.config import default_of, help_of, setting

    assert default_of("budget") == Settings().budget == 2000
    assert setting("budget").show_default == "vault.toml [retrieval] budget, else 2000"
    assert setting("floor").show_default == "vault.toml [retrieval] floor, else the embedder's calibration"
    assert setting("wide").bounds == WIDE_RANGE == (1, 1000)
    assert setting("extract_model").where == "[models] extract"
    assert help_of("gate_timeout").startswith("Seconds the gate may take")
    with pytest.raises(KeyError):
        setting("no_such_setting")


def test_the_funnel_knobs_a_user_may_tune_reach_the_funnel(tmp_path):
    from vault_pipeline.retrieve.types import FunnelConfig

    toml = (
        "[retrieval]\ngate_timeout = 2.5\ngate_batch = 4\ngate_text_chars = 300\nmax_candidates = 60\n"
        "window_share = 0.5\nrecency_half_life_days = 7\nrecency_weight = 0\n"
    )
    config = FunnelConfig.from_settings(settings_from(tmp_path, toml))
    assert (config.gate_timeout, config.gate_batch, config.gate_text_chars, config.max_candidates) == (2.5, 4, 300, 60)
    assert (config.window_share, config.recency_half_life_days, config.recency_weight) == (0.5, 7.0, 0.0)
    # Unset, they are the funnel's own defaults: one number in one place.
    assert FunnelConfig.from_settings(Settings()) == FunnelConfig()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("gate_timeout", "0"),
        ("gate_timeout", "nan"),
        ("gate_batch", "0"),
        ("gate_batch", "2.5"),
        ("gate_text_chars", "10"),
        ("max_candidates", "0"),
        ("window_share", "1.5"),
        ("recency_weight", "-0.1"),
        ("recency_half_life_days", "0"),
    ],
)
def test_the_funnel_knobs_are_checked_naming_the_key(tmp_path, key, value):
    from vault_pipeline.config import setting

    message = refused(tmp_path, f"[retrieval]\n{key} = {value}\n")
    assert f"[retrieval] {key} = " in message and setting(key).spec.expected in message


def test_vault_help_does_not_import_pydantic():
    """Importing the CLI reads the schema's defaults and help without pydantic (it costs ``--help``)."""
    import subprocess
    import sys

    code = "import sys, vault_pipeline.cli; assert 'pydantic' not in sys.modules, 'pydantic imported'"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0


def test_every_setting_keeps_its_name_in_the_funnel_config():
    """One name per setting from vault.toml to the code: a funnel setting is the FunnelConfig field of its name."""
    from dataclasses import fields

    from vault_pipeline.config import settings_schema
    from vault_pipeline.retrieve.types import FunnelConfig

    names = {f.name for f in fields(FunnelConfig)}
    funnel = [s for s in settings_schema() if s.spec.funnel]
    assert len(funnel) >= 12
    assert [(s.name, s.spec.funnel) for s in funnel if s.spec.funnel != s.name] == []
    assert [s.name for s in funnel if s.name not in names] == []


def test_the_cli_options_of_settings_read_their_help_bounds_and_default_from_the_schema():
    import typer.main

    from vault_pipeline.cli.app import app
    from vault_pipeline.config import setting

    command = typer.main.get_command(app)
    for sub, option, name in (
        ("query", "budget", "budget"),
        ("query", "wide", "wide"),
        ("ingest", "concurrency", "concurrency"),
    ):
        (param,) = [p for p in command.commands[sub].params if p.name == option]  # type: ignore[attr-defined]
        entry = setting(name)
        assert param.help == entry.help and param.show_default == entry.show_default
        assert (param.min, param.max) == entry.bounds  # type: ignore[attr-defined]
