"""The fitted offline gate: signals, the logistic fit, cross-validation, the vault's gate.json, the CLI."""

from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pytest

from tests.support.fakes import HashEmbedder, ScriptedLLM, run_vault
from tests.support.paths import REPO
from vault_pipeline.errors import ConfigError, VaultError
from vault_pipeline.models.build import build_llm
from vault_pipeline.models.embed import build_embedder
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.models.offline.relevance import DEFAULT, FEATURES, RelevanceModel, fit_weights
from vault_pipeline.retrieve import gatefit
from vault_pipeline.retrieve.calibrate import LabelledCandidate, calibrate, load_label_files
from vault_pipeline.retrieve.gate import gate_rows, label, reason_of
from vault_pipeline.retrieve.gatefit import Labelled, cross_validate, fit_gate, side_by_side, threshold_for
from vault_pipeline.retrieve.signals import gate_signals, load_relevance, relevance_path, save_relevance

CALIBRATION = REPO / "vault_example" / "calibration"
SHIPPED = [CALIBRATION / name for name in ("labels.jsonl", "traps.jsonl", "export.jsonl")]


def _row(query: str, i: int, relevant: bool, signals: dict[str, float], contaminant: bool = False) -> Labelled:
    item = LabelledCandidate(
        query=query,
        intent_domain=query,
        candidate=f"candidate {i}",
        candidate_id=f"{query}-{i}",
        label="relevant" if relevant else "off-topic",
        contaminant=contaminant,
    )
    return Labelled(item, dict.fromkeys(FEATURES, 0.0) | signals)


def _synthetic(queries: int = 6, per_query: int = 12, seed: int = 7) -> list[Labelled]:
    """Relevance decided by cos_intent (plus noise); contaminants share words (overlap) but not the intent."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(queries):
        for i in range(per_query):
            relevant = i % 2 == 0
            cos_intent = float(rng.normal(0.45 if relevant else 0.1, 0.08))
            overlap = float(rng.uniform(0.0, 0.3)) if relevant else float(rng.uniform(0.2, 0.6))
            rows.append(_row(f"q{q}", i, relevant, {"cos_intent": cos_intent, "overlap": overlap}, not relevant))
    return rows


# --------------------------------------------------------------------------- the labelled sets


def test_the_trap_set_holds_relevant_notes_and_contaminants_for_every_query(tmp_path):
    labels = load_label_files(SHIPPED)
    traps = [item for item in labels if item.candidate_id.startswith("trap-")]
    by_query: dict[str, list[LabelledCandidate]] = {}
    for item in traps:
        by_query.setdefault(item.query, []).append(item)
    assert len(by_query) >= 6
    for query, items in by_query.items():
        assert sum(i.relevant for i in items) >= 5 and sum(i.contaminant for i in items) >= 3, query
    copy = tmp_path / "again.jsonl"
    copy.write_text(SHIPPED[1].read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(VaultError, match="already used in"):
        load_label_files([SHIPPED[1], copy])


# --------------------------------------------------------------------------- the model


def test_fit_learns_the_signal_that_decides_and_keeps_lexical_weights_non_negative():
    rows = _synthetic()
    weights, _ = fit_weights([r.signals for r in rows], [r.item.relevant for r in rows])
    assert weights["cos_intent"] > 1.0 and set(weights) == set(FEATURES)
    # Overlap anti-correlates with relevance here (the contaminants share words): never a negative weight.
    assert weights["overlap"] == 0.0 and weights["phrase"] == 0.0
    model = gatefit.fit_model(rows)
    assert model.weights["overlap"] == 0.0 and 0.0 < model.threshold < 1.0


def test_threshold_keeps_the_target_share_of_relevant_candidates():
    probabilities = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05]
    relevant = [True] * 10
    assert threshold_for(probabilities, relevant, 0.95) == 0.05  # 10 relevant: 95 % needs all ten
    assert threshold_for(probabilities, relevant, 0.9) == 0.1
    assert threshold_for([0.9, 0.2], [True, False], 0.95) == 0.9
    with pytest.raises(ConfigError):
        threshold_for([0.5], [False])


def test_cross_validation_judges_each_query_with_a_model_that_never_saw_it(monkeypatch):
    rows = _synthetic()
    seen: list[frozenset[str]] = []
    real = gatefit.fit_weights

    def spy(signal_rows, labels, **kwargs):
        seen.append(frozenset(r["_query"] for r in signal_rows))
        return real(signal_rows, labels, **kwargs)

    marked = [Labelled(r.item, {**r.signals, "_query": r.item.query}) for r in rows]  # type: ignore[dict-item]
    monkeypatch.setattr(gatefit, "fit_weights", spy)
    held = cross_validate(marked)
    queries = frozenset(r.item.query for r in rows)
    assert [h.candidate_id for h in held] == [r.item.candidate_id for r in rows]
    # Every fit inside the cross-validation leaves out at least the held-out query.
    assert seen and all(fitted < queries for fitted in seen)
    # Outer folds: one per query, each fitting on all the other queries.
    assert {queries - fitted for fitted in seen if len(fitted) == len(queries) - 1} == {frozenset({q}) for q in queries}


def test_held_out_figures_on_separable_labels_meet_the_targets():
    rows = _synthetic()
    report = gatefit.FitReport(gatefit.fit_model(rows), cross_validate(rows), 0.95, 0.0, 0.0, 0.0)
    held = report.metrics()
    assert held["recall"] >= 0.95 and held["contamination"] <= 0.02
    curve = report.curve()
    assert [p["threshold"] for p in curve] == sorted(p["threshold"] for p in curve)
    assert all(a["recall"] >= b["recall"] for a, b in itertools.pairwise(curve))
    assert curve[0]["keep_rate"] == 1.0


def test_relevance_model_round_trips_and_rejects_bad_numbers():
    assert RelevanceModel.from_dict(DEFAULT.to_dict()) == DEFAULT
    with pytest.raises(ValueError, match="unknown signals"):
        RelevanceModel.from_dict({**DEFAULT.to_dict(), "weights": {"vibes": 1.0}})
    with pytest.raises(ValueError, match="threshold"):
        RelevanceModel.from_dict({**DEFAULT.to_dict(), "threshold": 3})


# --------------------------------------------------------------------------- signals and the gate


ROWS = [
    ("a#0", "engrams/raked-gravel.md", "", "Raked gravel in a Japanese garden stands for water."),
    ("b#0", "engrams/hubble.md", "", "Negative space between galaxies grows as the universe expands."),
    ("c#0", "engrams/tax.md", "", "The tax deadline is in April."),
]


def test_signals_reuse_stored_vectors_and_count_phrases():
    embedder = HashEmbedder(dim=256)
    query, intent = "negative space in Japanese gardens", "Japanese garden design"
    fresh = gate_signals(ROWS, query=query, intent=intent, embedder=embedder, variants=["Japanese gardens"])
    vectors = {cid: vec for (cid, *_), vec in zip(ROWS, embedder.embed([r[3] for r in ROWS]))}
    calls = len(embedder.calls)
    stored = gate_signals(
        ROWS, query=query, intent=intent, embedder=embedder, variants=["Japanese gardens"], vectors=vectors
    )
    assert embedder.calls[calls:] == [[query, intent, "Japanese gardens"]]  # candidates from their vectors
    assert stored == fresh and set(fresh) == {"a#0", "b#0", "c#0"}
    given = dict(zip([query, intent], embedder.embed([query, intent])))
    calls = len(embedder.calls)
    gate_signals(
        ROWS, query=query, intent=intent, embedder=embedder, variants=["gardens"], vectors=vectors, query_vectors=given
    )
    assert embedder.calls[calls:] == [["gardens"]]  # only the variant nobody had embedded
    assert set(fresh["a#0"]) == set(FEATURES)
    assert fresh["b#0"]["phrase"] > 0 and fresh["c#0"]["phrase"] == 0.0  # "negative space" is a prompt phrase
    assert fresh["c#0"]["overlap"] == 0.0 and fresh["a#0"]["overlap"] > 0


def test_session_signals_count_the_pools_candidates_from_the_same_chat():
    embedder = HashEmbedder(dim=64)
    texts = ["gravel", "stones", "moss", "tax", "ma", "pond", "lantern"]
    rows = [(f"c{i}", f"engrams/c{i}.md", "", text) for i, text in enumerate(texts)]
    chats = {"c0": "garden", "c1": "garden", "c2": "garden", "c3": "taxes", "c5": "ponds", "c6": "lights"}
    found = gate_signals(rows, query="garden", intent="garden", embedder=embedder, conversations=chats)
    # 2 of the 6 other candidates share c0's chat; c4 is a note of no chat.
    assert [found[f"c{i}"]["session_share"] for i in range(7)] == [round(2 / 6, 6)] * 3 + [0.0] * 4
    assert [found[f"c{i}"]["session_known"] for i in range(7)] == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    assert found["c4"]["same_session"] == 0.0 and all(found[f"c{i}"]["same_session"] in (0.0, 1.0) for i in range(7))
    unknown = gate_signals(rows, query="garden", intent="garden", embedder=embedder)
    assert all(s["session_known"] == s["session_share"] == s["same_session"] == 0.0 for s in unknown.values())
    # A later step's pool of one: its chat counted against the candidates that passed before it.
    one = gate_signals(
        rows[:1],
        query="garden",
        intent="garden",
        embedder=embedder,
        conversations=chats,
        context=["garden"] * 2 + ["x"] * 4,
    )
    assert one["c0"]["session_known"] == 1.0 and one["c0"]["session_share"] == round(2 / 6, 6)
    # Too few others to count a share: not known.
    alone = gate_signals(rows[:3], query="garden", intent="garden", embedder=embedder, conversations=chats)
    assert all(s["session_known"] == 0.0 and s["session_share"] == 0.0 for s in alone.values())


def test_the_session_signals_read_only_a_chat_exports_threads():
    from vault_pipeline.retrieve.signals import chat_of

    assert chat_of("chatgpt", "c-1") == "c-1" and chat_of("claude", "c-2") == "c-2"
    # A transcript's or LoCoMo's session passes through many subjects: not the signals' unit.
    assert chat_of("locomo", "conv-26:session_3") == "" and chat_of("transcript", "t-1") == ""
    assert chat_of("", "") == ""


GATE_ARGS = {
    "intent": "Japanese garden design",
    "query": "negative space in Japanese gardens",
    "batch_size": 2,
    "timeout": 10.0,
    "text_chars": 200,
}


def test_gate_rows_passes_signals_to_the_offline_gate_which_judges_with_the_weights_it_was_built_with():
    embedder = HashEmbedder(dim=256)
    fitted = OfflineBackend(relevance=RelevanceModel(DEFAULT.weights, DEFAULT.bias, DEFAULT.threshold, source="a fit"))
    unjudged = gate_rows(ROWS, llm=fitted, **GATE_ARGS)
    assert {reason_of(o) for o in unjudged.values()} == {"no retrieval signals; kept unjudged"}
    judged = gate_rows(ROWS, llm=fitted, embedder=embedder, **GATE_ARGS)
    assert all(reason_of(o).startswith("relevance ") for o in judged.values())
    keep_none = RelevanceModel(DEFAULT.weights, DEFAULT.bias, 1.0)
    strict = gate_rows(ROWS, llm=OfflineBackend(relevance=keep_none), embedder=embedder, **GATE_ARGS)
    assert {label(o) for o in strict.values()} == {"drop"}
    assert build_llm("offline", relevance=keep_none).relevance == keep_none  # type: ignore[attr-defined]


def test_a_model_gate_gets_neither_signals_nor_weights_in_its_prompt(monkeypatch):
    """The weights are the offline backend's own; a model reads the text, so no signals are computed."""
    import vault_pipeline.retrieve.gate as gate_module

    computed: list[int] = []
    monkeypatch.setattr(gate_module, "gate_signals", lambda rows, **kw: computed.append(len(rows)) or {})
    model = ScriptedLLM(lambda name, variables: _keep_all(variables))
    gate_rows(ROWS, llm=model, embedder=HashEmbedder(dim=256), **GATE_ARGS)
    assert computed == [] and model.calls
    for _, variables in model.calls:
        assert set(variables) == {"intent", "query", "candidates"}
        assert all(set(c) == {"key", "title", "heading", "text"} for c in variables["candidates"])
    offline = OfflineBackend(relevance=RelevanceModel(DEFAULT.weights, DEFAULT.bias, 1.0))
    gate_rows(ROWS, llm=offline, embedder=HashEmbedder(dim=256), **GATE_ARGS)
    assert computed  # the offline gate's signals


def _keep_all(variables) -> dict:
    verdict = {"reasoning": "fits", "verdict": "keep", "reason": "fits"}
    return {"verdicts": [{"key": c["key"], **verdict} for c in variables["candidates"]]}


def test_the_vaults_gate_json_round_trips_and_a_bad_file_names_itself(tmp_path):
    assert load_relevance(tmp_path) is None
    model = RelevanceModel(dict(DEFAULT.weights), -1.0, 0.4, "hash-64", "mine.jsonl")
    path = save_relevance(tmp_path, model)
    assert path == relevance_path(tmp_path) and load_relevance(tmp_path) == model
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_relevance(tmp_path)


# --------------------------------------------------------------------------- the LLM gate beside the fitted one


def _mock_gate_completion():
    """A completion answering each gate request through litellm's mock_response: keep unless 'galaxies'."""
    import litellm

    calls: list[dict] = []

    def completion(**kwargs):
        calls.append(kwargs)
        user = kwargs["messages"][-1]["content"]
        blocks = re.findall(r"^\[(c\d+)\][^\n]*\n([^\n]*)", user, re.M)
        verdicts = [
            {"key": key, "reasoning": "read it", "verdict": "drop" if "galax" in text else "keep", "reason": "mock"}
            for key, text in blocks
        ]
        return litellm.completion(mock_response=json.dumps({"verdicts": verdicts}), **kwargs)

    return completion, calls


def test_calibration_reports_the_llm_gate_beside_the_fitted_gate(tmp_path):
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.models.litellm_backend import LiteLLMBackend

    completion, calls = _mock_gate_completion()
    llm = LiteLLMBackend("openai/gpt-4o-mini", completion=completion, log=CallLog(tmp_path / "calls.jsonl"))
    labels = load_label_files(SHIPPED)
    labels = [item for item in labels if item.query in sorted({i.query for i in labels})[:4]]
    embedder = HashEmbedder(dim=256)
    report = calibrate(labels, llm=llm, embedder=embedder)
    fitted = fit_gate(labels, embedder)
    rows = side_by_side(fitted, report)
    assert [r["gate"] for r in rows] == ["fitted offline, held out", "openai/gpt-4o-mini"]
    assert calls and rows[1]["recall"] is not None and rows[1]["tokens_per_candidate"] is not None
    dropped = [c for c in report.candidates if c.outcomes["domain"] == "drop"]
    assert all("galax" in next(i.candidate for i in labels if i.candidate_id == c.candidate_id) for c in dropped)
    assert rows[0]["tokens_per_candidate"] == 0 and rows[0]["ms_per_candidate"] > 0


# --------------------------------------------------------------------------- the shipped default (MiniLM)


@pytest.mark.slow
def test_the_shipped_default_is_what_the_fit_reproduces_and_holds_out_well():
    report = fit_gate(load_label_files(SHIPPED), build_embedder("minilm"))
    for name in FEATURES:
        assert math.isclose(report.model.weights[name], DEFAULT.weights[name], abs_tol=2e-3), name
    assert math.isclose(report.model.bias, DEFAULT.bias, abs_tol=2e-3)
    assert math.isclose(report.model.threshold, DEFAULT.threshold, abs_tol=1e-3)
    held = report.metrics()
    assert held["queries"] >= 15 and held["recall"] >= 0.9
    # Held out, the gate keeps a smaller share of contaminants than the labels hold (no gate: all kept).
    assert held["contamination"] < held["contaminants"] / held["candidates"]


@pytest.mark.slow
def test_cli_fit_stores_the_fitted_gate_in_the_vault(tmp_path):
    from vault_pipeline.vault.files import Vault

    vault = Vault.init(tmp_path / "v")
    labels = [str(p) for p in SHIPPED]
    done = run_vault("gate-calibrate", "--fit", *labels, "--vault", str(vault.root), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    stored = load_relevance(vault.root)
    assert summary["stored"] == str(relevance_path(vault.root)) and stored is not None
    assert stored.to_dict() == summary["fitted_gate"]["model"]
    assert summary["fitted_gate"]["held_out"]["candidates"] == summary["candidates"]
    again = run_vault("gate-calibrate", *labels, "--vault", str(vault.root), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "stored the fitted gate" not in again.stdout and "held out: leave-one-query-out" in again.stdout


DUTCH = CALIBRATION / "dutch.jsonl"


def test_the_dutch_pools_are_labelled_per_question_and_the_shipped_gate_never_saw_them():
    items = load_label_files([DUTCH])
    queries = {item.query for item in items}
    assert len(queries) == 14 and len(items) == 167
    assert all(item.candidate_id.startswith("nl") for item in items)  # a chunk may come back for two questions
    assert not any(item.contaminant and item.relevant for item in items)
    assert DUTCH.name not in DEFAULT.source.split()


@pytest.mark.slow
def test_the_shipped_gate_keeps_the_relevant_candidates_of_the_dutch_pools_it_was_not_fitted_on():
    items = load_label_files([DUTCH])
    rows = gatefit.label_signals(items, build_embedder("minilm"))
    kept = [r for r in rows if DEFAULT.keeps(r.signals)]
    relevant = sum(r.item.relevant for r in rows)
    assert sum(r.item.relevant for r in kept) >= 0.95 * relevant
    # Held out, it still drops off-topic candidates: fewer than half of them are kept.
    assert sum(not r.item.relevant for r in kept) < 0.5 * (len(rows) - relevant)


def test_calibration_says_whether_the_current_weights_saw_the_labels():
    from vault_pipeline.cli.calibrate import seen_by

    files = [CALIBRATION / "labels.jsonl", DUTCH]
    assert "held out" in seen_by(DEFAULT, [DUTCH]) and "in-sample" not in seen_by(DEFAULT, [DUTCH])
    assert seen_by(DEFAULT, SHIPPED) == "current weights: in-sample on the labels they were fitted on"
    assert seen_by(DEFAULT, files) == "current weights: in-sample on labels.jsonl, held out on the rest"
