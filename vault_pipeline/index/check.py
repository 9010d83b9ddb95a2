"""`vault check`: find what is broken in a vault without touching a user's note.

Reports notes whose frontmatter does not parse, wikilinks, block links (``[[note#^id]]``) and
heading links (``[[note#Heading]]``) that resolve to nothing (names match without regard to
case, as in Obsidian), ids used by more than one file (reported once, as one problem), index
rows whose file changed or vanished, an index whose files cannot be read back (``damage.probe``),
temp files left by an interrupted write, and notes holding what looks like a real key or token
(the call log's redaction patterns, placeholders such as ``YOUR_API_KEY`` left out: the note keeps
it, the user decides). ``fix=True`` repairs only what is ours to repair: it
removes stale temp files, gives each copy of a note (an Obsidian "Make a copy" keeps the ``id``)
an id of its own so it can be indexed, and re-syncs the index with every file re-hashed (an
unreadable index is set aside and rebuilt).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from vault_pipeline.errors import FrontmatterError, VaultError
from vault_pipeline.index.damage import probe
from vault_pipeline.index.manifest import MANIFEST_FILE, opened_manifest
from vault_pipeline.index.sync import sync
from vault_pipeline.index.table import INDEX_DIR
from vault_pipeline.ingest.notes import literal_lines, markdown_blocks
from vault_pipeline.models.calllog import holds_secret
from vault_pipeline.text import wikilinks
from vault_pipeline.vault.files import STATE_DIR, Vault
from vault_pipeline.vault.format import ANY_BLOCK_ID
from vault_pipeline.vault.frontmatter import frontmatter_span, split_frontmatter
from vault_pipeline.vault.note import note_id
from vault_pipeline.vault.state import frontmatter_ids, sha256_bytes, stale_temp_files

_BLOCK = ANY_BLOCK_ID
# A note with none of these has no code block or raw HTML and needs no Markdown parser.
_CODE_OR_HTML = re.compile(r"```|~~~|^[ \t>*+\-\d.)]*<|^(?: {4}|\t)", re.M)
# Characters Obsidian leaves out of a heading link; headings match without them and case.
_NOT_IN_LINK = re.compile(r"[#^|:%\[\]\\]")


@dataclass
class CheckReport:
    """Every problem found, by kind; ``fixed`` lists what ``--fix`` repaired."""

    notes: int = 0
    invalid: list[tuple[str, str]] = field(default_factory=list)
    dangling_links: list[tuple[str, str]] = field(default_factory=list)
    dangling_blocks: list[tuple[str, str]] = field(default_factory=list)
    dangling_headings: list[tuple[str, str]] = field(default_factory=list)
    duplicate_ids: dict[str, list[str]] = field(default_factory=dict)
    copies: dict[str, list[str]] = field(default_factory=dict)  # per duplicate id: the files --fix re-ids
    index_mismatches: list[tuple[str, str]] = field(default_factory=list)
    index_damage: str = ""  # why the index cannot be read back, or ''
    secrets: list[str] = field(default_factory=list)  # notes holding a secret-looking string (never edited)
    temp_files: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)

    @property
    def problems(self) -> int:
        """How many problems were found (before any fix)."""
        return (
            len(self.invalid)
            + len(self.dangling_links)
            + len(self.dangling_blocks)
            + len(self.dangling_headings)
            + len(self.duplicate_ids)
            + len(self.index_mismatches)
            + bool(self.index_damage)
            + len(self.secrets)
            + len(self.temp_files)
        )

    def to_dict(self) -> dict[str, Any]:
        """The report as ``vault check --json`` prints it (the CLI adds ``exit_code``)."""
        return {**asdict(self), "problems": self.problems}


@dataclass
class _Scan:
    stems: dict[str, str] = field(default_factory=dict)  # file stem -> relpath
    blocks: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    links: list[tuple[str, str, str]] = field(default_factory=list)  # (from, target, "^block" or "Heading")
    headings: dict[str, set[str]] = field(default_factory=dict)  # file stem -> heading keys, read when linked
    ids: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    files: set[str] = field(default_factory=set)  # every file name in the vault, attachments too


def check(vault: Vault, *, embedder=None, fix: bool = False) -> CheckReport:
    """Check every note and the index; with ``fix``, remove stale temp files and re-sync the index."""
    report, scan = CheckReport(), _Scan()
    paths = vault.iter_note_paths()
    report.notes = len(paths)
    for relpath in paths:
        _scan_note(vault, relpath, scan, report)
    scan.files = {name.casefold() for _, _, names in os.walk(vault.root) for name in names}
    _resolve_links(vault, scan, report)
    report.duplicate_ids = {i: sorted(p) for i, p in sorted(scan.ids.items()) if len(p) > 1}
    report.temp_files = stale_temp_files(vault.root)
    entries = _manifest_entries(vault)
    report.copies = {i: _copies(vault, i, ps, entries) for i, ps in report.duplicate_ids.items()}
    copies = {p for ps in report.copies.values() for p in ps}
    # A copy is one problem, its duplicate id; "not indexed yet" would report it twice.
    report.index_mismatches = [m for m in _index_mismatches(vault, paths, entries) if m[0] not in copies]
    report.index_damage = probe(vault.root / STATE_DIR / INDEX_DIR, full=True)
    if fix:
        _fix(vault, report, embedder)
    return report


def _scan_note(vault: Vault, relpath: str, scan: _Scan, report: CheckReport) -> None:
    stem = PurePosixPath(relpath).stem.casefold()  # Obsidian resolves [[Note]] and [[note]] alike
    scan.stems.setdefault(stem, relpath)
    try:
        text = (vault.root / relpath).read_text(encoding="utf-8")
        frontmatter, body = split_frontmatter(text, relpath)
    except (FrontmatterError, UnicodeDecodeError, OSError) as exc:
        report.invalid.append((relpath, str(getattr(exc, "reason", exc))))
        return
    if holds_secret(text):
        report.secrets.append(relpath)
    span = frontmatter_span(text, relpath)
    if span is not None and len(frontmatter_ids(text, span)) > 1:
        report.invalid.append((relpath, "two `id:` keys; the last one counts, remove the other"))
    if frontmatter.get("id"):
        scan.ids[str(frontmatter["id"])].append(relpath)
    prose = _prose(body)
    scan.blocks[stem].update(_BLOCK.findall(prose))
    scan.links += [(relpath, link.target.strip(), link.anchor.strip()) for link in wikilinks(prose)]


def _prose(body: str) -> str:
    """The body with the lines of code blocks, fences and raw HTML blanked, as CommonMark reads them.

    Obsidian finds no block id and no link there."""
    if not _CODE_OR_HTML.search(body):
        return body
    lines = body.split("\n")
    literal = literal_lines(markdown_blocks(body), len(lines))
    return "\n".join("" if code else line for line, code in zip(lines, literal))


def _resolve_links(vault: Vault, scan: _Scan, report: CheckReport) -> None:
    for source, target, anchor in scan.links:
        if not target:
            continue  # [[#^block]] or [[#Heading]] points into the same note; Obsidian resolves it there
        name = PurePosixPath(target).name.casefold()
        stem = name[:-3] if name.endswith(".md") else name
        if stem not in scan.stems:
            if "." in name and not name.endswith(".md") and name in scan.files:
                continue  # an attachment such as ![[diagram.png]]
            report.dangling_links.append((source, target))
        elif anchor:
            _resolve_anchor(vault, scan, report, (source, target, anchor), stem)


def _resolve_anchor(vault: Vault, scan: _Scan, report: CheckReport, link: tuple[str, str, str], stem: str) -> None:
    """A link's ``#^block`` or ``#Heading`` part, looked up in the note ``stem`` it points to."""
    source, target, anchor = link
    if anchor.startswith("^"):
        block = anchor[1:].strip()
        if block and block not in scan.blocks.get(stem, set()):
            report.dangling_blocks.append((source, f"{target}#^{block}"))
        return
    headings = _headings(vault, scan, stem)
    wanted = [_heading_key(part) for part in anchor.split("#")]  # [[note#Heading#Subheading]]
    if not all(key in headings for key in wanted if key):
        report.dangling_headings.append((source, f"{target}#{anchor}"))


def _headings(vault: Vault, scan: _Scan, stem: str) -> set[str]:
    """The heading keys of a note (read on first use: only notes that heading links point to)."""
    if stem not in scan.headings:
        try:
            _, body = split_frontmatter((vault.root / scan.stems[stem]).read_text(encoding="utf-8"), scan.stems[stem])
        except (FrontmatterError, UnicodeDecodeError, OSError):
            body = ""
        tokens = markdown_blocks(body)
        scan.headings[stem] = {
            _heading_key(tokens[i + 1].content) for i, t in enumerate(tokens[:-1]) if t.type == "heading_open"
        }
    return scan.headings[stem]


def _heading_key(text: str) -> str:
    return " ".join(_NOT_IN_LINK.sub(" ", text).split()).casefold()


def _manifest_entries(vault: Vault) -> dict | None:
    """The index manifest's entries by path, or None when nothing was indexed yet."""
    manifest_path = vault.root / STATE_DIR / MANIFEST_FILE
    if not manifest_path.exists():
        return None
    with opened_manifest(manifest_path, read_only=True) as manifest:
        return manifest.entries()


def _copies(vault: Vault, nid: str, paths: list[str], entries: dict | None) -> list[str]:
    """The files holding ``nid`` that are copies: all but the one vault_pipeline wrote or indexed (else the oldest)."""
    recorded = set(vault.state.paths_for(nid))
    indexed = {p for p in paths if entries and p in entries and entries[p].note_id == nid}

    def rank(relpath: str) -> tuple[bool, bool, int, str]:
        try:
            mtime = (vault.root / relpath).stat().st_mtime_ns
        except OSError:
            mtime = 0
        return (relpath not in recorded, relpath not in indexed, mtime, relpath)

    original = min(paths, key=rank)
    return [p for p in paths if p != original]


def _index_mismatches(vault: Vault, paths: list[str], entries: dict | None) -> list[tuple[str, str]]:
    """Index manifest entries whose file is gone or whose content hash no longer matches."""
    if entries is None:
        return []
    present, out = set(paths), []
    for relpath, entry in sorted(entries.items()):
        if relpath not in present:
            out.append((relpath, "indexed but gone from the vault"))
            continue
        digest = hashlib.sha256((vault.root / relpath).read_bytes()).hexdigest()
        if digest != entry.sha256:
            out.append((relpath, "changed since it was indexed"))
    out += [(p, "not indexed yet") for p in sorted(present - set(entries))]
    return out


def _fix(vault: Vault, report: CheckReport, embedder) -> None:
    """Under the vault lock (taking it removes stale temp files): re-id copies, re-sync the index."""
    with vault.lock("check --fix"):
        report.fixed += [f"removed stale temp file {relpath}" for relpath in vault.swept]
        renamed = _new_ids(vault, report.copies)
        report.fixed += renamed
        if embedder is not None and (report.index_mismatches or renamed or report.index_damage):
            result = sync(vault, embedder, verify=True, damaged=report.index_damage)
            report.fixed.append(
                f"re-synced the index: {result.embedded_notes} note(s) re-embedded, "
                f"{result.removed} removed, {result.repaired} repaired"
            )
            if result.damaged_copy:
                report.fixed.append(f"rebuilt the unreadable index; the broken copy is in {result.damaged_copy}")


def _new_ids(vault: Vault, copies: dict[str, list[str]]) -> list[str]:
    """Give each copy an id of its own (only its ``id`` line changes); the lines to report."""
    done = []
    for old, paths in copies.items():
        for relpath in paths:
            prefix = old.rsplit("-", 1)[0] if "-" in old else "note"
            new = note_id(prefix, old, relpath)
            try:
                data = (vault.root / relpath).read_bytes()
                vault.update_frontmatter(relpath, {"id": new}, expected_sha256=sha256_bytes(data))
            except (OSError, VaultError) as exc:
                done.append(f"could not give {relpath} a new id: {getattr(exc, 'reason', exc)}")
                continue
            done.append(f"gave the copy {relpath} a new id {new} (was {old})")
    return done
