"""The retrieval funnel: decomposition, fusion, floor, fit-gate, provenance rank, dedup, budget, package."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.support.fakes import (
    EVERY_CANDIDATE,
    FakeRetriever,
    HashEmbedder,
    ScriptedLLM,
    fake_row,
    note_text,
    stats_of,
    traced,
)
from tests.support.paths import REPO
from vault_pipeline import pipeline
from vault_pipeline.config import DEFAULT_TOML, load_settings
from vault_pipeline.index import search
from vault_pipeline.index.search import Index, Row
from vault_pipeline.index.sync import sync
from vault_pipeline.index.table import ROW_COLUMNS
from vault_pipeline.models.embed import (
    DEFAULT_CALIBRATION,
    MINILM_CALIBRATION,
    Calibration,
    MiniLMEmbedder,
    build_embedder,
    calibration_of,
)
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.models.offline.retrieval import decompose, gate
from vault_pipeline.retrieve import types as retrieve_types
from vault_pipeline.retrieve.blocks import first_level
from vault_pipeline.retrieve.funnel import run_query
from vault_pipeline.retrieve.gate import GateVerdicts
from vault_pipeline.retrieve.metering import token_counter
from vault_pipeline.retrieve.package import REFERENCES, Selected, assemble, block_overhead, cut_text
from vault_pipeline.retrieve.rank import dedup, rank, recency
from vault_pipeline.retrieve.types import QUERY_COLUMNS, Candidate, FunnelConfig, Hit, QueryPlan
from vault_pipeline.text import estimate_tokens
from vault_pipeline.vault.files import Vault

QUERY = "How do negative space and emptiness work in Japanese garden design?"


# --------------------------------------------------------------------------- fakes


def keep_all(name, variables):
    """Scripted gate answer: keep every candidate."""
    return {
        "verdicts": [
            {"key": c["key"], "reasoning": "fits", "verdict": "keep", "reason": "fits"} for c in variables["candidates"]
        ]
    }


def drop_if(word):
    """Scripted gate answer: drop candidates whose text mentions ``word``."""

    def answer(name, variables):
        return {
            "verdicts": [
                {
                    "key": c["key"],
                    "reasoning": "checked",
                    "verdict": "drop" if word in c["text"] else "keep",
                    "reason": f"mentions {word}" if word in c["text"] else "fits",
                }
                for c in variables["candidates"]
            ]
        }

    return answer


# --------------------------------------------------------------------------- the corpus

# A look-alike from another chat: the gate weighs a candidate from the strongest ones' chat up
# (``same_session``), so a contaminant said in the garden chat itself would be a different case.
COSMOLOGY = fake_row(
    note_id="hubble-law",
    path="engrams/hubble-law.md",
    source_conversation="conv-cosmos",
    text="How negative space and emptiness work in cosmology: Hubble's "
    "law says expansion stretches the empty space between galaxies.",
)
GARDEN_ROWS = [
    fake_row(
        note_id="garden-gravel",
        path="engrams/garden-gravel.md",
        text="Raked gravel left empty in a Japanese garden frames the stones.",
    ),
    fake_row(
        note_id="garden-ma",
        path="engrams/garden-ma.md",
        text="Ma (間), the Japanese concept of interval, is the pause between garden stones.",
    ),
    fake_row(
        note_id="garden-corner",
        path="inbox/garden-corner.md",
        text="We decided to leave the north corner of the garden empty as negative space.",
        tier="chat",
        created="2024-06-01T00:00:00+00:00",
        category="decision",
    ),
    fake_row(
        note_id="karesansui",
        path="resources/karesansui.md",
        text="Karesansui: Japanese dry gardens suggest water with raked gravel and negative space.",
        tier="resource",
        type="resource",
        heading="Karesansui",
    ),
    fake_row(
        note_id="tax-deadline", path="engrams/tax-deadline.md", text="The quarterly tax filing deadline is in April."
    ),
]


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(dim=512)


def garden(embedder, extra=()) -> FakeRetriever:
    return FakeRetriever([COSMOLOGY, *GARDEN_ROWS, *extra], embedder)


GARDEN_INTENT = "Japanese garden design"


def run(retriever, embedder, *, gate_llm=None, plan_llm=None, intent=None, query=QUERY, **config):
    return run_query(
        query,
        retriever=retriever,
        embedder=embedder,
        llm_plan=plan_llm or OfflineBackend(),
        llm_gate=gate_llm or OfflineBackend(),
        config=FunnelConfig(**config),
        intent=intent,
    )


def trace_of(package, note_id):
    return next(t for t in traced(package) if t["id"] == note_id)


def block_ids(package):
    return [b.item.note_id for b in package.blocks]


# --------------------------------------------------------------------------- the contamination case


def test_gate_removes_the_cosmology_contaminant(embedder):
    # The offline gate judges by its signals against the intent: the subject domain, given here.
    package = run(garden(embedder), embedder, intent=GARDEN_INTENT)
    entry = trace_of(package, "hubble-law")
    assert entry["floor"] == "pass" and entry["similarity"] > 0.3  # similarity cannot exclude it
    assert entry["gate"] == "drop" and entry["rank"] is None
    assert entry["reason"].startswith("relevance ") and "cosine to intent" in entry["reason"]
    assert "hubble-law" not in block_ids(package)
    assert {"garden-gravel", "garden-ma", "garden-corner"} <= set(block_ids(package))
    assert stats_of(package)["gate_dropped"] >= 1 and stats_of(package)["degraded"] is False


def test_without_the_gate_the_contaminant_ranks_high(embedder):
    package = run(garden(embedder), embedder, gate_enabled=False)
    entry = trace_of(package, "hubble-law")
    assert entry["gate"] == "skipped" and entry["reason"] == "gate disabled"
    assert entry["rank"] is not None and entry["rank"] <= 2
    assert "hubble-law" in block_ids(package)


def test_gate_first_rank_never_lets_a_dropped_engram_outrank_a_kept_chunk(embedder, scripted_llm):
    gated = run(garden(embedder), embedder, gate_llm=scripted_llm(drop_if("Hubble")))
    ungated = run(garden(embedder), embedder, gate_enabled=False)
    assert trace_of(ungated, "hubble-law")["rank"] == 1  # provenance x similarity puts it on top
    ranked = sorted((t for t in traced(gated) if t["rank"] is not None), key=lambda t: t["rank"])
    assert ranked[0]["id"] != "hubble-law" and all(t["gate"] == "keep" for t in ranked)
    assert all(t["rank"] is None for t in traced(gated) if t["gate"] == "drop")
    assert [t["rank"] for t in ranked] == list(range(1, len(ranked) + 1))


# --------------------------------------------------------------------------- fail-open


def test_gate_model_error_fails_open(embedder, raising_llm):
    package = run(garden(embedder), embedder, gate_llm=raising_llm())
    judged = [t for t in traced(package) if t["floor"] == "pass"]
    assert judged and all(t["gate"] == "fail-open" for t in judged)
    assert all("connection refused" in t["reason"] for t in judged)
    assert stats_of(package)["gate_fail_open"] == len(judged) == stats_of(package)["after_floor"]
    assert stats_of(package)["degraded"] is True
    assert "hubble-law" in block_ids(package)  # nothing blanked: every candidate kept
    assert stats_of(package)["gate_error"] == "broken: connection refused"  # the cause, in the JSON
    assert "> Degraded package: the fit-gate failed open (broken: connection refused)" in package.to_markdown()


def test_gate_timeout_fails_open(embedder, sleeping_llm):
    slow = sleeping_llm()
    started = time.monotonic()
    try:
        package = run(garden(embedder), embedder, gate_llm=slow, gate_timeout=0.3, gate_batch=2)
    finally:
        slow.release.set()
    assert time.monotonic() - started < 3
    judged = [t for t in traced(package) if t["floor"] == "pass"]
    assert judged and all(t["gate"] == "fail-open" and "no answer within" in t["reason"] for t in judged)
    assert stats_of(package)["degraded"] is True and stats_of(package)["gate_fail_open"] == len(judged)


def test_gate_batches_run_concurrently_and_cover_every_key(embedder, scripted_llm):
    llm = scripted_llm(keep_all)
    package = run(garden(embedder), embedder, gate_llm=llm, gate_batch=2)
    sizes = [len(v["candidates"]) for name, v in llm.calls]
    assert sum(sizes) == stats_of(package)["after_floor"] and max(sizes) <= 2
    assert stats_of(package)["gate_kept"] == stats_of(package)["after_floor"]


# --------------------------------------------------------------------------- the real instructor path


def test_gate_reasks_through_instructor_when_a_key_is_missing(embedder):
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    from vault_pipeline.models.litellm_backend import LiteLLMBackend

    calls = []

    def completion(**kwargs):
        calls.append(kwargs)
        keys = re.findall(r"^\[(c\d+)\]", kwargs["messages"][1]["content"], re.M)
        verdicts = [{"key": k, "reasoning": "checked", "verdict": "keep", "reason": "fits"} for k in keys]
        if len(calls) == 1:
            verdicts = verdicts[:-1]  # the first answer forgets one candidate
        else:
            verdicts[0] = {**verdicts[0], "verdict": "drop", "reason": "second answer used"}
        return litellm.completion(mock_response=json.dumps({"verdicts": verdicts}), **kwargs)

    backend = LiteLLMBackend("openai/gpt-4o-mini", completion=completion, max_reasks=2)
    package = run(garden(embedder), embedder, gate_llm=backend)
    assert len(calls) == 2
    assert "missing" in json.dumps(calls[1]["messages"])  # the re-ask names the validation error
    judged = [t for t in traced(package) if t["floor"] == "pass"]
    assert judged[0]["gate"] == "drop" and judged[0]["reason"] == "second answer used"
    assert all(t["gate"] == "keep" for t in judged[1:])
    assert stats_of(package)["gate_fail_open"] == 0 and stats_of(package)["models"]["gate"] == "openai/gpt-4o-mini"


def test_gate_verdicts_need_exactly_one_verdict_per_key():
    one = {"key": "c01", "reasoning": "r", "verdict": "keep", "reason": "x"}
    GateVerdicts.model_validate({"verdicts": [one]}, context={"keys": ["c01"]})
    for verdicts in ([], [one, one], [one, {**one, "key": "c09"}]):
        with pytest.raises(ValidationError):
            GateVerdicts.model_validate({"verdicts": verdicts}, context={"keys": ["c01"]})
    assert (
        GateVerdicts.model_validate({"verdicts": [{**one, "key": "[c01]"}]}, context={"keys": ["c01"]}).verdicts[0].key
        == "c01"
    )


# --------------------------------------------------------------------------- decomposition and fusion


def test_decomposition_runs_the_original_and_its_distinct_variants_concurrently_fused(embedder):
    retriever = garden(embedder)
    package = run(retriever, embedder)
    kinds = [v["kind"] for v in stats_of(package)["variants"]]
    assert kinds == ["original", "concept", "methodology", "continuity", "authority"]
    # The offline plan's last three variants frame the concept phrase ("facts and sources about
    # <concept>"): they run no lanes of their own; the original and the concept run both.
    assert [v["searched"] for v in stats_of(package)["variants"]] == [True, True, False, False, False]
    assert len(retriever.searches) == 4  # 2 searched queries x 2 lanes
    assert package.stats.walk_line().startswith(  # what --explain prints
        "queries: 2 of 5 searched (methodology, continuity, authority: a frame around an earlier query); depth: "
    )
    assert package.intent == "negative space, emptiness, Japanese garden design"
    assert stats_of(package)["intent_source"] == "plan"
    ids = [t["chunk_id"] for t in traced(package)]
    assert len(ids) == len(set(ids))  # deduplicated by chunk id
    entry = trace_of(package, "garden-gravel")
    assert entry["lanes"] == ["vector", "text"] and entry["variants"][0] == "original"
    assert entry["rrf"] > 0


def test_a_variant_that_frames_an_earlier_query_is_not_searched_again():
    from vault_pipeline.retrieve.plan import searched

    offline = ["What is our peer review plan?", "peer review plan", "facts and sources about peer review plan"]
    assert searched(offline) == [True, True, False]
    # Rewrites that say something else (as a model planner writes them) each run their own lanes.
    rewrites = ["What is our peer review plan?", "peer review plan", "referee reports for the manuscript"]
    assert searched(rewrites) == [True, True, True]
    # Whole words only ("reviewers" is not "review"), and the same words are no frame of themselves
    # (the plan never repeats a text: ``_queries`` drops repeats first).
    assert searched(["peer review", "peer reviewers guide", "Peer Review"]) == [True, True, True]
    assert searched(["plan", "the plan"]) == [True, False]


def test_retrieve_wider_keeps_the_top_fused_and_traces_the_rest(embedder):
    package = run(garden(embedder), embedder, wide=3, adaptive=False)
    data = json.loads(package.to_json(trace=True))
    inside = [t for t in data["trace"] if t["wide"]]
    outside = [t for t in data["trace"] if not t["wide"]]
    assert len(inside) == 3 == data["stats"]["candidates"] and outside
    assert all(t["floor"] is None and t["rank"] is None and t["gate"] == "skipped" for t in outside)
    assert min(t["rrf"] for t in inside) >= max(t["rrf"] for t in outside)
    assert data["stats"]["retrieved"] == len(data["trace"])


def test_user_intent_overrides_and_reaches_the_gate(embedder, scripted_llm):
    gate_llm = scripted_llm(keep_all)
    run_query(
        QUERY,
        retriever=garden(embedder),
        embedder=embedder,
        llm_plan=OfflineBackend(),
        llm_gate=gate_llm,
        intent="Japanese gardens",
    )
    assert gate_llm.calls[0][1]["intent"] == "Japanese gardens"


def test_variants_off_runs_only_the_original(embedder):
    retriever = garden(embedder)
    package = run(retriever, embedder, variants=False)
    assert [v["kind"] for v in stats_of(package)["variants"]] == ["original"]
    assert len(retriever.searches) == 2


def test_decompose_failure_degrades_but_still_retrieves(embedder, raising_llm):
    package = run(garden(embedder), embedder, plan_llm=raising_llm())
    assert stats_of(package)["plan_error"] and stats_of(package)["degraded"] is True
    assert package.intent == QUERY and package.blocks


def test_query_plan_validation():
    with pytest.raises(ValidationError):
        QueryPlan.model_validate({"intent": "x", "variants": [{"kind": "concept", "text": "a"}] * 5})
    with pytest.raises(ValidationError):
        QueryPlan.model_validate({"intent": "x", "variants": [{"kind": "concept", "text": "  "}]})
    with pytest.raises(ValidationError):
        QueryPlan.model_validate({"intent": "x", "variants": [{"kind": "vibes", "text": "a"}]})


def test_offline_decompose_strips_politeness_and_keeps_content_phrases():
    plan = QueryPlan.model_validate(decompose({"query": "can we talk about peer review for our paper?", "intent": ""}))
    assert plan.intent == "peer review, paper"
    assert [v.kind for v in plan.variants] == ["concept", "methodology", "continuity", "authority"]
    assert plan.variants[2].text == "earlier decisions and sessions about peer review paper"
    assert decompose({"query": "what about it?", "intent": "Garden design"})["intent"] == "Garden design"


def test_offline_decompose_drops_the_function_words_of_the_prompts_own_language():
    # A Dutch prompt's "hoe", "ik", "mijn" are no subject: before, the intent was the whole sentence.
    assert decompose({"query": "Hoe ruim ik mijn huis op?"})["intent"] == "ruim, huis"
    assert decompose({"query": "Wat zijn de beweegredenen voor de wet DBA?"})["intent"] == "beweegredenen, wet DBA"
    # English keeps its own lists: words another language calls function words stay ("die", "door").
    assert decompose({"query": "Why did the door hinge die?"})["intent"] == "door hinge die"


def test_offline_gate_judges_by_the_fitted_model_over_the_signals():
    from vault_pipeline.models.offline.relevance import DEFAULT

    # An on-topic note sharing no word (close to the intent and to the pool's strongest notes) and a
    # vocabulary trap (shares words and phrases with the prompt, far from the intent).
    on_topic = {"cos_query": 0.25, "cos_intent": 0.45, "agreement": 0.25, "overlap": 0.0, "phrase": 0.0, "anchor": 0.4}
    trap = {"cos_query": 0.35, "cos_intent": 0.0, "agreement": 0.3, "overlap": 0.6, "phrase": 0.5, "anchor": 0.1}
    candidates = [
        {
            "key": "c01",
            "title": "ma",
            "heading": "",
            "text": "Ma (間), the Japanese concept of interval.",
            "signals": on_topic,
        },
        {"key": "c02", "title": "hubble", "heading": "", "text": "Empty space between galaxies.", "signals": trap},
        {"key": "c03", "title": "tax", "heading": "", "text": "The tax deadline is in April."},
    ]
    answer = gate({"intent": "negative space, Japanese garden design", "query": QUERY, "candidates": candidates})
    verdicts = {v["key"]: v for v in answer["verdicts"]}
    assert [verdicts[k]["verdict"] for k in ("c01", "c02", "c03")] == ["keep", "drop", "keep"]
    assert DEFAULT.keeps(on_topic) and not DEFAULT.keeps(trap)
    assert verdicts["c02"]["reason"].startswith(f"relevance {DEFAULT.probability(trap):.2f} < {DEFAULT.threshold:.2f}")
    assert verdicts["c03"]["reason"] == "no retrieval signals; kept unjudged"
    assert all(v["reasoning"] == "" for v in answer["verdicts"])  # a fitted model writes no made-up prose
    stricter = replace(DEFAULT, threshold=0.999)  # a vault's own fitted weights win over the default
    again = gate({"intent": "x", "query": QUERY, "candidates": candidates[:1]}, stricter)
    assert again["verdicts"][0]["verdict"] == "drop"


# --------------------------------------------------------------------------- floor, rank, recency, dedup


def test_floor_drops_low_similarity_candidates(embedder):
    package = run(garden(embedder), embedder, floor=0.2, gate_enabled=False)
    tax = trace_of(package, "tax-deadline")
    assert tax["similarity"] < 0.2 and tax["floor"] == "drop" and tax["gate"] == "skipped"
    assert "below floor" in tax["reason"] and tax["rank"] is None
    assert "tax-deadline" not in block_ids(package)
    assert stats_of(package)["after_floor"] == sum(t["floor"] == "pass" for t in traced(package))


class CalibratedHashEmbedder(HashEmbedder):
    """The fake embedder with a calibration of its own, as MiniLM and the LiteLLM adapter carry one."""

    calibration = Calibration(floor=0.27)


def test_floor_is_the_embedders_calibration_unless_vault_toml_sets_one(tmp_path):
    (tmp_path / "vault.toml").write_text(DEFAULT_TOML, encoding="utf-8")  # what `vault init` writes
    unset = load_settings(tmp_path)
    assert unset.floor is None
    assert FunnelConfig.from_settings(unset, MiniLMEmbedder()).floor == MINILM_CALIBRATION.floor == 0.20
    assert FunnelConfig.from_settings(unset, CalibratedHashEmbedder()).floor == 0.27
    assert FunnelConfig.from_settings(unset, HashEmbedder()).floor == DEFAULT_CALIBRATION.floor  # carries none
    assert calibration_of(build_embedder("openai/x", embed_fn=lambda model, texts: [])) == DEFAULT_CALIBRATION
    assert load_settings(tmp_path, {"VAULT_FLOOR": "0.25"}).floor == 0.25

    (tmp_path / "vault.toml").write_text("[retrieval]\nfloor = 0.3\n", encoding="utf-8")
    pinned = load_settings(tmp_path)
    assert FunnelConfig.from_settings(pinned, MiniLMEmbedder()).floor == 0.3
    assert FunnelConfig.from_settings(pinned, CalibratedHashEmbedder()).floor == 0.3
    assert FunnelConfig.from_settings(pinned, MiniLMEmbedder(), floor=0.05).floor == 0.05  # `--floor` wins


def cand(note_id, tier="engram", similarity=0.5, created="2024-01-01", text=None, type="atomic"):
    r = fake_row(
        note_id=note_id,
        path=f"x/{note_id}.md",
        text=text or f"text of {note_id}",
        tier=tier,
        created=created,
        type=type,
    )
    return Candidate(r, 0.01, ("vector",), ("original",), similarity)


def test_recency_decays_only_the_chat_tier():
    config = FunnelConfig(recency_half_life_days=30, recency_weight=0.15)
    ref = datetime(2024, 7, 1, tzinfo=UTC)
    assert recency("engram", "2020-01-01", ref, config) == 1.0
    assert recency("resource", "2020-01-01", ref, config) == 1.0
    assert recency("web", "2020-01-01", ref, config) == 1.0
    assert recency("chat", "2024-07-01", ref, config) == 1.0
    assert recency("chat", "2024-06-01", ref, config) == pytest.approx(0.85 + 0.15 * 0.5 ** (30 / 30))
    assert 0.85 <= recency("chat", "2000-01-01", ref, config) < 0.8501  # bounded: never overrides relevance
    ranked = rank(
        [
            cand("old-chat", "chat", created="2024-01-01"),
            cand("new-chat", "chat", created="2024-07-01"),
            cand("old-engram", created="2000-01-01"),
        ],
        ref,
        config,
    )
    assert [s.candidate.row.note_id for s in ranked] == ["old-engram", "new-chat", "old-chat"]
    assert ranked[0].score == pytest.approx(0.5)


def test_reference_date_defaults_to_newest_candidate_not_the_clock(embedder):
    package = run(garden(embedder), embedder)
    assert stats_of(package)["reference_date"] == "2024-06-01T00:00:00+00:00"


def test_rank_ties_break_by_id():
    ranked = rank([cand("b"), cand("c"), cand("a")], None, FunnelConfig())
    assert [s.candidate.row.note_id for s in ranked] == ["a", "b", "c"]


def test_dedup_keeps_the_highest_provenance_copy(embedder):
    same = "The north corner of the garden stays empty on purpose."
    copies = [
        fake_row(note_id="corner-web", path="web/corner-web.md", text=same, tier="web", type="web"),
        fake_row(note_id="corner-chat", path="inbox/corner-chat.md", text=same, tier="chat"),
        fake_row(
            note_id="corner-resource",
            path="resources/corner-resource.md",
            text=same.upper(),
            tier="resource",
            type="resource",
        ),
    ]
    package = run(garden(embedder, copies), embedder, gate_enabled=False, floor=0.0)
    assert "corner-resource" in block_ids(package)
    assert not {"corner-web", "corner-chat"} & set(block_ids(package))
    for loser in ("corner-web", "corner-chat"):
        entry = trace_of(package, loser)
        assert entry["collapsed_into"] == "corner-resource" and entry["rank"] is None
        assert "collapsed into corner-resource" in entry["reason"]
    assert stats_of(package)["deduped"] == 2
    kept, collapsed = dedup(
        rank([cand("x1", "chat", text=same), cand("x2", "engram", text=same)], None, FunnelConfig())
    )
    assert [s.candidate.row.note_id for s in kept] == ["x2"] and collapsed == {"x1#0": "x2#0"}


# --------------------------------------------------------------------------- budget assembly

CORE = Selected(
    "core#0", "core", "engrams/core.md", "engram", "atomic", 0.9, 1, "Core sentence that must survive intact."
)
STRUCT = Selected(
    "session#1",
    "session",
    "sessions/session.md",
    "chat",
    "session",
    0.5,
    2,
    "## Summary\n\nFirst paragraph of the session. It has two sentences.\n\n"
    + "Second paragraph goes on at length about details. " * 6,
)
PERIPHERAL = Selected(
    "web#0", "web", "web/web.md", "web", "web", 0.05, 3, "A clipped page. It says several things. " * 5
)


def test_levels_and_deterministic_block_order():
    out = assemble([PERIPHERAL, STRUCT, CORE], budget=10_000, window=100_000, window_share=0.78)
    assert [(b.item.note_id, b.level) for b in out.blocks] == [
        ("core", "core"),
        ("session", "structural"),
        ("web", "peripheral"),
    ]
    assert not any(b.truncated for b in out.blocks) and not out.dropped and not out.cap_fired


def overhead(*items: Selected) -> int:
    """What the blocks of ``items`` cost beyond their text: marker and reference line each, and the
    reference list's heading."""
    return sum(block_overhead(item, 1) for item in items) + estimate_tokens(REFERENCES)


def test_budget_cuts_peripheral_then_structural_before_core():
    first = estimate_tokens(first_level(STRUCT.text))
    budget = estimate_tokens(CORE.text) + first + 2 + overhead(CORE, STRUCT)
    out = assemble([CORE, STRUCT, PERIPHERAL], budget=budget, window=100_000, window_share=0.78)
    blocks = {b.item.note_id: b for b in out.blocks}
    assert blocks["core"].text == CORE.text and not blocks["core"].truncated
    assert blocks["session"].truncated and blocks["session"].text == first_level(STRUCT.text)
    assert blocks["session"].text.endswith("two sentences.")
    assert "web" not in blocks and [d["id"] for d in out.dropped] == ["web"]
    assert out.tokens <= budget and out.outcomes["web#0"].cut == "dropped"


def test_budget_cut_lands_on_a_sentence_boundary_and_is_marked():
    budget = estimate_tokens(CORE.text) + estimate_tokens(STRUCT.text) + 25 + overhead(CORE, STRUCT, PERIPHERAL)
    out = assemble([CORE, STRUCT, PERIPHERAL], budget=budget, window=100_000, window_share=0.78)
    web = next(b for b in out.blocks if b.item.note_id == "web")
    assert web.truncated and web.text.endswith(".") and PERIPHERAL.text.startswith(web.text)
    assert out.tokens <= budget and not out.dropped


def test_core_is_cut_last_and_only_when_nothing_else_is_left():
    core = replace(CORE, text="Core sentence first. Then a second one, longer than the first.")
    budget = 6 + overhead(core)
    out = assemble([core, STRUCT, PERIPHERAL], budget=budget, window=100_000, window_share=0.78)
    assert [b.item.note_id for b in out.blocks] == ["core"] and out.blocks[0].truncated
    assert out.blocks[0].text == "Core sentence first."
    assert {d["id"] for d in out.dropped} == {"session", "web"} and out.tokens <= 6


def test_a_block_no_sentence_of_which_fits_is_left_out_not_cut():
    # A one-sentence note cut to its first words ("This means that the") is a fragment.
    out = assemble([CORE, STRUCT, PERIPHERAL], budget=6, window=100_000, window_share=0.78)
    assert out.blocks == () and {d["id"] for d in out.dropped} == {"core", "session", "web"}
    # What the cuts left is filled, in block order, by a later block that fits whole.
    small = Selected("small#0", "small", "engrams/small.md", "engram", "atomic", 0.1, 9, "Short one.")
    budget = estimate_tokens(CORE.text) + 5 + overhead(CORE, small)
    out = assemble([CORE, STRUCT, PERIPHERAL, small], budget=budget, window=100_000, window_share=0.78)
    assert [b.item.note_id for b in out.blocks] == ["core", "small"] and out.tokens <= budget
    assert not any(b.truncated for b in out.blocks)


def test_cut_text_ends_a_sentence_and_respects_utf8_boundaries():
    text = "日本庭園の余白は静けさを生む。" * 4
    head = cut_text(text, 12)
    assert text.startswith(head) and head.endswith("。") and 0 < len(head.encode("utf-8")) <= 48
    assert cut_text("日本庭園の余白は静けさを生む" * 4, 5) == ""  # no sentence mark: nothing to cut to
    assert cut_text("e\u0301" * 30, 3) == ""
    assert cut_text("One. Two three four five six seven.", 3) == "One."
    assert cut_text("short", 100) == "short"
    # A cut never ends on what opens the part it leaves out: a list marker, a bold label, a lead-in.
    listed = "It has steps.\n\nTo do this, follow these steps:\n\n1. **Install it**\n\n7. More text that goes on."
    assert cut_text(listed, 20) == "It has steps."
    assert cut_text("Laws.\n\n7. A robot must explain itself.", 4) == "Laws."


def test_cap_backstop_fires_when_forced(embedder):
    package = run(garden(embedder), embedder, gate_enabled=False, budget=2000, window=40)
    assert stats_of(package)["cap_fired"] is True and stats_of(package)["cap"] == 31
    assert package.tokens <= 31 and stats_of(package)["dropped_for_budget"]
    assert any(t["cap"] for t in traced(package))
    normal = run(garden(embedder), embedder, gate_enabled=False)
    assert stats_of(normal)["cap_fired"] is False and not any(t["cap"] for t in traced(normal))


# --------------------------------------------------------------------------- the package


def test_package_is_byte_identical_across_runs(embedder):
    outputs = {run(garden(HashEmbedder(dim=512)), HashEmbedder(dim=512), gate_batch=3).to_json() for _ in range(10)}
    assert len(outputs) == 1


def test_json_shape(embedder):
    package = run(garden(embedder), embedder)
    # The trace is for --explain: plain --json (and MCP) leave it out; nothing else differs.
    plain = json.loads(package.to_json())
    data = json.loads(package.to_json(trace=True))
    shape = {"query", "intent", "found", "blocks", "tokens", "tokenizer", "stats"}
    assert set(plain) == shape and set(data) == {*plain, "trace"}
    assert {k: v for k, v in data.items() if k != "trace"} == plain
    block = data["blocks"][0]
    assert {"id", "path", "tier", "level", "score", "text", "source", "heading", "truncated"} <= set(block)
    # Extended, never renamed: scripts read conversation and messages; path and links were added.
    assert set(block["source"]) == {"conversation", "messages", "path", "links"}
    assert block["source"]["messages"] == ["m-1"] and block["source"]["path"] == block["path"]
    assert block["level"] in ("core", "structural", "peripheral") and block["path"].endswith(".md")
    stats = {
        "candidates",
        "after_floor",
        "gate_kept",
        "gate_dropped",
        "gate_fail_open",
        "degraded",
        "deduped",
        "cap_fired",
        "tokens",
        "budget",
        "dropped_for_budget",
        "variants",
        "models",
    }
    assert stats <= set(data["stats"])
    assert set(data["stats"]["models"]) == {"plan", "gate", "embedder"}
    entry_keys = {
        "id",
        "chunk_id",
        "path",
        "lanes",
        "variants",
        "rrf",
        "similarity",
        "floor",
        "gate",
        "reason",
        "score",
        "rank",
    }
    assert all(entry_keys <= set(t) for t in data["trace"])
    # A chat export's candidate names its chat (what a labels line copies as `conversation`).
    assert {t["conversation"] for t in data["trace"]} == {"conv-1", "conv-cosmos"}
    assert len(data["trace"]) == data["stats"]["retrieved"]
    # The package as returned, references too, by the tokenizer it names.
    assert data["tokens"] == token_counter(data["tokenizer"]).count(package.to_markdown())
    text = json.dumps(data)
    assert not re.search(r"\d\.\d{7,}", text)  # floats rounded to 6 places


def test_tokens_are_the_count_of_what_vault_query_prints(embedder, capsys):
    from vault_pipeline.cli.query import print_package

    for budget in (120, 400, 2000):
        package = run(garden(embedder), embedder, budget=budget, stop=0.0)
        print_package(package, json_out=False, explain=False)
        printed = capsys.readouterr().out
        count = token_counter(package.tokenizer).count
        assert package.blocks and count(printed.rstrip("\n") + "\n") == package.tokens <= budget
        notes = {b.item.stem for b in package.blocks}
        assert printed.split("References:\n", 1)[1].count("[[") == len(notes)  # one short line a note


def test_markdown_cites_every_block_in_a_numbered_reference_list(embedder):
    package = run(garden(embedder), embedder)
    markdown = package.to_markdown()
    body, _, references = markdown.partition("\nReferences:\n")
    assert package.blocks and references
    for number, block in enumerate(package.blocks, 1):
        assert f"{block.text.strip()} [{number}]" in body  # the block, then its reference number
        line = next(x for x in references.splitlines() if x.startswith(f"[[{block.item.stem}]] "))
        assert str(number) in line.split("]] ", 1)[1].split(", ")  # one line per note, its blocks' numbers
    assert "Source:" not in body and "[[" not in body  # no link line per block


# --------------------------------------------------------------------------- integration with the real index


def _note(note_id: str, body: str, *, status: str = "kept", conversation: str = "conv-9", **frontmatter) -> str:
    """A note of ``conversation`` (messages m-3, m-4) with no tier of its own: its folder decides it."""
    return note_text(
        note_id,
        body,
        status=status,
        tier=None,
        source={"kind": "chatgpt", "conversation": conversation, "messages": ["m-3", "m-4"]},
        **frontmatter,
    )


INTEGRATION_NOTES = {
    "engrams/hubble law.md": _note("n-hubble", COSMOLOGY.text, conversation="conv-cosmos"),
    "engrams/gravel frames stones.md": _note("n-gravel", GARDEN_ROWS[0].text),
    "engrams/ma interval.md": _note("n-ma", GARDEN_ROWS[1].text),
    "inbox/north corner.md": _note(
        "n-corner", GARDEN_ROWS[2].text, status="provisional", created="2024-06-01T10:00:00"
    ),
    "archive/old garden.md": _note(
        "n-old",
        "Negative space and emptiness in a Japanese garden design, retired.",
        status="archived",
        superseded_by="[[gravel frames stones]]",
    ),
    "sessions/2024-05-01 garden talk.md": _note(
        "s-garden",
        "# Garden talk\n\nWe talked about Japanese garden design and negative space.\n\n"
        "## Summary\n\nEmptiness in a Japanese garden is designed: raked gravel stands for water.\n\n"
        "The second paragraph lists the stones one by one and goes on for a while.\n",
        type="session",
    ),
}


def test_integration_with_a_real_index(make_vault):
    # MiniLM, whose cosines the offline gate's weights were fitted on: with the hash embedder the
    # user's own north-corner decision sits at the gate's threshold, and which side of it is chance.
    embedder = MiniLMEmbedder()
    vault = make_vault(notes=INTEGRATION_NOTES)
    with vault.lock("index"):
        sync(vault, embedder)
    retriever = Index.open(vault, embedder)
    # Every survivor is evidence here (stop 0): this test is about the index's wiring, not depth.
    packages = [run(retriever, embedder, stop=0.0, intent=GARDEN_INTENT) for _ in range(2)]
    package = packages[0]
    assert packages[0].to_json() == packages[1].to_json()
    ids = block_ids(package)
    assert "n-hubble" not in ids and trace_of(package, "n-hubble")["gate"] == "drop"
    assert {"n-gravel", "n-ma", "n-corner"} <= set(ids)
    assert all(t["id"] != "n-old" for t in traced(package))  # archived notes never enter by default
    for block in package.blocks:
        assert (vault.root / block.item.path).is_file() and not block.item.path.startswith("/")
    levels = {b.item.chunk_id: b.level for b in package.blocks if b.item.note_id == "s-garden"}
    # A kept session is an engram: its top-ranked chunk is core, its other chunks structural.
    assert sorted(levels.values()) == ["core", "structural"]
    first = package.blocks[0].to_dict()["source"]
    # A summary chunk holds no turn verbatim: it cites its conversation, not the session's turns.
    assert first["conversation"] == "conv-9" and first["messages"] == [] and package.blocks[0].item.type == "session"
    assert all(b.to_dict()["source"]["messages"] == ["m-3", "m-4"] for b in package.blocks if b.item.type == "atomic")


@pytest.fixture(scope="module")
def ingested_example(tmp_path_factory) -> Path:
    """vault_example with its exports ingested and cleaned offline, indexed with MiniLM: sessions
    with their transcripts, related links and a superseded note for the one hop to read."""
    root = tmp_path_factory.mktemp("ingested") / "vault"
    shutil.copytree(REPO / "vault_example" / "vault", root)
    vault = Vault.open(root)
    try:
        exports = sorted((REPO / "vault_example" / "exports").iterdir())
        pipeline.ingest(vault, exports, OfflineBackend(), selector=EVERY_CANDIDATE)  # many notes: every hop runs
        pipeline.clean(vault, embedder=build_embedder("minilm"), llm=OfflineBackend())
    finally:
        vault.close()
    # Clean relates notes within these conversations; a link across two of them, as clean or a user
    # writes it, lets the one hop bring a note its sessions do not hold.
    asking = next((root / "inbox").glob("can-we-talk-about-peer-review-for-our-paper-*.md"))
    other = next((root / "inbox").glob("ill-keep-related-work-to-one-page-*.md"))
    head, fence, body = asking.read_text(encoding="utf-8").partition("\n---\n")
    asking.write_text(f'{head}\nrelated:\n  - "[[{other.stem}]]"{fence}{body}', encoding="utf-8")
    return root


def test_query_columns_are_the_hits_fields_and_the_speaker():
    """One list of what the funnel reads: ``Hit``'s stored fields, and ``speaker`` (read only if
    a row has it, for an atomic note's block)."""
    read = {name for name, value in vars(Hit).items() if isinstance(value, property)} - {"similarity", "lane"}
    assert set(QUERY_COLUMNS) == read | {"speaker"} and len(QUERY_COLUMNS) == len(set(QUERY_COLUMNS))


@pytest.mark.slow
def test_the_funnel_reads_only_the_query_columns(ingested_example, monkeypatch):
    """``pipeline.query`` reads the index's QUERY_COLUMNS only: the funnel touches every one of
    them and no other field of a row, and its packages are those a read of every column gives."""
    retrieve = f"{Path(run_query.__code__.co_filename).parent}{os.sep}"
    touched: set[str] = set()
    digests: set[str] = set()

    @dataclass(frozen=True)
    class Watched(Row):
        """A row that notes which fields code in ``retrieve/`` reads, and which digest it was built with."""

        def __post_init__(self):
            digests.add(self.sha256)

        def __getattribute__(self, name):
            if name in ROW_COLUMNS and sys._getframe(1).f_code.co_filename.startswith(retrieve):
                touched.add(name)
            return object.__getattribute__(self, name)

    monkeypatch.setattr(search, "Row", Watched)
    vault, embedder = Vault.open(ingested_example), build_embedder("minilm")
    asked = (REPO / "vault_example" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    questions = [(json.loads(line)["query"], None) for line in asked]
    questions += [("How often should I feed my sourdough starter?", None), ("Which reading group book?", None)]

    def packages() -> list[str]:
        found = pipeline.query(
            vault, questions, embedder=embedder, llm_plan=OfflineBackend(), llm_gate=OfflineBackend()
        )
        return [p.to_json() for p in found]

    try:
        slim = packages()
        assert touched == set(QUERY_COLUMNS) and digests == {""}  # no row read its sha256 column
        monkeypatch.setattr(retrieve_types, "QUERY_COLUMNS", ROW_COLUMNS)
        digests.clear()
        assert packages() == slim and "" not in digests
    finally:
        vault.close()
    # The one hop's reads all ran: sessions (neighbours, whole turns, superseded turns), related links.
    hops = [json.loads(p)["stats"]["expansion"] for p in slim]
    assert all(any(h.get(k) for h in hops) for k in ("neighbours", "related", "whole_turns", "superseded_turns"))


def test_the_gate_reads_the_query_vectors_the_funnel_embedded(embedder):
    """Every query and the intent are embedded once, in the lanes' call; the offline gate's signals
    read those vectors and the candidates' stored ones, and embed nothing again."""
    retriever = garden(embedder)
    embedder.calls.clear()
    package = run(retriever, embedder, intent=GARDEN_INTENT)
    queries = [v["text"] for v in stats_of(package)["variants"]]
    assert embedder.calls == [[*queries, GARDEN_INTENT]]
    # A model gate reads no signals: the intent's vector is not needed.
    embedder.calls.clear()
    run(retriever, embedder, intent=GARDEN_INTENT, gate_llm=ScriptedLLM(keep_all))
    assert embedder.calls == [queries]


def test_the_gate_reads_a_chat_exports_conversations_and_no_transcripts(embedder, monkeypatch):
    """The session signals see a chat export's thread; a LoCoMo or transcript session counts as no chat."""
    import vault_pipeline.retrieve.gate as gate_module

    seen: list[dict[str, str]] = []
    real = gate_module.gate_signals

    def spy(rows, **kwargs):
        seen.append(dict(kwargs.get("conversations") or {}))
        return real(rows, **kwargs)

    monkeypatch.setattr(gate_module, "gate_signals", spy)

    def chats(kind: str) -> set[str]:
        seen.clear()
        rows = [replace(r, source_kind=kind) for r in (COSMOLOGY, *GARDEN_ROWS)]
        run(FakeRetriever(rows, embedder), embedder)
        assert seen
        return {chat for call in seen for chat in call.values()}

    assert chats("chatgpt") == {"conv-1", "conv-cosmos"} == chats("claude")
    assert chats("locomo") == {""} and chats("transcript") == {""}


def test_unknown_words_are_the_ones_no_note_holds_archived_notes_included(make_vault, embedder):
    vault = make_vault(notes=INTEGRATION_NOTES)
    with vault.lock("index"):
        sync(vault, embedder)
    index = Index.open(vault, embedder)
    # "retired" is only in the archived note; "galaxy" matches "galaxies" through the index's stemmer.
    assert index.unknown_words(["gravel", "zyxwvut", "retired", "galaxy", "qwertyuiop"]) == ["zyxwvut", "qwertyuiop"]
    assert index.unknown_words([]) == []


def test_a_prompt_word_no_note_holds_is_named_in_the_package(embedder):
    from vault_pipeline.retrieve.lanes import absent_words

    spy = FakeRetriever([COSMOLOGY, *GARDEN_ROWS], embedder)
    package = run(spy, embedder, query="Where does the stone lantern zyxwvut go in a Japanese garden?")
    assert stats_of(package)["absent_words"] == ["lantern", "zyxwvut"]
    # Only the words no retrieved candidate holds were looked up ("japanese", "garden", "stone" came back).
    assert spy.words_asked and all(set(asked) <= {"lantern", "zyxwvut"} for asked in spy.words_asked)
    assert "> No note in the vault holds: lantern, zyxwvut." in package.to_markdown()
    assert package.stats.walk_line().endswith("; no note holds: lantern, zyxwvut")
    assert json.loads(package.to_json())["stats"]["absent_words"] == ["lantern", "zyxwvut"]
    # Every word back in a candidate: no lookup, no line.
    spy.words_asked.clear()
    held = run(spy, embedder, query="Raked gravel and negative space in a Japanese garden")
    assert stats_of(held)["absent_words"] == [] and spy.words_asked == []
    assert "No note in the vault holds" not in held.to_markdown()
    # Without candidates, every content word is looked up; the vault's own words are known.
    assert absent_words("zyxwvut gravel", [], garden(embedder)) == ["zyxwvut"]


def test_cli_query_floor_is_the_embedders_unless_vault_toml_sets_one(make_vault, monkeypatch):
    from typer.testing import CliRunner

    import vault_pipeline.models.embed as embed
    from vault_pipeline.cli import app

    monkeypatch.delenv("VAULT_FLOOR", raising=False)
    monkeypatch.setattr(embed, "build_embedder", lambda *args, **kwargs: CalibratedHashEmbedder(dim=64))
    vault = make_vault("v", notes={"engrams/ma interval.md": INTEGRATION_NOTES["engrams/ma interval.md"]})
    runner = CliRunner()
    indexed = runner.invoke(app, ["index", "--vault", str(vault.root)])
    assert indexed.exit_code == 0, indexed.output

    def floor() -> float:
        result = runner.invoke(app, ["query", QUERY, "--vault", str(vault.root), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["stats"]["floor"]

    assert floor() == 0.27  # the vault.toml `vault init` writes leaves the floor to the embedder
    toml = vault.root / "vault.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace("[retrieval]\n", "[retrieval]\nfloor = 0.3\n"), encoding="utf-8"
    )
    assert floor() == 0.3


def test_cli_explain_shows_every_candidate_from_both_lanes(make_vault, monkeypatch):
    """`--explain` and `--json --explain` run through the CLI; a full-text-only candidate is shown too."""
    from typer.testing import CliRunner

    import vault_pipeline.models.embed as embed
    import vault_pipeline.retrieve.types as types
    from vault_pipeline.cli import app

    monkeypatch.setattr(embed, "build_embedder", lambda *args, **kwargs: HashEmbedder(dim=64))
    monkeypatch.setattr(types, "DEEP_LIST", 1)  # lanes of one hit each, as `--wide 1` alone once gave
    vault = make_vault("v", notes=INTEGRATION_NOTES)
    runner = CliRunner()
    assert runner.invoke(app, ["index", "--vault", str(vault.root)]).exit_code == 0
    # A narrow vector lane leaves some candidates to the full-text lane alone.
    args = ["query", QUERY, "--vault", str(vault.root), "--wide", "1", "--explain"]
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert "funnel trace" in shown.output
    assert "depth: " in shown.output and "candidates in steps" in shown.output  # how deep, and why it stopped
    as_json = runner.invoke(app, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    trace = json.loads(as_json.stdout)["trace"]
    plain = runner.invoke(app, [*args[:-1], "--json"])  # without --explain, --json leaves the trace out
    assert plain.exit_code == 0 and "trace" not in json.loads(plain.stdout)
    assert json.loads(plain.stdout)["blocks"] == json.loads(as_json.stdout)["blocks"]
    lanes = [tuple(t["lanes"]) for t in trace]
    assert ("text",) in lanes and any("vector" in lane for lane in lanes), lanes
    text_only = next(t for t in trace if tuple(t["lanes"]) == ("text",))
    # Its cosine comes from the stored vectors (or the table prints "-"), never a crash.
    assert text_only["similarity"] is None or 0.0 <= abs(text_only["similarity"]) <= 1.0


def test_the_vaults_fitted_gate_json_decides_what_vault_query_keeps(make_vault, monkeypatch):
    """`gate-calibrate --fit` stores gate.json; `vault query` then gates with it, not the shipped default."""
    from typer.testing import CliRunner

    import vault_pipeline.models.embed as embed
    from vault_pipeline.cli import app
    from vault_pipeline.models.offline.relevance import DEFAULT, RelevanceModel
    from vault_pipeline.retrieve.signals import save_relevance

    monkeypatch.setattr(embed, "build_embedder", lambda *args, **kwargs: HashEmbedder(dim=64))
    vault = make_vault("v", notes=INTEGRATION_NOTES)
    runner = CliRunner()
    assert runner.invoke(app, ["index", "--vault", str(vault.root)]).exit_code == 0

    def gated() -> list[str]:
        result = runner.invoke(app, ["query", QUERY, "--vault", str(vault.root), "--json", "--explain"])
        assert result.exit_code == 0, result.output
        return [t["gate"] for t in json.loads(result.stdout)["trace"] if t.get("gate")]

    shipped = gated()
    assert "keep" in shipped, shipped
    # A vault whose fitted gate keeps nothing: an impossible bias, the shipped weights otherwise.
    save_relevance(vault.root, RelevanceModel(dict(DEFAULT.weights), bias=-1e3, threshold=0.5, source="test"))
    assert gated() and "keep" not in gated()


def test_a_package_on_nothing_the_vault_holds_is_empty_and_says_so(embedder):
    from vault_pipeline.models.offline.relevance import DEFAULT, FoundModel

    spy = FakeRetriever([COSMOLOGY, *GARDEN_ROWS], embedder)
    query = "How do I descale my Zyxwvut espresso machine?"
    # A found model that weighs only the share of the prompt's words no note holds.
    strict = FoundModel({"absent_share": -20.0}, 5.0, 0.5)
    gate = OfflineBackend(relevance=replace(DEFAULT, found=strict))
    package = run(spy, embedder, query=query, gate_llm=gate, stop=0.0)
    data = package.to_dict()
    assert data["found"] is False and data["blocks"] == [] and data["stats"]["evidence"]["probability"] < 0.5
    markdown = package.to_markdown()
    assert "Nothing on this in the vault" in markdown and "References" not in markdown
    assert package.tokens == token_counter(package.tokenizer).count(markdown) < 60
    # The same vault answers a prompt on what it holds, with the same model.
    held = run(spy, embedder, query="Why is emptiness designed in a Japanese garden?", gate_llm=gate, stop=0.0)
    assert held.found and held.blocks and held.to_dict()["found"] is True
    # Below the stop threshold a survivor is no block, and the trace says why.
    none = run(spy, embedder, query="Why is emptiness designed in a Japanese garden?", stop=1.0)
    assert not none.blocks and not none.found
    assert any("below the evidence threshold" in t["reason"] for t in traced(none))


def test_evidence_left_out_because_nothing_was_found_is_traced_as_such(embedder):
    from vault_pipeline.models.offline.relevance import DEFAULT, FoundModel

    spy = FakeRetriever([COSMOLOGY, *GARDEN_ROWS], embedder)
    strict = FoundModel({"absent_share": -20.0}, 5.0, 0.5)  # found only when few of the prompt's words are absent
    gate = OfflineBackend(relevance=replace(DEFAULT, found=strict))
    query = "Why is emptiness designed in a Japanese garden by Zyxwvut Qwertyx?"
    package = run(spy, embedder, query=query, gate_llm=gate, stop=0.0)
    assert not package.found and not package.blocks
    reasons = [t["reason"] for t in traced(package)]
    assert any("nothing in the vault is clearly about the prompt: no block" in r for r in reasons)
    assert not any("below the evidence threshold" in r for r in reasons)  # stop 0.0: every survivor cleared it


def test_a_package_the_found_model_is_unsure_of_carries_only_the_closest_few_marked(embedder):
    from vault_pipeline.models.offline.relevance import DEFAULT, FoundModel
    from vault_pipeline.retrieve.evidence import CLOSEST, CLOSEST_TOKENS

    spy = FakeRetriever([COSMOLOGY, *GARDEN_ROWS], embedder)
    unsure = FoundModel({}, 0.0, threshold=0.4, sure=0.6)  # every prompt at 0.5: between the two
    gate = OfflineBackend(relevance=replace(DEFAULT, found=unsure))
    package = run(spy, embedder, query="Why is emptiness designed in a Japanese garden?", gate_llm=gate, stop=0.0)
    whole = run(spy, embedder, query="Why is emptiness designed in a Japanese garden?", stop=0.0)
    assert not package.found and whole.found and 0 < len(package.blocks) <= min(CLOSEST, len(whole.blocks))
    assert package.tokens <= CLOSEST_TOKENS and package.to_dict()["stats"]["evidence"]["closest"] is True
    assert "Nothing in the vault is clearly about this: the closest notes follow" in package.to_markdown()
