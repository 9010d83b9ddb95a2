"""The ``vault`` command: the composition root.

It reads settings and the environment, builds the models and the embedder, calls
one library function per command and renders the result with rich. Heavy
libraries (litellm, lancedb, onnxruntime) are imported only by the commands
that need them, so ``vault --help`` and ``vault status`` start fast.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from vault_pipeline.errors import VaultError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Chat archives in, atomic cited notes out, a precise context package back.",
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

VaultOpt = Annotated[
    Path,
    typer.Option(
        "--vault", "-v", envvar="VAULT_PATH", help="The vault folder (default: current folder or $VAULT_PATH)."
    ),
]
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
REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- building blocks


def _open(vault_path: Path):
    from vault_pipeline.config import load_settings
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.vault.files import STATE_DIR, Vault

    vault = Vault.open(vault_path)
    settings = load_settings(vault.root, os.environ)
    log_path = vault.root / STATE_DIR / "calls.jsonl" if settings.log_calls else None
    return vault, settings, CallLog(log_path, payloads=settings.log_payloads)


def _llm(settings, model: str, log):
    from vault_pipeline.models.build import build_llm

    return build_llm(model, api_base=settings.api_base, log=log)


def _embedder(settings):
    from vault_pipeline.models.embed import build_embedder
    from vault_pipeline.models.litellm_backend import litellm_embed

    return build_embedder(settings.embed_model, embed_fn=partial(litellm_embed, api_base=settings.api_base))


def _progress():
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),  # the ETA, where the total is known
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def _callback(progress, task):
    def update(done: int, total: int | None, label: str = "") -> None:
        progress.update(task, completed=done, total=total, description=(label or "")[:40])

    return update


def _table(title: str, rows: list[tuple], headers: tuple[str, ...]):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    return table


# --------------------------------------------------------------------------- commands


@app.command()
def init(path: Annotated[Path, typer.Argument(help="Folder to make a vault (an Obsidian vault works).")]) -> None:
    """Create the vault folders and <vault>/vault.toml (existing files are left alone)."""
    from vault_pipeline.vault.files import Vault

    vault = Vault.init(path)
    out.print(f"vault ready at {vault.root}")


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Export .zip/.json, folder, or transcript files.")],
    vault_path: VaultOpt = Path("."),
    model: Annotated[str | None, typer.Option(help="Extraction model (overrides vault.toml).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    wait: WaitOpt = 0,
) -> None:
    """Turn chat exports into atomic notes, session notes, topic hubs and thread maps."""
    from vault_pipeline.pipeline import ingest as run_ingest

    vault, settings, log = _open(vault_path)
    llm = _llm(settings, model or settings.extract_model, log)
    for path in paths:
        if not path.exists():
            raise VaultError(f"{path}: no such file or folder")
    with _progress() as progress:
        task = progress.add_task("ingest", total=None)
        report = run_ingest(vault, paths, llm, progress=_callback(progress, task), wait=wait)
    _print_ingest(report, llm.model, json_out)


def _print_ingest(report, model: str, json_out: bool) -> None:
    if json_out:
        out.print_json(json.dumps(_ingest_dict(report, model)))
        return
    for line in report.skipped + report.errors:
        err.print(f"skipped: {line}", markup=False)
    for line in report.refused:
        err.print(f"left untouched (edited since written): {line}", markup=False)
    rate = report.notes / report.seconds * 60 if report.seconds else 0.0
    rows = [
        ("conversations", report.conversations),
        ("messages", report.messages),
        ("abandoned-branch messages (not ingested)", report.alternates),
        ("atomic notes", report.notes),
        ("thread maps", report.threads),
        *((f"  {cat}", n) for cat, n in sorted(report.notes_by_category.items())),
        ("units skipped (not sayable in 15 words)", report.units_skipped),
        ("files created", report.writes["created"]),
        ("files updated", report.writes["updated"]),
        ("files unchanged", report.writes["unchanged"] + report.writes["moved-elsewhere"]),
        ("files refused (user-edited)", report.writes["refused"]),
        ("records skipped", len(report.skipped)),
        ("conversations failed", len(report.errors)),
        ("seconds", f"{report.seconds:.1f}"),
        ("notes per minute", f"{rate:,.0f}"),
        ("model", model),
    ]
    out.print(_table("ingest", rows, ("", "count")))


def _ingest_dict(report, model: str) -> dict:
    return {
        "conversations": report.conversations,
        "messages": report.messages,
        "alternates": report.alternates,
        "notes": report.notes,
        "notes_by_category": dict(sorted(report.notes_by_category.items())),
        "units_skipped": report.units_skipped,
        "threads": report.threads,
        "writes": dict(sorted(report.writes.items())),
        "files_written": report.files_written,
        "skipped": report.skipped,
        "errors": report.errors,
        "refused": report.refused,
        "seconds": round(report.seconds, 3),
        "model": model,
    }


@app.command()
def keep(
    notes: Annotated[list[str] | None, typer.Argument(help="Note ids, file stems or paths in inbox/.")] = None,
    vault_path: VaultOpt = Path("."),
    all_passing: Annotated[
        bool, typer.Option("--all-passing", help="Keep every inbox note that passes the Note Quality Gate.")
    ] = False,
    force: Annotated[bool, typer.Option(help="Keep named notes even if they fail the gate.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be kept and refused; write nothing.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print kept, refused and skipped as JSON.")] = False,
    wait: WaitOpt = 0,
) -> None:
    """Promote notes to engrams (also picks up notes flipped to `status: kept` in Obsidian).

    Each note the gate evaluates gets its verdict in its `quality` property."""
    from vault_pipeline.ingest.keep import keep as run_keep

    vault, _, _ = _open(vault_path)
    with _progress() as progress:
        task = progress.add_task("keep", total=None)
        report = run_keep(
            vault,
            targets=list(notes or []),
            all_passing=all_passing,
            force=force,
            dry_run=dry_run,
            wait=wait,
            progress=_callback(progress, task),
        )
    _print_keep(report, json_out, dry_run)


KEEP_SHOWN = 20  # refusals listed one by one; the rest are counted by reason (all of them with --json)


def _print_keep(report, json_out: bool, dry_run: bool) -> None:
    from collections import Counter

    if json_out:
        out.print_json(
            data={
                "kept": report.kept,
                "refused": [{"path": p, "reasons": r} for p, r in report.refused],
                "skipped": [{"path": p, "reason": r} for p, r in report.skipped],
                "dry_run": dry_run,
            }
        )
        return
    for path, problems in report.refused[:KEEP_SHOWN]:
        err.print(f"not kept: {path}: {'; '.join(problems)}", markup=False)
    if len(report.refused) > KEEP_SHOWN:
        tally = Counter(reason.split(":")[0] for _, problems in report.refused for reason in problems)
        err.print(f"... and {len(report.refused) - KEEP_SHOWN} more not kept (--json lists all); reasons:")
        for reason, count in tally.most_common():
            err.print(f"  {count:>6}  {reason}", markup=False)
    verb = "would keep" if dry_run else "kept"
    out.print(f"{verb} {len(report.kept)} note(s) into engrams/; refused {len(report.refused)}")


@app.command("index")
def index_cmd(
    vault_path: VaultOpt = Path("."),
    rebuild: Annotated[bool, typer.Option(help="Drop the index and embed everything again.")] = False,
    verify: Annotated[bool, typer.Option(help="Re-hash every file, not only changed ones.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    wait: WaitOpt = 0,
) -> None:
    """Embed new and changed notes into the LanceDB index (incremental; integrity-checked)."""
    from vault_pipeline.pipeline import index as run_index

    vault, settings, _ = _open(vault_path)
    embedder = _embedder(settings)
    with _progress() as progress:
        task = progress.add_task("index", total=None)
        report = run_index(
            vault, embedder, progress=_callback(progress, task), rebuild=rebuild, verify=verify, wait=wait
        )
    _print_index(report, json_out)


def _print_index(report, json_out: bool) -> None:
    from dataclasses import asdict

    if json_out:
        out.print_json(json.dumps(asdict(report), default=str))
        return
    for path, reason in report.skipped:
        err.print(f"skipped: {path}: {reason}", markup=False)
    for path, fault in report.repairs:
        err.print(f"repaired: {path}: {fault}", markup=False)
    if report.rebuilt:
        err.print(f"rebuilt the index: {report.rebuild_reason}", markup=False)
    rows = [
        ("note files scanned", report.scanned),
        ("unchanged", report.unchanged),
        ("added", report.added),
        ("changed", report.changed),
        ("moved", report.moved),
        ("removed", report.removed),
        ("repaired", report.repaired),
        ("notes re-embedded", report.embedded_notes),
        ("chunks embedded", report.embedded_chunks),
        ("skipped", len(report.skipped)),
        ("rows in index", report.rows),
        ("embedder", report.embedder),
        ("seconds", f"{report.seconds:.2f}"),
    ]
    out.print(_table("index", rows, ("", "count")))


@app.command("query")
def query_cmd(
    text: Annotated[str | None, typer.Argument(help="The prompt to build context for.")] = None,
    vault_path: VaultOpt = Path("."),
    intent: Annotated[str | None, typer.Option(help="The subject domain the gate judges against.")] = None,
    budget: Annotated[int | None, typer.Option(help="Token budget of the package.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the package as JSON.")] = False,
    explain: Annotated[bool, typer.Option(help="Show every candidate's path through the funnel.")] = False,
    batch: Annotated[
        Path | None, typer.Option(help='JSONL file of {"query", "intent"?}; one package per line.')
    ] = None,
    no_gate: Annotated[bool, typer.Option("--no-gate", help="Skip the fit-gate (recall-only path).")] = False,
    no_variants: Annotated[bool, typer.Option("--no-variants", help="Skip multi-query decomposition.")] = False,
    floor: Annotated[float | None, typer.Option(help="Similarity floor.")] = None,
    wide: Annotated[int | None, typer.Option(help="Candidates retrieved before the floor and gate.")] = None,
) -> None:
    """Build a small, precise, cited context package for a prompt."""
    from vault_pipeline.pipeline import query as run_query
    from vault_pipeline.retrieve.types import FunnelConfig

    queries = _batch_queries(batch) if batch else [(text or "", intent)]
    if not batch and not (text or "").strip():
        raise VaultError("give a query, or --batch FILE")
    vault, settings, log = _open(vault_path)
    overrides = {k: v for k, v in {"budget": budget, "floor": floor, "wide": wide}.items() if v is not None}
    if no_gate:
        overrides["gate"] = False
    if no_variants:
        overrides["variants"] = False
    embedder = _embedder(settings)  # its calibration gives the floor unless vault.toml sets one
    config = FunnelConfig.from_settings(settings, embedder, **overrides)
    packages = run_query(
        vault,
        queries,
        embedder=embedder,
        llm_plan=_llm(settings, settings.extract_model, log),
        llm_gate=_llm(settings, settings.gate_model, log),
        config=config,
    )
    for package in packages:
        _print_package(package, json_out=json_out, explain=explain, one_line=batch is not None)


def _batch_queries(path: Path) -> list[tuple[str, str | None]]:
    if not path.is_file():
        raise VaultError(f"{path}: no such file")
    queries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            queries.append((str(item["query"]), item.get("intent")))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise VaultError(f'{path} [line {number}]: not a {{"query", "intent"?}} object ({exc})') from None
    return queries


def _print_package(package, *, json_out: bool, explain: bool, one_line: bool = False) -> None:
    if explain:
        err.print(_trace_table(package))
    if json_out:
        sys.stdout.write(package.to_json(indent=None if one_line else 2))
        sys.stdout.flush()
    else:
        out.print(package.to_markdown(), markup=False)


def _shown(value) -> str:
    """A trace figure for the table: three decimals, the integer as is, "-" when the stage gave none."""
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _trace_table(package):
    rows = [
        (
            _shown(t.get("rank")),
            t.get("path", ""),
            ",".join(t.get("lanes", [])),
            _shown(t.get("similarity")),
            t.get("floor") or "-",
            t.get("gate", ""),
            (t.get("reason") or "")[:70],
            _shown(t.get("score")),
        )
        for t in package.to_dict()["trace"]
    ]
    return _table(
        f"funnel trace: {package.query}  (intent: {package.intent})",
        rows,
        ("rank", "note", "lanes", "sim", "floor", "gate", "reason", "score"),
    )


@app.command()
def status(
    vault_path: VaultOpt = Path("."),
    lint: Annotated[bool, typer.Option(help="List heading levels with more than four bullets.")] = False,
) -> None:
    """Notes per folder, tier, status and category; index freshness; which models are remote."""
    from vault_pipeline.models.litellm_backend import is_remote
    from vault_pipeline.pipeline import status as run_status

    vault, settings, _ = _open(vault_path)
    result = run_status(vault, lint=lint)
    out.print(_table(f"vault {vault.root}", sorted(result.folders.items()), ("folder", "notes")))
    if result.index is None:
        out.print("index: none yet (run `vault index`)")
    else:
        idx = result.index
        rows = [
            ("notes indexed", idx["notes"]),
            ("chunks", idx["rows"]),
            ("last sync", idx["last_sync"]),
            ("embedder", f"{idx['embedder']} ({idx['dim']}-d)"),
            ("waiting to index", ", ".join(f"{k} {v}" for k, v in result.pending.items())),
            *((f"tier {k}", v) for k, v in sorted(idx["tiers"].items())),
            *((f"status {k}", v) for k, v in sorted(idx["statuses"].items())),
            *((f"category {k}", v) for k, v in sorted(idx["categories"].items())),
        ]
        out.print(_table("index", rows, ("", "")))
    models = [
        (role, model, "remote" if is_remote(model, settings.api_base) and model != "minilm" else "local")
        for role, model in (
            ("extract", settings.extract_model),
            ("gate", settings.gate_model),
            ("embed", settings.embed_model),
        )
    ]
    out.print(_table("models", models, ("role", "model", "where")))
    for relpath, heading, bullets in result.lint:
        out.print(f"lint: {relpath}: '{heading}' has {bullets} bullets (more than four: split the idea)", markup=False)


@app.command("clean")
def clean_cmd(
    vault_path: VaultOpt = Path("."),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan (or report) as JSON.")] = False,
    undo: Annotated[str | None, typer.Option(help="Restore exactly what run RUN changed.")] = None,
    wait: WaitOpt = 0,
) -> None:
    """The nightly sweep: collapse duplicates, supersede contradictions, link related notes; nothing deleted."""
    from vault_pipeline import pipeline

    vault, settings, log = _open(vault_path)
    embedder = _embedder(settings)
    if undo:
        report = pipeline.undo_clean(vault, undo, embedder=embedder, wait=wait)
        for line in report.skipped:
            err.print(f"left alone: {line}", markup=False)
        out.print(f"undid run {report.undone}: restored {report.restored} file(s) (journaled as {report.run_id})")
        return
    llm = _llm(settings, settings.extract_model, log)
    with _progress() as progress:
        task = progress.add_task("clean", total=None)
        if dry_run:
            plan = pipeline.plan_clean(vault, embedder=embedder, llm=llm, progress=_callback(progress, task), wait=wait)
        else:
            report = pipeline.clean(vault, embedder=embedder, llm=llm, progress=_callback(progress, task), wait=wait)
    if dry_run:
        _print_plan(plan, json_out)
    elif json_out:
        out.print_json(
            json.dumps(
                {
                    "run_id": report.run_id,
                    "counts": dict(report.counts),
                    "skipped": report.skipped,
                    "files": report.files,
                }
            )
        )
    else:
        _print_clean_report(report)


def _print_plan(plan, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(json.dumps(plan.to_json(), ensure_ascii=False, indent=1) + "\n")
        return
    for line in plan.skipped:
        err.print(f"skipped: {line}", markup=False)
    rows = [(a.action, ", ".join(a.notes), a.reason) for a in plan.actions]
    out.print(
        _table(
            f"clean plan: {len(plan.actions)} action(s) from {plan.candidates} candidate pair(s) "
            f"over {plan.notes} notes",
            rows,
            ("action", "notes", "reason"),
        )
    )


def _print_clean_report(report) -> None:
    for line in report.skipped:
        err.print(f"skipped: {line}", markup=False)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items())) or "nothing to do"
    out.print(
        f"clean: {counts}; {report.files} file(s) changed; run {report.run_id or '-'} "
        f"(undo: vault clean --undo {report.run_id})"
        if report.run_id
        else f"clean: {counts}"
    )


@app.command("check")
def check_cmd(
    vault_path: VaultOpt = Path("."),
    fix: Annotated[
        bool, typer.Option(help="Remove stale temp files and re-sync the index; never edits a note.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Find broken frontmatter, dangling links and block links, duplicate ids, stale index rows, temp files."""
    from dataclasses import asdict

    from vault_pipeline.index.check import check

    vault, settings, _ = _open(vault_path)
    report = check(vault, embedder=_embedder(settings) if fix else None, fix=fix)
    if json_out:
        out.print_json(json.dumps({**asdict(report), "problems": report.problems}))
    else:
        lines = [
            *(f"invalid frontmatter: {p}: {why}" for p, why in report.invalid),
            *(f"dangling link: {p} -> [[{t}]]" for p, t in report.dangling_links),
            *(f"dangling block link: {p} -> [[{t}]]" for p, t in report.dangling_blocks),
            *(f"dangling heading link: {p} -> [[{t}]]" for p, t in report.dangling_headings),
            *(f"duplicate id {i}: {', '.join(ps)}" for i, ps in report.duplicate_ids.items()),
            *(f"index: {p}: {why}" for p, why in report.index_mismatches),
            *(f"temp file left by an interrupted write: {p}" for p in report.temp_files),
            *(f"fixed: {line}" for line in report.fixed),
        ]
        for line in lines:
            out.print(line, markup=False)
        out.print(f"checked {report.notes} notes: {report.problems} problem(s)")
    if report.problems and not fix:
        raise typer.Exit(code=2)


@app.command()
def demo(
    out_dir: Annotated[Path, typer.Option("--out", help="Where to build the demo vault.")] = Path("vault-demo"),
    example: Annotated[Path, typer.Option(help="The example folder.")] = REPO / "vault_example",
) -> None:
    """The main job, offline: copy vault_example/vault, ingest its exports, clean, index, answer its queries."""
    import shutil

    from vault_pipeline import pipeline

    if not (example / "exports").is_dir() or not (example / "vault").is_dir():
        raise VaultError(f"{example}: not an example folder (needs exports/ and vault/); pass --example")
    if not out_dir.exists():
        shutil.copytree(example / "vault", out_dir)
        out.print(f"copied {example / 'vault'} to {out_dir}")
    vault, settings, log = _open(out_dir)
    before = _snapshot(vault.root)
    exports = sorted(p for p in (example / "exports").iterdir() if not p.name.startswith("."))
    out.rule("1. ingest the example exports")
    _print_ingest(
        pipeline.ingest(vault, exports, _llm(settings, settings.extract_model, log)), settings.extract_model, False
    )
    embedder = _embedder(settings)
    out.rule("2. index")
    with _progress() as progress:
        task = progress.add_task("index", total=None)
        _print_index(pipeline.index(vault, embedder, progress=_callback(progress, task)), False)
    _demo_clean(vault, settings, log, embedder)
    out.rule("4. context packages")
    _demo_queries(vault, settings, log, embedder, example / "queries.jsonl")
    out.print(f"demo vault: {vault.root} (open it in Obsidian); {_written(before, _snapshot(vault.root))}")


# A sweep that archives notes frees their places in other notes' candidate lists (each note keeps
# its few best pairs), so pairs it never saw can come up in the next sweep; the demo sweeps again
# until a sweep changes nothing, which is what makes a second demo run write nothing.
DEMO_CLEAN_ROUNDS = 5


def _demo_clean(vault, settings, log, embedder) -> None:
    from vault_pipeline import pipeline

    out.rule("3. nightly clean (duplicates, supersession) and re-index")
    llm = _llm(settings, settings.extract_model, log)
    for _ in range(DEMO_CLEAN_ROUNDS):
        report = pipeline.clean(vault, embedder=embedder, llm=llm)
        _print_clean_report(report)
        if not report.files:
            break
    else:
        err.print(f"the clean still changed files after {DEMO_CLEAN_ROUNDS} sweeps; the next run goes on")
    pipeline.index(vault, embedder)


def _snapshot(root: Path) -> dict[str, str]:
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


def _written(before: dict[str, str], after: dict[str, str]) -> str:
    """What a run did to the vault's files, from two snapshots: "N files written[, M removed]"."""
    written = sum(1 for path, sha in after.items() if before.get(path) != sha)  # created or changed
    removed = sum(1 for path in before if path not in after)  # an archived note moved elsewhere
    text = f"{written} file{'' if written == 1 else 's'} written"
    return f"{text}, {removed} moved away or removed" if removed else text


def _demo_queries(vault, settings, log, embedder, path: Path) -> None:
    from vault_pipeline.pipeline import query as run_query
    from vault_pipeline.retrieve.types import FunnelConfig

    queries = _batch_queries(path) if path.is_file() else [("Can we talk about peer review for our paper?", None)]
    packages = run_query(
        vault,
        queries,
        embedder=embedder,
        llm_plan=_llm(settings, settings.extract_model, log),
        llm_gate=_llm(settings, settings.gate_model, log),
        config=FunnelConfig.from_settings(settings, embedder),
    )
    for package in packages:
        stats = package.to_dict()["stats"]
        out.print(package.to_markdown(), markup=False)
        out.print(
            f"[candidates {stats.get('candidates')}, after floor {stats.get('after_floor')}, "
            f"gate kept {stats.get('gate_kept')} dropped {stats.get('gate_dropped')}, "
            f"{package.tokens} tokens]\n",
            markup=False,
        )


@app.command("gate-calibrate")
def gate_calibrate(
    labels: Annotated[Path, typer.Argument(help="Labels JSONL (see vault_example/calibration/README.md).")],
    vault_path: Annotated[
        Path | None,
        typer.Option("--vault", "-v", help="Take the gate model and embedder from this vault's vault.toml."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON line.")] = False,
) -> None:
    """Measure the fit-gate at two intent altitudes and sweep the similarity floor on labelled candidates."""
    from vault_pipeline.config import load_settings
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.retrieve.calibrate import calibrate, load_labels
    from vault_pipeline.retrieve.types import FunnelConfig

    items = load_labels(labels)
    if vault_path is not None:
        _, settings, log = _open(vault_path)
    else:
        settings, log = load_settings(None, os.environ), CallLog(None)
    embedder = _embedder(settings)
    report = calibrate(
        items,
        llm=_llm(settings, settings.gate_model, log),
        embedder=embedder,
        config=FunnelConfig.from_settings(settings, embedder),
    )
    if json_out:
        sys.stdout.write(report.to_json() + "\n")
        return
    if report.offline:
        out.print("offline baseline gate: real calibration needs a configured model", markup=False)
    _print_calibration(
        report, "set in vault.toml or VAULT_FLOOR" if settings.floor is not None else "the embedder's calibration"
    )


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def _print_calibration(report, floor_source: str) -> None:
    quality = [
        (
            s.altitude,
            s.candidates,
            _pct(s.keep_rate),
            _pct(s.precision),
            _pct(s.recall),
            f"{s.contaminants_kept}/{s.contaminants}",
            s.fail_open,
        )
        for s in report.altitudes
    ]
    out.print(
        _table(
            f"fit-gate ({report.model}) on {len(report.candidates)} labelled candidates",
            quality,
            ("altitude", "n", "keep rate", "precision", "recall", "contam. kept", "fail-open"),
        )
    )
    cost = [
        (
            s.altitude,
            s.queries,
            f"{s.calls / max(1, s.queries):.1f}",
            "-" if s.tokens is None else f"{s.tokens / max(1, s.queries):,.0f}",
            f"{1000 * s.seconds / max(1, s.queries):.0f}",
        )
        for s in report.altitudes
    ]
    out.print(_table("gate cost per query", cost, ("altitude", "queries", "calls", "tokens", "latency ms")))
    sweep = [(f"{p.floor:.2f}", _pct(p.recall), _pct(p.off_topic_pass), _pct(p.contaminant_pass)) for p in report.sweep]
    out.print(
        _table(
            f"similarity floor sweep ({report.embedder})",
            sweep,
            ("floor", "relevant passing (recall)", "off-topic passing", "contaminants passing"),
        )
    )
    out.print(
        "precision = relevant kept / kept; recall = relevant kept / relevant; fail-open counts as kept", markup=False
    )
    verdict = "" if report.floor_meets_target else " (no swept floor reaches the target: lowest swept floor)"
    exact = "" if report.floor_at_target is None else f"; exact cosine at target: {report.floor_at_target:.3f}"
    out.print(f"suggested floor for {report.embedder}: {report.suggested_floor:.2f}{verdict}{exact}", markup=False)
    out.print(f"floor in use: {report.current_floor:.2f} ({floor_source})", markup=False)
    out.print(f"rule: {report.floor_rule}", markup=False)


def main() -> None:
    """Console entry point: map the project's errors to a one-line message and exit 1."""
    # A command builds ~100k small objects per 100k notes (manifest rows, stats, paths) and
    # creates no cycles worth chasing; at the default thresholds the collector re-scanned every
    # long-lived object (LanceDB's thousands of classes) over and over: 0.16 s of a 2.2 s
    # one-note `vault index` at 102k notes.
    gc.set_threshold(100_000, 50, 100)
    try:
        app()
    except VaultError as exc:
        err.print(f"error: {exc}", markup=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        sys.exit(130)


if __name__ == "__main__":
    main()
