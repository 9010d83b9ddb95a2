"""The question sets behind "does the vault hold anything on this?", shared by ``bench_absent.py``
(which reports them) and ``fit_evidence.py`` (which fits the evidence thresholds on them).

* The export: its answerable questions (the 14 of ``vault_example/calibration/export.jsonl`` and the
  24 of ``benchmarks/data/export_questions.jsonl``) and the questions whose subject never occurs in
  it (``benchmarks/data/absent_questions.jsonl``; each subject word is counted in the export first).
* LoCoMo: each conversation's own questions (categories 1-4), and questions of another conversation
  asked of it: a question that names a speaker of its own conversation whose name never occurs in
  the vault's conversation (``cross_questions``; "When did Jon lose his job?" asked of Caroline and
  Melanie's). ``TUNE_SAMPLES``' vaults are for fitting, the others are reported.

Vaults are built when their folder does not exist yet, so each benchmark runs with one command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_locomo import TUNE_SAMPLES, build, questions  # noqa: E402

from vault_pipeline.config import load_settings  # noqa: E402
from vault_pipeline.index.search import Index  # noqa: E402
from vault_pipeline.models.offline import OfflineBackend  # noqa: E402
from vault_pipeline.models.offline.relevance import RelevanceModel  # noqa: E402
from vault_pipeline.retrieve.funnel import run_query  # noqa: E402
from vault_pipeline.retrieve.package import ContextPackage  # noqa: E402
from vault_pipeline.retrieve.signals import load_relevance  # noqa: E402
from vault_pipeline.retrieve.types import QUERY_COLUMNS, FunnelConfig  # noqa: E402
from vault_pipeline.vault.files import Vault  # noqa: E402

DATA = REPO / "benchmarks" / "data"
CALIBRATION = REPO / "vault_example" / "calibration"
SHARED = Path(os.environ.get("VAULT_SHARED_DATA", REPO.parent / "shared" / "data"))  # as bench_locomo.py reads it
EXPORT = SHARED / "exports" / "chatgpt-pkuppens-2023.json"
LOCOMO = SHARED / "locomo" / "locomo-dev.json"
CROSS_PER_VAULT = 20  # LoCoMo questions of other conversations asked of each vault


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def occurrences(text: str, word: str) -> int:
    """How often ``word`` occurs in ``text`` as the start of a word, case-insensitive."""
    return len(re.findall(r"(?<!\w)" + re.escape(word), text, re.I))


def export_questions() -> list[dict]:
    """{"query", "answerable", "set"} for the export: answerable ones, then absent ones."""
    answerable = list(dict.fromkeys(row["query"] for row in lines(CALIBRATION / "export.jsonl")))
    answerable += [row["query"] for row in lines(DATA / "export_questions.jsonl") if row["query"] not in answerable]
    rows = [{"query": q, "answerable": True, "set": "export"} for q in answerable]
    return rows + [
        {"query": row["query"], "answerable": False, "set": "export", "absent": row["absent"]}
        for row in lines(DATA / "absent_questions.jsonl")
    ]


def check_absent(rows: list[dict], export: Path) -> list[dict]:
    """The absent rows whose subject words all occur 0 times in the export (the others are reported)."""
    source = export.read_text(encoding="utf-8")
    kept = []
    for row in rows:
        counts = {w: occurrences(source, w) for w in row.get("absent", [])}
        if any(counts.values()):
            print(f"  not absent, left out: {row['query']} ({counts})")
        else:
            kept.append(row)
    return kept


def cross_questions(data: Path, vault_sample: str, per_vault: int = CROSS_PER_VAULT) -> list[dict]:
    """LoCoMo questions of the other conversations that name one of their own speakers, none of
    whose names occurs in ``vault_sample``'s conversation; every k-th, so each conversation gives some."""
    samples = json.loads(data.read_text(encoding="utf-8"))
    text = {s["sample_id"]: json.dumps(s["conversation"]).lower() for s in samples}
    speakers = {s["sample_id"]: (s["conversation"]["speaker_a"], s["conversation"]["speaker_b"]) for s in samples}
    found = []
    for q in questions(data, None):
        if q["sample"] == vault_sample:
            continue
        names = [n for n in speakers[q["sample"]] if re.search(rf"\b{n}\b", q["query"])]
        if names and not any(re.search(rf"\b{n.lower()}\b", text[vault_sample]) for n in names):
            found.append({**q, "answerable": False, "set": "locomo-cross", "asked_of": vault_sample})
    step = max(1, len(found) // per_vault)
    return found[::step][:per_vault]


def own_questions(data: Path, sample: str) -> list[dict]:
    """A LoCoMo conversation's own questions (categories 1-4), asked of its own vault."""
    return [
        {**q, "answerable": True, "set": "locomo-own", "asked_of": sample}
        for q in questions(data, None)
        if q["sample"] == sample
    ]


def export_vault(path: Path, export: Path = EXPORT) -> Vault:
    """A vault of the export at ``path``, built the way a user would when the folder is missing."""
    if not path.exists():
        for args in (["init", str(path)], ["ingest", str(export)], ["keep", "--all-passing"], ["index"]):
            command = [sys.executable, "-m", "vault_pipeline.cli", *args] + (
                [] if args[0] == "init" else ["--vault", str(path)]
            )
            print(f"  $ vault {' '.join(args)}", flush=True)
            subprocess.run(command, check=True, capture_output=True, env={"PYTHONPATH": str(REPO), **os.environ})
    return Vault.open(path)


def locomo_vaults(out: Path, data: Path = LOCOMO) -> dict[str, Vault]:
    """One vault per LoCoMo conversation under ``out``, built as ``bench_locomo.py`` builds them when missing."""
    samples = [s["sample_id"] for s in json.loads(data.read_text(encoding="utf-8"))]
    reuse = all((out / s / "vault.toml").exists() for s in samples)
    return build(data, out, "minilm", reuse=reuse)


def packages(
    vault: Vault,
    queries: list[str],
    embedder,
    *,
    budget: int = 1500,
    relevance: RelevanceModel | None = None,
    intents: list[str | None] | None = None,
    **overrides,
) -> list[ContextPackage]:
    """Each query's package through the whole funnel, in this process, as ``vault query`` builds it
    (with ``intents``: each query's intent, as ``--intent`` gives it)."""
    retriever = Index.open(vault, embedder, columns=QUERY_COLUMNS)
    config = FunnelConfig.from_settings(load_settings(vault.root), embedder, budget=budget, **overrides)
    gate = OfflineBackend(relevance=relevance or load_relevance(vault.root))
    return [
        run_query(
            q, retriever=retriever, embedder=embedder, llm_plan=OfflineBackend(), llm_gate=gate, config=config, intent=i
        )
        for q, i in zip(queries, intents or [None] * len(queries))
    ]


def is_tuning(sample: str) -> bool:
    return sample in TUNE_SAMPLES
