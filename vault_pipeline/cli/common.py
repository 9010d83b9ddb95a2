"""What every command shares: the consoles, the common options, finding and opening the vault,
building the models from settings, tables, JSON reports and exit codes.

Heavy libraries (litellm, lancedb, onnxruntime, pydantic) are imported inside the functions that
need them, so ``vault --help`` starts fast.
"""

from __future__ import annotations

import json
import logging
import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from vault_pipeline.config import CONFIG_FILE, setting

# Exit codes, the same in every command and in every --json report ("exit_code"), and the usage
# error: defined with every error class in errors.py, read by the commands from here.
from vault_pipeline.errors import EXIT_INCOMPLETE as EXIT_INCOMPLETE
from vault_pipeline.errors import EXIT_OK as EXIT_OK
from vault_pipeline.errors import EXIT_USAGE as EXIT_USAGE
from vault_pipeline.errors import ConfigError
from vault_pipeline.errors import UsageError as UsageError
from vault_pipeline.errors import exit_code as exit_code

if TYPE_CHECKING:
    from rich.table import Table

    from vault_pipeline.config import Settings
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.models.embed import Embedder
    from vault_pipeline.models.protocol import StructuredLLM
    from vault_pipeline.vault.files import Vault


out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
VERBOSE = "vault_pipeline.verbose"  # key in the click context's meta: the log handler -v installed
REPO = Path(__file__).resolve().parent.parent.parent


# --------------------------------------------------------------------------- options


def schema_option(name: str, metavar: str) -> Any:
    """A command-line option for the setting ``name``: its help, bounds and default as the settings
    schema (``config.Settings``) declares them, so the CLI never retypes them."""
    entry = setting(name)
    low, high = entry.bounds
    return typer.Option(metavar=metavar, min=low, max=high, show_default=entry.show_default, help=entry.help)


def set_verbose(ctx: typer.Context, value: bool) -> bool:
    """``-v``: log lines (ours, LiteLLM's, instructor's) on stderr for this command, and an error's traceback."""
    if value and VERBOSE not in ctx.meta:
        from rich.logging import RichHandler

        handler = RichHandler(console=err, show_path=False)
        ctx.meta[VERBOSE] = (handler, logging.root.level)
        logging.root.addHandler(handler)
        logging.root.setLevel(logging.INFO)
    return value


def unset_verbose(meta: dict[str, Any]) -> None:
    """Take away the log handler ``-v`` installed (the click context's ``meta``, shared with the command's)."""
    installed = meta.pop(VERBOSE, None)
    if installed is not None:
        handler, level = installed
        logging.root.removeHandler(handler)
        logging.root.setLevel(level)


VaultOpt = Annotated[
    Path | None,
    typer.Option(
        "--vault",
        metavar="DIR",
        envvar="VAULT_DIR",
        show_default=False,
        help=f"The vault folder (default: $VAULT_DIR, else the nearest folder holding a {CONFIG_FILE}, "
        "from here upwards).",
    ),
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        callback=set_verbose,
        expose_value=False,
        help="Show log lines (ours and the model libraries') and an error's traceback.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON (with its exit_code).")]
WaitOpt = Annotated[
    float,
    typer.Option(
        "--wait",
        metavar="SECONDS",
        min=0,
        help="If another vault command holds the vault lock, wait up to "
        "SECONDS for it (default 0: fail at once, naming the holder).",
    ),
]


# --------------------------------------------------------------------------- the vault and its models


def find_vault(given: Path | None) -> Path:
    """``--vault`` (or $VAULT_DIR), else the nearest folder holding a vault.toml from here upwards."""
    if given is not None:
        return given
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    raise ConfigError(
        f"{here}: no {CONFIG_FILE} here or in any folder above; pass --vault DIR, set VAULT_DIR, "
        "or make one with `vault init DIR`"
    )


def open_vault(vault_path: Path | None) -> tuple[Vault, Settings, CallLog]:
    """The vault, its settings (vault.toml and the environment) and its model call log."""
    from vault_pipeline.config import load_settings
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.vault.files import STATE_DIR, Vault

    vault = Vault.open(find_vault(vault_path))
    settings = load_settings(vault.root, os.environ)
    log_path = vault.root / STATE_DIR / "calls.jsonl" if settings.log_calls else None
    return vault, settings, CallLog(log_path, payloads=settings.log_payloads)


def model_options(settings: Settings) -> dict[str, Any]:
    """What every model backend takes from the settings: server, key, request timeout, output mode."""
    return {
        "api_base": settings.api_base,
        "api_key": settings.api_key,
        "timeout": settings.model_timeout,
        "output": settings.output,
    }


def build_llm(settings: Settings, model: str, log: CallLog) -> StructuredLLM:
    """The model backend for ``model`` (``offline`` or a LiteLLM model string), logging to ``log``."""
    from vault_pipeline.models.build import build_llm as build

    return build(model, log=log, **model_options(settings))


def build_gate(vault: Vault, settings: Settings, log: CallLog) -> StructuredLLM:
    """The fit-gate's backend: the offline one with the vault's fitted weights (``pipeline.gate_llm``);
    ``mcp-sampling`` outside ``vault mcp`` is the offline gate too (the caller says so)."""
    from vault_pipeline.pipeline import gate_llm

    return gate_llm(vault, settings.gate_model, log=log, **model_options(settings))


def build_embedder(settings: Settings) -> Embedder:
    """The embedder vault.toml names (MiniLM offline by default)."""
    from vault_pipeline.models.embed import build_embedder as build
    from vault_pipeline.models.litellm_backend import litellm_embed

    embed_fn = partial(litellm_embed, api_base=settings.api_base, api_key=settings.api_key)
    return build(settings.embed_model, embed_fn=embed_fn)


# --------------------------------------------------------------------------- rendering and exit codes


def table(title: str, rows: list[tuple[Any, ...]], headers: tuple[str, ...]) -> Table:
    """A titled table of ``rows`` (every cell shown as text)."""
    from rich.table import Table

    shown = Table(title=title, title_justify="left")
    for header in headers:
        shown.add_column(header, overflow="fold")
    for row in rows:
        shown.add_row(*(str(cell) for cell in row))
    return shown


def print_json(data: dict[str, Any], code: int, console: Console | None = None) -> None:
    """A report's ``to_dict()`` as JSON, with the command's ``exit_code`` as its last key."""
    (console or out).print_json(json.dumps({**data, "exit_code": code}, default=str))


def exit_for(problems: dict[str, int]) -> int:
    """EXIT_INCOMPLETE when any count of failed or skipped things is non-zero, else EXIT_OK."""
    return EXIT_INCOMPLETE if any(problems.values()) else EXIT_OK


def finish(problems: dict[str, int]) -> None:
    """End a command: on failures, a last line counting them and exit 1 (a cron job can tell)."""
    code = exit_for(problems)
    if code != EXIT_OK:
        counted = ", ".join(f"{n} {what}" for what, n in problems.items() if n)
        err.print(f"incomplete: {counted} (exit {code})", markup=False)
        raise typer.Exit(code)
