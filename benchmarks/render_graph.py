"""Draw a vault's hubs as a graph (docs/demo-graph.png): what the graph view shows of subjects and people.

Sessions sit on a ring, each conversation's notes just outside its session; subject hubs
(``topics/`` tagged ``topic/<subject>``), people pages (``people/``) and thread maps (``threads/``)
sit inside the ring, joined to every session and note they link. A conversation's own hub (named
by its title) is left out: it links only its own notes.

    python benchmarks/render_graph.py VAULT [--out docs/demo-graph.png]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from vault_pipeline.ingest.notes import topic_tag
from vault_pipeline.text import wikilinks
from vault_pipeline.vault.frontmatter import split_frontmatter

KINDS = {"subject": "#d62728", "person": "#1f77b4", "thread": "#2ca02c", "session": "#7f7f7f", "atomic": "#bbbbbb"}


def read(vault: Path) -> dict[str, tuple[str, str, set[str], dict]]:
    """stem -> (kind, title, linked stems, frontmatter) of every note of the vault's generated folders."""
    notes = {}
    for path in sorted(vault.glob("*/*.md")):
        if path.parent.name not in ("inbox", "sessions", "topics", "people", "threads"):
            continue
        fm, body = split_frontmatter(path.read_text(encoding="utf-8"), str(path))
        tags = [str(t) for t in fm.get("tags") or []]
        kind = {"session": "session", "atomic": "atomic", "thread": "thread"}.get(str(fm.get("type")), "")
        if fm.get("type") == "topic":
            kind = "person" if "person" in tags else "subject" if any(t.startswith("topic/") for t in tags) else ""
        title = next((line[2:] for line in body.splitlines() if line.startswith("# ")), path.stem)
        if kind == "subject" and tags != ["hub", topic_tag(title)]:
            kind = ""  # a conversation's own hub (its title's) carries its subjects' tags: not drawn
        notes[path.stem] = (kind, title, {link.target for link in wikilinks(body)}, fm)
    return {stem: note for stem, note in notes.items() if note[0]}


def layout(notes: dict) -> dict[str, tuple[float, float]]:
    """Sessions on a ring, their notes just outside, hubs, people and threads on an inner ring."""
    sessions = sorted(s for s, n in notes.items() if n[0] == "session")
    where = {
        s: (math.cos(2 * math.pi * i / len(sessions)), math.sin(2 * math.pi * i / len(sessions)))
        for i, s in enumerate(sessions)
    }
    by_session: dict[str, list[str]] = {}
    for stem, (kind, _, _, fm) in notes.items():
        if kind == "atomic":
            by_session.setdefault(str(fm.get("session", "")).strip("[]"), []).append(stem)
    for session, members in by_session.items():
        if session not in where:
            continue
        angle = math.atan2(where[session][1], where[session][0])
        for j, stem in enumerate(sorted(members)):
            spread = (j - (len(members) - 1) / 2) * 0.045
            radius = 1.35 + 0.12 * (j % 3)
            where[stem] = (radius * math.cos(angle + spread), radius * math.sin(angle + spread))
    inner = sorted(s for s, n in notes.items() if n[0] in ("subject", "person", "thread"))
    for i, stem in enumerate(inner):
        angle = 2 * math.pi * i / max(1, len(inner)) + 0.3
        where[stem] = (0.45 * math.cos(angle), 0.45 * math.sin(angle))
    return where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("vault", type=Path)
    parser.add_argument("--title", default="The demo vault (vault demo)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "demo-graph.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    notes = read(args.vault)
    where = layout(notes)
    fig, ax = plt.subplots(figsize=(11, 11), dpi=110)
    for stem, (kind, _, links, _) in notes.items():
        if kind in ("subject", "person", "thread") and stem in where:
            for target in links & set(where):
                (x0, y0), (x1, y1) = where[stem], where[target]
                ax.plot([x0, x1], [y0, y1], color=KINDS[kind], alpha=0.25, linewidth=0.8, zorder=1)
    for stem, (kind, title, _, _) in notes.items():
        if stem not in where:
            continue
        x, y = where[stem]
        size = {"subject": 260, "person": 220, "thread": 180, "session": 120, "atomic": 18}[kind]
        ax.scatter([x], [y], s=size, color=KINDS[kind], zorder=2, edgecolors="white", linewidths=0.6)
        if kind != "atomic":
            label = title if len(title) <= 34 else title[:33] + "…"
            ax.annotate(label, (x, y), xytext=(0, 9), textcoords="offset points", ha="center", fontsize=8, zorder=3)
    for kind, colour in KINDS.items():
        ax.scatter([], [], s=80, color=colour, label={"atomic": "note", "subject": "subject hub"}.get(kind, kind))
    ax.legend(loc="lower right", frameon=False)
    ax.set_title(f"{args.title}: subject hubs, people and thread maps across conversations", fontsize=11)
    ax.set_axis_off()
    ax.set_aspect("equal")
    fig.tight_layout()
    fig.savefig(args.out)
    print(
        f"wrote {args.out} ({sum(1 for n in notes.values() if n[0] == 'subject')} subject hubs, "
        f"{sum(1 for n in notes.values() if n[0] == 'person')} people, {len(where)} nodes)"
    )


if __name__ == "__main__":
    main()
