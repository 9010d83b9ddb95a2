"""The vault on disk: the only module that writes vault files.

Every write is atomic and guarded: a file is overwritten only when its bytes are exactly
what vault_pipeline last wrote there (the state's hash), so a user's edit always survives.
Nothing is ever deleted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from vault_pipeline.config import CONFIG_FILE, DEFAULT_TOML
from vault_pipeline.errors import (
    ConfigError,
    DirtyFileError,
    FrontmatterError,
    StorageError,
    VaultError,
    as_storage_error,
    storage_fault,
)
from vault_pipeline.vault.frontmatter import split_frontmatter
from vault_pipeline.vault.lock import LOCK_FILE, hold
from vault_pipeline.vault.note import Note
from vault_pipeline.vault.state import (
    StateStore,
    atomic_write,
    edit_frontmatter_text,
    read_note_id,
    remove_stale_temp_files,
    rename_no_clobber,
    sha256_bytes,
)

FOLDERS = ("inbox", "engrams", "sessions", "threads", "topics", "people", "resources", "web", "archive")
STATE_DIR = ".vault_pipeline"
STATE_DB = "state.sqlite"

Outcome = Literal["created", "updated", "unchanged", "refused", "moved-elsewhere"]


@dataclass(frozen=True)
class WriteOutcome:
    """What ``Vault.write`` did with one note, and why."""

    outcome: Outcome
    relpath: str
    reason: str = ""
    unwritable: bool = False  # refused because the file or its folder cannot be written (not a user's edit)


class Vault:
    """An Obsidian vault folder plus ``.vault_pipeline/`` state."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).resolve()
        self.state = StateStore(self.root / STATE_DIR / STATE_DB)
        self._ids: dict[str, str] | None = None  # note id -> relpath, from a frontmatter scan
        self.swept: list[str] = []  # stale temp files removed when the lock was last taken

    def __repr__(self) -> str:
        return f"Vault({str(self.root)!r})"

    # ----------------------------------------------------------------------- opening

    @classmethod
    def init(cls, root: str | os.PathLike[str]) -> Vault:
        """Create the folders, state dir and a commented vault.toml; existing files stay as they are."""
        root = Path(root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            for folder in (*FOLDERS, STATE_DIR):
                (root / folder).mkdir(exist_ok=True)
            fd = os.open(root / CONFIG_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError as exc:
            if Path(exc.filename or "").name != CONFIG_FILE:
                raise ConfigError(f"{exc.filename}: exists and is not a folder; cannot make a vault here") from None
        except OSError as exc:
            raise ConfigError(f"{root}: cannot make a vault here: {exc.strerror or exc}") from None
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(DEFAULT_TOML)
        vault = cls(root)
        vault.state.ensure()
        return vault

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> Vault:
        """Open an initialised vault (ConfigError when the folder has no vault.toml)."""
        root = Path(root)
        if not (root / CONFIG_FILE).is_file():
            raise ConfigError(f"{root}: not a vault (no {CONFIG_FILE}); run `vault init {root}` first")
        (root / STATE_DIR).mkdir(exist_ok=True)
        return cls(root)

    def close(self) -> None:
        """Release the state database connection."""
        self.state.close()

    # ----------------------------------------------------------------------- paths

    def path(self, relpath: str, *, allow_symlink: bool = False) -> Path:
        """Absolute path of a vault-relative path; VaultError if it could leave the vault."""
        parts = str(relpath).split("/")
        if (
            not relpath
            or "\\" in relpath
            or "\x00" in relpath
            or relpath.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise VaultError(f"{relpath!r}: not a safe vault-relative path; refused")
        full = self.root.joinpath(*parts)
        try:
            resolved = full.resolve()
        except (OSError, RuntimeError):  # a symlink loop (ELOOP; RuntimeError before Python 3.13)
            raise VaultError(f"{relpath}: a symlink loop; refused (remove the link)") from None
        if not resolved.is_relative_to(self.root):
            raise VaultError(f"{relpath}: resolves outside the vault (a symlink?); refused")
        if not allow_symlink and full.is_symlink():
            raise VaultError(f"{relpath}: is a symlink; refused")
        return full

    def iter_note_paths(self) -> list[str]:
        """Sorted vault-relative paths of every .md note (hidden files and folders skipped)."""
        return sorted(relpath for relpath, _ in self._note_entries())

    def _note_entries(self) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """(relpath, directory entry) of every .md note, hidden files and folders skipped, in no order."""
        stack = [("", str(self.root))]
        while stack:
            prefix, folder = stack.pop()
            try:
                entries = os.scandir(folder)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    # Hidden covers .vault_pipeline/, .obsidian/, .trash/ and our temp files.
                    if entry.name.startswith("."):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((f"{prefix}{entry.name}/", entry.path))
                    elif entry.name.endswith(".md") and entry.is_file(follow_symlinks=False):
                        yield prefix + entry.name, entry

    # ----------------------------------------------------------------------- reading and finding

    def read(self, relpath: str) -> tuple[dict, str, str]:
        """(frontmatter, body, sha256 of the file's bytes) of a note."""
        data = self._read_bytes(relpath)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise FrontmatterError(relpath, "not UTF-8 text") from None
        frontmatter, body = split_frontmatter(text, relpath)
        return frontmatter, body, sha256_bytes(data)

    def _read_bytes(self, relpath: str) -> bytes:
        try:
            return self.path(relpath, allow_symlink=True).read_bytes()
        except FileNotFoundError:
            raise VaultError(f"{relpath}: no such note in {self.root}") from None

    def locate(self, note_id: str) -> str | None:
        """Where the note with this id lives now (state first, then a frontmatter scan)."""
        recorded = self.state.paths_for(note_id)
        for relpath in recorded:
            if self._holds(relpath, note_id):
                return relpath
        ids = self._id_index()
        found = ids.get(note_id)
        if found is not None and not self._holds(found, note_id):
            del ids[note_id]
            found = None
        if found is not None and recorded and found not in recorded:
            # The user moved our file: carry its record along, so the next run finds it directly.
            self.state.rename(recorded[0], found)
        return found

    def _holds(self, relpath: str, note_id: str) -> bool:
        try:
            return read_note_id(self.path(relpath, allow_symlink=True)) == note_id
        except VaultError:
            return False

    def _id_index(self) -> dict[str, str]:
        """Note id -> relpath of every note (the first path in sorted order when an id repeats).

        Built once per Vault from a scan; ids read before are reused from the state while a
        file's size and mtime are unchanged, so a large vault costs a ``stat`` per note, not a read."""
        if self._ids is None:
            cached = self.state.cached_ids()
            found: dict[str, str | None] = {}
            changed: list[tuple[str, str | None, int, int]] = []
            for relpath, entry in self._note_entries():
                try:
                    stat = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                hit = cached.pop(relpath, None)
                if hit is not None and hit[1:] == (stat.st_size, stat.st_mtime_ns):
                    found[relpath] = hit[0]
                else:
                    found[relpath] = read_note_id(self.root / relpath)
                    changed.append((relpath, found[relpath], stat.st_size, stat.st_mtime_ns))
            self.state.cache_ids(changed, gone=list(cached))
            ids: dict[str, str] = {}
            for relpath in sorted(found):
                nid = found[relpath]
                if nid is not None:
                    ids.setdefault(nid, relpath)
            self._ids = ids
        return self._ids

    def _remember(self, note_id: str | None, relpath: str, old: str | None = None) -> None:
        if self._ids is None:
            return
        if old is not None and note_id and self._ids.get(note_id) == old:
            del self._ids[note_id]
        if note_id:
            self._ids.setdefault(note_id, relpath)

    # ----------------------------------------------------------------------- writing

    def write(self, note: Note, *, follow: bool = False) -> WriteOutcome:
        """Write a note atomically unless someone else changed the file or moved the note.

        With ``follow``, a note found (by its frontmatter ``id``) under another name or folder is
        written where it is now, so a note the user renamed keeps receiving updates; the caller
        must have merged the keys the file owns (``ingest.write.with_lifecycle``). Without it
        such a note is left alone ("moved-elsewhere")."""
        where = self.locate(note.id)
        target = where if follow and where is not None else note.relpath
        try:
            path = self.path(target)
        except VaultError as exc:
            return WriteOutcome("refused", target, str(exc))
        if where is not None and where != target:
            return WriteOutcome("moved-elsewhere", where, f"note {note.id} lives at {where}; not rewritten")
        data = note.text().encode("utf-8")
        try:
            current = path.read_bytes() if path.exists() else None
        except OSError as exc:
            return WriteOutcome("refused", target, f"cannot read it: {exc.strerror or exc}")
        if current is None and where is None and self.state.paths_for(note.id):
            # We wrote this note before and no file holds its id now: the user deleted it.
            return WriteOutcome("refused", target, "deleted since vault_pipeline wrote it; not recreated")
        return self._write_over(target, path, note.id, data, current)

    def _write_over(self, relpath: str, path: Path, note_id: str, data: bytes, current: bytes | None) -> WriteOutcome:
        """Create, adopt or update the file at ``relpath`` whose bytes are ``current`` (None: no file)."""
        if current is None:
            fault = self._put_or_refuse(relpath, path, note_id, data, None)
            return WriteOutcome("refused", relpath, fault, True) if fault else WriteOutcome("created", relpath)
        if current == data:
            self._adopt(relpath, note_id, data)
            return WriteOutcome("unchanged", relpath)
        reason = self._refusal(relpath, note_id, current)
        if reason:
            return WriteOutcome("refused", relpath, reason)
        try:
            fault = self._put_or_refuse(relpath, path, note_id, data, current)
        except DirtyFileError as exc:
            return WriteOutcome("refused", relpath, exc.reason)
        return WriteOutcome("refused", relpath, fault, True) if fault else WriteOutcome("updated", relpath)

    def _put_or_refuse(self, relpath: str, path: Path, note_id: str, data: bytes, current: bytes | None) -> str:
        """``_put``, '' when done; a file that cannot be written (permission, an immutable file) is
        refused with the reason and the command goes on; a full or read-only disk stops it (StorageError)."""
        digest = None if current is None else sha256_bytes(current)
        try:
            self._put(relpath, path, note_id, data, expect_sha256=digest, previous=current)
        except StorageError as fault:
            if fault.stops:
                raise
            return f"cannot write it: {fault.strerror}; {fault.advice}"
        return ""

    def ours(self, relpath: str, data: bytes) -> bool:
        """Whether ``data`` are the bytes vault_pipeline last wrote at ``relpath`` (no one edited it since)."""
        record = self.state.get(relpath)
        return record is not None and record.sha256 == sha256_bytes(data)

    def _refusal(self, relpath: str, note_id: str, current: bytes) -> str:
        record = self.state.get(relpath)
        if record is None:
            return "not written by vault_pipeline (unknown to its state); left untouched"
        if record.note_id and record.note_id != note_id:
            return f"holds note {record.note_id}, not {note_id}; left untouched"
        if record.sha256 != sha256_bytes(current):
            return "edited since vault_pipeline wrote it; left untouched"
        return ""

    def _put(
        self,
        relpath: str,
        path: Path,
        note_id: str | None,
        data: bytes,
        *,
        expect_sha256: str | None = None,
        previous: bytes | None = None,
    ) -> None:
        """Write the file, then record it; a fault in either leaves the file as it was (StorageError)."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            stat = atomic_write(path, data, expect_sha256=expect_sha256)
        except OSError as exc:
            raise as_storage_error(exc, path) from None
        try:
            self.state.record(relpath, note_id, sha256_bytes(data), stat.st_size, stat.st_mtime_ns)
        except Exception as exc:
            # The file is new but its record is not: put the old bytes back (or take our new file
            # away), else the next run would take our own write for a user's edit and refuse it.
            fault = storage_fault(exc, self.root / STATE_DIR / STATE_DB)
            self._restore(path, previous)
            if fault is None:
                raise
            raise fault from None
        self._remember(note_id, relpath)

    def _restore(self, path: Path, previous: bytes | None) -> None:
        try:
            if previous is None:
                path.unlink(missing_ok=True)  # the file this very call created
            else:
                atomic_write(path, previous)
        except OSError:
            pass  # nothing more can be done on this disk; the state still names the old bytes

    def _adopt(self, relpath: str, note_id: str, data: bytes) -> None:
        # The file holds exactly the bytes we would write, so it is safe to treat as ours.
        record = self.state.get(relpath)
        digest = sha256_bytes(data)
        if record is None or record.sha256 != digest or record.note_id != note_id:
            stat = os.stat(self.root / relpath)
            self.state.record(relpath, note_id, digest, stat.st_size, stat.st_mtime_ns)

    def update_frontmatter(
        self, relpath: str, changes: Mapping[str, Any], *, expected_sha256: str | None = None
    ) -> None:
        """Set (or, with None, remove) frontmatter keys, keeping every other byte of the file."""
        path = self.path(relpath)
        data = self._read_bytes(relpath)
        digest = sha256_bytes(data)
        if expected_sha256 is not None and digest != expected_sha256:
            raise DirtyFileError(relpath, "changed since it was read")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise FrontmatterError(relpath, "not UTF-8 text") from None
        new_data = edit_frontmatter_text(text, changes, relpath).encode("utf-8")
        if new_data == data:
            return
        record = self.state.get(relpath)
        try:
            stat = atomic_write(path, new_data, expect_sha256=digest)
        except DirtyFileError:
            raise DirtyFileError(relpath, "changed while its frontmatter was being edited") from None
        except OSError as exc:
            raise as_storage_error(exc, path) from None
        # Only a file that was still ours stays ours: a user-edited file must keep refusing
        # our rewrites after we touched a few of its keys.
        if record is not None and record.sha256 == digest:
            try:
                self.state.record(relpath, record.note_id, sha256_bytes(new_data), stat.st_size, stat.st_mtime_ns)
            except Exception as exc:
                fault = storage_fault(exc, self.root / STATE_DIR / STATE_DB)
                self._restore(path, data)
                if fault is None:
                    raise
                raise fault from None

    def move(self, relpath: str, folder: str) -> str:
        """Move a note into another vault folder (atomic, never over an existing file)."""
        src = self.path(relpath)
        new_relpath = f"{folder.strip('/')}/{PurePosixPath(relpath).name}"
        dst = self.path(new_relpath)
        if new_relpath == relpath:
            return relpath
        if not src.is_file():
            raise VaultError(f"{relpath}: no such note in {self.root}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            rename_no_clobber(src, dst)
        except FileExistsError:
            raise DirtyFileError(new_relpath, f"already exists; {relpath} was not moved") from None
        except OSError as exc:
            raise as_storage_error(exc, src) from None
        record = self.state.get(relpath)
        if record is not None:
            self.state.rename(relpath, new_relpath)
        self._remember(record.note_id if record else read_note_id(dst), new_relpath, old=relpath)
        return new_relpath

    # ----------------------------------------------------------------------- the lock

    @contextmanager
    def lock(self, command: str, *, wait: float = 0) -> Iterator[None]:
        """Hold the vault's exclusive lock; LockError naming the holder if it stays busy for ``wait`` s.

        Every writing command holds it, so this is where the temp files of writers killed
        mid-write are removed (``swept`` lists them): no live writer can own one now."""
        with hold(self.root / STATE_DIR / LOCK_FILE, command, wait=wait):
            self.swept = remove_stale_temp_files(self.root)
            yield
