"""The vault's write state and the low-level file primitives ``vault.py`` builds on.

``StateStore`` remembers, per file, the bytes vault_pipeline last wrote there. That hash is
the permission to overwrite: a file whose bytes differ was changed by someone else.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from vault_pipeline.errors import DirtyFileError, FrontmatterError, StorageError, VaultError
from vault_pipeline.vault.frontmatter import dump_yaml, frontmatter_span, load_yaml, plain_value

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files(
    relpath TEXT PRIMARY KEY,
    note_id TEXT,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS files_note_id ON files(note_id);
CREATE TABLE IF NOT EXISTS ids(
    relpath TEXT PRIMARY KEY,
    note_id TEXT,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL
);
"""
_ID_LINE = re.compile(r"""^id:[ \t]*(?:"([^"\n]*)"|'([^'\n]*)'|([^\s#]+))""", re.M)
_KEY_LINE = re.compile(
    r"""^("(?:[^"\\\n]|\\.)*"|'(?:[^'\n]|'')*'|[^\s#'"\-?:,\[\]{}&*!|>%@`][^:\n]*?)[ \t]*:(?:[ \t]|\r?\n|$)"""
)
_HEAD_BYTES = 8192


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of some bytes."""
    return hashlib.sha256(data).hexdigest()


class FileRecord(NamedTuple):
    """One row of the state: what we last wrote at a path."""

    relpath: str
    note_id: str | None
    sha256: str
    size: int
    mtime_ns: int


# SQLite's primary result codes that mean "this file or its folder cannot be written" (not damage).
_SQLITE_READONLY, _SQLITE_CANTOPEN = 8, 14


def cannot_write(exc: sqlite3.Error) -> bool:
    """Whether a SQLite error says the database or its folder is not writable (another user's
    vault, a read-only mount), as opposed to a damaged or locked file."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (_SQLITE_READONLY, _SQLITE_CANTOPEN)


def connect_read_only(path: Path, *, timeout: float = 30.0) -> sqlite3.Connection:
    """A read-only connection to a (WAL-mode) SQLite file, also where this process may not write
    the file or its folder.

    ``mode=ro`` first: it sees the writers' latest commits, but a WAL database needs its ``-shm``
    file, which SQLite must create when it is missing. Where it cannot (the folder is another
    user's, or a read-only mount), the file is opened ``immutable``: read as it is on disk, without
    the WAL's newer commits (a writer that could add them could also write the folder). Raises
    ``sqlite3.Error`` when the file cannot be read at all."""
    uri = Path(path).absolute().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout)
    try:
        conn.execute("PRAGMA schema_version").fetchone()  # opening is lazy: read once to know
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        if not cannot_write(exc):
            raise
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout)


class StateStore:
    """``files(relpath, note_id, sha256, size, mtime_ns)`` in a WAL-mode SQLite file.

    Where the state folder cannot be written (another user running ``vault status``, a read-only
    mount), the database is opened read-only (``read_only``): reads answer as usual, the id cache
    is not updated, and recording a write raises ``StorageError``."""

    def __init__(self, path: Path):
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self.read_only = False

    def _db(self) -> sqlite3.Connection:
        # A connection must not cross a fork; reopen in a child process.
        if self._conn is None or self._pid != os.getpid():
            try:
                conn = self._open()
            except sqlite3.DatabaseError as exc:
                raise VaultError(
                    f"{self.path}: state database unreadable ({exc}); move it aside "
                    "and run again (files it does not know are then left untouched)"
                ) from None
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            self.read_only = False
            return conn
        except PermissionError:
            pass  # the state folder cannot be made: read what there is
        except sqlite3.OperationalError as exc:
            if conn is not None:
                conn.close()
            if not cannot_write(exc):
                raise
        self.read_only = True
        if self.path.exists():
            return connect_read_only(self.path)
        empty = sqlite3.connect(":memory:", isolation_level=None)  # nothing recorded yet: nothing to read
        empty.executescript(_SCHEMA)
        return empty

    def _writable(self) -> sqlite3.Connection:
        db = self._db()
        if self.read_only:
            raise StorageError(self.path, PermissionError(errno.EACCES, "the state database cannot be written"))
        return db

    def ensure(self) -> None:
        """Create the database and its table now rather than on first use."""
        self._db()

    def get(self, relpath: str) -> FileRecord | None:
        """The record for a path, if we ever wrote it."""
        row = (
            self._db()
            .execute("SELECT relpath, note_id, sha256, size, mtime_ns FROM files WHERE relpath = ?", (relpath,))
            .fetchone()
        )
        return FileRecord(*row) if row else None

    def paths_for(self, note_id: str) -> list[str]:
        """Recorded paths of a note id, sorted."""
        rows = self._db().execute("SELECT relpath FROM files WHERE note_id = ? ORDER BY relpath", (note_id,)).fetchall()
        return [r[0] for r in rows]

    def record(self, relpath: str, note_id: str | None, sha256: str, size: int, mtime_ns: int) -> None:
        """Remember the bytes we just wrote (or adopted) at a path."""
        self._writable().execute(
            "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)", (relpath, note_id, sha256, size, mtime_ns)
        )

    def cached_ids(self) -> dict[str, tuple[str | None, int, int]]:
        """The frontmatter ids last read from each note: relpath -> (id, size, mtime_ns when read)."""
        rows = self._db().execute("SELECT relpath, note_id, size, mtime_ns FROM ids").fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    def cache_ids(self, rows: list[tuple[str, str | None, int, int]], gone: list[str]) -> None:
        """Remember ids read from changed notes ((relpath, id, size, mtime_ns)) and forget notes gone."""
        if not rows and not gone:
            return
        db = self._db()
        if self.read_only:
            return  # a cache: the next writable run fills it
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("DELETE FROM ids WHERE relpath = ?", [(g,) for g in gone])
            db.executemany("INSERT OR REPLACE INTO ids VALUES (?, ?, ?, ?)", rows)

    def rename(self, old: str, new: str) -> None:
        """Carry a record to the path its file moved to."""
        db = self._writable()
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM files WHERE relpath = ?", (new,))
            db.execute("UPDATE files SET relpath = ? WHERE relpath = ?", (new, old))

    def close(self) -> None:
        """Close the connection (it reopens on next use)."""
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None


# --------------------------------------------------------------------------- file primitives


def temp_name(path: Path) -> Path:
    """The temp file an atomic write of ``path`` uses (``vault check`` looks for leftovers)."""
    return path.with_name(f".{path.name}.vp-tmp-{os.getpid()}")


_TEMP = re.compile(r"^\..+\.vp-tmp-(\d+)$")
_NOT_OURS = frozenset({".git", ".trash", ".obsidian"})  # folders no atomic write of ours goes into


def stale_temp_files(root: Path) -> list[str]:
    """Vault-relative paths of our atomic writes' temp files whose writing process is gone, sorted."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _NOT_OURS]
        for name in names:
            match = _TEMP.match(name) if ".vp-tmp-" in name else None
            if match and not pid_alive(int(match.group(1))):
                found.append(Path(folder, name).relative_to(root).as_posix())
    return sorted(found)


def remove_stale_temp_files(root: Path) -> list[str]:
    """Remove the temp files of dead writers (ours by name, never a note); return what was removed."""
    removed = []
    for relpath in stale_temp_files(root):
        try:
            (root / relpath).unlink()
        except OSError:
            continue  # gone already, or not ours to remove (a read-only folder): `vault check` shows it
        removed.append(relpath)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (one we may not signal counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    except OverflowError:
        return False  # no system hands out such a pid
    return True


def atomic_write(path: Path, data: bytes, *, expect_sha256: str | None = None) -> os.stat_result:
    """Write via a temp file in the same folder, fsync, rename; keeps an existing file's mode (and owner, as root).

    With ``expect_sha256``, the file on disk is checked again just before the rename, so an
    edit saved while we were writing is never replaced (DirtyFileError).
    """
    tmp = temp_name(path)
    mode = _mode_of(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if mode != 0o644:
            os.chmod(tmp, mode)
        _keep_owner(tmp, path)
        if expect_sha256 is not None and _current_sha(path) != expect_sha256:
            raise DirtyFileError(path, "changed while it was being written")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    # No directory fsync per write: it doubles the cost (~2 ms each in a 10,000-file folder),
    # and without it a power cut can only lose the rename, never leave a half-written note.
    return os.stat(path)


def _keep_owner(tmp: Path, path: Path) -> None:
    """Run as root (``sudo vault ...``), a rewritten file keeps its owner and a new one takes its
    folder's, so the user can still edit their notes; as anyone else, files are theirs already."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    try:
        owner = os.stat(path)
    except FileNotFoundError:
        owner = os.stat(path.parent)
    if (owner.st_uid, owner.st_gid) != (0, 0):
        os.chown(tmp, owner.st_uid, owner.st_gid)


def _mode_of(path: Path) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return 0o644


def _current_sha(path: Path) -> str | None:
    try:
        return sha256_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def rename_no_clobber(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``; FileExistsError if ``dst`` exists, never replacing it."""
    try:
        os.link(src, dst)  # fails atomically when dst exists, unlike rename
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        # No hard links here (some FUSE or FAT volumes): check, then rename.
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, "file exists", str(dst)) from None
        os.rename(src, dst)
    else:
        os.unlink(src)
    _fsync_dir(dst.parent)
    _fsync_dir(src.parent)


def read_note_id(path: Path) -> str | None:
    """The ``id`` in a file's frontmatter, read cheaply from the head of the file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
            if len(head) == _HEAD_BYTES and b"\n---" not in head[3:]:
                head += fh.read()  # a frontmatter block longer than the head
    except OSError:
        return None
    text = head.decode("utf-8", errors="replace")
    try:
        span = frontmatter_span(text)
    except FrontmatterError:
        return None
    if span is None:
        return None
    found = frontmatter_ids(text, span)
    return found[-1] if found else None  # the last, as YAML reads a key given twice


def frontmatter_ids(text: str, span: tuple[int, ...]) -> list[str]:
    """Every top-level ``id:`` value in the frontmatter at ``span`` (more than one: a hand-made duplicate)."""
    return [next((g for g in hit.groups() if g), "") for hit in _ID_LINE.finditer(text, span[0], span[1])]


# --------------------------------------------------------------------------- line-level frontmatter edit


def edit_frontmatter_text(text: str, changes: Mapping[str, Any], source: str = "<note>") -> str:
    """Set or remove (None) top-level keys, keeping every other byte of the note as it was."""
    if not changes:
        return text
    newline = "\r\n" if "\r\n" in text[:4096] else "\n"
    span = frontmatter_span(text, source)
    if span is None:
        added = {k: v for k, v in changes.items() if v is not None}
        if not added:
            return text
        return _lines("---\n" + dump_yaml({k: plain_value(v) for k, v in added.items()}) + "---\n", newline) + text
    start, end, _ = span
    before = load_yaml(text[start:end], source)  # never edit a block that is already broken
    segments = _segments(text[start:end].splitlines(keepends=True))
    for key, value in changes.items():
        segments = _apply(segments, str(key), value, newline)
    block = "".join("".join(lines) for _, lines in segments)
    result = text[:start] + block + text[end:]
    _verify(result, before, changes, source)
    return result


def _lines(yaml_text: str, newline: str) -> str:
    return yaml_text.replace("\n", newline) if newline != "\n" else yaml_text


def _segments(lines: list[str]) -> list[tuple[str | None, list[str]]]:
    """Split a YAML block into (key, lines) spans; comments and blank lines between keys stay keyless."""
    segments: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in lines:
        # Only a key at column 0 starts a span: indented lines, "- " items, blank lines inside
        # block scalars and comments all belong to the key above them.
        match = _KEY_LINE.match(line)
        if match:
            segments.append((_key_text(match[1]), [line]))
        else:
            segments[-1][1].append(line)
    return _trim_trailing_neutral(segments)


def _trim_trailing_neutral(segments: list[tuple[str | None, list[str]]]) -> list[tuple[str | None, list[str]]]:
    """Blank or comment lines closing a key's span belong to no key (an edit keeps them)."""
    out: list[tuple[str | None, list[str]]] = []
    for key, lines in segments:
        tail: list[str] = []
        while key is not None and len(lines) > 1 and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
            tail.insert(0, lines.pop())
        out.append((key, lines))
        if tail:
            out.append((None, tail))
    return out


def _key_text(raw: str) -> str:
    if raw[:1] in ("'", '"'):
        try:
            return str(yaml.safe_load(raw))
        except yaml.YAMLError:
            return raw
    return raw.rstrip()


def _apply(
    segments: list[tuple[str | None, list[str]]], key: str, value: Any, newline: str
) -> list[tuple[str | None, list[str]]]:
    new_lines = [] if value is None else _lines(dump_yaml({key: plain_value(value)}), newline).splitlines(keepends=True)
    out: list[tuple[str | None, list[str]]] = []
    placed = False
    for seg_key, lines in segments:
        if seg_key != key:
            out.append((seg_key, lines))
        elif not placed:  # the first occurrence takes the new value; later duplicates go
            out.append((key, new_lines))
            placed = True
    if not placed and new_lines:
        last = out[-1][1] if out and out[-1][1] else None
        if last and not last[-1].endswith("\n"):
            last[-1] += newline
        out.append((key, new_lines))
    return out


def _verify(result: str, before: dict, changes: Mapping[str, Any], source: str) -> None:
    """The edited block must parse to the old mapping with exactly the requested changes."""
    expected = {k: v for k, v in before.items() if str(k) not in {str(c) for c in changes}}
    expected.update({str(k): plain_value(v) for k, v in changes.items() if v is not None})
    try:
        span = frontmatter_span(result, source)
        after = load_yaml(result[span[0] : span[1]], source) if span else {}
    except FrontmatterError:
        after = None
    if after != expected:
        raise FrontmatterError(
            source, f"cannot edit {sorted(map(str, changes))} line by line in this frontmatter; left untouched"
        )
