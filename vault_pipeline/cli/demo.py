"""``vault demo``: the main job, offline, on the example vault (ingest, index, clean, query).

With ``--json`` every stage's tables and packages go to stderr and stdout carries one summary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from vault_pipeline.cli import ingest as ingest_cmd
from vault_pipeline.cli.clean import print_clean_report
from vault_pipeline.cli.common import (
    REPO,
    UsageError,
    VerboseOpt,
    build_embedder,
    build_gate,
    build_llm,
    err,
    exit_for,
    finish,
    open_vault,
    out,
    print_json,
)
from vault_pipeline.cli.index import print_index
from vault_pipeline.cli.progress import progress
from vault_pipeline.cli.query import batch_queries

if TYPE_CHECKING:
    from vault_pipeline.config import Settings
    from vault_pipeline.index.sync import IndexReport
    from vault_pipeline.ingest.write import IngestReport
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.models.embed import Embedder
    from vault_pipeline.vault.files import Vault

# A sweep that archives notes frees their places in other notes' candidate lists (each note keeps
# its few best pairs), so pairs it never saw can come up in the next sweep; the demo sweeps again
# until a sweep changes nothing, which is what makes a second demo run write nothing.
DEMO_CLEAN_ROUNDS = 5
DEFAULT_QUERY = "Can we talk about peer review for our paper?"


@dataclass
class DemoReport:
    """What a demo run did: the vault it built, the ingest and index reports, the files it wrote."""

    vault: str
    ingest: IngestReport
    index: IndexReport
    written: str

    def to_dict(self) -> dict[str, Any]:
        """The summary ``vault demo --json`` prints (the ingest's exit code inside, the CLI adds the run's)."""
        return {
            "vault": self.vault,
            "ingest": {**self.ingest.to_dict(), "exit_code": exit_for(ingest_cmd.problems(self.ingest))},
            "index": self.index.to_dict(),
            "written": self.written,
        }


def demo(
    out_dir: Annotated[Path, typer.Option("--out", metavar="DIR", help="Where to build the demo vault.")] = Path(
        "vault-demo"
    ),
    example: Annotated[Path, typer.Option(metavar="DIR", help="The example folder.")] = REPO / "vault_example",
    json_out: Annotated[
        bool, typer.Option("--json", help="Print a JSON summary on stdout (the stages' output goes to stderr).")
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """The main job, offline: copy vault_example/vault, ingest its exports, clean, index, answer its queries.

    \b
    Example:  vault demo --out /tmp/vault-demo"""
    if not (example / "exports").is_dir() or not (example / "vault").is_dir():
        raise UsageError(f"{example}: not an example folder (needs exports/ and vault/); pass --example")
    report = run_demo(out_dir, example, err if json_out else out)
    found = ingest_cmd.problems(report.ingest)
    if json_out:
        print_json(report.to_dict(), exit_for(found))
    finish(found)


def run_demo(out_dir: Path, example: Path, console: Console) -> DemoReport:
    """Build the demo vault in ``out_dir`` from ``example``, printing every stage on ``console``."""
    import shutil

    from vault_pipeline import pipeline

    if not out_dir.exists():
        shutil.copytree(example / "vault", out_dir)
        console.print(f"copied {example / 'vault'} to {out_dir}")
    vault, settings, log = open_vault(out_dir)
    before = snapshot(vault.root)
    exports = sorted(p for p in (example / "exports").iterdir() if not p.name.startswith("."))
    console.rule("1. ingest the example exports")
    ingested = pipeline.ingest(
        vault, exports, build_llm(settings, settings.extract_model, log), selector=ingest_cmd.selector_of(settings)
    )
    ingest_cmd.print_ingest(ingested, console)
    embedder = build_embedder(settings)
    console.rule("2. index")
    with progress("index", "rows") as advance:
        indexed = pipeline.index(vault, embedder, progress=advance)
    print_index(indexed, console)
    _clean(vault, settings, log, embedder, console)
    console.rule("4. context packages")
    _queries(vault, settings, log, embedder, example / "queries.jsonl", console)
    written = files_written(before, snapshot(vault.root))
    console.print(f"demo vault: {vault.root} (open it in Obsidian); {written}")
    return DemoReport(str(vault.root), ingested, indexed, written)


def _clean(vault: Vault, settings: Settings, log: CallLog, embedder: Embedder, console: Console) -> None:
    from vault_pipeline import pipeline

    console.rule("3. nightly clean (duplicates, supersession) and re-index")
    llm = build_llm(settings, settings.extract_model, log)
    for _ in range(DEMO_CLEAN_ROUNDS):
        report = pipeline.clean(vault, embedder=embedder, llm=llm)
        print_clean_report(report, console)
        if not report.files:
            break
    else:
        err.print(f"the clean still changed files after {DEMO_CLEAN_ROUNDS} sweeps; the next run goes on")
    pipeline.index(vault, embedder)


def _queries(vault: Vault, settings: Settings, log: CallLog, embedder: Embedder, path: Path, console: Console) -> None:
    from vault_pipeline import pipeline
    from vault_pipeline.retrieve.types import FunnelConfig

    queries = batch_queries(path)[0] if path.is_file() else [(DEFAULT_QUERY, None)]
    packages = pipeline.query(
        vault,
        queries,
        embedder=embedder,
        llm_plan=build_llm(settings, settings.extract_model, log),
        llm_gate=build_gate(vault, settings, log),
        config=FunnelConfig.from_settings(settings, embedder),
    )
    for package in packages:
        stats = package.to_dict()["stats"]
        console.print(package.to_markdown(), markup=False)
        console.print(
            f"[candidates {stats.get('candidates')}, after floor {stats.get('after_floor')}, "
            f"gate kept {stats.get('gate_kept')} dropped {stats.get('gate_dropped')}, "
            f"{package.tokens} tokens]\n",
            markup=False,
        )


def snapshot(root: Path) -> dict[str, str]:
    """Every file a user sees in the vault (the pipeline's own state folder left out): path -> sha256."""
    import hashlib

    from vault_pipeline.vault.files import STATE_DIR

    found = {}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        if here == root:
            dirs[:] = [d for d in dirs if d != STATE_DIR]
        for name in files:
            path = here / name
            found[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def files_written(before: dict[str, str], after: dict[str, str]) -> str:
    """What a run did to the vault's files, from two snapshots: "N files written[, M removed]"."""
    written = sum(1 for path, sha in after.items() if before.get(path) != sha)  # created or changed
    removed = sum(1 for path in before if path not in after)  # an archived note moved elsewhere
    text = f"{written} file{'' if written == 1 else 's'} written"
    return f"{text}, {removed} moved away or removed" if removed else text
