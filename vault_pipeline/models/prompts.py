"""Prompt files: frontmatter settings, a system part and a user template, rendered in a jinja sandbox."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from vault_pipeline.errors import ConfigError

# An installed wheel carries the repository's ``prompts/`` as ``vault_pipeline/_prompts`` (pyproject.toml).
_PACKAGE_PROMPTS = Path(__file__).resolve().parents[1] / "_prompts"
_REPO_PROMPTS = Path(__file__).resolve().parents[2] / "prompts"


@dataclass(frozen=True)
class Prompt:
    """A prompt file: settings from its frontmatter, a system part and a user template."""

    name: str
    version: str
    temperature: float
    system: str
    template: str

    @property
    def hash(self) -> str:
        """Short content hash of the prompt, logged with every call."""
        text = f"{self.name}\n{self.version}\n{self.temperature}\n{self.system}\n{self.template}"
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def render(self, variables: Mapping[str, Any]) -> list[dict[str, str]]:
        """Render to chat messages; a missing variable is an error, never an empty string."""
        env = _jinja_env()
        try:
            user = env.from_string(self.template).render(**variables)
            system = env.from_string(self.system).render(**variables)
        except Exception as exc:  # jinja2's UndefinedError and sandbox errors
            raise ConfigError(f"prompt {self.name!r}: {exc}") from exc
        return [{"role": "system", "content": system.strip()}, {"role": "user", "content": user.strip()}]


@lru_cache(maxsize=1)
def _jinja_env():
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False, default=str)
    return env


def prompts_dir() -> Path:
    """The prompt folder: inside an installed wheel, else the repository's ``prompts/``."""
    return _PACKAGE_PROMPTS if _PACKAGE_PROMPTS.is_dir() else _REPO_PROMPTS


@cache
def load_prompt(name: str) -> Prompt:
    """Load ``prompts/<name>.md``: YAML-ish frontmatter, then ``# system`` and ``# user`` parts."""
    path = prompts_dir() / f"{name}.md"
    if not path.is_file():
        raise ConfigError(f"prompt file not found: {path}")
    text = path.read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    if not match:
        raise ConfigError(f"{path}: prompt needs a frontmatter block (name, version, temperature)")
    meta = dict(line.split(":", 1) for line in match.group(1).splitlines() if ":" in line)
    meta = {k.strip(): v.strip() for k, v in meta.items()}
    parts = re.split(r"^# (system|user)\s*$", match.group(2), flags=re.M)
    sections = dict(zip(parts[1::2], parts[2::2]))
    if "user" not in sections:
        raise ConfigError(f"{path}: prompt needs a '# user' section")
    return Prompt(
        name=meta.get("name", name),
        version=meta.get("version", "0"),
        temperature=float(meta.get("temperature", "0")),
        system=sections.get("system", ""),
        template=sections["user"],
    )
