"""The ``vault`` command: the composition root.

It reads settings and the environment, builds the models and the embedder, calls one library
function per command and renders the report it returns. One module per command (``ingest``,
``query``, ``clean`` ...); ``app`` registers them, ``common`` holds what they share and
``progress`` shows how a long step advances. Only this package imports typer and rich.
"""

from __future__ import annotations

import gc
import os
import sys

from vault_pipeline.cli.app import app
from vault_pipeline.cli.common import EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE, err, exit_code
from vault_pipeline.errors import VaultError
from vault_pipeline.models.threads import one_blas_thread

__all__ = ["EXIT_INCOMPLETE", "EXIT_OK", "EXIT_USAGE", "app", "main"]


def main() -> None:
    """Console entry point: a project error is one line and exit 1 (2 for usage and config errors)."""
    # A command builds ~100k small objects per 100k notes and creates no cycles worth chasing; at
    # the default thresholds the collector re-scans every long-lived object (LanceDB's thousands of
    # classes) again and again.
    gc.set_threshold(100_000, 50, 100)
    one_blas_thread()  # small matrix products: a BLAS thread per core only spins (models/threads.py)
    try:
        app()
    except SystemExit as done:
        _exit(done)
    except VaultError as exc:  # raised outside a command (the group maps those inside one)
        err.print(f"error: {exc}", markup=False)
        sys.exit(exit_code(exc))
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        sys.exit(130)


def _exit(done: SystemExit) -> None:
    """End the process with ``done``'s code. With a model call still out on a daemon thread (a gate
    past its deadline, its request waiting on a server that never answers) the process ends at once:
    the interpreter's shutdown could wait on that thread, or deadlock with an import it holds (seen at
    load ~20: litellm's client finalizer waiting on the thread's import lock for good)."""
    from vault_pipeline.models.workers import calls_in_flight

    if calls_in_flight():
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if done.code is not None and not isinstance(done.code, int):
            err.print(str(done.code), markup=False)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise done
