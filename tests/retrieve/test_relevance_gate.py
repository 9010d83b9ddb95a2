"""The offline gate is the shipped relevance model: it loads from the package with no download,
its probability is computed once and rides on the verdict, it writes no made-up reasoning, and
no module outside ``models/`` asks which backend it is talking to."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.models.offline.crossencoder import ENCODER, MODEL_DIR, shipped
from vault_pipeline.models.offline.relevance import DEFAULT, FEATURES, RelevanceModel
from vault_pipeline.retrieve.gate import (
    Drop,
    EncoderGate,
    GateItem,
    Keep,
    ModelGate,
    SignalGate,
    gate_of,
    gate_rows,
    probability_of,
    reasoning_of,
    run_gate,
)
from vault_pipeline.retrieve.state import evidence_threshold
from vault_pipeline.retrieve.types import FunnelConfig

PACKAGE = Path(__file__).resolve().parents[2] / "vault_pipeline"


def test_the_shipped_model_is_the_file_its_description_names_and_fits_the_package():
    meta = json.loads((MODEL_DIR / "relevance.json").read_text(encoding="utf-8"))
    onnx = MODEL_DIR / "relevance.onnx"
    assert hashlib.sha256(onnx.read_bytes()).hexdigest() == meta["sha256"] == shipped().sha256
    assert onnx.stat().st_size <= 30 * 1024 * 1024
    assert shipped().name == meta["name"]


def test_the_model_tells_a_statement_of_the_asked_fact_from_an_unrelated_turn():
    model = shipped()
    question = "What instrument did Sanne start learning?"
    p = model.probabilities(
        [question] * 3,
        [
            "Sanne: I finally started cello lessons last month, my teacher is very patient.",
            "Pieter: The traffic on the ring road was terrible this morning.",
            "Assistant: To install the package, run pip install with the name of the wheel.",
        ],
    )
    assert all(0.0 <= x <= 1.0 for x in p)
    assert p[0] > p[1] and p[0] > p[2]


def test_the_offline_backend_gates_with_its_signal_weights_or_when_asked_with_the_relevance_model():
    assert gate_of(OfflineBackend()) == SignalGate(DEFAULT)
    assert isinstance(gate_of(OfflineBackend(relevance_model=True)), EncoderGate)
    fitted = RelevanceModel(dict.fromkeys(FEATURES, 1.0), bias=-2.0, threshold=0.4, source="a vault's fit")
    assert gate_of(OfflineBackend(relevance=fitted)) == SignalGate(fitted)  # a vault's own fit wins
    assert gate_of(OfflineBackend(relevance=fitted, relevance_model=True)) == SignalGate(fitted)


class _Model:
    """A model backend as the gate sees one (never called here)."""

    model = "openai/some-model"
    remote = True

    def call(self, *args, **kwargs):  # pragma: no cover - not reached
        raise AssertionError("not called")


def test_a_model_gate_has_no_calibrated_probability_so_no_depth_stop():
    assert isinstance(gate_of(_Model()), ModelGate)
    assert evidence_threshold(FunnelConfig(), _Model()) is None
    assert evidence_threshold(FunnelConfig(), OfflineBackend()) == DEFAULT.evidence
    assert evidence_threshold(FunnelConfig(), OfflineBackend(relevance_model=True)) == ENCODER.stop
    assert evidence_threshold(FunnelConfig(gate_enabled=False), OfflineBackend()) is None


def test_the_verdict_carries_the_models_probability_once_and_no_reasoning_text():
    rows = [
        ("a", "notes/cello.md", "", "Sanne: I finally started cello lessons last month."),
        ("b", "notes/traffic.md", "", "Pieter: The traffic on the ring road was terrible.\n\nSource: [[x#^m-1]]"),
    ]
    query = "What instrument did Sanne start learning?"
    outcomes = gate_rows(
        rows,
        llm=OfflineBackend(relevance_model=True),
        intent="",
        query=query,
        batch_size=10,
        timeout=30.0,
        text_chars=600,
    )
    expected = shipped().probabilities([query] * 2, [rows[0][3], rows[1][3].split("\n\nSource:")[0]])
    for (cid, *_), p in zip(rows, expected):
        outcome = outcomes[cid]
        assert isinstance(outcome, Keep | Drop)
        assert probability_of(outcome) == pytest.approx(p, abs=1e-6)
        assert reasoning_of(outcome) == ""
        assert isinstance(outcome, Keep) == (p >= ENCODER.threshold)


def test_a_signal_gate_without_signals_keeps_the_candidate_unjudged():
    fitted = SignalGate(RelevanceModel(dict.fromkeys(FEATURES, 1.0), bias=-2.0, threshold=0.4))
    items = [GateItem("c01", "t", "", "text")]
    (outcome,) = run_gate(items, llm=fitted, intent="", query="q", batch_size=10, timeout=30.0).values()
    assert isinstance(outcome, Keep) and probability_of(outcome) is None


def test_a_missing_model_file_fails_the_gate_open_with_the_cause(tmp_path):
    from vault_pipeline.models.offline.crossencoder import CrossEncoderModel
    from vault_pipeline.retrieve.gate import FailOpen

    broken = EncoderGate(CrossEncoderModel(tmp_path / "none.onnx", tmp_path / "none.json", a=1.0, b=0.0))
    items = [GateItem("c01", "t", "", "text"), GateItem("c02", "t", "", "more")]
    outcomes = run_gate(items, llm=broken, intent="", query="q", batch_size=10, timeout=30.0)
    assert all(isinstance(o, FailOpen) and "relevance model missing" in o.error for o in outcomes.values())


BACKEND_CHECK = re.compile(
    r"OFFLINE_MODEL|MCP_SAMPLING|==\s*[\"']offline[\"']|[\"']offline[\"']\s*==|\.model\s*(==|!=|in)\b"
)


def test_no_backend_name_check_in_retrieve():
    """Which backend judges is the gate's business (``gate.gate_of`` through ``models.offline``)."""
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted((PACKAGE / "retrieve").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if BACKEND_CHECK.search(line)
    ]
    assert not found, "backend-name checks outside models/:\n" + "\n".join(found)


OFFLINE_CHECK = re.compile(r"OFFLINE_MODEL|==\s*[\"']offline[\"']|[\"']offline[\"']\s*==")


def test_no_offline_comparison_outside_models():
    """Whether a model string is the offline backend is asked of ``models.protocol`` (``is_offline``)."""
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "models" not in path.relative_to(PACKAGE).parts[:1]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OFFLINE_CHECK.search(line)
    ]
    assert not found, "offline comparisons outside models/:\n" + "\n".join(found)
    assert OFFLINE_CHECK.search("if settings.quality_model == OFFLINE_MODEL:")


def test_the_backend_check_pattern_catches_what_it_forbids():
    for line in ('if llm.model == "offline":', "return self.model == OFFLINE_MODEL", "x = 'offline' == m"):
        assert BACKEND_CHECK.search(line)
    assert not BACKEND_CHECK.search("the offline gate judges by the relevance model")


def test_the_gate_model_string_offline_relevance_builds_the_offline_backend_with_the_model():
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.models.offline.crossencoder import RELEVANCE_GATE

    llm = build_llm(RELEVANCE_GATE)
    assert isinstance(llm, OfflineBackend) and isinstance(gate_of(llm), EncoderGate)
    assert isinstance(gate_of(build_llm("offline")), SignalGate)
