"""benchmarks/bench_real_packages.py: the shipped package labels, and how blocks are counted."""

from __future__ import annotations

import sys

from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import bench_real_packages as bench


def test_the_shipped_labels_cover_every_block_of_the_14_packages():
    labels = bench.load(bench.LABELS)
    # 521 blocks of the first packages, then 52 that later gates brought in, 3 that the assembly's
    # refill put in (a block that fits whole), 15 replies to a question the hop brought and 62 blocks of
    # the chats the hop reached once its seeds came by fused rank (8 off-topic), 42 that the keep gate's
    # tagging fixes brought (10 off-topic, 1 contaminant), 6 after the pronoun's antecedent (2 off-topic);
    # no block labelled twice.
    assert len({query for query, _ in labels}) == 14 and len(labels) == 703
    rows = list(labels.values())
    assert sum(r["label"] == "off-topic" for r in rows) == 142 and sum(r["contaminant"] for r in rows) == 38
    assert all(r["label"] == "off-topic" for r in rows if r["contaminant"])  # a contaminant is off-topic


def test_blocks_are_counted_by_label_and_by_how_they_came_in():
    labels = {
        ("q", "a:0"): {"label": "relevant", "contaminant": False},
        ("q", "b:0"): {"label": "off-topic", "contaminant": True},
        ("q", "c:0"): {"label": "off-topic", "contaminant": False},
    }
    package = {
        "query": "q",
        "blocks": [{"chunk_id": cid} for cid in ("a:0", "b:0", "c:0", "d:0")],
        "trace": [{"chunk_id": "b:0", "expanded_from": "a"}, {"chunk_id": "a:0", "expanded_from": None}],
    }
    counts = bench.tally([package], labels)
    assert counts["all"] == {"blocks": 4, "relevant": 1, "off_topic": 2, "contaminant": 1, "unlabelled": 1}
    assert counts["hop"] == {"blocks": 1, "off_topic": 1, "contaminant": 1}
    assert counts["retrieved"]["blocks"] == 3 and counts["retrieved"]["unlabelled"] == 1
    assert bench.share(1, 4) == "25.0%" and bench.share(1, 0) == "-"


def test_a_gate_model_judges_the_held_out_packages(tmp_path, capsys, monkeypatch):
    """``bench_contamination --model``: the model is the gate of an added row (here one that drops every
    candidate, so its packages are empty while the fitted gate's are not)."""
    import json

    import bench_contamination

    from tests.support.fakes import ScriptedLLM

    pools = {
        ("kiln glaze firing", "pottery"): [
            ("The kiln fired the glaze at 1240 degrees.", True),
            ("Glazes need a second firing after the bisque.", True),
            ("Bake the bread at 220 degrees.", False),
        ],
        ("sprint length in scrum", "agile software teams"): [
            ("Our sprints last two weeks.", True),
            ("The team agreed on two-week sprints after the retro.", True),
            ("The sprinter ran 100 metres.", False),
        ],
        ("shady garden plants", "shade gardening"): [
            ("Hostas and ferns thrive under the north wall.", True),
            ("Hydrangeas take the shade by the fence.", True),
            ("Sunglasses give shade to the eyes.", False),
        ],
    }
    labels = [
        {
            "query": query,
            "intent_domain": domain,
            "candidate_id": f"{query.split()[0]}-{i}",
            "candidate": text,
            "label": "relevant" if relevant else "off-topic",
            "contaminant": not relevant,
        }
        for (query, domain), rows in pools.items()
        for i, (text, relevant) in enumerate(rows)
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in labels), encoding="utf-8")

    def drop_all(prompt_name, variables):
        keys = [c["key"] for c in variables["candidates"]]
        return {"verdicts": [{"key": k, "reasoning": "-", "verdict": "drop", "reason": "test"} for k in keys]}

    made = []
    monkeypatch.setattr(
        bench_contamination, "build_llm", lambda model, **_: made.append(model) or ScriptedLLM(drop_all)
    )
    bench_contamination.main(["--labels", str(path), "--out", str(tmp_path / "run"), "--model", "test/drop-all"])
    rows = {line.split("  ")[0]: line for line in capsys.readouterr().out.splitlines()}
    assert made == ["test/drop-all"]
    assert "blocks    0" in rows["funnel, gate model test/drop-all"]
    assert "blocks    0" not in rows["funnel (floor + fitted gate, held out)"]
