"""The ``vault`` Typer app: readable help, one line per project error, and every command registered.

Each command lives in its own module of this package; this one only decides how help reads and
how a ``VaultError`` ends a command (one line on stderr and its exit code, the traceback with -v).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

from vault_pipeline.cli import calibrate, check, clean, demo, index, ingest, init, keep, query, serve, status
from vault_pipeline.cli.common import VERBOSE, err, exit_code, unset_verbose
from vault_pipeline.errors import VaultError, storage_fault

if TYPE_CHECKING:
    from typer import _click


def _argument_name(param: _click.Parameter) -> str:
    """An argument as a shell user reads it: ``EXPORT...``, ``QUERY``."""
    name = param.metavar or (param.name or "").upper()
    return name if param.nargs == 1 or name.endswith("...") else f"{name}..."


class _Command(TyperCommand):
    """Usage lines and argument names without typer's type labels: ``vault ingest [OPTIONS] EXPORT...``."""

    def collect_usage_pieces(self, ctx: _click.Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"argument": [], "option": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.param_type_name in sections:
                name = _argument_name(param) if param.param_type_name == "argument" else record[0]
                sections[param.param_type_name].append((name, record[1]))
        for title, kind in (("Arguments", "argument"), ("Options", "option")):
            if sections[kind]:
                with formatter.section(title):
                    formatter.write_dl(sections[kind])


class _Group(TyperGroup):
    """Every command gets readable usage lines; a VaultError becomes one line and its exit code."""

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if type(command) is TyperCommand:
            command.__class__ = _Command  # a subclass adding no state: only how help is written
        return command

    def invoke(self, ctx: _click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except VaultError as exc:
            if ctx.meta.get(VERBOSE):
                err.print_exception()
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(exit_code(exc)) from None
        except Exception as exc:
            fault = storage_fault(exc)  # a full disk, a read-only file, a vanished folder: one line, exit 1
            if fault is None:
                raise
            if ctx.meta.get(VERBOSE):
                err.print_exception()
            err.print(f"error: {fault}", markup=False)
            raise typer.Exit(1) from None
        finally:
            unset_verbose(ctx.meta)


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Chat archives in, atomic cited notes out, a precise context package back.\n\n"
    "Exit codes: 0 done; 1 some records, conversations or notes failed or were skipped (counted in the "
    "last line); 2 usage or configuration error.",
)

# In the order `vault --help` lists them: the flow first, then the tools around it.
app.command("init")(init.init)
app.command("ingest")(ingest.ingest)
app.command("keep")(keep.keep)
app.command("index")(index.index)
app.command("query")(query.query)
app.command("status")(status.status)
app.command("clean")(clean.clean)
app.command("check")(check.check)
app.command("demo")(demo.demo)
app.command("gate-calibrate")(calibrate.gate_calibrate)
app.command("mcp")(serve.mcp)
app.command("watch")(serve.watch)
