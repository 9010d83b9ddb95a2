"""The memory-server tools of `vault mcp`, driven through the MCP SDK's own client (in memory):
reading by id with paging, browsing (recent, list_notes, neighbours), and the journaled changes
(edit_note, archive_note, supersede) undone by the `undo` tool and by `vault clean --undo`. Every
result stays within its size bound; unknown and invalid arguments are refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest

from vault_pipeline.serve.notes import MAX_RESULT_BYTES
from vault_pipeline.vault.frontmatter import split_frontmatter

CLIENT = "vault-test-client"
NEW_TOOLS = {"recent", "list_notes", "neighbours", "edit_note", "archive_note", "supersede", "undo"}
LONG = "\n\n".join(f"Paragraph {i} of the long session note, about raked gravel and moss." for i in range(900))
PLAN = "# Plan\n\nWe use PostgreSQL.\n\n## Risks\n\nThe disk may fill.\n\n## Next\n\nMigrate in May.\n"


@pytest.fixture
def tools(make_vault):
    """VaultTools on a small vault: linked notes, a session, a person's page, a long note."""
    from tests.support.fakes import HashEmbedder
    from vault_pipeline import pipeline
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.retrieve.types import FunnelConfig
    from vault_pipeline.serve.tools import VaultTools

    session = {"type": "session"}
    vault = make_vault(
        notes={
            "sessions/garden-talk.md": ("s-garden", "# Garden talk\n\nCaroline: the gravel stands for water.", session),
            "sessions/long-talk.md": ("s-long", LONG, session),
            "engrams/gravel.md": (
                "e-gravel",
                "Raked gravel in a dry garden stands for water. See [[moss]].",
                {"tier": "engram", "type": "atomic", "tags": ["topic/garden/zen"], "session": "[[garden-talk]]"},
            ),
            "engrams/moss.md": (
                "e-moss",
                "Moss grows between the stones of the garden.",
                {"tier": "engram", "type": "atomic", "tags": ["topic/garden"], "session": "[[garden-talk]]"},
            ),
            "inbox/plan.md": ("i-plan", PLAN, {"type": "atomic", "status": "provisional", "tags": ["project"]}),
            "inbox/plan-v2.md": ("i-plan2", "# Plan\n\nWe use SQLite now.\n", {"type": "atomic"}),
            "people/caroline.md": (
                "p-caroline",
                "# Caroline\n\n- [[garden-talk]]\n",
                {"type": "topic", "tags": ["person"]},
            ),
        }
    )
    embedder = HashEmbedder(dim=64)
    pipeline.index(vault, embedder)
    llm = build_llm("offline")
    return VaultTools(
        vault.root, embedder=embedder, llm_extract=llm, llm_plan=llm, llm_gate=llm, config=FunnelConfig(), lock_wait=0.2
    )


def talk(tools, *calls):
    """Tool calls (name, arguments) through the real MCPServer and the SDK's client; each result is
    checked against the size bound and, when an error, for being one line."""
    from mcp.client import Client
    from mcp_types import Implementation

    from vault_pipeline.serve.mcp import build_server

    async def go():
        async with Client(build_server(tools), client_info=Implementation(name=CLIENT, version="1")) as client:
            return [await client.call_tool(name, arguments) for name, arguments in calls]

    results = anyio.run(go)
    for result in results:
        text = "".join(c.text for c in result.content)
        assert len(text.encode("utf-8")) <= 2 * MAX_RESULT_BYTES
        assert len(json.dumps(result.structured_content or {}).encode("utf-8")) <= MAX_RESULT_BYTES + 1024
        if result.is_error:
            assert "\n" not in text and text.startswith("error: ") and "Traceback" not in text, text
    return results


def one(tools, name, arguments):
    return talk(tools, (name, arguments))[0]


def body_of(tools, relpath):
    return split_frontmatter((tools.root / relpath).read_text(encoding="utf-8"))


def test_the_new_tools_are_listed_beside_the_old(tools):
    from mcp.client import Client

    from vault_pipeline.serve.mcp import build_server

    async def go():
        async with Client(build_server(tools)) as client:
            return await client.list_tools()

    listed = {t.name: t for t in anyio.run(go).tools}
    assert {"query", "search", "read_note", "remember", "status"} | NEW_TOOLS == set(listed)
    assert all(len(t.description or "") > 80 for t in listed.values())


def test_unknown_arguments_are_refused_in_one_line(tools):
    status, read, listed = talk(
        tools,
        ("status", {"verbose": True}),
        ("read_note", {"path": "engrams/gravel.md", "page": 2}),
        ("list_notes", {"tag": "person", "colour": "red"}),
    )
    assert status.is_error and "'verbose'" in status.content[0].text and "takes: no arguments" in status.content[0].text
    assert read.is_error and "'page'" in read.content[0].text and "path" in read.content[0].text
    assert listed.is_error and "'colour'" in listed.content[0].text
    fine = one(tools, "status", {})
    assert not fine.is_error


def test_read_note_by_id_and_by_path_in_pages(tools):
    first = one(tools, "read_note", {"id": "s-long"})
    data = first.structured_content
    assert not first.is_error and data["path"] == "sessions/long-talk.md" and data["truncated"] is True
    pages, offset = [data["text"]], data["next_offset"]
    while offset is not None:
        page = one(
            tools, "read_note", {"path": "sessions/long-talk.md", "offset": offset, "limit": 20000}
        ).structured_content
        pages.append(page["text"])
        offset = page["next_offset"]
    assert "".join(pages) == body_of(tools, "sessions/long-talk.md")[1] and len(pages) > 2
    old = one(tools, "read_note", {"path": "engrams/gravel.md"})  # the old argument alone still works
    assert old.structured_content["text"].startswith("Raked gravel") and old.structured_content["truncated"] is False
    for bad in (
        {"id": "no-such-id"},
        {"path": "engrams/gravel.md", "id": "e-gravel"},
        {"path": "engrams/gravel.md", "limit": 0},
    ):
        assert one(tools, "read_note", bad).is_error, bad


def test_edit_note_appends_replaces_a_section_and_sets_properties_then_undo_restores_bytes(tools):
    before = (tools.root / "inbox/plan.md").read_bytes()
    version = one(tools, "read_note", {"path": "inbox/plan.md"}).structured_content["version"]
    edited = one(
        tools,
        "edit_note",
        {
            "id": "i-plan",
            "section": "Risks",
            "content": "The disk may fill; we watch it weekly.",
            "append": "Decided on 1 December.",
            "properties": {"owner": "Jan", "priority": 2},
            "version": version,
        },
    )
    assert not edited.is_error, edited.content
    props, body = body_of(tools, "inbox/plan.md")
    assert (props["owner"], props["priority"], props["id"]) == ("Jan", 2, "i-plan")
    assert "## Risks\n\nThe disk may fill; we watch it weekly.\n\n## Next\n\nMigrate in May." in body
    assert body.rstrip().endswith("Decided on 1 December.") and "The disk may fill.\n" not in body
    stale = one(tools, "edit_note", {"path": "inbox/plan.md", "append": "Again.", "version": version})
    assert stale.is_error and "changed since you read it" in stale.content[0].text
    undone = one(tools, "undo", {"run_id": edited.structured_content["run_id"]})
    assert not undone.is_error and undone.structured_content["restored"] == 1
    assert (tools.root / "inbox/plan.md").read_bytes() == before


def test_edit_note_refuses_what_it_must_not_change(tools):
    cases = [
        ({"path": "inbox/plan.md", "properties": {"id": "other"}}, "the vault's own"),
        ({"path": "inbox/plan.md", "properties": {"source_conversation": "x"}}, "the vault's own"),
        ({"path": "inbox/plan.md", "section": "Budget", "content": "x"}, "no section 'Budget'"),
        ({"path": "inbox/plan.md", "section": "Risks"}, "both `section`"),
        ({"path": "inbox/plan.md"}, "nothing to change"),
        ({"path": "inbox/plan.md", "properties": {"tags": [{"a": 1}]}}, "a value is text"),
        ({"path": "../outside.md", "append": "x"}, "no such note"),
    ]
    before = (tools.root / "inbox/plan.md").read_bytes()
    for arguments, why in cases:
        result = one(tools, "edit_note", arguments)
        assert result.is_error and why in result.content[0].text, (arguments, result.content[0].text)
    assert (tools.root / "inbox/plan.md").read_bytes() == before


def test_a_users_edit_after_ours_wins_over_undo(tools):
    edited = one(tools, "edit_note", {"path": "inbox/plan.md", "append": "Ours."})
    path = tools.root / "inbox/plan.md"
    users = path.read_text(encoding="utf-8") + "\nThe user's own line.\n"
    path.write_text(users, encoding="utf-8")
    undone = one(tools, "undo", {"run_id": edited.structured_content["run_id"]})
    assert undone.is_error and "changed after the run" in undone.content[0].text
    assert path.read_text(encoding="utf-8") == users


def test_archive_and_supersede_move_never_delete_and_vault_clean_undo_restores(tools):
    gravel_before = (tools.root / "engrams/gravel.md").read_bytes()
    archived = one(tools, "archive_note", {"id": "e-gravel", "reason": "no longer true"})
    assert not archived.is_error, archived.content
    assert (
        archived.structured_content["path"] == "archive/gravel.md" and not (tools.root / "engrams/gravel.md").exists()
    )
    props, _ = body_of(tools, "archive/gravel.md")
    assert props["status"] == "archived" and "no longer true" in props["archived_by"]
    assert archived.structured_content["run_id"] in props["archived_by"]
    again = one(tools, "archive_note", {"path": "archive/gravel.md", "reason": "twice"})
    assert again.is_error and "already archived" in again.content[0].text
    assert one(tools, "archive_note", {"id": "e-moss"}).is_error  # a reason is required

    plans = {p: (tools.root / p).read_bytes() for p in ("inbox/plan.md", "inbox/plan-v2.md")}
    replaced = one(
        tools, "supersede", {"older_id": "i-plan", "newer_path": "inbox/plan-v2.md", "reason": "we moved to SQLite"}
    )
    assert not replaced.is_error, replaced.content
    older, _ = body_of(tools, "archive/plan.md")
    newer, _ = body_of(tools, "inbox/plan-v2.md")
    assert (
        older["superseded_by"] == "[[plan-v2]]"
        and older["status"] == "archived"
        and newer["supersedes"] == ["[[plan]]"]
    )

    for run in (archived.structured_content["run_id"], replaced.structured_content["run_id"]):
        cli = subprocess.run(
            [sys.executable, "-m", "vault_pipeline.cli", "clean", "--undo", run, "--vault", str(tools.root)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert cli.returncode == 0, cli.stderr
    assert (tools.root / "engrams/gravel.md").read_bytes() == gravel_before
    assert {p: (tools.root / p).read_bytes() for p in plans} == plans
    assert not list((tools.root / "archive").glob("*.md"))


def test_undo_refuses_what_is_not_a_run_of_these_tools(tools):
    assert "not a run id" in one(tools, "undo", {"run_id": "yesterday"}).content[0].text
    missing = one(tools, "undo", {"run_id": "20261201T101500123456Z-1a2b3c4d"})
    assert missing.is_error and "no journal" in missing.content[0].text


def test_recent_lists_what_changed_since_a_time(tools):
    import os

    old = 1_600_000_000  # 2020: every note but the edited one is older than a day
    for path in tools.root.rglob("*.md"):
        os.utime(path, (old, old))
    one(tools, "edit_note", {"path": "engrams/moss.md", "append": "It stays green in winter."})
    day, since_2019, bad = talk(
        tools,
        ("recent", {"since": "1d"}),
        ("recent", {"since": "2019-01-01", "folder": "engrams"}),
        ("recent", {"since": "soon"}),
    )
    assert [n["path"] for n in day.structured_content["notes"]] == ["engrams/moss.md"]
    assert [n["path"] for n in since_2019.structured_content["notes"]] == ["engrams/moss.md", "engrams/gravel.md"]
    assert bad.is_error and "give an ISO date" in bad.content[0].text


def test_list_notes_by_tag_folder_and_person(tools):
    nested, folder, person, paged, wrong = talk(
        tools,
        ("list_notes", {"tag": "topic/garden"}),
        ("list_notes", {"folder": "inbox"}),
        ("list_notes", {"person": "Caroline"}),
        ("list_notes", {"limit": 2}),
        ("list_notes", {"folder": "nowhere"}),
    )
    assert [n["path"] for n in nested.structured_content["notes"]] == ["engrams/gravel.md", "engrams/moss.md"]
    assert [n["path"] for n in folder.structured_content["notes"]] == ["inbox/plan-v2.md", "inbox/plan.md"]
    assert [n["path"] for n in person.structured_content["notes"]] == ["people/caroline.md", "sessions/garden-talk.md"]
    assert len(paged.structured_content["notes"]) == 2 and paged.structured_content["next_offset"] == 2
    assert paged.structured_content["total"] == 7
    assert wrong.is_error and "is not one of" in wrong.content[0].text


def test_neighbours_are_links_backlinks_and_the_session(tools):
    gravel, session = talk(
        tools, ("neighbours", {"id": "e-gravel"}), ("neighbours", {"path": "sessions/garden-talk.md"})
    )
    data = gravel.structured_content
    assert [n["path"] for n in data["links"]["notes"]] == ["engrams/moss.md", "sessions/garden-talk.md"]
    assert data["session"]["path"] == "sessions/garden-talk.md"
    assert [n["path"] for n in data["same_session"]["notes"]] == ["engrams/moss.md"]
    around = session.structured_content
    assert [n["path"] for n in around["backlinks"]["notes"]] == [
        "engrams/gravel.md",
        "engrams/moss.md",
        "people/caroline.md",
    ]
    assert [n["path"] for n in around["same_session"]["notes"]] == ["engrams/gravel.md", "engrams/moss.md"]


def test_a_note_is_a_resource_by_its_id(tools):
    from mcp.client import Client

    from vault_pipeline.serve.mcp import build_server

    async def go():
        async with Client(build_server(tools)) as client:
            templates = await client.list_resource_templates()
            return templates, await client.read_resource("note://e-moss")

    templates, read = anyio.run(go)
    assert [t.uri_template for t in templates.resource_templates] == ["note://{id}"]
    assert read.contents[0].text.startswith("Moss grows between the stones")


def test_explain_is_cut_to_the_size_bound_placed_candidates_first():
    from vault_pipeline.serve.mcp_notes import EXPLAIN_BYTES, bound_explain

    trace = [{"id": f"n-{i}", "rank": (i if i < 5 else None), "reason": "x" * 400} for i in range(600)]
    data = bound_explain({"found": True, "tokens": 10, "blocks": []}, {"retrieved": 600}, list(reversed(trace)))
    assert len(json.dumps(data, separators=(",", ":")).encode("utf-8")) <= EXPLAIN_BYTES
    assert [t["id"] for t in data["trace"][:5]] == [f"n-{i}" for i in range(5)]
    assert data["trace_total"] == 600 and data["trace_left_off"] == 600 - len(data["trace"]) > 0


def test_query_with_explain_stays_within_the_bound(tools):
    explained = one(tools, "query", {"prompt": "What does raked gravel stand for?", "explain": True, "budget": 500})
    assert not explained.is_error and explained.structured_content["trace"]
    assert explained.structured_content["trace_total"] >= len(explained.structured_content["trace"])
