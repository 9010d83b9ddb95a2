"""Frontmatter: YAML in, YAML out, byte-stable, in the key order Obsidian users see."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import PurePath
from typing import Any

import yaml

from vault_pipeline.errors import FrontmatterError

KEY_ORDER = (
    "id",
    "type",
    "category",
    "status",
    "tier",
    "speaker",
    "source_kind",
    "source_conversation",
    "source_title",
    "source_messages",
    "source_position",
    "source",  # the nested form notes had before the flat source_* keys; still read, no longer written
    "session",
    "created",
    "supersedes",
    "superseded_by",
    "duplicate_of",
    "related",
    "tags",
)
_OPEN = re.compile(r"\ufeff?---[ \t]*\r?\n")
_CLOSE = re.compile(r"^---[ \t]*(?:\r?\n|\Z)", re.M)
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_C_NESTING_SAFE = 4096  # libyaml survived 10,000 nested "[" here and crashed at 30,000


def _without_timestamps(resolvers: dict) -> dict:
    # Dates stay strings both ways, so a round trip never turns text into datetime objects.
    return {first: [(tag, rx) for tag, rx in pairs if tag != _TIMESTAMP] for first, pairs in resolvers.items()}


# The C loader when PyYAML was built with libyaml (about ten times faster), the pure-Python one otherwise.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    yaml_implicit_resolvers = _without_timestamps(yaml.SafeLoader.yaml_implicit_resolvers)


class _PyLoader(yaml.SafeLoader):
    yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers


class _Dumper(yaml.SafeDumper):
    # The pure-Python emitter: libyaml's escapes emoji as \U0001F389, unreadable in Obsidian.
    yaml_implicit_resolvers = _without_timestamps(yaml.SafeDumper.yaml_implicit_resolvers)

    def increase_indent(self, flow: bool = False, indentless: bool = False):
        return super().increase_indent(flow, False)  # "  - item", as Obsidian writes lists


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = '"' if value.startswith("[[") else ("|" if "\n" in value else None)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def load_yaml(block: str, source: str = "<note>") -> dict:
    """Parse a frontmatter block into a mapping (FrontmatterError otherwise)."""
    # libyaml recurses in C and crashes the process on very deep nesting; every level of nesting
    # needs one of these characters, so a block with few of them is safe for the fast loader.
    loader = _Loader if sum(block.count(ch) for ch in "[{:-?") < _C_NESTING_SAFE else _PyLoader
    try:
        data = yaml.load(block, Loader=loader)
    except yaml.YAMLError as exc:
        raise FrontmatterError(source, f"frontmatter is not valid YAML: {exc}") from None
    except RecursionError:
        raise FrontmatterError(source, "frontmatter is nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FrontmatterError(source, f"frontmatter is a {type(data).__name__}, not a mapping")
    return data


def dump_yaml(mapping: Mapping[str, Any]) -> str:
    """Block-style YAML for a mapping, one value per line, unicode kept, stable bytes."""
    lines: list[str] = []
    if _fast_block(mapping, "", lines):
        return "\n".join(lines) + "\n"
    return yaml.dump(
        dict(mapping), Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=10**9
    )


class _Resolver(yaml.resolver.BaseResolver):
    yaml_implicit_resolvers = _Dumper.yaml_implicit_resolvers


_RESOLVER = _Resolver()
_STR_TAG = "tag:yaml.org,2002:str"


def _fast_block(mapping: Mapping[Any, Any], pad: str, out: list[str]) -> bool:
    """The same bytes as yaml.dump for simple shapes, about ten times faster; False otherwise."""
    # PyYAML's pure-Python emitter costs ~0.5 ms a note: a minute per 100,000-note re-ingest.
    for key, value in mapping.items():
        name = _fast_scalar(key) if isinstance(key, str) and len(key) < 128 else None
        if name is None or name.startswith('"') or not _fast_entry(name, value, pad, out):
            return False
    return True


def _fast_entry(name: str, value: Any, pad: str, out: list[str]) -> bool:
    """One ``name: value`` entry of a block mapping (a nested mapping, a list or a scalar); False if not simple."""
    if isinstance(value, dict) and value:
        out.append(f"{pad}{name}:")
        return _fast_block(value, pad + "  ", out)
    if isinstance(value, list) and value:
        out.append(f"{pad}{name}:")
        items = [_fast_scalar(item) for item in value]
        if None in items:
            return False
        out.extend(f"{pad}  - {item}" for item in items)
        return True
    text = _fast_scalar(value)
    if text is None:
        return False
    out.append(f"{pad}{name}: {text}")
    return True


def _fast_scalar(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str) or not value or not value.isprintable():
        return None
    if value.startswith("[["):
        return None if '"' in value or "\\" in value else f'"{value}"'
    if not _has_indicator(value) and _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) == _STR_TAG:
        return value
    return "'" + value.replace("'", "''") + "'"


def _has_indicator(value: str) -> bool:
    """Whether a printable one-line scalar needs quotes in block context (PyYAML's Emitter.analyze_scalar)."""
    return (
        value[0] == " "
        or value[-1] == " "
        or value.startswith(("---", "..."))
        or value[0] in "#,[]{}&*!|>'\"%@`"
        or (value[0] in "?:-" and value[1:2] in ("", " "))
        or ": " in value
        or value.endswith(":")
        or " #" in value
    )


# --------------------------------------------------------------------------- frontmatter


def frontmatter_span(text: str, source: str = "<note>") -> tuple[int, int, int] | None:
    """(start, end) of the YAML block and where the body starts; None when there is no block."""
    opening = _OPEN.match(text)
    if opening is None:
        return None
    closing = _CLOSE.search(text, opening.end())
    if closing is None:
        raise FrontmatterError(source, "frontmatter block opened with --- is never closed")
    return opening.end(), closing.start(), closing.end()


def split_frontmatter(text: str, source: str = "<note>") -> tuple[dict, str]:
    """Split a note into (frontmatter mapping, body); a note without frontmatter gives ({}, text)."""
    span = frontmatter_span(text, source)
    if span is None:
        return {}, text
    frontmatter = load_yaml(text[span[0] : span[1]], source)
    body = text[span[2] :]
    # render_note puts one blank line after the block; take it back so a round trip is exact.
    if body.startswith("\r\n"):
        body = body[2:]
    elif body.startswith("\n"):
        body = body[1:]
    return frontmatter, body


# A top-level ``key: value`` line, and a list item under the key before it.
_KEY_LINE = re.compile(r"^([A-Za-z_][\w-]*)\s*:\s*(.*?)\s*$")
_ITEM_LINE = re.compile(r"^\s+-\s+(.*?)\s*$")


def salvage_frontmatter(text: str) -> tuple[dict, str]:
    """(what can be read of a broken frontmatter block, the body): for a note a person broke by hand,
    so it stays findable. Each top-level ``key: value`` line and each list item under a key are
    taken as plain text (quotes stripped); any other line of the block is left out. A block that is
    never closed is no block: the whole text is the body."""
    opening = _OPEN.match(text)
    closing = _CLOSE.search(text, opening.end()) if opening else None
    if opening is None or closing is None:
        return {}, text
    found: dict[str, Any] = {}
    key = ""
    for line in text[opening.end() : closing.start()].splitlines():
        if (item := _ITEM_LINE.match(line)) and key:
            value = found.get(key)
            found[key] = [*(value if isinstance(value, list) else []), _unquoted(item[1])]
        elif match := _KEY_LINE.match(line):
            key = match[1]
            found[key] = _unquoted(match[2]) if match[2] else []
        else:
            key = ""
    body = text[closing.end() :]
    return {k: v for k, v in found.items() if v not in ("", [])}, body[1:] if body.startswith("\n") else body


def _unquoted(value: str) -> str:
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value


def render_note(frontmatter: Mapping[str, Any], body: str) -> str:
    """Render frontmatter (canonical key order, empty values omitted) and body; byte-stable."""
    clean = ordered_frontmatter(frontmatter)
    if body and not body.endswith("\n"):
        body += "\n"
    if not clean:
        return body
    return "---\n" + dump_yaml(clean) + "---\n" + ("\n" + body if body else "")


def ordered_frontmatter(frontmatter: Mapping[str, Any]) -> dict:
    """Frontmatter cleaned of empty values, canonical keys first, the rest in their given order."""
    clean = {k: v for k, v in ((k, plain_value(v)) for k, v in frontmatter.items()) if not _empty(v)}
    first = [k for k in KEY_ORDER if k in clean]
    return {k: clean[k] for k in first + [k for k in clean if k not in KEY_ORDER]}


def plain_value(value: Any) -> Any:
    """A YAML-friendly copy: ISO 8601 dates, lists for tuples and sets, empty entries dropped."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Mapping):
        items = ((str(k) if isinstance(k, PurePath) else k, plain_value(v)) for k, v in value.items())
        return {k: v for k, v in items if not _empty(v)}
    if isinstance(value, (set, frozenset)):
        return sorted(plain_value(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [v for v in map(plain_value, value) if not _empty(v)]
    if isinstance(value, PurePath):
        return value.as_posix()
    return value


# --------------------------------------------------------------------------- source properties

SOURCE_KEYS = ("source_kind", "source_conversation", "source_title", "source_messages")


def source_properties(frontmatter: Mapping[str, Any]) -> dict[str, Any]:
    """A note's ``source_*`` properties, flat keys first, else the nested ``source`` mapping of older notes.

    ``source_messages`` is always a list of strings; the other values are as the note gives them."""
    nested = frontmatter.get("source")
    legacy: Mapping[str, Any] = nested if isinstance(nested, Mapping) else {}
    out: dict[str, Any] = {}
    for key in SOURCE_KEYS:
        value = frontmatter.get(key)
        out[key] = legacy.get(key.removeprefix("source_")) if _empty(value) else value
    messages = out["source_messages"]
    if _empty(messages):
        out["source_messages"] = []
    elif isinstance(messages, (list, tuple)):
        out["source_messages"] = [str(m) for m in messages if not _empty(m)]
    else:
        out["source_messages"] = [str(messages)]
    return out


def source_messages(frontmatter: Mapping[str, Any]) -> list[str]:
    """The message ids a note came from (flat ``source_messages`` or nested ``source.messages``)."""
    return source_properties(frontmatter)["source_messages"]


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list, tuple, dict, set, frozenset)) and not value)
