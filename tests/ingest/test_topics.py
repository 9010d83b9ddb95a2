"""Subjects across chats: one tag and one hub per subject several conversations share."""

from __future__ import annotations

import json
import re

from vault_pipeline import pipeline
from vault_pipeline.ingest.select import Selector
from vault_pipeline.ingest.topics import Subjects, assign, mentioned
from vault_pipeline.models.offline import OfflineBackend

EVERY = Selector({}, 0.0, write=0.0, keep=0.0)
TITLES = [
    "Django Multi-DB Setup",
    "Fixing Django GCP Deployment",
    "GitHub Actions for Django",
    "Python Django CI/CD GCP",
    "Google Cloud Webshop Architecture",
    "Google Cloud Django Architecture",
    "Sourdough Schedule",
    "Summarize Request and Response",
    "Summarize this Article",
]


def test_one_tag_per_subject_names_first_and_never_a_lone_title_or_a_doing():
    subjects = Subjects.of(TITLES)
    found = assign(subjects, {str(n): (t, ()) for n, t in enumerate(TITLES)})
    assert found["0"] == ["Django"]  # "Multi-DB" and "Setup" are in one title only
    assert found["1"] == ["Django", "GCP"]
    assert found["2"] == ["Django"]  # "GitHub" and "Actions": one title each
    assert found["4"] == ["Google Cloud", "Architecture"]  # a phrase whose words always stand together
    assert found["6"] == found["7"] == []  # a lone title; "summarize" is a doing, not a subject
    assert sum("Django" in v for v in found.values()) == 5


def test_a_subject_the_user_turns_name_joins_a_chat_whose_title_does_not():
    subjects = Subjects.of(TITLES)
    said = mentioned(["My Django view 500s.", "Still Django: the template breaks. Really broken."])
    assert said == ("django",)  # "template" and "broken" are common words; "view" said once
    assert assign(subjects, {"x": ("Webshop checkout", said)})["x"] == []  # alone: gathers nothing
    both = assign(subjects, {"x": ("Webshop checkout", said), "y": ("Django Multi-DB Setup", ())})
    assert both == {"x": ["Django"], "y": ["Django"]}


def _export(path, titles):
    convs = []
    for n, title in enumerate(titles):
        mapping = {
            "root": {"id": "root", "message": None, "parent": None, "children": [f"u{n}"]},
            f"u{n}": {
                "id": f"u{n}",
                "parent": "root",
                "children": [],
                "message": {
                    "id": f"u{n}",
                    "author": {"role": "user"},
                    "create_time": 1_700_000_000 + n * 86_400 * 40,
                    "content": {"content_type": "text", "parts": [f"We deploy the shop with {title} every week now."]},
                },
            },
        }
        convs.append(
            {"id": f"c{n}", "title": title, "create_time": 1_700_000_000 + n * 86_400 * 40, "mapping": mapping}
        )
    path.write_text(json.dumps(convs), encoding="utf-8")
    return path


def test_hubs_gather_chats_are_never_empty_and_a_partial_ingest_tags_alike(make_vault, tmp_path):
    vault = make_vault()
    titles = ["Django Multi-DB Setup", "Fixing Django GCP Deployment", "Sourdough Schedule"]
    pipeline.ingest(vault, [_export(tmp_path / "all.json", titles)], OfflineBackend(), selector=EVERY)
    hubs = {p.name: p.read_text(encoding="utf-8") for p in (vault.root / "topics").glob("*.md")}
    django = next(text for name, text in hubs.items() if name.startswith("django-"))
    sessions = sorted(p.stem for p in (vault.root / "sessions").glob("*.md"))
    assert sum(f"[[{s}]]" in django for s in sessions) == 2  # both Django chats, not the bread
    assert all(re.search(r"\[\[[^\]]+\]\]", text) for text in hubs.values())  # no empty hub
    tags = {t for p in (vault.root / "inbox").glob("*.md") for t in re.findall(r"- (topic/\S+)", p.read_text())}
    assert tags == {"topic/django"}
    # A later ingest of one Django chat alone still finds the subject, through the vault's sessions.
    other = make_vault("other")
    pipeline.ingest(other, [_export(tmp_path / "all.json", titles)], OfflineBackend(), selector=EVERY)
    one = _export(tmp_path / "one.json", ["Django Multi-DB Setup"])
    again = pipeline.ingest(other, [one], OfflineBackend(), selector=EVERY)
    assert again.files_written == 0  # the same tags: nothing to rewrite


def test_a_subject_keeps_the_name_its_hub_already_has(make_vault, tmp_path):
    """ "Gardens" then "garden": a later ingest whose titles spell it otherwise files under the same hub."""
    vault = make_vault()
    first = ["Negative space in Japanese gardens", "Moss gardens of Kyoto"]
    pipeline.ingest(vault, [_export(tmp_path / "first.json", first)], OfflineBackend(), selector=EVERY)
    later = ["Structure of the garden essay", "Planting a garden border", "A garden in winter"]
    pipeline.ingest(vault, [_export(tmp_path / "later.json", later)], OfflineBackend(), selector=EVERY)
    hubs = [p.name for p in (vault.root / "topics").glob("*.md") if p.name.lower().startswith("garden")]
    assert len(hubs) == 1 and hubs[0].startswith("gardens-"), hubs  # one hub, the name it was written with
    tags = {t for p in (vault.root / "inbox").glob("*.md") for t in re.findall(r"- (topic/garden\S*)", p.read_text())}
    assert tags == {"topic/gardens"}
