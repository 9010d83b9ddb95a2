"""``vault mcp`` and ``vault watch``: serve the vault to LLM clients, keep the index live."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from vault_pipeline.cli.common import VaultOpt, build_embedder, build_gate, build_llm, err, open_vault, out

if TYPE_CHECKING:
    from vault_pipeline.serve.tools import VaultTools
    from vault_pipeline.serve.watch import WatchEvent


def mcp(
    vault_path: VaultOpt = None,
    http: Annotated[
        int | None,
        typer.Option(
            "--http", metavar="PORT", min=1, max=65535, help="Serve streamable HTTP on 127.0.0.1:PORT, not stdio."
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch/--no-watch", help="Keep the index in sync with the files while serving.")
    ] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Log the watcher's syncs to stderr as JSON lines.")] = False,
) -> None:
    """Serve the vault to LLM clients over MCP: query, search, read_note, remember, status.

    Example: vault mcp --vault ~/notes  (stdio, as Claude Desktop and Claude Code start it)"""
    from vault_pipeline.serve.memory import bound_allocator

    bound_allocator()  # before the models' and the index's threads: a long-running server's RSS stays near flat
    from vault_pipeline.serve.mcp import serve

    serve(
        vault_tools(vault_path),
        port=http,
        watch=watch,
        listener=partial(print_event, json_out=json_out, console=err),
        on_ready=lambda line: err.print(line, markup=False),
    )


def watch(
    vault_path: VaultOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON line per sync.")] = False,
) -> None:
    """Keep the index in sync as notes are saved, moved or deleted (Ctrl-C stops).

    Example: vault watch --vault ~/notes"""
    from vault_pipeline.serve.memory import bound_allocator
    from vault_pipeline.serve.watch import Watcher

    bound_allocator()

    vault, settings, _ = open_vault(vault_path)
    watcher = Watcher(
        vault.root, build_embedder(settings), listener=partial(print_event, json_out=json_out, console=out)
    )
    err.print(f"watching {vault.root} (Ctrl-C stops)", markup=False)
    try:
        watcher.run()
    except KeyboardInterrupt:
        err.print("stopped", markup=False)


def vault_tools(vault_path: Path | None) -> VaultTools:
    """The MCP tools over the vault, with the models and the funnel its settings name."""
    from vault_pipeline.models.protocol import MCP_SAMPLING
    from vault_pipeline.retrieve.types import FunnelConfig
    from vault_pipeline.serve.tools import VaultTools

    vault, settings, log = open_vault(vault_path)
    embedder = build_embedder(settings)
    roles = {"gate": settings.gate_model, "extract": settings.extract_model}
    tools = VaultTools(
        vault.root,
        embedder=embedder,
        llm_extract=build_llm(settings, settings.extract_model, log),
        llm_plan=build_llm(settings, settings.extract_model, log),
        llm_gate=build_gate(vault, settings, log),
        config=FunnelConfig.from_settings(settings, embedder),
        sampling=frozenset(role for role, model in roles.items() if model == MCP_SAMPLING),
        call_log=log,
    )
    vault.close()
    return tools


def print_event(event: WatchEvent, *, json_out: bool, console: Console) -> None:
    """One watcher event: a JSON line, or a line of text (waiting and errors on stderr)."""
    if json_out:
        console.print(json.dumps(event.to_dict(), ensure_ascii=False), markup=False, highlight=False, soft_wrap=True)
    else:
        (console if event.kind == "synced" else err).print(event.line(), markup=False)
    console.file.flush()  # a line per sync as it happens, also into a pipe
