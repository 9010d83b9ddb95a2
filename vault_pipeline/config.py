"""Settings: ``<vault>/vault.toml`` overlaid by environment variables and CLI options.

The loader takes the environment as an argument so that only the CLI (the
composition root) reads ``os.environ``; library code receives a ``Settings``.
"""

from __future__ import annotations

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
# Environment overrides: VAULT_EXTRACT_MODEL, VAULT_GATE_MODEL, VAULT_EMBED_MODEL, VAULT_API_BASE,
# VAULT_FLOOR.
[models]
extract = "offline"   # extraction, summaries, thread maps, query decomposition, sweep judgements
gate = "offline"      # the small fast fit-gate model
embed = "minilm"      # offline all-MiniLM-L6-v2 (int8 ONNX), or a LiteLLM embedding model string
api_base = ""

[retrieval]
wide = 15             # candidates pulled before the floor and the gate
# floor = 0.20        # cosine floor; unset, the embedder's own calibration applies (MiniLM: 0.20);
                      # measure one with `vault gate-calibrate` (see notebooks/)
budget = 2000         # tokens in a context package
window = 8000         # the target model's context window; packages use at most 78% of it
variants = true       # multi-query decomposition
gate_enabled = true

[log]
calls = true          # <vault>/.vault_pipeline/calls.jsonl (never holds API keys)
payloads = true       # include prompt variables and outputs in the call log
"""

_ENV = {
    "VAULT_EXTRACT_MODEL": ("models", "extract"),
    "VAULT_GATE_MODEL": ("models", "gate"),
    "VAULT_EMBED_MODEL": ("models", "embed"),
    "VAULT_API_BASE": ("models", "api_base"),
    "VAULT_FLOOR": ("retrieval", "floor"),
}


@dataclass(frozen=True)
class Settings:
    """Everything configurable, with the offline defaults."""

    extract_model: str = "offline"
    gate_model: str = "offline"
    embed_model: str = "minilm"
    api_base: str | None = None
    wide: int = 15
    floor: float | None = None  # None: not set by the user; the embedder's calibration applies
    budget: int = 2000
    window: int = 8000
    variants: bool = True
    gate_enabled: bool = True
    log_calls: bool = True
    log_payloads: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with the given non-None fields replaced (CLI options)."""
        known = {f.name for f in fields(self)}
        clean = {k: v for k, v in changes.items() if v is not None and k in known}
        return replace(self, **clean)


_TABLE_KEYS = {
    ("models", "extract"): "extract_model",
    ("models", "gate"): "gate_model",
    ("models", "embed"): "embed_model",
    ("models", "api_base"): "api_base",
    ("retrieval", "wide"): "wide",
    ("retrieval", "floor"): "floor",
    ("retrieval", "budget"): "budget",
    ("retrieval", "window"): "window",
    ("retrieval", "variants"): "variants",
    ("retrieval", "gate_enabled"): "gate_enabled",
    ("log", "calls"): "log_calls",
    ("log", "payloads"): "log_payloads",
}
# The type of each setting whose default is None (the others' type is their default's).
_OPTIONAL_TYPES: dict[str, type] = {"api_base": str, "floor": float}


def load_settings(vault_root: Path | None, env: Mapping[str, str] | None = None) -> Settings:
    """Read ``vault.toml`` (if any), then apply ``VAULT_*`` environment overrides."""
    data: dict[tuple[str, str], Any] = {}
    if vault_root is not None and (vault_root / CONFIG_FILE).is_file():
        path = vault_root / CONFIG_FILE
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        for table, values in raw.items():
            if isinstance(values, dict):
                data.update({(table, key): value for key, value in values.items()})
    for name, key in _ENV.items():
        if env and env.get(name):
            data[key] = env[name]
    return _settings_from(data, vault_root)


def _settings_from(data: Mapping[tuple[str, str], Any], vault_root: Path | None) -> Settings:
    defaults = Settings()
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = _TABLE_KEYS.get(key)
        if name is None:
            continue
        expected = _OPTIONAL_TYPES.get(name) or type(getattr(defaults, name))
        try:
            values[name] = _coerce(value, expected)
        except (TypeError, ValueError):
            where = vault_root / CONFIG_FILE if vault_root else "environment"
            raise ConfigError(f"{where}: [{key[0]}] {key[1]} = {value!r} is not a {expected.__name__}") from None
    if values.get("api_base") == "":
        values["api_base"] = None
    return replace(defaults, **values)


def _coerce(value: Any, expected: type) -> Any:
    if expected is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(value)
    if expected in (int, float) and isinstance(value, bool):
        raise TypeError(value)
    return expected(value)
