"""Notes as values: frontmatter, stable ids, safe file names, and the note builders.

Nothing here touches the file system; ``vault.py`` is the only module that writes.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any

import yaml

from vault_pipeline.errors import FrontmatterError

if TYPE_CHECKING:
    from vault_pipeline.extract import AtomicUnit, ThreadMap
    from vault_pipeline.parse import Conversation

KEY_ORDER = ("id", "type", "category", "status", "tier", "speaker", "source", "session", "created",
             "supersedes", "superseded_by", "duplicate_of", "related", "tags")
CATEGORIES = ("decision", "open-question", "constraint", "fact", "idea", "action-item", "topic",
              "provisional")
TIER_WEIGHTS = {"engram": 1.0, "resource": 0.8, "chat": 0.6, "web": 0.1}
MAX_STEM_BYTES = 120

_FOLDER_TIERS = {"engrams": "engram", "resources": "resource", "web": "web", "inbox": "chat",
                 "sessions": "chat", "threads": "chat", "topics": "chat",
                 # Archived copies are ours (duplicates, superseded notes), not the user's own writing.
                 "archive": "chat"}
_TIER_ALIASES = {"transcript": "chat"}
_OPEN = re.compile(r"\ufeff?---[ \t]*\r?\n")
_CLOSE = re.compile(r"^---[ \t]*(?:\r?\n|\Z)", re.M)
_WORD = re.compile(r"\w+(?:['’.-]\w+)*")
_APOSTROPHES = re.compile(r"['’‘`]")
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_C_NESTING_SAFE = 4096  # libyaml survived 10,000 nested "[" here and crashed at 30,000


def _without_timestamps(resolvers: dict) -> dict:
    # Dates stay strings both ways, so a round trip never turns text into datetime objects.
    return {first: [(tag, rx) for tag, rx in pairs if tag != _TIMESTAMP] for first, pairs in resolvers.items()}


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
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
    return yaml.dump(dict(mapping), Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=10**9)


class _Resolver(yaml.resolver.BaseResolver):
    yaml_implicit_resolvers = _Dumper.yaml_implicit_resolvers


_RESOLVER = _Resolver()
_STR_TAG = "tag:yaml.org,2002:str"


def _fast_block(mapping: Mapping[Any, Any], pad: str, out: list[str]) -> bool:
    """The same bytes as yaml.dump for simple shapes, about ten times faster; False otherwise."""
    # PyYAML's pure-Python emitter costs ~0.5 ms a note: a minute per 100,000-note re-ingest.
    for key, value in mapping.items():
        name = _fast_scalar(key) if isinstance(key, str) and len(key) < 128 else None
        if name is None or name.startswith('"'):
            return False
        if isinstance(value, dict) and value:
            out.append(f"{pad}{name}:")
            if not _fast_block(value, pad + "  ", out):
                return False
        elif isinstance(value, list) and value:
            out.append(f"{pad}{name}:")
            items = [_fast_scalar(item) for item in value]
            if None in items:
                return False
            out.extend(f"{pad}  - {item}" for item in items)
        else:
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
    # PyYAML's Emitter.analyze_scalar rules for a printable one-line scalar in block context.
    indicators = (value[0] == " " or value[-1] == " " or value.startswith(("---", "..."))
                  or value[0] in "#,[]{}&*!|>'\"%@`" or (value[0] in "?:-" and value[1:2] in ("", " "))
                  or ": " in value or value.endswith(":") or " #" in value)
    if not indicators and _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) == _STR_TAG:
        return value
    return "'" + value.replace("'", "''") + "'"


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
    frontmatter = load_yaml(text[span[0]:span[1]], source)
    body = text[span[2]:]
    # render_note puts one blank line after the block; take it back so a round trip is exact.
    if body.startswith("\r\n"):
        body = body[2:]
    elif body.startswith("\n"):
        body = body[1:]
    return frontmatter, body


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


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list, tuple, dict, set, frozenset)) and not value)


def wikilink(stem: str, anchor: str = "") -> str:
    """An Obsidian wikilink to a note stem, optionally to a heading or ``^block``."""
    return f"[[{stem}#{anchor}]]" if anchor else f"[[{stem}]]"


# --------------------------------------------------------------------------- the Note value


@dataclass(frozen=True)
class Note:
    """One vault note as a value: where it goes and what it says."""

    id: str
    type: str
    folder: str
    stem: str
    frontmatter: dict = field(hash=False)
    body: str = field(hash=False)

    @property
    def relpath(self) -> str:
        """Vault-relative path, always with forward slashes."""
        return f"{self.folder}/{self.stem}.md"

    def text(self) -> str:
        """The file's full text, exactly as it is written."""
        return render_note({**self.frontmatter, "id": self.id, "type": self.type}, self.body)


# --------------------------------------------------------------------------- ids and names


def normalise_text(text: str) -> str:
    """Case-, width- and punctuation-insensitive form of a sentence (for ids and duplicate checks)."""
    folded = _APOSTROPHES.sub("", unicodedata.normalize("NFKC", str(text)).casefold())
    return " ".join(re.findall(r"\w+", folded))


def word_count(sentence: str) -> int:
    """Words in a sentence (contractions and hyphenated words count once)."""
    return len(_WORD.findall(str(sentence)))


def note_id(prefix: str, *parts: object) -> str:
    """``<prefix>-`` plus 12 hex of sha256 over the parts joined with U+001F."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()
    return f"{prefix.rstrip('-')}-{digest[:12]}"


def atomic_id(kind: str, conversation_id: str, category: str, sentence: str) -> str:
    """Stable id of an atomic note: re-ingesting the same export yields the same id."""
    return note_id("a", kind, conversation_id, category, normalise_text(sentence))


def session_id(kind: str, conversation_id: str) -> str:
    """Stable id of a conversation's session note."""
    return note_id("s", kind, conversation_id)


def thread_id(key: str) -> str:
    """Stable id of a thread map note."""
    return note_id("t", key)


def topic_id(topic: str) -> str:
    """Stable id of a topic hub (case and punctuation of the name do not matter)."""
    return note_id("h", normalise_text(topic))


def safe_stem(title: str, note_id: str, max_len: int = 80) -> str:
    """Readable, unique, length-bounded file stem that is safe on every OS and in wikilinks."""
    suffix = _id_suffix(note_id)
    slug = _truncate(_slugify(title), max(1, max_len - len(suffix) - 1),
                     MAX_STEM_BYTES - len(suffix) - 1)
    stem = f"{slug or 'note'}-{suffix}"
    # The suffix already keeps us clear of CON, NUL, COM1...; this guards odd ids and max_len.
    if stem.split(".")[0].lower() in _RESERVED:
        stem = "_" + stem
    return stem


def _slugify(title: str) -> str:
    text = _APOSTROPHES.sub("", unicodedata.normalize("NFC", str(title)).lower())
    # Whitelist: letters, combining marks, digits and "_". Everything else (path separators,
    # Obsidian's # ^ [ ] |, dots, control characters, NUL, emoji) becomes a dash.
    kept = "".join(ch if ch == "_" or unicodedata.category(ch)[0] in "LMN" else "-" for ch in text)
    return re.sub(r"-{2,}", "-", kept).strip("-_")


def _truncate(slug: str, max_chars: int, max_bytes: int) -> str:
    out, used = [], 0
    for ch in slug[:max_chars]:
        size = len(ch.encode("utf-8"))
        if used + size > max_bytes:
            break
        out.append(ch)
        used += size
    cut = "".join(out)
    if len(cut) < len(slug):
        dash = cut.rfind("-")
        if dash > len(cut) // 2:  # prefer a word boundary when one is near the end
            cut = cut[:dash]
    return cut.strip("-_")


def _id_suffix(note_id: str) -> str:
    hexes = re.sub(r"[^0-9a-f]", "", str(note_id).lower())
    return hexes[-6:] if len(hexes) >= 6 else hashlib.sha256(str(note_id).encode()).hexdigest()[:6]


def block_id(message_id: str) -> str:
    """Obsidian block id for a message: ``m-`` + id reduced to [A-Za-z0-9-] (+ hash if reduced)."""
    raw = str(message_id)
    reduced = re.sub(r"[^A-Za-z0-9-]+", "-", raw)
    if reduced == raw and raw:
        return f"m-{raw}"
    tag = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:4]
    reduced = reduced.strip("-")
    return f"m-{reduced}-{tag}" if reduced else f"m-{tag}"


# --------------------------------------------------------------------------- builders


def _source(conv: Conversation, message_ids: Iterable[str]) -> dict:
    return {"source": {"kind": conv.kind, "conversation": conv.id, "title": conv.title,
                       "messages": [str(m) for m in message_ids]},
            "source_kind": conv.kind, "source_conversation": conv.id}


def _one_line(text: str | None) -> str:
    return " ".join(str(text or "").split())


def atomic_note(unit: AtomicUnit, conv: Conversation, session_stem: str, created_iso: str) -> Note:
    """A provisional atomic note in inbox/, linked to its source messages in the session note."""
    nid = atomic_id(conv.kind, conv.id, unit.category, unit.text)
    sentence = _one_line(unit.text)
    frontmatter = {"id": nid, "type": "atomic", "category": unit.category, "status": "provisional",
                   "tier": "chat", "speaker": unit.speaker, **_source(conv, unit.source_ids),
                   "session": wikilink(session_stem), "created": created_iso}
    lines = [sentence, ""]
    if _one_line(unit.context):
        lines += [f"Context: {_one_line(unit.context)}", ""]
    links = ", ".join(wikilink(session_stem, "^" + block_id(m)) for m in unit.source_ids)
    lines.append(f"Source: {links}")
    return Note(nid, "atomic", "inbox", safe_stem(sentence, nid), frontmatter, "\n".join(lines) + "\n")


def session_note(conv: Conversation, summary: str,
                 units_by_message: Mapping[str, Sequence[Any]] | None = None) -> Note:
    """One note per conversation: title, summary, and the transcript with a block id per message."""
    nid = session_id(conv.kind, conv.id)
    title = _one_line(conv.title) or "Untitled conversation"
    frontmatter = {"id": nid, "type": "session", "tier": "chat",
                   **_source(conv, (m.id for m in conv.messages)), "created": iso(conv.created)}
    links = {mid: [_stem_of(u) for u in units] for mid, units in (units_by_message or {}).items()}
    body = (f"# {title}\n\n## Summary\n\n{str(summary or '').strip()}\n\n## Transcript\n\n"
            + render_transcript(conv.messages, links))
    return Note(nid, "session", "sessions", safe_stem(title, nid), frontmatter, body)


def _stem_of(unit: Any) -> str:
    return unit if isinstance(unit, str) else unit.stem


def thread_note(key: str, thread_map: ThreadMap, session_stems: Mapping[str, str]) -> Note:
    """A thread map across the sessions of one line of work, each step linking its session."""
    nid = thread_id(key)
    title = _one_line(thread_map.title) or _one_line(key) or "Thread"
    lines = [f"# {title}", "", "## Steps", ""]
    for number, step in enumerate(thread_map.steps, 1):
        stem = session_stems.get(step.session_id)
        where = wikilink(stem) if stem else f"session {step.session_id}"
        lines.append(f"{number}. {where}: {_one_line(step.step)}")
    if thread_map.open_questions:
        lines += ["", "## Open questions", ""]
        lines += [f"- {_one_line(q)}" for q in thread_map.open_questions]
    frontmatter = {"id": nid, "type": "thread", "tier": "chat", "thread": key}
    return Note(nid, "thread", "threads", safe_stem(title, nid), frontmatter, "\n".join(lines) + "\n")


def topic_hub(topic: str, atomic_stems: Iterable[str]) -> Note:
    """A topic hub linking its atomic notes (sorted, deduplicated; pass old links to keep them)."""
    nid = topic_id(topic)
    title = _one_line(topic) or "Topic"
    links = [f"- {wikilink(stem)}" for stem in sorted(set(atomic_stems))]
    body = "\n".join([f"# {title}", "", *links]) + "\n"
    frontmatter = {"id": nid, "type": "topic", "tier": "chat"}
    return Note(nid, "topic", "topics", safe_stem(title, nid), frontmatter, body)


def iso(value: Any) -> str:
    """ISO 8601 text for a datetime, date, Unix seconds or string; empty for None."""
    if value is None or value == "":
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


# --------------------------------------------------------------------------- transcript

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# HTML blocks that, left open, run to the end of the document (CommonMark types 1 and 2).
_HTML_OPEN = re.compile(r"^ {0,3}<(pre|script|style|textarea|!--)(?=[\s>]|$|(?<=--))", re.I)
_HTML_END = {"pre": "</pre>", "script": "</script>", "style": "</style>", "textarea": "</textarea>",
             "!--": "-->"}
# Lines that start something other than a plain paragraph: indented code, quote, heading,
# table, HTML, list item, thematic break or setext underline, math block.
_STRUCTURAL = re.compile(r"^(?: {4}|\t| {0,3}(?:[>#|<]|[-+*](?:\s|$)|\d{1,9}[.)](?:\s|$)"
                         r"|(?:[-*_][ \t]*){3,}$|=+[ \t]*$|\$\$))")
_TRAILING_ID = re.compile(r"(^|\s)\^([A-Za-z0-9-]+)([ \t]*)$")


def render_transcript(messages: Sequence[Any], links: Mapping[str, Sequence[str]] | None = None) -> str:
    """Messages as paragraphs ``**Speaker:** text ^m-id``: every message id becomes a block id."""
    parts = []
    for message in messages:
        parts.append(_render_message(message))
        stems = list(dict.fromkeys((links or {}).get(message.id, ())))
        if stems:
            parts.append("Notes: " + ", ".join(wikilink(s) for s in stems))
    return "\n\n".join(parts) + "\n"


def _render_message(message: Any) -> str:
    lines, plain = _message_lines(str(message.text or ""))
    label = f"**{_speaker(message)}:**"
    if not lines:
        lines, plain = ["_(empty message)_"], [True]
    if _paragraph_is_plain(plain, first=True):
        lines[0] = f"{label} {lines[0]}"
    else:
        lines = [label, ""] + lines
    # Obsidian takes " ^id" at the end of a paragraph; structured blocks (lists, tables, code,
    # quotes) need the id on its own line after a blank line.
    if _paragraph_is_plain(plain, first=False):
        lines[-1] = f"{lines[-1].rstrip()} ^{block_id(message.id)}"
    else:
        lines += ["", f"^{block_id(message.id)}"]
    return "\n".join(lines)


def _speaker(message: Any) -> str:
    name = re.sub(r"[*_\[\]:`]", "", _one_line(getattr(message, "speaker", "")))
    return name or str(getattr(message, "role", "") or "speaker").capitalize()


def _message_lines(text: str) -> tuple[list[str], list[bool | None]]:
    """Lines with stray block ids escaped and open blocks closed; per line: plain, structural or blank."""
    raw = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    while raw and not raw[-1].strip():
        raw.pop()
    while raw and not raw[0].strip():
        raw.pop(0)
    lines: list[str] = []
    kinds: list[bool | None] = []
    closer: tuple[re.Pattern[str], str] | None = None  # how the open fence or HTML block ends
    for line in raw:
        if closer is not None:
            if closer[0].search(line):
                closer = None
            lines.append(line)
            kinds.append(False)
            continue
        closer = _opened_block(line)
        if closer is None and not _FENCE.match(line):
            line = _TRAILING_ID.sub(r"\1\\^\2\3", line)  # text that would pose as a block id
        lines.append(line)
        kinds.append(None if not line.strip() else not (closer or _FENCE.match(line) or _STRUCTURAL.match(line)))
    if closer is not None:  # left open, it would swallow every later message and its block id
        lines.append(closer[1])
        kinds.append(False)
    return lines, kinds


def _opened_block(line: str) -> tuple[re.Pattern[str], str] | None:
    """A fence or HTML block this line opens and does not close, as (end pattern, closing line)."""
    fence = _FENCE.match(line)
    if fence and not (fence[1][0] == "`" and "`" in fence[2]):
        mark, size = fence[1][0], len(fence[1])
        return re.compile(rf"^ {{0,3}}{re.escape(mark)}{{{size},}}[ \t]*$"), mark * size
    html = _HTML_OPEN.match(line)
    if html:
        end = _HTML_END[html[1].lower()]
        if end not in line[html.end():].lower():
            return re.compile(re.escape(end), re.I), end
    return None


def _paragraph_is_plain(kinds: list[bool | None], *, first: bool) -> bool:
    """Whether the first (or last) paragraph consists of plain lines only."""
    seq = kinds if first else kinds[::-1]
    block = []
    for kind in seq:
        if kind is None:
            break
        block.append(kind)
    return bool(block) and all(block)


# --------------------------------------------------------------------------- tiers


def note_tier(frontmatter: Mapping[str, Any], relpath: str | PurePath) -> str:
    """A note's effective provenance tier: kept -> engram, else its tier key, else its folder."""
    if str(frontmatter.get("status", "")).strip().lower() == "kept":
        return "engram"
    tier = str(frontmatter.get("tier") or "").strip().lower()
    tier = _TIER_ALIASES.get(tier, tier)
    if tier in TIER_WEIGHTS:
        return tier
    parts = PurePosixPath(str(relpath).replace("\\", "/")).parts
    # Notes the user wrote in the root or their own folders are their adopted thinking.
    return _FOLDER_TIERS.get(parts[0], "engram") if len(parts) > 1 else "engram"
