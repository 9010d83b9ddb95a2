"""First-index speed: `vault index` of a vault against the embedder alone on the same texts, and
against an older build, in one run.

    python benchmarks/bench_index.py --vault /tmp/export-vault                # a vault ingested already
    python benchmarks/bench_index.py --export ../shared/data/exports/chatgpt-pkuppens-2023.json \\
        --base /tmp/base                                                       # ingest first; compare
    python benchmarks/bench_index.py --vault V --base /tmp/base --base-first   # the old build runs first
    python benchmarks/bench_index.py --vault V --base /tmp/base --side-by-side # all three at once

The vault's notes are copied twice into fresh folders without any index state (no table, manifest
or embedding store): a first index, as a user meets it. Each `vault index` runs as a fresh process
(wall time and peak RSS its own); ``--base`` names a checkout of another build (``git worktree add
/tmp/base a839779``), run with its own ``PYTHONPATH``. Then the embedder alone embeds every row's
text of the new index (all rows, duplicates too: what the index had to produce) in length-sorted
calls of the size the index uses, in this process, warm. Last, `vault index --rebuild` of the new
copy shows what the embedding store saves on a re-index. Printed: rows, seconds, rows/s for each,
the index's share of the embedder's rate, the speed-up over the base build, and what each build
has to embed (rows, distinct texts, tokens): the speed-up the tokens allow.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_scale import run  # noqa: E402

STATE = ".vault_pipeline"
TARGET_SHARE = 0.90
TARGET_SPEEDUP = 2.0


def fresh_copy(vault: Path, where: Path) -> Path:
    """The vault's notes and settings, without index state (a first index)."""
    shutil.copytree(vault, where, ignore=shutil.ignore_patterns(STATE))
    return where


# `python -m` puts the working folder before PYTHONPATH, so a child started from this checkout ran
# this checkout's code whatever build it was given: the child puts its build first itself and
# refuses to run another one's.
CHILD_CLI = (
    "import runpy, sys; build = sys.argv.pop(1); sys.path.insert(0, build); import vault_pipeline; "
    "from pathlib import Path; here = Path(vault_pipeline.__file__).resolve().parent.parent; "
    "sys.exit(f'vault_pipeline imported from {here}, not {build}') if here != Path(build).resolve() else None; "
    "runpy.run_module('vault_pipeline.cli', run_name='__main__', alter_sys=True)"
)


def index_run(root: Path, build: Path, *extra: str) -> dict:
    """`vault index` of ``root`` by the checkout ``build``, as a fresh process."""
    # The child's own environment: threads of a side-by-side run must not share os.environ.
    env = {**os.environ, "PYTHONPATH": str(build)}
    command = [sys.executable, "-c", CHILD_CLI, str(build), "index", "--vault", str(root), "--json", *extra]
    done = run(command, env=env)
    report = json.loads(done["stdout"])
    figures = {
        "seconds": done["seconds"],
        # CPU seconds (user + system, every thread): on a loaded machine, where wall seconds follow
        # whatever else runs and a side-by-side run's survivor gets the cores the other freed.
        "cpu_seconds": done["cpu"],
        "peak_mib": done["peak_mib"],
        "rows": report["rows"],
        "embedded": report["embedded_chunks"],
        "embed_seconds": report.get("embed_seconds", 0.0),
        "per_second": report["rows"] / done["seconds"],
        "load": os.getloadavg()[0],
    }
    print(f"vault index of {root.name} by {build}: {json.dumps(figures)}", flush=True)  # as each run ends
    return figures


def row_texts(root: Path) -> list[str]:
    """The text embedded for every row a first index of ``root`` writes (its chunks and statement
    rows, parsed the way the sync parses them): the texts the index has to produce vectors for."""
    from vault_pipeline.index.chunk import chunks_for_note
    from vault_pipeline.index.statements import statement_chunks
    from vault_pipeline.index.sync import user_note_id
    from vault_pipeline.vault.files import Vault
    from vault_pipeline.vault.frontmatter import split_frontmatter

    texts = []
    for relpath in Vault(root).iter_note_paths():
        frontmatter, body = split_frontmatter((root / relpath).read_text(encoding="utf-8"), relpath)
        note_id = str(frontmatter.get("id") or "").strip() or user_note_id(relpath)
        chunks = chunks_for_note(note_id, body)
        chunks += statement_chunks(note_id, relpath, frontmatter, body, len(chunks))
        # What the build embeds for each row: a build without ``embedded_text`` embeds the row's text.
        texts += [getattr(c, "embedded_text", c.text) for c in chunks]
    return texts


def text_counts(root: Path) -> dict:
    """What a first index of ``root`` by the build imported here has to embed: rows, distinct
    texts and their tokens (MiniLM's, cut at its 256-token cap), for every row and once a text.
    The embedder's time follows the tokens, so the tokens of two builds bound the speed-up."""
    from vault_pipeline.models.embed import MiniLMEmbedder

    texts = row_texts(root)
    embedder = MiniLMEmbedder()
    embedder.load()
    tokens = dict(zip(texts, (len(e.ids) for e in embedder._tokenizer.encode_batch(texts))))
    every = sum(tokens[t] for t in texts)
    return {"rows": len(texts), "distinct": len(tokens), "tokens": every, "distinct_tokens": sum(tokens.values())}


def counts_by(build: Path, root: Path) -> dict:
    """``text_counts`` by the checkout ``build``, as a child process (its own ``vault_pipeline``
    imported first, so this file's own path insertions do not win)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import vault_pipeline; sys.path.insert(0, sys.argv[2]); "
        "import json, pathlib, bench_index; print(json.dumps(bench_index.text_counts(pathlib.Path(sys.argv[3]))))"
    )
    env = {**os.environ, "PYTHONPATH": str(build)}
    done = run([sys.executable, "-c", code, str(build), str(REPO / "benchmarks"), str(root)], env=env)
    return json.loads(done["stdout"].splitlines()[-1])


def embedder_alone(root: Path) -> dict:
    """The offline embedder on every row's text of ``root`` (duplicates too), called like the
    index calls it: length-sorted calls of ``EMBED_CALL`` texts, warm. Parsing is not timed."""
    from vault_pipeline.index.sync import EMBED_CALL
    from vault_pipeline.models.embed import MiniLMEmbedder

    texts = row_texts(root)
    embedder = MiniLMEmbedder()
    embedder.embed(["warm up the session"])
    ordered = sorted(texts, key=len)
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(ordered), EMBED_CALL):
        embedder.embed(ordered[start : start + EMBED_CALL])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "texts": len(texts),
        "distinct": len(set(texts)),
        "seconds": seconds,
        "cpu_seconds": cpu,
        "per_second": len(texts) / seconds,
    }


def side_by_side(vault: Path, work: Path, base: Path | None) -> tuple[dict[str, dict], dict]:
    """The new build's index, the base build's and the embedder alone, started at once (three
    processes): on a shared, loaded machine each meets the same load, where one after another
    each would meet whatever the other users ran then."""
    from concurrent.futures import ThreadPoolExecutor

    copies = {name: fresh_copy(vault, work / name) for name in ("new", "base") if name == "new" or base}
    with ThreadPoolExecutor(max_workers=3) as pool:
        alone = pool.submit(run, [sys.executable, str(Path(__file__).resolve()), "--embed-alone", str(copies["new"])])
        futures = {name: pool.submit(index_run, root, REPO if name == "new" else base) for name, root in copies.items()}
        runs = {name: f.result() for name, f in futures.items()}
        measured = json.loads(alone.result()["stdout"].splitlines()[-1])
    return runs, measured


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.embed_alone:
        print(json.dumps(embedder_alone(args.embed_alone)))
        return 0
    from vault_pipeline.models.threads import one_blas_thread

    one_blas_thread()
    work = Path(tempfile.mkdtemp(prefix="bench-index-"))
    vault = args.vault
    if vault is None:
        vault = work / "ingested"
        run([sys.executable, "-m", "vault_pipeline.cli", "init", str(vault)])
        run([sys.executable, "-m", "vault_pipeline.cli", "ingest", str(args.export), "--vault", str(vault), "--json"])
    if args.side_by_side:
        runs, alone = side_by_side(vault, work, args.base)
    else:
        runs = {}
        order = ["base", "new"] if args.base_first else ["new", "base"]
        for name in order:
            if name == "base" and args.base is None:
                continue
            build = REPO if name == "new" else args.base
            runs[name] = index_run(fresh_copy(vault, work / name), build)
            print(f"{name}: {json.dumps(runs[name])}", flush=True)
        alone = embedder_alone(work / "new")
    print(f"embedder alone: {json.dumps(alone)}", flush=True)
    again = index_run(work / "new", REPO, "--rebuild")
    print(f"rebuild: {json.dumps(again)}", flush=True)
    counts = {name: counts_by(REPO if name == "new" else args.base, vault) for name in runs}
    print(f"texts to embed: {json.dumps(counts)}", flush=True)
    _print(vault, runs, alone, again, counts)
    if args.json:
        figures = {"runs": runs, "alone": alone, "rebuild": again, "texts": counts}
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _print(vault: Path, runs: dict[str, dict], alone: dict, again: dict, counts: dict[str, dict]) -> None:
    new = runs["new"]
    share = new["per_second"] / alone["per_second"]
    print(f"\nfirst index of {vault} ({new['rows']:,} rows, {alone['distinct']:,} distinct texts)")
    print(
        f"  embedder alone       {alone['per_second']:7.1f} rows/s ({alone['texts']:,} texts in {alone['seconds']:.1f} s)"
    )
    for name, r in runs.items():
        print(
            f"  vault index ({name:4}) {r['per_second']:7.1f} rows/s ({r['seconds']:.1f} s, {r['embedded']:,} texts "
            f"embedded, peak {r['peak_mib']:.0f} MiB, load {r['load']:.1f})"
        )
    print(f"  index / embedder alone  {100 * share:.1f} %  {'ok' if share >= TARGET_SHARE else 'MISSED'}")
    if "cpu_seconds" in alone:
        print(f"  same, in CPU seconds    {100 * alone['cpu_seconds'] / new['cpu_seconds']:.1f} %")
    if "base" in runs:
        speedup = runs["base"]["seconds"] / new["seconds"]
        print(f"  speed-up over base      {speedup:.2f}x  {'ok' if speedup >= TARGET_SPEEDUP else 'MISSED'}")
        cpu = runs["base"]["cpu_seconds"] / new["cpu_seconds"]
        print(
            f"  same, in CPU seconds    {cpu:.2f}x  {'ok' if cpu >= TARGET_SPEEDUP else 'MISSED'} "
            f"({runs['base']['cpu_seconds']:.0f} s against {new['cpu_seconds']:.0f} s)"
        )
    for name, c in counts.items():
        print(
            f"  to embed ({name:4})        {c['rows']:,} rows, {c['tokens']:,} tokens; {c['distinct']:,} distinct "
            f"texts, {c['distinct_tokens']:,} tokens"
        )
    if "base" in counts:
        # The new build embeds each distinct text once, the base every row: the embedder's time,
        # nearly all of a first index, follows the tokens.
        bound = counts["base"]["tokens"] / counts["new"]["distinct_tokens"]
        print(f"  speed-up the tokens allow  {bound:.2f}x (base's tokens over the new build's distinct tokens)")
    print(
        f"  vault index --rebuild   {again['seconds']:.1f} s ({again['embedded']:,} texts embedded: the store holds the rest)"
    )


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--embed-alone", type=Path, help=argparse.SUPPRESS)  # the side-by-side run's third process
    source.add_argument("--vault", type=Path, help="a vault ingested already (its notes are copied)")
    source.add_argument("--export", type=Path, help="a chat export to ingest first (offline)")
    p.add_argument("--base", type=Path, default=None, help="a checkout of the build to compare with")
    p.add_argument("--base-first", action="store_true", help="run the base build's index first")
    p.add_argument(
        "--side-by-side", action="store_true", help="run both indexes and the embedder alone at once (same load)"
    )
    p.add_argument("--keep", action="store_true", help="keep the copies (printed folder)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    return p.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
