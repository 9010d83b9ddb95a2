"""People pages against a labelled list: which named people get a page, and which pages name no one.

Reads ``tests/data/people_labels.jsonl`` (read by hand; see tests/data/README.md) and finds the
people ingest would write pages for (``ingest/people.py``, the same ``People`` the ingest feeds) in:

* **export**: the real ChatGPT export (``--export``), every conversation;
* **demo**: ``vault_example/exports`` (what ``vault demo`` ingests);
* **tests**: the labelled sentences themselves, each as a user turn;
* **locomo**: LoCoMo's dev conversations (``--locomo``): its speakers are the people to find
  (validation only, nothing here is fitted on it).

Per source: recall (labelled people, citations not counted, that get a page), precision (pages
whose name is labelled a person; a page whose name has no label counts as wrong) and the names
behind every miss and wrong page.

    python benchmarks/bench_people.py [--export PATH] [--locomo PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vault_pipeline.ingest.parse import Conversation, Message, read_export
from vault_pipeline.ingest.people import People

REPO = Path(__file__).resolve().parents[1]
LABELS = REPO / "tests" / "data" / "people_labels.jsonl"
EXPORT = REPO.parent / "shared" / "data" / "exports" / "chatgpt-pkuppens-2023.json"
LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo-dev.json"


def pages(paths: list[Path]) -> set[str]:
    """The names ingest writes a page for, over every conversation of ``paths``."""
    people = People()
    for path in paths:
        for item in read_export(path):
            if isinstance(item, Conversation):
                people.add(item, f"s-{item.id}")
    return set(people.pages())


def sentence_pages(texts: list[str]) -> set[str]:
    people = People()
    for n, text in enumerate(dict.fromkeys(texts)):
        message = Message(f"m{n}", "user", "user", text, None)
        people.add(Conversation("chatgpt", f"c{n}", "t", None, None, (message,), "labels"), f"s-{n}")
    return set(people.pages())


def score(source: str, found: set[str], labels: list[dict], expected: set[str] | None = None) -> dict:
    """Recall over the expected people, precision over the pages found."""
    mine = [r for r in labels if r["source"] == source]
    people = expected if expected is not None else {r["name"] for r in mine if r["person"] and r["scope"] == "named"}
    known = {r["name"]: r["person"] for r in mine}
    right = {n for n in found if known.get(n) or (expected is not None and n in expected)}
    return {
        "source": source,
        "people": len(people),
        "with_page": len(people & found),
        "recall": round(len(people & found) / len(people), 3) if people else None,
        "pages": len(found),
        "precision": round(len(right) / len(found), 3) if found else None,
        "missed": sorted(people - found),
        "wrong": sorted(found - right),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--export", type=Path, default=EXPORT)
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    args = parser.parse_args()
    labels = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]
    demo = sorted(p for p in (REPO / "vault_example" / "exports").rglob("*") if p.suffix in (".json", ".md"))
    rows = [
        score("export", pages([args.export]), labels),
        score("demo", pages(demo), labels),
        score("tests", sentence_pages([r["text"] for r in labels if r["source"] == "tests"]), labels),
    ]
    if args.locomo.exists():
        data = json.loads(args.locomo.read_text(encoding="utf-8"))
        speakers = {s["conversation"][k] for s in data for k in ("speaker_a", "speaker_b")}
        rows.append(score("locomo", pages([args.locomo]), labels, speakers))
    for row in rows:
        print(json.dumps(row, ensure_ascii=False))


if __name__ == "__main__":
    main()
