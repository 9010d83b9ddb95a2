"""Benchmark the cleaning sweep's dry run on a seeded synthetic vault.

    python benchmarks/bench_clean.py                      # 100,000 notes, offline MiniLM (slow index)
    python benchmarks/bench_clean.py --notes 10000 --embedder hash
    python benchmarks/bench_clean.py --labels              # only the hand-labelled real-export pairs

The vault holds atomic notes about made-up subjects ("The staging server port is 8080.")
with planted groups, each recorded as ground truth:

* duplicates   - 2-3 rewordings of one claim (other template, number words, a Context line);
  a third of the groups also swap the attribute for a synonym ("deadline" / "due date");
* contradictions - an older claim and a newer one with a changed value ("moved to", "is now",
  a plain new value) or a negation ("is no longer"); some form a chain of three; some have a
  kept engram as the older note and a chat note as the newer (provenance must hold those);
* related      - the same subject with a different predicate ("needs approval from Alice");
* look-alikes  - the same words and value under a different subject ("production" vs "staging").

Everything else is filler with unique subjects from the same vocabulary, so nearest
neighbours are crowded with look-alikes. The notes are real files written with notes.py's
renderer into a vault made by vault.py; the index is built by index.sync, and the dry run
(clean.plan with the offline judge, the work of `vault clean --dry-run`) runs in a fresh
process so its wall time and peak RSS are its own.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import combinations, pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STATE_MARK = ".vault_pipeline/bench_clean.json"  # what --reuse checks
sys.path.insert(0, str(REPO))

QUALIFIERS = (
    "staging production mobile desktop billing search analytics onboarding marketing support "
    "payments reporting backend frontend internal public legacy nightly weekly quarterly customer "
    "partner admin research design security compliance finance legal sales travel office garden "
    "library fitness kitchen hiring training community events press investor vendor hardware "
    "firmware network storage caching identity logging metrics alerting release testing docs "
    "translation accessibility pricing checkout inventory shipping returns loyalty referral "
    "newsletter podcast video audio chatbot voice maps weather sports music gaming"
).split()
ENTITIES = (
    "team server database cluster project meeting report budget dashboard pipeline service app "
    "website workshop review sprint launch contract survey backup migration roadmap demo campaign "
    "audit retreat conference course build portal gateway queue scheduler crawler importer "
    "exporter notebook wiki forum store kiosk printer router firewall laptop tablet repository "
    "template playbook handbook checklist"
).split()
# (attribute, synonym for paraphrases, value kind)
ATTRIBUTES = (
    ("deadline", "due date", "date"),
    ("start date", "kickoff date", "date"),
    ("owner", "lead", "person"),
    ("location", "venue", "city"),
    ("headcount", "team size", "people"),
    ("port", "listening port", "port"),
    ("version", "release number", "version"),
    ("review day", "check-in day", "weekday"),
    ("budget", "spending cap", "money"),
    ("timeout", "time limit", "minutes"),
    ("database", "datastore", "tool"),
    ("language", "programming language", "lang"),
    ("vendor", "supplier", "company"),
    ("sync time", "meeting time", "time"),
    ("retention period", "retention window", "days"),
    ("priority", "urgency level", "prio"),
    ("contact", "point of contact", "person"),
    ("backup day", "snapshot day", "weekday"),
    ("capacity", "seat count", "seats"),
    ("rate limit", "request cap", "requests"),
    ("license", "licence", "license"),
    ("file format", "export format", "format"),
    ("sponsor", "executive sponsor", "person"),
    ("target date", "goal date", "date"),
)
MONTHS = "January February March April May June July August September October November December".split()
WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
PEOPLE = (
    "Alice Bruno Chen Dana Emeka Fatima Greta Hiro Ines Jonas Kofi Lena Marco Nadia Omar Priya Quinn "
    "Rosa Sven Tariq Uma Viktor Wen Yara Zoe"
).split()
CITIES = (
    "Berlin Paris Lisbon Madrid Oslo Vienna Prague Warsaw Dublin Athens Rome Zurich Helsinki Tallinn "
    "Riga Porto Seville Lyon Munich Krakow"
).split()
TOOLS = "Postgres MySQL Redis Kafka Cassandra MongoDB SQLite DuckDB ClickHouse Elasticsearch".split()
LANGS = "Python Go Rust Java Kotlin TypeScript Swift Ruby Elixir Scala".split()
COMPANIES = "Acme Globex Initech Umbrella Hooli Vandelay Stark Wayne Wonka Tyrell".split()
LICENSES = "MIT Apache GPL BSD MPL".split()
FORMATS = "JSON CSV Parquet Avro XML YAML".split()
NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
).split()

BASE_TEMPLATES = (
    "The {s} is {v}.",
    "Our {s} is set to {v}.",
    "The {s} will be {v}.",
    "We agreed that the {s} is {v}.",
    "For the {q} {e}, the {a} is {v}.",
)
PARAPHRASE_TEMPLATES = ("{V} is the {s}.", "The {s} has been fixed at {v}.", "It was decided: the {s} is {v}.")
CHANGE_TEMPLATES = ("The {s} moved to {v}.", "The {s} changed to {v}.", "The {s} is now {v}.", "The {s} is {v}.")
RELATED_TEMPLATES = (
    "The {s} needs approval from {p}.",
    "The {s} was discussed in the {q} sync.",
    "The {s} is documented in the {q} wiki.",
    "The {s} is tracked in the planning sheet.",
)
CONTEXTS = (
    "Context: mentioned during the {q} planning call.",
    "Context: confirmed in the follow-up thread.",
    "Context: from the {q} retro notes.",
)


@dataclass
class Synth:
    """One synthetic atomic note and the planted group it belongs to."""

    id: str
    text: str
    created: str
    status: str = "provisional"
    context: str = ""
    messages: list[str] = field(default_factory=list)
    group: str = ""
    role: str = "filler"  # filler | dup | contra-old | contra-new | related | lookalike


@dataclass
class Truth:
    """Ground truth: same-claim groups, expected supersessions (newer, older), provenance holds."""

    duplicate_groups: list[list[str]] = field(default_factory=list)
    supersessions: list[tuple[str, str]] = field(default_factory=list)
    provenance_holds: list[tuple[str, str]] = field(default_factory=list)
    related: list[tuple[str, str]] = field(default_factory=list)
    lookalikes: list[tuple[str, str]] = field(default_factory=list)


# --------------------------------------------------------------------------- generator


class Generator:
    """Seeded claims with unique subjects, plus planted groups recorded as ground truth."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        subjects = [(q, e, i) for q in QUALIFIERS for e in ENTITIES for i in range(len(ATTRIBUTES))]
        self.rng.shuffle(subjects)
        self._subjects: Iterator[tuple[str, str, int]] = iter(subjects)
        self._second_tier = False
        self.used: set[tuple[str, str, int]] = set()
        self.used_words: set[frozenset[str]] = set()
        self.notes: list[Synth] = []
        self.truth = Truth()
        self.clock = 0

    def subject(self) -> tuple[str, str, int]:
        """A subject no other note has used, as a set of words (so only planted groups share one).

        Past the one-qualifier subjects (about 92,000) come two-qualifier ones ("staging billing
        server port"), drawn in a seeded order of their own: a vault that never needed them is the
        same as before they existed, and the scaling table reaches 300,000 notes."""
        for subject in self._subjects:
            if self.reserve(subject):
                return subject
        if not self._second_tier:
            self._second_tier = True
            self._subjects = self._paired_subjects()
            return self.subject()
        raise SystemExit("vocabulary exhausted: too many notes for the subject space")

    def _paired_subjects(self) -> Iterator[tuple[str, str, int]]:
        pairs = [f"{a} {b}" for a, b in combinations(QUALIFIERS, 2)]
        entities, attributes = list(ENTITIES), list(range(len(ATTRIBUTES)))
        for order in (pairs, entities, attributes):
            self.rng.shuffle(order)
        # Attribute outermost: every pair and entity comes once before any attribute repeats a word.
        return ((q, e, i) for i in attributes for q in pairs for e in entities)

    def reserve(self, subject: tuple[str, str, int]) -> bool:
        """Claim a subject; False when it, or the same words in another order, is taken.

        ("garden", "review", "backup day") and ("garden", "backup", "review day") read
        "garden review backup day" / "garden backup review day": one subject to any reader.
        """
        q, e, i = subject
        words = frozenset(f"{q} {e} {ATTRIBUTES[i][0]}".split())
        if subject in self.used or words in self.used_words:
            return False
        self.used.add(subject)
        self.used_words.add(words)
        return True

    def value(self, kind: str, words: bool = False) -> str:
        """A random value of ``kind``; small numbers may come out as words (a rewording)."""
        r = self.rng
        number = {
            "people": (3, 40, "people"),
            "seats": (10, 400, "seats"),
            "minutes": (5, 90, "minutes"),
            "days": (7, 365, "days"),
            "requests": (50, 5000, "requests per minute"),
            "money": (1000, 90000, "euros"),
        }
        if kind in number:
            lo, hi, unit = number[kind]
            n = r.randint(lo, hi)
            return f"{NUMBER_WORDS[n] if words and n <= 20 else n} {unit}"
        simple = {
            "date": lambda: f"{r.choice(MONTHS)} {r.randint(1, 28)}",
            "weekday": lambda: r.choice(WEEKDAYS),
            "person": lambda: r.choice(PEOPLE),
            "city": lambda: r.choice(CITIES),
            "port": lambda: str(r.randint(1024, 9999)),
            "version": lambda: f"{r.randint(1, 9)}.{r.randint(0, 20)}",
            "tool": lambda: r.choice(TOOLS),
            "lang": lambda: r.choice(LANGS),
            "company": lambda: r.choice(COMPANIES),
            "prio": lambda: f"P{r.randint(1, 4)}",
            "time": lambda: f"{r.randint(7, 18)}:{r.choice(['00', '15', '30', '45'])}",
            "license": lambda: r.choice(LICENSES),
            "format": lambda: r.choice(FORMATS),
        }
        return simple[kind]()

    def other_value(self, kind: str, seen: list[str]) -> str:
        """A value of ``kind`` unlike every value in ``seen`` (a contradiction must change something)."""
        firsts = {v.split()[0] for v in seen}
        for _ in range(100):
            new = self.value(kind)
            if new.split()[0] not in firsts:
                return new
        raise SystemExit(f"no fresh value of kind {kind}")

    def sentence(
        self, template: str, subject: tuple[str, str, int], value: str, synonym: bool = False, person: str = ""
    ) -> str:
        """Fill a template for ``subject``; ``synonym`` swaps the attribute for its paraphrase."""
        q, e, i = subject
        attr = ATTRIBUTES[i][1] if synonym else ATTRIBUTES[i][0]
        text = template.format(
            s=f"{q} {e} {attr}",
            q=q,
            e=e,
            a=attr,
            v=value,
            V=value[:1].upper() + value[1:],
            p=person or self.rng.choice(PEOPLE),
        )
        return text[:1].upper() + text[1:]

    def add(
        self, text: str, role: str, group: str = "", *, status: str = "", context: str = "", later_than: str = ""
    ) -> Synth:
        """Append a note, created after the previous one (and after ``later_than``)."""
        self.clock += self.rng.randint(1, 600)
        minutes = self.clock if not later_than else max(self.clock, _minutes(later_than) + 60)
        note = Synth(
            id=f"a-{len(self.notes):06x}",
            text=text,
            created=_stamp(minutes),
            status=status or ("kept" if self.rng.random() < 0.1 else "provisional"),
            context=context,
            messages=[f"m{len(self.notes)}-{k}" for k in range(self.rng.randint(1, 3))],
            group=group,
            role=role,
        )
        self.notes.append(note)
        return note


EPOCH = datetime(2023, 1, 1)


def _stamp(minutes: int) -> str:
    return (EPOCH + timedelta(minutes=minutes)).isoformat(timespec="seconds")


def _minutes(stamp: str) -> int:
    return int((datetime.fromisoformat(stamp) - EPOCH).total_seconds() // 60)


def generate(n: int, seed: int = 0) -> tuple[list[Synth], Truth]:
    """``n`` notes: ~12% in duplicate groups, ~9% in contradictions, ~6% related, ~6% look-alikes."""
    g = Generator(seed)
    planters = [
        (0.05, _plant_duplicates),
        (0.04, _plant_contradiction),
        (0.03, _plant_related),
        (0.03, _plant_lookalike),
    ]
    while len(g.notes) < n:
        roll, acc = g.rng.random(), 0.0
        for share, plant in planters:
            acc += share
            if roll < acc:
                plant(g)
                break
        else:
            subject = g.subject()
            kind = ATTRIBUTES[subject[2]][2]
            g.add(g.sentence(g.rng.choice(BASE_TEMPLATES), subject, g.value(kind)), "filler")
    return g.notes[:n], _trim(g.truth, {s.id for s in g.notes[:n]})


def _plant_duplicates(g: Generator) -> None:
    subject, group = g.subject(), f"d{len(g.truth.duplicate_groups)}"
    kind = ATTRIBUTES[subject[2]][2]
    value = g.value(kind)
    synonym = g.rng.random() < 1 / 3  # a third of the groups are paraphrases with a synonym
    templates = [*g.rng.sample(BASE_TEMPLATES, 2), g.rng.choice(PARAPHRASE_TEMPLATES)]
    members = []
    for k in range(g.rng.choice((2, 2, 3))):
        words = value if k == 0 else _wordy(value)
        context = g.rng.choice(CONTEXTS).format(q=subject[0]) if g.rng.random() < 0.3 else ""
        text = g.sentence(templates[k], subject, words, synonym=synonym and k > 0)
        members.append(g.add(text, "dup", group, context=context).id)
    g.truth.duplicate_groups.append(members)


def _wordy(value: str) -> str:
    first, *rest = value.split()
    if first.isdigit() and int(first) <= 20:
        return " ".join([NUMBER_WORDS[int(first)], *rest])
    return value


def _plant_contradiction(g: Generator) -> None:
    subject, group = g.subject(), f"c{len(g.truth.supersessions) + len(g.truth.provenance_holds)}"
    kind = ATTRIBUTES[subject[2]][2]
    old_value = g.value(kind)
    hold = g.rng.random() < 0.1  # a kept engram contradicted by a provisional chat note
    old = g.add(
        g.sentence(g.rng.choice(BASE_TEMPLATES), subject, old_value),
        "contra-old",
        group,
        status="kept" if hold else "provisional",
    )
    chain, values = [old], [old_value]
    for _ in range(2 if g.rng.random() < 0.15 and not hold else 1):
        if g.rng.random() < 0.15:
            text = g.sentence("The {s} is no longer {v}.", subject, values[-1])
        else:
            values.append(g.other_value(kind, values))
            text = g.sentence(g.rng.choice(CHANGE_TEMPLATES), subject, values[-1])
        chain.append(g.add(text, "contra-new", group, status="provisional", later_than=chain[-1].created))
    for older, newer in pairwise(chain):
        (g.truth.provenance_holds if hold else g.truth.supersessions).append((newer.id, older.id))


def _plant_related(g: Generator) -> None:
    subject, group = g.subject(), f"r{len(g.truth.related)}"
    kind = ATTRIBUTES[subject[2]][2]
    a = g.add(g.sentence(g.rng.choice(BASE_TEMPLATES), subject, g.value(kind)), "related", group)
    b = g.add(
        g.sentence(
            g.rng.choice(RELATED_TEMPLATES),
            subject,
            "",
            person=g.rng.choice(PEOPLE),
        ),
        "related",
        group,
    )
    g.truth.related.append((a.id, b.id))


def _plant_lookalike(g: Generator) -> None:
    q, e, i = g.subject()
    free = [x for x in QUALIFIERS if x != q and (x, e, i) not in g.used]
    g.rng.shuffle(free)
    other_q = next((x for x in free if g.reserve((x, e, i))), None)
    if other_q is None:
        return
    value, template = g.value(ATTRIBUTES[i][2]), g.rng.choice(BASE_TEMPLATES)
    a = g.add(g.sentence(template, (q, e, i), value), "lookalike", f"l{len(g.truth.lookalikes)}")
    b = g.add(g.sentence(template, (other_q, e, i), value), "lookalike", f"l{len(g.truth.lookalikes)}")
    g.truth.lookalikes.append((a.id, b.id))


def _trim(truth: Truth, kept: set[str]) -> Truth:
    """Drop planted pairs cut off by the note budget."""
    return Truth(
        duplicate_groups=[
            [m for m in grp if m in kept] for grp in truth.duplicate_groups if sum(m in kept for m in grp) >= 2
        ],
        supersessions=[p for p in truth.supersessions if set(p) <= kept],
        provenance_holds=[p for p in truth.provenance_holds if set(p) <= kept],
        related=[p for p in truth.related if set(p) <= kept],
        lookalikes=[p for p in truth.lookalikes if set(p) <= kept],
    )


# --------------------------------------------------------------------------- vault and index


def write_vault(root: Path, notes: list[Synth]) -> float:
    """Write the notes as real files (notes.py's renderer, vault.py's layout); returns seconds."""
    from vault_pipeline.vault.files import Vault
    from vault_pipeline.vault.note import Note, safe_stem, wikilink

    started = time.perf_counter()
    Vault.init(root)
    for s in notes:
        kept = s.status == "kept"
        frontmatter = {
            "id": s.id,
            "type": "atomic",
            "category": "fact",
            "status": s.status,
            "tier": "engram" if kept else "chat",
            "speaker": "user",
            "source": {
                "kind": "chatgpt",
                "conversation": f"conv-{s.group or s.id}",
                "title": "Synthetic",
                "messages": s.messages,
            },
            "session": wikilink(f"session-{s.group or s.id}"),
            "created": s.created,
        }
        body = (
            s.text
            + "\n\n"
            + (s.context + "\n\n" if s.context else "")
            + f"Source: {wikilink('session-' + (s.group or s.id), '^m-' + s.messages[0])}\n"
        )
        note = Note(s.id, "atomic", "engrams" if kept else "inbox", safe_stem(s.text, s.id), frontmatter, body)
        # Direct writes: vault.write would commit one state row per note, which is not what we time.
        (root / note.relpath).write_text(note.text(), encoding="utf-8")
    return time.perf_counter() - started


def build_embedder(name: str):
    """``minilm`` (the product's offline default) or ``hash`` (the tests' fake, 256 dims)."""
    if name == "hash":
        from tests.support.fakes import HashEmbedder  # REPO is on sys.path

        return HashEmbedder(dim=256)
    from vault_pipeline.models.embed import MiniLMEmbedder

    return MiniLMEmbedder()


def index_vault(root: Path, embedder_name: str) -> tuple[float, int]:
    """index.sync the vault; returns (seconds, rows)."""
    from vault_pipeline.index.sync import sync
    from vault_pipeline.vault.files import Vault

    vault = Vault.open(root)
    embedder = build_embedder(embedder_name)
    started = time.perf_counter()
    with vault.lock("index"):
        report = sync(vault, embedder)
    return time.perf_counter() - started, report.rows


# --------------------------------------------------------------------------- the dry run (own process)


def plan_phase(root: Path) -> dict:
    """clean.plan with the offline judge; wall time and peak RSS of this process."""
    started = time.perf_counter()
    from vault_pipeline.clean.plan import plan
    from vault_pipeline.clean.types import action_json
    from vault_pipeline.index.search import Index
    from vault_pipeline.models.offline import OfflineBackend
    from vault_pipeline.vault.files import Vault

    imports = time.perf_counter() - started
    vault = Vault.open(root)
    index = Index.open(vault)
    result = plan(vault, index, OfflineBackend())
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_seconds": round(time.perf_counter() - started, 2),
        "import_seconds": round(imports, 2),
        "cpu_seconds": round(me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "plan_seconds": result.seconds,
        "timings": result.timings,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "notes": result.notes,
        "candidates": result.candidates,
        "judged": dict(result.judged),
        "actions": [action_json(a) for a in result.actions],
        "judgements": result.judgements,
        "skipped": result.skipped[:20],
    }


def run_plan_subprocess(root: Path) -> dict:
    """Run ``plan_phase`` in a fresh interpreter, so its time and peak RSS are the dry run's alone."""
    out = subprocess.run(
        [sys.executable, __file__, "--phase", "plan", "--out", str(root)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


# --------------------------------------------------------------------------- scoring


def _prf(pred: set, truth: set) -> dict:
    hit = len(pred & truth)
    return {
        "predicted": len(pred),
        "planted": len(truth),
        "correct": hit,
        "precision": round(hit / len(pred), 4) if pred else None,
        "recall": round(hit / len(truth), 4) if truth else None,
    }


def score(result: dict, truth: Truth) -> dict:
    """Pairwise precision/recall of duplicate clusters and supersessions against the plants."""
    actions = result["actions"]
    dup_pred = {frozenset(p) for a in actions if a["action"] == "duplicate" for p in combinations(a["notes"], 2)}
    dup_true = {frozenset(p) for grp in truth.duplicate_groups for p in combinations(grp, 2)}
    sup_pred = {tuple(a["notes"]) for a in actions if a["action"] == "supersede"}
    sup_true = {tuple(p) for p in truth.supersessions}
    related_pred = {frozenset(a["notes"]) for a in actions if a["action"] == "relate"}
    holds = {frozenset(p) for p in truth.provenance_holds}
    judged = {frozenset(j[:2]) for j in result["judgements"]}
    looks = {frozenset(p) for p in truth.lookalikes}
    return {
        "duplicates": _prf(dup_pred, dup_true),
        "contradictions": _supersession_prf(sup_pred, truth.supersessions),
        "provenance_holds": {
            "planted": len(holds),
            "related_not_archived": len(holds & related_pred),
            "wrongly_superseded": len(holds & {frozenset(p) for p in sup_pred}),
        },
        "related_links": {
            "planted": len(truth.related),
            "linked": len({frozenset(p) for p in truth.related} & related_pred),
            "relate_actions": len(related_pred),
        },
        "lookalikes_merged_or_superseded": len(looks & (dup_pred | {frozenset(p) for p in sup_pred})),
        "candidate_recall": {
            "duplicate_pairs": _share(dup_true, judged),
            "supersessions": _share({frozenset(p) for p in sup_true}, judged),
        },
    }


def _chains(supersessions: list[tuple[str, str]]) -> dict[str, int]:
    """Note id -> its planted contradiction chain (A -> B -> C is one chain)."""
    chain: dict[str, int] = {}
    for newer, older in supersessions:
        label = chain.get(older, chain.get(newer, len(chain)))
        chain[older] = chain[newer] = label
    return chain


def _supersession_prf(pred: set[tuple[str, str]], planted: list[tuple[str, str]]) -> dict:
    """Precision: supersessions inside one planted chain (B->A, C->B and C->A all retire an
    outdated value). Recall: the chains' older notes that got retired."""
    chains = _chains(planted)
    hit = {p for p in pred if p[0] in chains and chains[p[0]] == chains.get(p[1])}
    olders = {old for _, old in planted}
    retired = {old for _, old in hit} & olders
    return {
        "predicted": len(pred),
        "planted": len(olders),
        "correct": len(hit),
        "precision": round(len(hit) / len(pred), 4) if pred else None,
        "recall": round(len(retired) / len(olders), 4) if olders else None,
    }


def _share(truth: set, found: set) -> float | None:
    return round(len(truth & found) / len(truth), 4) if truth else None


def cosine_profile(root: Path, truth: Truth) -> dict:
    """Cosine quantiles of planted pairs and of every note's nearest neighbour (calibration)."""
    import numpy as np

    from vault_pipeline.clean.pairs import neighbours
    from vault_pipeline.index.search import Index
    from vault_pipeline.vault.files import Vault

    ids, _, vectors = Index.open(Vault.open(root)).all_vectors()
    row = {nid: i for i, nid in enumerate(ids)}

    def quantiles(pairs) -> dict:
        sims = np.array([float(vectors[row[a]] @ vectors[row[b]]) for a, b in pairs if a in row and b in row])
        return (
            {q: round(float(np.quantile(sims, v)), 3) for q, v in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9))}
            if len(sims)
            else {}
        )

    _, sims = neighbours(vectors, 1)
    dup_pairs = [p for grp in truth.duplicate_groups for p in combinations(grp, 2)]
    return {
        "nearest_neighbour": {
            q: round(float(np.quantile(sims[:, 0], v)), 3) for q, v in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9))
        },
        "duplicates": quantiles(dup_pairs),
        "contradictions": quantiles(truth.supersessions),
        "related": quantiles(truth.related),
        "lookalikes": quantiles(truth.lookalikes),
    }


# --------------------------------------------------------------------------- main


LABELS = REPO / "tests" / "data" / "clean_pairs.jsonl"
JUDGED_AS = {"merge": "duplicate", "supersede": "contradiction"}


def labelled_scores(path: Path = LABELS) -> dict:
    """Per-action precision and recall of the offline judge on the hand-labelled real-export pairs.

    A merge is a pair judged ``duplicate``, a supersession one judged ``contradiction`` (the plan
    may still relate such a pair for time or provenance, so these bound the actions from above).
    Reported per split: ``tune`` was used while writing the rules, ``test`` only to report.
    """
    from vault_pipeline.models.offline.judging import judge

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    answers = judge({"pairs": [{"key": str(i), "a": r["a"], "b": r["b"]} for i, r in enumerate(rows)]})
    predicted = [j["relation"] for j in answers["judgements"]]
    out: dict = {}
    for split in ("test", "tune"):
        pairs = [(p, r["label"]) for p, r in zip(predicted, rows) if r["split"] == split]
        out[split] = {"pairs": len(pairs)}
        for action, relation in JUDGED_AS.items():
            said = sum(p == relation for p, _ in pairs)
            truth = sum(label == relation for _, label in pairs)
            hits = sum(p == relation == label for p, label in pairs)
            out[split][action] = {
                "precision": round(hits / said, 4) if said else None,
                "recall": round(hits / truth, 4) if truth else None,
                "predicted": said,
                "labelled": truth,
            }
    return out


def _print_labelled(scores: dict) -> None:
    for split, figures in scores.items():
        parts = [
            f"{action} precision {f['precision']}, recall {f['recall']} "
            f"({f['predicted']} predicted, {f['labelled']} labelled)"
            for action, f in figures.items()
            if action != "pairs"
        ]
        print(f"real-export labels, {split} split ({figures['pairs']} pairs): " + "; ".join(parts))


def main(argv: list[str] | None = None) -> int:
    """Build, index and dry-run-clean a synthetic vault; print the figures (and JSON with --json)."""
    args = _args(argv)
    if args.phase == "plan":
        print(json.dumps(plan_phase(Path(args.out))))
        return 0
    if args.labels:
        scores = labelled_scores()
        _print_labelled(scores)
        if args.json:
            print(json.dumps(scores, indent=1))
        return 0
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-clean-")) / "vault"
    notes, truth = generate(args.notes, args.seed)
    if args.reuse and (root / STATE_MARK).is_file():
        index_seconds = json.loads((root / STATE_MARK).read_text())["index_seconds"]
        print(f"vault: {root} reused ({len(notes):,} notes, seed {args.seed}; index took {index_seconds:.1f} s)")
    else:
        write_seconds = write_vault(root, notes)
        print(f"vault: {root} ({len(notes):,} atomic notes, seed {args.seed}), written in {write_seconds:.1f} s")
        index_seconds, rows = index_vault(root, args.embedder)
        print(
            f"index: embedder {args.embedder}, {rows:,} rows in {index_seconds:.1f} s "
            f"({len(notes) / max(index_seconds, 1e-9):,.0f} notes/s)"
        )
        (root / STATE_MARK).write_text(
            json.dumps(
                {"notes": len(notes), "seed": args.seed, "embedder": args.embedder, "index_seconds": index_seconds}
            )
        )
    result = run_plan_subprocess(root)
    figures = {
        "notes": len(notes),
        "embedder": args.embedder,
        "index_seconds": round(index_seconds, 1),
        **{k: v for k, v in result.items() if k not in ("actions", "judgements", "skipped")},
        "action_counts": _counts(result["actions"]),
        **score(result, truth),
        "cosines": cosine_profile(root, truth),
        "labelled_real_pairs": labelled_scores(),
    }
    _print(figures)
    _print_labelled(figures["labelled_real_pairs"])
    if args.json:
        print(json.dumps(figures, indent=1))
    return 0


def _counts(actions: list[dict]) -> dict:
    out: dict[str, int] = {}
    for a in actions:
        out[a["action"]] = out.get(a["action"], 0) + 1
    return out


def _print(f: dict) -> None:
    print(
        f"dry run (clean.plan, offline judge, own process): wall {f['wall_seconds']} s "
        f"(imports {f['import_seconds']} s; stages {f['timings']}), peak RSS {f['peak_rss_mib']} MiB, "
        f"CPU {f['cpu_seconds']} s incl. reader processes, 1-min load average {f['load_average_1m']} "
        f"on {len(os.sched_getaffinity(0))} cores"
    )
    print(f"candidate pairs: {f['candidates']:,}   judged: {f['judged']}   actions: {f['action_counts']}")
    for kind in ("duplicates", "contradictions"):
        print(
            f"{kind}: precision {f[kind]['precision']}, recall {f[kind]['recall']} "
            f"({f[kind]['correct']} of {f[kind]['predicted']} predicted, {f[kind]['planted']} planted pairs)"
        )
    print(f"candidate recall: {f['candidate_recall']}")
    print(
        f"provenance holds: {f['provenance_holds']}   related: {f['related_links']}   "
        f"look-alikes merged/superseded: {f['lookalikes_merged_or_superseded']}"
    )
    print(f"cosines: {f['cosines']}")


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=100_000, help="atomic notes to generate (default 100,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--embedder",
        choices=("minilm", "hash"),
        default="minilm",
        help="minilm: the offline default (~160-200 notes/s to index); hash: a quick fake",
    )
    parser.add_argument("--out", help="vault folder to create (default: a new temp folder)")
    parser.add_argument("--json", action="store_true", help="also print all figures as JSON")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --out: reuse a vault this script built and indexed (same --notes/--seed)",
    )
    parser.add_argument(
        "--labels",
        action="store_true",
        help="only score the offline judge on the hand-labelled real-export pairs (tests/data/clean_pairs.jsonl)",
    )
    parser.add_argument("--phase", choices=("all", "plan"), default="all", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
