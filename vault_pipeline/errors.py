"""Every exception class of the project: one base and its data-carrying subclasses.

Every error a user can cause (bad input, a dirty file, a held lock, a model that never produced
valid output) is a ``VaultError``; the CLI maps it to a one-line message and the exit code of its
kind (``exit_code``; the README's table)::

    VaultError                      exit 1 unless a subclass says otherwise
    ├── UsageError                  exit 2: a command line that cannot run as given (no such input file)
    ├── ConfigError                 exit 2: a setting is missing or malformed (vault.toml, environment)
    ├── ParseError                  an input file, or one record in it, cannot be read
    │   ├── FrontmatterError        a note's YAML frontmatter is missing, unterminated or not a mapping
    │   └── HeadTooLarge            an export's first records hide their keys in one huge value
    ├── DirtyFileError              a file changed since it was read: left untouched
    ├── LockError                   another process holds the vault lock
    ├── ModelError                  a model call failed for good (retries spent, output never valid)
    ├── IndexStateError             the derived index is missing, incompatible or corrupt
    │   └── IndexDamagedError       its files cannot be read: set aside and rebuilt by the commands
    │       └── IndexOutdatedError  readable, but its vectors are of an older embedded text: embedded again
    └── StorageError                a file could not be written or read (disk full, read-only, permission)

Signals that never leave the module that raises them (each is caught there and becomes a value
or a ``VaultError``), so they are no ``VaultError``::

    ValueError
    ├── RecordError                 one bad record inside an export reader: becomes a ParseIssue
    ├── TruncatedJSON               an export's JSON stream broke off after the records read so far
    └── NotAnArray                  an export's JSON holds no array or object at its top level
    Exception
    └── DeadlinePassed              the model backend's deadline passed before a request went out
"""

from __future__ import annotations

from pathlib import Path


class VaultError(Exception):
    """Base class for every error this package raises on purpose."""


EXIT_OK = 0  # the command did what was asked
EXIT_INCOMPLETE = 1  # it ran, but something failed or was skipped (counted on its last line)
EXIT_USAGE = 2  # nothing was done: a usage or configuration error


class UsageError(VaultError):
    """A command line that cannot run as given (a missing input file, no query)."""


class ConfigError(VaultError):
    """A setting is missing or malformed (vault.toml, environment, options)."""


class ParseError(VaultError):
    """An input file, or one record in it, cannot be read."""

    def __init__(self, source: str | Path, reason: str, record: str | int | None = None):
        # One printable line: undecodable file-name bytes shown escaped, line breaks in a reason folded.
        self.source = str(source).encode("utf-8", "backslashreplace").decode("utf-8")
        self.record = None if record is None else str(record)
        self.reason = " ".join(reason.split())
        where = self.source if self.record is None else f"{self.source} [record {self.record}]"
        super().__init__(f"{where}: {self.reason}")


class FrontmatterError(ParseError):
    """A note's YAML frontmatter is missing, unterminated or not a mapping."""


class HeadTooLarge(ParseError):
    """The head ran to ``MAX_PEEK`` inside its first records (a huge value hides their keys)."""


class RecordError(ValueError):
    """Raised inside a format reader for one bad record; turned into a ParseIssue."""


class TruncatedJSON(ValueError):
    """The file ended (or broke) inside or between elements; the elements before it were yielded."""


class NotAnArray(ValueError):
    """The stream does not hold a JSON array or object at the top level."""


class DirtyFileError(VaultError):
    """A file changed on disk since we last wrote or read it; we refuse to overwrite it."""

    def __init__(self, path: str | Path, reason: str = "changed since it was last written"):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}; left untouched")


class LockError(VaultError):
    """Another vault_pipeline process holds the vault lock."""

    def __init__(self, path: str | Path, holder: str = "another process"):
        self.path = str(path)
        self.holder = holder
        super().__init__(f"vault is locked by {holder} ({self.path}); try again when it finishes")


NEVER_VALIDATED = "output never validated"  # ModelError.reason when the model answered, but never in shape


class ModelError(VaultError):
    """A model call failed for good: retries exhausted or output never validated."""

    def __init__(self, prompt: str, model: str, reason: str, attempts: int = 0, last_output: str | None = None):
        self.prompt = prompt
        self.model = model
        self.reason = " ".join(str(reason).split())  # one line, whatever the model or validator said
        self.attempts = attempts
        self.last_output = last_output
        super().__init__(f"model {model} failed on prompt {prompt!r} after {attempts} attempt(s): {self.reason}")


def validation_line(exc: Exception, limit: int = 300) -> str:
    """A pydantic ValidationError as one line: each problem's place and message, no input dump, no URL."""
    errors = getattr(exc, "errors", None)
    try:
        problems = errors(include_url=False, include_input=False) if callable(errors) else []
    except TypeError:
        problems = []
    parts = [f"{'.'.join(str(p) for p in e.get('loc', ())) or 'value'}: {e.get('msg', '')}" for e in problems]
    line = " ".join(("; ".join(parts) or str(exc)).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class IndexStateError(VaultError):
    """The derived index is missing, incompatible or corrupt (rebuild with `vault index --rebuild`)."""


class IndexDamagedError(IndexStateError):
    """The index's files cannot be read; ``what`` says which read failed and how."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(f"the index cannot be read ({what}); run `vault index` to rebuild it from the notes")


class IndexOutdatedError(IndexDamagedError):
    """The index is readable but its vectors are of texts this build no longer embeds (an older
    embedding text): a reader must not compare them with its own; readers that repair re-embed it."""

    def __init__(self, what: str):
        self.what = what
        IndexStateError.__init__(self, f"{what}; run `vault index` to embed it again")


class DeadlinePassed(Exception):
    """The current deadline (``models.protocol.deadline``) passed before a request could be sent."""


def exit_code(exc: VaultError) -> int:
    """The exit code of a project error: 2 for usage and configuration errors (nothing was done), else 1."""
    return EXIT_USAGE if isinstance(exc, ConfigError | UsageError) else EXIT_INCOMPLETE


_STORAGE_ADVICE = {
    "ENOSPC": "free disk space and run the command again",
    "EDQUOT": "free space within your disk quota and run the command again",
    "EACCES": "check the permissions of the file and its folder, then run the command again",
    "EPERM": "check the file's permissions and attributes (chattr -i), then run the command again",
    "EROFS": "the filesystem is read-only; remount it writable or use a copy of the vault",
    "ENOENT": "a folder vanished meanwhile; check the vault is mounted and run the command again",
}


class StorageError(VaultError):
    """A file or folder could not be written or read (disk full, read-only, permission denied, vanished).

    Carries the path and the errno's name; the message is one line ending in what to do."""

    def __init__(self, path: str | Path, cause: OSError, advice: str | None = None):
        import errno as _errno

        self.path = str(path).encode("utf-8", "backslashreplace").decode("utf-8")
        self.errno_name = _errno.errorcode.get(cause.errno or 0, "")
        self.strerror = cause.strerror or str(cause) or self.errno_name
        self.advice = _STORAGE_ADVICE.get(self.errno_name) or advice or "check the disk and run the command again"
        super().__init__(f"{self.path}: {self.strerror}; {self.advice}")

    @property
    def stops(self) -> bool:
        """A fault of the whole disk (full, read-only, vanished): every later write fails too, so the
        command stops; a permission on one file only skips that file."""
        return self.errno_name not in ("EACCES", "EPERM")


def as_storage_error(exc: OSError, path: str | Path) -> StorageError:
    """An OSError from writing ``path`` as a StorageError naming it."""
    return storage_fault(exc, path) or StorageError(exc.filename or path, exc)


# What a storage fault looks like where a library reports it as text (LanceDB's Rust IO errors carry
# "(os error 28)"; SQLite says "database or disk is full" or "attempt to write a readonly database").
_FAULT_ERRNOS = {"ENOSPC": 28, "EACCES": 13, "EPERM": 1, "EROFS": 30, "EDQUOT": 122}
_FAULT_TEXTS = (
    ("no space left on device", "ENOSPC"),
    ("database or disk is full", "ENOSPC"),
    ("disk quota exceeded", "EDQUOT"),
    ("read-only file system", "EROFS"),
    ("readonly database", "EROFS"),
    ("permission denied", "EACCES"),
    ("operation not permitted", "EPERM"),
)


def storage_fault(exc: BaseException, path: str | Path = "") -> StorageError | None:
    """``exc`` as a StorageError when it is a disk-full, read-only, permission or vanished-folder fault, else None.

    Recognises OSErrors by errno and library errors (LanceDB, SQLite) by their text; never a
    decoding or format error, so damage to a file is still told apart from a failed write."""
    import errno as _errno

    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, OSError) and exc.errno is not None:
        name = _errno.errorcode.get(exc.errno, "")
        if name in _FAULT_ERRNOS or (name == "ENOENT" and exc.filename is not None):  # ENOENT: a vanished folder
            return StorageError(path or exc.filename or "the vault's files", exc)
        return None
    text = str(exc).lower()
    for words, name in _FAULT_TEXTS:
        number = _FAULT_ERRNOS.get(name, 0)
        if words in text or (number and f"os error {number})" in text):
            cause = OSError(getattr(_errno, name), os_strerror(getattr(_errno, name)))
            return StorageError(path or _path_in(str(exc)) or "the vault's files", cause)
    return None


def os_strerror(code: int) -> str:
    """The C library's text for an errno ("No space left on device")."""
    import os as _os

    return _os.strerror(code)


def _path_in(text: str) -> str:
    """A file path quoted in a library's message, if it names one."""
    import re as _re

    found = _re.search(r"(/[^\s'\",:)]+)", text)
    return found.group(1) if found else ""
