"""``vault init``: make a folder a vault."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vault_pipeline.cli.common import EXIT_OK, JsonOpt, VerboseOpt, out, print_json


def init(
    path: Annotated[Path, typer.Argument(metavar="DIR", help="Folder to make a vault (an Obsidian vault works).")],
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Create the vault folders and <vault>/vault.toml (existing files are left alone).

    \b
    Example:  vault init ~/notes"""
    from vault_pipeline.vault.files import Vault

    vault = Vault.init(path)
    if json_out:
        print_json({"vault": str(vault.root)}, EXIT_OK)
    else:
        out.print(f"vault ready at {vault.root}")
