"""benchmarks/bench_real_packages.py: the shipped package labels, and how blocks are counted."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_real_packages as bench  # noqa: E402


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
