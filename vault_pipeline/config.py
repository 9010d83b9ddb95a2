"""Settings: ``<vault>/vault.toml`` overlaid by environment variables and CLI options.

One schema: each field of ``Settings`` is declared once, with its default, its place in
``vault.toml``, its bounds, its environment variable and its help. The default ``vault.toml``
text, the environment names, the CLI's help and the pydantic validator are all read from it.
The validator is built on first load: importing pydantic would cost ``vault --help`` more than
the rest of its start (docs/decisions/0030-one-settings-schema.md).

The loader takes the environment as an argument so that only the CLI (the composition root)
reads ``os.environ``; library code receives a ``Settings``. A bad value is a one-line
``ConfigError`` naming the key, its value and what it takes.
"""

from __future__ import annotations

import functools
import math
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NamedTuple

from vault_pipeline.errors import ConfigError

CONFIG_FILE = "vault.toml"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_URL = r"^(https?://\S+)?$"
TABLES = ("models", "retrieval", "ingest", "log")


class Spec(NamedTuple):  # a NamedTuple, not a dataclass: cheaper to define, and `vault --help` imports it
    """What the schema says of one setting besides its name, type and default."""

    table: str  # its [table] in vault.toml
    key: str  # its key there ("" : the field's own name)
    help: str  # one sentence: the CLI's help and the comment in the default vault.toml
    expected: str  # what it takes, for an error message ("an integer from 1 to 1,000")
    ge: float | None = None
    le: float | None = None
    gt: float | None = None
    env: str = ""  # the environment variable that overrides it ("": none)
    pattern: str = ""  # a string's pattern
    example: str = ""  # for a setting that is unset by default: the commented-out line's value
    funnel: str = ""  # the ``FunnelConfig`` field it sets ("": none)


def _setting(default: Any, table: str, help: str, expected: str, *, key: str = "", **spec: Any) -> Any:
    return field(default=default, metadata={"spec": Spec(table, key, help, expected, **spec)})


_MODEL = "a model string"
_SWITCH = "true or false"


@dataclass(frozen=True)
class Settings:
    """Everything configurable, with the offline defaults (the schema: see the module docstring)."""

    extract_model: str = _setting(
        "offline",
        "models",
        "The model for extraction, summaries, thread maps, query decomposition and sweep judgements.",
        _MODEL,
        key="extract",
        env="VAULT_EXTRACT_MODEL",
    )
    gate_model: str = _setting(
        "offline",
        "models",
        'The small fast fit-gate model; "mcp-sampling": the connected MCP client\'s own model (in `vault mcp`, '
        "where the client offers sampling; else the offline gate).",
        _MODEL,
        key="gate",
        env="VAULT_GATE_MODEL",
    )
    quality_model: str = _setting(
        "offline",
        "models",
        "The Note Quality Gate's judge in `vault keep` (offline: the fitted gate).",
        _MODEL,
        key="quality",
        env="VAULT_QUALITY_MODEL",
    )
    embed_model: str = _setting(
        "minilm",
        "models",
        "The embedder: offline all-MiniLM-L6-v2 (int8 ONNX), or a LiteLLM embedding model string.",
        _MODEL,
        key="embed",
        env="VAULT_EMBED_MODEL",
    )
    api_base: str | None = _setting(
        None,
        "models",
        "The model server's URL (a llama.cpp or vLLM server); empty: the provider's own.",
        '"" or an http(s):// URL',
        env="VAULT_API_BASE",
        pattern=_URL,
        example='""',
    )
    api_key_env: str | None = _setting(
        None,
        "models",
        "The environment variable holding the key (a key is never written here); unset, LiteLLM reads "
        "the provider's usual one.",
        "an environment variable name",
        pattern=_ENV_NAME,
        example='"OPENAI_API_KEY"',
    )
    api_key: str | None = field(default=None, repr=False)  # read from ``api_key_env``, never from vault.toml
    output: str = _setting(
        "auto",
        "models",
        "How a model is held to the answer's schema: auto (a JSON schema where LiteLLM says the provider "
        "enforces one, and for a self-hosted server; else tool calling or JSON mode with re-asks), json_schema, "
        "tools or json.",
        "one of auto, json_schema, tools, json",
        key="output",
        env="VAULT_MODEL_OUTPUT",
        pattern=r"^(auto|json_schema|tools|json)$",
    )
    concurrency: int = _setting(
        4,
        "models",
        "Model requests `vault ingest` keeps in flight at once (1: one at a time).",
        "an integer from 1 to 64",
        ge=1,
        le=64,
        env="VAULT_MODEL_CONCURRENCY",
    )
    model_timeout: float = _setting(
        60.0,
        "models",
        "Seconds one model request may take before it is retried (a small local model on a CPU may need more).",
        "a number of seconds above 0, at most 3,600",
        key="timeout",
        gt=0,
        le=3600,
        env="VAULT_MODEL_TIMEOUT",
    )
    wide: int = _setting(
        15,
        "retrieval",
        "Candidates in the first step to the floor and gate; the depth then doubles until the budget fills.",
        "an integer from 1 to 1,000",  # past 1,000 the gate alone would cost minutes
        ge=1,
        le=1000,
        funnel="wide",
    )
    floor: float | None = _setting(
        None,
        "retrieval",
        "Similarity floor (cosine, 0 to 1); unset, the embedder's own calibration applies (MiniLM: 0.20); "
        "measure one with `vault gate-calibrate`.",
        "a number from 0 to 1",
        ge=0,
        le=1,
        env="VAULT_FLOOR",
        example="0.20",
    )
    budget: int = _setting(
        2000,
        "retrieval",
        "Token budget of a context package.",
        "an integer from 1 to 1,000,000",
        ge=1,
        le=1_000_000,
        funnel="budget",
    )
    window: int = _setting(
        8000,
        "retrieval",
        "The target model's context window in tokens; a package uses at most `window_share` of it.",
        "an integer from 512 to 10,000,000",  # below any chat model's window, packages come out empty
        ge=512,
        le=10_000_000,
        funnel="window",
    )
    window_share: float = _setting(
        0.78,
        "retrieval",
        "The share of the window a package may fill; the rest stays free for the model's answer.",
        "a number above 0, at most 1",
        gt=0,
        le=1,
        funnel="window_share",
    )
    variants: bool = _setting(True, "retrieval", "Multi-query decomposition.", _SWITCH, funnel="variants")
    max_candidates: int = _setting(
        120,
        "retrieval",
        "The most candidates the depth walk takes to the floor and gate before it stops.",
        "an integer from 1 to 10,000",
        ge=1,
        le=10_000,
        funnel="max_candidates",
    )
    gate_enabled: bool = _setting(
        True, "retrieval", "The fit-gate (false: the floor alone).", _SWITCH, funnel="gate_enabled"
    )
    gate_batch: int = _setting(
        10,
        "retrieval",
        "Candidates per gate call.",
        "an integer from 1 to 100",
        ge=1,
        le=100,
        env="VAULT_GATE_BATCH",
        funnel="gate_batch",
    )
    gate_timeout: float = _setting(
        30.0,
        "retrieval",
        "Seconds the gate may take for one query; a batch still out then keeps its candidates unchecked, and "
        "`vault query` exits 1.",
        "a number of seconds above 0, at most 3,600",
        gt=0,
        le=3600,
        env="VAULT_GATE_TIMEOUT",
        funnel="gate_timeout",
    )
    gate_text_chars: int = _setting(
        1200,
        "retrieval",
        "Characters of each candidate's text shown to the gate model.",
        "an integer from 100 to 100,000",
        ge=100,
        le=100_000,
        funnel="gate_text_chars",
    )
    recency_half_life_days: float = _setting(
        30.0,
        "retrieval",
        "Days after which a chat note's recency has halved.",
        "a number of days above 0, at most 36,500",
        gt=0,
        le=36_500,
        funnel="recency_half_life_days",
    )
    recency_weight: float = _setting(
        0.15,
        "retrieval",
        "The most a chat note's score can lose to age, however old (0: recency off).",
        "a number from 0 to 1",
        ge=0,
        le=1,
        funnel="recency_weight",
    )
    max_record_mb: float = _setting(
        5.0,
        "ingest",
        "A record or transcript larger than this (MiB of text) is skipped with a line naming it; the rest "
        "of the file is ingested.",
        "a number of MiB from 0.001 to 1024",  # memory stays bounded either way
        ge=0.001,
        le=1024.0,
    )
    write_threshold: float | None = _setting(
        None,
        "ingest",
        "The probability of a good note a candidate needs to be written into inbox/ (lower: more notes, "
        "fewer of them worth keeping); unset, the shipped selector's own, chosen for precision.",
        "a number from 0 to 1",
        ge=0,
        le=1,
        example="0.66",
    )
    keep_threshold: float | None = _setting(
        None,
        "ingest",
        "The probability of a good note `vault keep --all-passing` asks of a note to make it an engram; "
        "unset, the shipped selector's own.",
        "a number from 0 to 1",
        ge=0,
        le=1,
        example="0.76",
    )
    log_calls: bool = _setting(
        True, "log", "Log model calls to <vault>/.vault_pipeline/calls.jsonl (never API keys).", _SWITCH, key="calls"
    )
    log_payloads: bool = _setting(
        True, "log", "Include prompt variables and outputs in the call log.", _SWITCH, key="payloads"
    )

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with the given non-None fields replaced (CLI options), checked like vault.toml."""
        known = {f.name for f in fields(self)}
        clean = {k: v for k, v in changes.items() if v is not None and k in known}
        check_overrides(**{k: v for k, v in clean.items() if k in OPTION_KEYS})
        return replace(self, **clean)


OPTION_KEYS = frozenset({"wide", "floor", "budget", "window"})  # settings a CLI option may override


# --------------------------------------------------------------------------- reading the schema


class Setting(NamedTuple):
    """One setting as the schema declares it: for the CLI's help and the default vault.toml."""

    name: str  # the ``Settings`` attribute
    default: Any
    spec: Spec

    @property
    def key(self) -> str:
        """Its key in its vault.toml table."""
        return self.spec.key or self.name

    @property
    def where(self) -> str:
        """``[retrieval] wide``: where vault.toml sets it."""
        return f"[{self.spec.table}] {self.key}"

    @property
    def help(self) -> str:
        """One sentence saying what it does."""
        return self.spec.help

    @property
    def bounds(self) -> tuple[Any, Any]:
        """(lowest, highest) a number may be (None: unbounded on that side)."""
        return (self.spec.ge if self.spec.ge is not None else self.spec.gt), self.spec.le

    @property
    def show_default(self) -> str:
        """The default as a CLI option shows it: where vault.toml sets it, else the built-in value."""
        shown = "the embedder's calibration" if self.name == "floor" else _toml_value(self.default)
        return f"vault.toml {self.where}, else {shown}"


@functools.cache
def settings_schema() -> tuple[Setting, ...]:
    """Every setting of vault.toml, in the order of the default file."""
    return tuple(Setting(f.name, f.default, f.metadata["spec"]) for f in fields(Settings) if "spec" in f.metadata)


def setting(name: str) -> Setting:
    """The schema's entry for the ``Settings`` attribute ``name`` (KeyError when there is none)."""
    for entry in settings_schema():
        if entry.name == name:
            return entry
    raise KeyError(name)


def default_of(name: str) -> Any:
    """The built-in default of a setting."""
    return setting(name).default


def help_of(name: str) -> str:
    """The one-sentence help of a setting."""
    return setting(name).help


def env_names() -> dict[str, str]:
    """Environment variable -> the setting it overrides."""
    return {s.spec.env: s.name for s in settings_schema() if s.spec.env}


# --------------------------------------------------------------------------- the default vault.toml

_PREAMBLE = """\
# vault_pipeline settings for this vault.
# Model strings are LiteLLM's: "openai/gpt-4o-mini", "anthropic/claude-haiku-4-5",
# "ollama/llama3.1", or "openai/<name>" with api_base for a llama.cpp / vLLM server.
# "offline" is the deterministic built-in baseline: no key, no network, modest quality.
"""
_WIDTH = 100  # the default file's comment lines wrap here


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _comment(text: str) -> list[str]:
    """``text`` as comment lines of at most ``_WIDTH`` characters."""
    lines = ["#"]
    for word in text.split():
        if len(lines[-1]) + 1 + len(word) > _WIDTH and lines[-1] != "#":
            lines.append("#")
        lines[-1] += f" {word}"
    return lines


def _entry(s: Setting) -> list[str]:
    """One setting: its help as a comment, then ``key = default``; an unset one commented out, with
    its example, unless the example is the empty string (which reads as unset)."""
    if s.default is not None:
        line = f"{s.key} = {_toml_value(s.default)}"
    else:
        line = f"{s.key} = {s.spec.example}" if s.spec.example == '""' else f"# {s.key} = {s.spec.example}"
    return [*_comment(s.help), line]


def default_toml() -> str:
    """The ``vault.toml`` that ``vault init`` writes: every setting at its default, with its help."""
    lines = [_PREAMBLE.rstrip("\n"), *_comment(f"Environment overrides: {', '.join(env_names())}.")]
    for table in TABLES:
        lines += ["", f"[{table}]"]
        for s in settings_schema():
            if s.spec.table == table:
                lines += _entry(s)
    return "\n".join(lines) + "\n"


DEFAULT_TOML = default_toml()


# --------------------------------------------------------------------------- loading


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
    for name, attribute in env_names().items():
        s = setting(attribute)
        if env.get(name):
            if not isinstance(raw.get(s.spec.table, {}), dict):
                break  # the file's own error is reported below
            raw.setdefault(s.spec.table, {})[s.key] = _from_env(name, s, env[name])
            sources[(s.spec.table, s.key)] = f"environment {name}"
    checked = _validate(raw, where, sources)
    return _settings_from(checked, env, where)


def _refuse_plain_key(raw: Mapping[str, Any], where: str) -> None:
    models = raw.get("models")
    if isinstance(models, dict) and "api_key" in models:  # the value itself is never echoed
        raise ConfigError(
            f"{where}: [models] api_key: keys are not read from vault.toml (it would sit in plain text in the "
            'vault); put the key in an environment variable and name it: api_key_env = "OPENAI_API_KEY"'
        )


def _from_env(name: str, s: Setting, value: str) -> Any:
    """An environment override as the type its setting takes (environment values are all strings)."""
    kind = _toml_type(s.name)
    if kind is str:
        return value
    if kind is bool:
        return {"true": True, "false": False}.get(value.strip().lower(), value)  # else refused as not a bool
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"environment {name} = {value!r}: expected {s.spec.expected}") from None


@functools.cache
def _types() -> dict[str, Any]:
    return typing.get_type_hints(Settings)


def _toml_type(name: str) -> type:
    """The TOML type of a setting: its annotation without ``| None``."""
    hint = _types()[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


@functools.cache
def _schema() -> Any:
    """The pydantic model of vault.toml, built from ``Settings`` on first use (importing pydantic
    costs more than the rest of ``vault --help``)."""
    from pydantic import ConfigDict, create_model
    from pydantic import Field as PydanticField

    strict = ConfigDict(extra="forbid", strict=True)
    tables: dict[str, Any] = {}
    for table in TABLES:
        keys: dict[str, Any] = {}
        for s in (s for s in settings_schema() if s.spec.table == table):
            spec = s.spec
            checks = {k: getattr(spec, k) for k in ("ge", "le", "gt") if getattr(spec, k) is not None}
            if spec.pattern:
                checks["pattern"] = spec.pattern
            kind = _toml_type(s.name)
            if kind is float:
                checks["allow_inf_nan"] = False
            elif kind is str and not spec.pattern:
                checks["min_length"] = 1
            annotation = kind if s.default is not None else kind | None  # unset: the built-in choice applies
            keys[s.key] = (annotation, PydanticField(s.default, description=spec.expected, **checks))
        model = create_model(table.capitalize(), __config__=strict, **keys)
        tables[table] = (model, model())
    return create_model("VaultToml", __config__=strict, **tables)


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
    for s in settings_schema():
        value = getattr(getattr(checked, s.spec.table), s.key)
        values[s.name] = None if value == "" and s.default is None else value
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
        raise ConfigError(f"--floor {given['floor']!r}: expected {setting('floor').spec.expected}")
    from pydantic import ValidationError

    try:
        _schema().model_validate({"retrieval": given})
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][-1])
        expected = _schema().model_fields["retrieval"].annotation.model_fields.get(key)
        reason = _reason(error, expected.description if expected is not None else None)
        raise ConfigError(f"--{key} {error['input']!r}: {reason}") from None


def funnel_values(settings: Settings) -> dict[str, Any]:
    """The ``FunnelConfig`` fields the settings set (``floor`` aside: unset, the embedder's applies)."""
    return {s.spec.funnel: getattr(settings, s.name) for s in settings_schema() if s.spec.funnel}


__all__ = [
    "CONFIG_FILE",
    "DEFAULT_TOML",
    "Setting",
    "Settings",
    "check_overrides",
    "default_of",
    "env_names",
    "funnel_values",
    "help_of",
    "load_settings",
    "setting",
    "settings_schema",
]


# The budget a caller may ask for (the MCP query tool bounds its argument by it).
BUDGET_RANGE = setting("budget").bounds
