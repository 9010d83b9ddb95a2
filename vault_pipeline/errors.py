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
    └── IndexStateError             the derived index is missing, incompatible or corrupt
        └── IndexDamagedError       its files cannot be read: set aside and rebuilt by the commands

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
        self.reason = reason
        self.attempts = attempts
        self.last_output = last_output
        super().__init__(f"model {model} failed on prompt {prompt!r} after {attempts} attempt(s): {reason}")


class IndexStateError(VaultError):
    """The derived index is missing, incompatible or corrupt (rebuild with `vault index --rebuild`)."""


class IndexDamagedError(IndexStateError):
    """The index's files cannot be read; ``what`` says which read failed and how."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(f"the index cannot be read ({what}); run `vault index` to rebuild it from the notes")


class DeadlinePassed(Exception):
    """The current deadline (``models.protocol.deadline``) passed before a request could be sent."""


def exit_code(exc: VaultError) -> int:
    """The exit code of a project error: 2 for usage and configuration errors (nothing was done), else 1."""
    return EXIT_USAGE if isinstance(exc, ConfigError | UsageError) else EXIT_INCOMPLETE
