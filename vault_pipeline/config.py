"""Settings: ``<vault>/vault.toml`` overlaid by environment variables and CLI options.

The loader takes the environment as an argument so that only the CLI (the
composition root) reads ``os.environ``; library code receives a ``Settings``.
Every value is checked against one pydantic schema (types, ranges, unknown keys)
and a bad one is a one-line ``ConfigError`` naming the key. pydantic is imported on
the first load, not at import: ``vault --help`` reads the defaults from ``Settings``.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from vault_pipeline.errors import ConfigError

CONFIG_FILE = "vault.toml"

DEFAULT_TOML = """\
# vault_pipeline settings for this vault.
# Model strings are LiteLLM's: "openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-latest",
# "ollama/llama3.1", or "openai/<name>" with api_base for a llama.cpp / vLLM server.
# "offline" is the deterministic built-in baseline: no key, no network, modest quality.
# Environment overrides: VAULT_EXTRACT_MODEL, VAULT_GATE_MODEL, VAULT_QUALITY_MODEL,
# VAULT_EMBED_MODEL, VAULT_API_BASE, VAULT_FLOOR.
[models]
extract = "offline"   # extraction, summaries, thread maps, query decomposition, sweep judgements
gate = "offline"      # the small fast fit-gate model
quality = "offline"   # the Note Quality Gate's judge in `vault keep` (offline: the fitted gate)
embed = "minilm"      # offline all-MiniLM-L6-v2 (int8 ONNX), or a LiteLLM embedding model string
api_base = ""
# api_key_env = "OPENAI_API_KEY"  # the environment variable holding the key (a key is never
                                  # written here); unset, LiteLLM reads the provider's usual one

[retrieval]
wide = 15             # candidates pulled before the floor and the gate (1 to 1000)
# floor = 0.20        # cosine floor, 0 to 1; unset, the embedder's own calibration applies
                      # (MiniLM: 0.20); measure one with `vault gate-calibrate` (see notebooks/)
budget = 2000         # tokens in a context package
window = 8000         # the target model's context window; packages use at most 78% of it
variants = true       # multi-query decomposition
gate_enabled = true

[ingest]
max_record_mb = 5     # a record or transcript larger than this (MiB of text) is skipped with a line
                      # naming it, and the rest of the file is ingested (0.001 to 1024)

[log]
calls = true          # <vault>/.vault_pipeline/calls.jsonl (never holds API keys)
payloads = true       # include prompt variables and outputs in the call log
"""

_ENV = {
    "VAULT_EXTRACT_MODEL": ("models", "extract"),
    "VAULT_GATE_MODEL": ("models", "gate"),
    "VAULT_QUALITY_MODEL": ("models", "quality"),
    "VAULT_EMBED_MODEL": ("models", "embed"),
    "VAULT_API_BASE": ("models", "api_base"),
    "VAULT_FLOOR": ("retrieval", "floor"),
}

# The bounds of each number, one home for the schema, the CLI's option checks and the help.
WIDE_RANGE = (1, 1000)  # candidates per query; past 1,000 the gate alone would cost minutes
BUDGET_RANGE = (1, 1_000_000)  # tokens in a package
RECORD_MB_RANGE = (0.001, 1024.0)  # MiB of text in one record; memory stays bounded either way
WINDOW_RANGE = (512, 10_000_000)  # tokens in the target model's window; below any chat model's, packages come out empty
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Settings:
    """Everything configurable, with the offline defaults."""

    extract_model: str = "offline"
    gate_model: str = "offline"
    quality_model: str = "offline"
    embed_model: str = "minilm"
    api_base: str | None = None
    api_key_env: str | None = None  # the name of the environment variable holding the key
    api_key: str | None = field(default=None, repr=False)  # read from it; never from vault.toml
    wide: int = 15
    floor: float | None = None  # None: not set by the user; the embedder's calibration applies
    budget: int = 2000
    window: int = 8000
    variants: bool = True
    gate_enabled: bool = True
    log_calls: bool = True
    log_payloads: bool = True
    max_record_mb: float = 5.0  # MiB of text in one export record or transcript
    extra: dict[str, Any] = field(default_factory=dict)

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with the given non-None fields replaced (CLI options), checked like vault.toml."""
        known = {f.name for f in fields(self)}
        clean = {k: v for k, v in changes.items() if v is not None and k in known}
        check_overrides(**{k: v for k, v in clean.items() if k in _OPTION_KEYS})
        return replace(self, **clean)


_TABLE_KEYS = {
    ("models", "extract"): "extract_model",
    ("models", "gate"): "gate_model",
    ("models", "quality"): "quality_model",
    ("models", "embed"): "embed_model",
    ("models", "api_base"): "api_base",
    ("models", "api_key_env"): "api_key_env",
    ("retrieval", "wide"): "wide",
    ("retrieval", "floor"): "floor",
    ("retrieval", "budget"): "budget",
    ("retrieval", "window"): "window",
    ("retrieval", "variants"): "variants",
    ("retrieval", "gate_enabled"): "gate_enabled",
    ("ingest", "max_record_mb"): "max_record_mb",
    ("log", "calls"): "log_calls",
    ("log", "payloads"): "log_payloads",
}
_OPTION_KEYS = {"wide", "floor", "budget", "window"}  # settings a CLI option may override


@functools.cache
def _schema() -> Any:
    """The pydantic model of vault.toml, built on first use (importing pydantic costs ~50 ms)."""
    from pydantic import BaseModel, ConfigDict, Field

    strict = ConfigDict(extra="forbid", strict=True)
    d = Settings()  # the defaults live in one place

    class Models(BaseModel):
        model_config = strict
        extract: str = Field(default=d.extract_model, min_length=1, description="a model string")
        gate: str = Field(default=d.gate_model, min_length=1, description="a model string")
        quality: str = Field(default=d.quality_model, min_length=1, description="a model string")
        embed: str = Field(default=d.embed_model, min_length=1, description="a model string")
        api_base: str = Field(default="", pattern=r"^(https?://\S+)?$", description='"" or an http(s):// URL')
        api_key_env: str | None = Field(
            default=None, pattern=_ENV_NAME.pattern, description="an environment variable name"
        )

    class Retrieval(BaseModel):
        model_config = strict
        wide: int = Field(default=d.wide, ge=WIDE_RANGE[0], le=WIDE_RANGE[1], description=_int_range(WIDE_RANGE))
        floor: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False, description="a number from 0 to 1")
        budget: int = Field(
            default=d.budget, ge=BUDGET_RANGE[0], le=BUDGET_RANGE[1], description=_int_range(BUDGET_RANGE)
        )
        window: int = Field(
            default=d.window, ge=WINDOW_RANGE[0], le=WINDOW_RANGE[1], description=_int_range(WINDOW_RANGE)
        )
        variants: bool = Field(default=d.variants, description="true or false")
        gate_enabled: bool = Field(default=d.gate_enabled, description="true or false")

    class Ingest(BaseModel):
        model_config = strict
        max_record_mb: float = Field(
            default=d.max_record_mb,
            ge=RECORD_MB_RANGE[0],
            le=RECORD_MB_RANGE[1],
            allow_inf_nan=False,
            description=f"a number of MiB from {RECORD_MB_RANGE[0]} to {RECORD_MB_RANGE[1]:g}",
        )

    class Log(BaseModel):
        model_config = strict
        calls: bool = Field(default=d.log_calls, description="true or false")
        payloads: bool = Field(default=d.log_payloads, description="true or false")

    class VaultToml(BaseModel):
        model_config = strict
        models: Models = Models()
        retrieval: Retrieval = Retrieval()
        ingest: Ingest = Ingest()
        log: Log = Log()

    return VaultToml


def _int_range(bounds: tuple[int, int]) -> str:
    return f"an integer from {bounds[0]:,} to {bounds[1]:,}"


def load_settings(vault_root: Path | None, env: Mapping[str, str] | None = None) -> Settings:
    """Read ``vault.toml`` (if any), then apply ``VAULT_*`` environment overrides; all checked."""
    env = env or {}
    where = "environment"
    raw: dict[str, Any] = {}
    if vault_root is not None and (vault_root / CONFIG_FILE).is_file():
        path = vault_root / CONFIG_FILE
        where = str(path)
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {' '.join(str(exc).split())}") from exc
    _refuse_plain_key(raw, where)
    sources: dict[tuple[str, str], str] = {}
    for name, (table, key) in _ENV.items():
        if env.get(name):
            if not isinstance(raw.get(table, {}), dict):
                break  # the file's own error is reported below
            raw.setdefault(table, {})[key] = _from_env(name, key, env[name])
            sources[(table, key)] = f"environment {name}"
    checked = _validate(raw, where, sources)
    return _settings_from(checked, env, where)


def _refuse_plain_key(raw: Mapping[str, Any], where: str) -> None:
    models = raw.get("models")
    if isinstance(models, dict) and "api_key" in models:  # the value itself is never echoed
        raise ConfigError(
            f"{where}: [models] api_key: keys are not read from vault.toml (it would sit in plain text in the "
            'vault); put the key in an environment variable and name it: api_key_env = "OPENAI_API_KEY"'
        )


def _from_env(name: str, key: str, value: str) -> Any:
    """An environment override as the type its key takes (environment values are all strings)."""
    if key != "floor":
        return value
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"environment {name} = {value!r}: expected a number from 0 to 1") from None


def _validate(raw: dict[str, Any], where: str, sources: Mapping[tuple[str, str], str]) -> Any:
    from pydantic import ValidationError

    schema = _schema()
    try:
        return schema.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc.errors()[0], raw, where, sources, schema)) from None


def _one_line(error: Mapping[str, Any], raw: Mapping[str, Any], where: str, sources, schema) -> str:
    """One line naming the key, its value and what it takes."""
    loc = [str(part) for part in error["loc"]]
    table = schema.model_fields.get(loc[0])
    if len(loc) == 1:
        if table is None:
            return f"{where}: [{loc[0]}]: unknown table (known: {', '.join(f'[{t}]' for t in schema.model_fields)})"
        return f"{where}: {loc[0]} = {raw[loc[0]]!r}: expected a table ([{loc[0]}] with its keys below it)"
    model = table.annotation
    key = loc[1]
    origin = sources.get((loc[0], key), where)
    if error["type"] == "extra_forbidden":
        known = ", ".join(model.model_fields)
        return f"{origin}: [{loc[0]}] {key}: unknown setting (known: {known})"
    return f"{origin}: [{loc[0]}] {key} = {error['input']!r}: {_reason(error, model.model_fields[key].description)}"


def _reason(error: Mapping[str, Any], expected: str | None) -> str:
    """pydantic's reason, lower-cased, and what the key takes ("an integer from 1 to 1,000")."""
    if error["type"] == "string_pattern_mismatch":
        return f"expected {expected}"
    reason = f"{error['msg'][0].lower()}{error['msg'][1:]}"
    return f"{reason} ({expected})" if expected else reason


def _settings_from(checked: Any, env: Mapping[str, str], where: str) -> Settings:
    values: dict[str, Any] = {}
    for (table, key), name in _TABLE_KEYS.items():
        values[name] = getattr(getattr(checked, table), key)
    values["api_base"] = values["api_base"] or None
    if values["api_key_env"]:
        values["api_key"] = _key_from(values["api_key_env"], env, where)
    return replace(Settings(), **values)


def _key_from(name: str, env: Mapping[str, str], where: str) -> str:
    key = env.get(name, "").strip()
    if not key:
        raise ConfigError(f"{where}: [models] api_key_env = {name!r}: the environment variable {name} is not set")
    return key


def check_overrides(**values: Any) -> None:
    """Check CLI overrides (``wide``, ``floor``, ``budget``, ``window``) against the same ranges."""
    given = {k: v for k, v in values.items() if v is not None}
    if "floor" in given and isinstance(given["floor"], float) and not math.isfinite(given["floor"]):
        raise ConfigError(f"--floor {given['floor']!r}: expected a number from 0 to 1")
    from pydantic import ValidationError

    try:
        _schema().model_validate({"retrieval": given})
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][-1])
        expected = _schema().model_fields["retrieval"].annotation.model_fields.get(key)
        reason = _reason(error, expected.description if expected is not None else None)
        raise ConfigError(f"--{key} {error['input']!r}: {reason}") from None
