"""``vault gate-calibrate``: the fit-gate's quality and cost on labelled candidates, the similarity
floor sweep, and the offline gate fitted on the labels (stored in a vault with ``--fit --vault``)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault_pipeline.cli.common import EXIT_OK, VerboseOpt, build_embedder, build_gate, build_llm, open_vault, out, table

if TYPE_CHECKING:
    from vault_pipeline.models.offline.relevance import RelevanceModel
    from vault_pipeline.retrieve.calibrate import CalibrationReport
    from vault_pipeline.retrieve.gatefit import FitReport


@dataclass(frozen=True)
class GateCalibration:
    """One gate-calibrate run: the configured gate's figures, the fitted offline gate, where it was stored."""

    report: CalibrationReport
    fitted: FitReport
    stored: Path | None

    def to_dict(self) -> dict[str, Any]:
        """The summary ``vault gate-calibrate --json`` prints (the CLI adds ``exit_code``)."""
        return {
            **self.report.summary(),
            "fitted_gate": self.fitted.summary(),
            "stored": str(self.stored) if self.stored else None,
        }


def gate_calibrate(
    labels: Annotated[
        list[Path],
        typer.Argument(metavar="LABELS...", help="Labels JSONL file(s) (see vault_example/calibration/README.md)."),
    ],
    vault_path: Annotated[
        Path | None,
        typer.Option("--vault", metavar="DIR", help="Take the gate model and embedder from this vault's vault.toml."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON line.")] = False,
    fit: Annotated[
        bool,
        typer.Option("--fit", help="Fit the offline gate on LABELS; with --vault, store it in the vault's gate.json."),
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Measure the fit-gate at two intent altitudes and sweep the similarity floor on labelled candidates.

    \b
    Example:  vault gate-calibrate vault_example/calibration/labels.jsonl"""
    from vault_pipeline.config import load_settings
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.models.offline.relevance import DEFAULT
    from vault_pipeline.retrieve.calibrate import calibrate, load_label_files
    from vault_pipeline.retrieve.gatefit import fit_gate
    from vault_pipeline.retrieve.signals import load_relevance, save_relevance
    from vault_pipeline.retrieve.types import FunnelConfig

    items = load_label_files(labels)
    vault = None
    if vault_path is not None:
        vault, settings, log = open_vault(vault_path)
    else:
        settings, log = load_settings(None, os.environ), CallLog(None)
    embedder = build_embedder(settings)
    current = load_relevance(vault.root) if vault is not None else None
    report = calibrate(
        items,
        llm=build_gate(vault, settings, log) if vault is not None else build_llm(settings, settings.gate_model, log),
        embedder=embedder,
        config=FunnelConfig.from_settings(settings, embedder),
    )
    fitted = fit_gate(items, embedder, source=" ".join(p.name for p in labels))
    stored = save_relevance(vault.root, fitted.model) if fit and vault is not None else None
    run = GateCalibration(report, fitted, stored)
    if json_out:
        summary = {**run.to_dict(), "exit_code": EXIT_OK}
        sys.stdout.write(json.dumps(summary, ensure_ascii=False, sort_keys=True) + "\n")
        return
    if report.offline:
        out.print(
            "offline gate: the fitted relevance model; a configured gate model is reported beside it", markup=False
        )
    floor_source = "set in vault.toml or VAULT_FLOOR" if settings.floor is not None else "the embedder's calibration"
    print_calibration(report, floor_source)
    print_fitted(run, fit, seen_by(current or DEFAULT, labels) if report.offline else "")


def seen_by(model: RelevanceModel, labels: list[Path]) -> str:
    """How the configured offline gate's figures on ``labels`` read: in sample when its ``source`` names
    the files, held out when it names none of them."""
    fitted_on = set(model.source.split())
    given = [p.name for p in labels]
    seen = [name for name in given if name in fitted_on]
    if not seen:
        return "current weights: held out (fitted on none of these files)"
    if len(seen) == len(given):
        return "current weights: in-sample on the labels they were fitted on"
    return f"current weights: in-sample on {', '.join(seen)}, held out on the rest"


def pct(value: float | None) -> str:
    """A share as a whole percentage, "-" when there is none."""
    return "-" if value is None else f"{value:.0%}"


def print_fitted(run: GateCalibration, fit: bool, current: str) -> None:
    """The fitted offline gate's held-out figures beside the configured gate's on the same labels."""
    from vault_pipeline.retrieve.gatefit import side_by_side

    fitted = run.fitted
    rows = [
        (
            r["gate"],
            pct(r["recall"]),
            pct(r["precision"]),
            f"{r['contaminants_kept']}/{r['kept']} ({pct(r['contamination'])})",
            f"{r['ms_per_candidate']:.2f}",
            "-" if r["tokens_per_candidate"] is None else f"{r['tokens_per_candidate']:,.0f}",
        )
        for r in side_by_side(fitted, run.report)
    ]
    out.print(
        table(
            f"gate quality and cost on {fitted.candidates} labelled candidates",
            rows,
            ("gate", "recall", "precision", "contaminants/kept", "ms/candidate", "tokens/candidate"),
        )
    )
    out.print(
        "held out: leave-one-query-out, weights and threshold fitted without the judged query"
        + (f"; {current}" if current else ""),
        markup=False,
    )
    model = fitted.model
    weights = ", ".join(f"{n} {w:+.3f}" for n, w in model.weights.items())
    out.print(f"fitted weights: {weights}; bias {model.bias:+.3f}; threshold {model.threshold:.4f}", markup=False)
    if run.stored is not None:
        out.print(f"stored the fitted gate in {run.stored}", markup=False)
    elif fit:
        out.print("not stored: pass --vault to store the fitted gate in that vault", markup=False)


def print_calibration(report: CalibrationReport, floor_source: str) -> None:
    """The gate's quality and cost per intent altitude, the floor sweep and the suggested floor."""
    quality = [
        (
            s.altitude,
            s.candidates,
            pct(s.keep_rate),
            pct(s.precision),
            pct(s.recall),
            f"{s.contaminants_kept}/{s.contaminants}",
            s.fail_open,
        )
        for s in report.altitudes
    ]
    out.print(
        table(
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
    out.print(table("gate cost per query", cost, ("altitude", "queries", "calls", "tokens", "latency ms")))
    sweep = [(f"{p.floor:.2f}", pct(p.recall), pct(p.off_topic_pass), pct(p.contaminant_pass)) for p in report.sweep]
    out.print(
        table(
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
