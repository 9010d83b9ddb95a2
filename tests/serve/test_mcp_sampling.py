"""`vault mcp` with `[models] gate = "mcp-sampling"` and `extract = "mcp-sampling"`: the client's own
model judges the fit-gate and extracts `remember`'s notes, through the MCP SDK's sampling. The client
here is the SDK's own, over stdio; its sampling callback is the "model". Without the callback the
offline gate answers and the result says so."""

from __future__ import annotations

import json
import os
import shutil
import sys

import anyio
import pytest

from tests.support.openai_server import _MESSAGE, answer_for

PROMPT = "What does the empty space between the stones mean?"
MEMORY = "Invoices for the billing service are stored in PostgreSQL."
CLIENT_MODEL = "client-test-model"


def schema_of(system: str) -> dict:
    """The answer schema the server wrote into its system prompt."""
    start = system.index("{", system.index("JSON schema"))
    schema, _ = json.JSONDecoder().raw_decode(system[start:])
    return schema


class ClientModel:
    """The sampling callback: a valid answer from the schema; the gate's first candidate dropped."""

    def __init__(self):
        self.asked: list[str] = []  # the system prompt's first line, per request

    async def __call__(self, context, params):
        from mcp_types import CreateMessageResult, TextContent

        system = params.system_prompt or ""
        self.asked.append(system.splitlines()[0])
        prompt = "\n".join(m.content.text for m in params.messages)
        answer = answer_for(schema_of(system), prompt)
        if "relevance gate" in system:
            answer["verdicts"][0] |= {"verdict": "drop", "reason": "judged off-topic by the client's model"}
        if "extraction operator" in system:
            message_id = _MESSAGE.findall(prompt)[0][0]  # the id the prompt shows: the text's digest
            answer["units"] = [{"text": MEMORY, "category": "fact", "source_ids": [message_id], "speaker": "user"}]
        text = f"```json\n{json.dumps(answer)}\n```"  # a chat model's habit: the parser takes it
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text=text), model=CLIENT_MODEL)


@pytest.fixture
def sampling_server(indexed_example, tmp_path):
    """(vault root, the stdio server's parameters) with the gate and extraction on mcp-sampling."""
    from mcp.client.stdio import StdioServerParameters

    root = tmp_path / "vault"
    shutil.copytree(indexed_example, root)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},  # a worktree's code, where it is set
        "VAULT_GATE_MODEL": "mcp-sampling",
        "VAULT_EXTRACT_MODEL": "mcp-sampling",
    }
    args = ["-m", "vault_pipeline.cli", "mcp", "--vault", str(root), "--no-watch"]
    return root, StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(tmp_path))


async def talk(params, log_path, callback=None) -> dict:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    with log_path.open("w") as log:
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(read, write, sampling_callback=callback) as session,
        ):
            with anyio.fail_after(600):
                await session.initialize()
                package = await session.call_tool("query", {"prompt": PROMPT, "explain": True})
                remembered = await session.call_tool("remember", {"text": MEMORY})
    return {"package": package, "remembered": remembered}


@pytest.mark.slow
def test_the_gate_and_remember_ask_the_clients_model_through_sampling(sampling_server, tmp_path):
    root, params = sampling_server
    model = ClientModel()
    seen = anyio.run(talk, params, tmp_path / "server.log", model)

    package = seen["package"]
    assert not package.is_error, package.content
    stats = package.structured_content["stats"]
    assert stats["models"]["gate"] == "mcp-sampling" and "notes" not in package.structured_content
    assert stats["gate_dropped"] >= 1 and stats["gate_fail_open"] == 0  # the verdicts came from the client
    assert any(line.startswith("You are the relevance gate") for line in model.asked)

    remembered = seen["remembered"]
    assert not remembered.is_error, remembered.content
    assert any(line.startswith("You are a semantic extraction operator") for line in model.asked)
    written = remembered.structured_content["written"]
    assert len(written) == 1 and MEMORY in (root / written[0]).read_text(encoding="utf-8")

    calls = [json.loads(line) for line in (root / ".vault_pipeline" / "calls.jsonl").read_text().splitlines()]
    sampled = [c for c in calls if c["model"] == "mcp-sampling"]
    assert {c["prompt"] for c in sampled} >= {"gate", "extract", "summarize"}
    assert {c.get("served_by") for c in sampled} == {CLIENT_MODEL}


@pytest.mark.slow
def test_without_sampling_the_offline_gate_answers_and_says_so(sampling_server, tmp_path):
    _, params = sampling_server
    seen = anyio.run(talk, params, tmp_path / "server.log", None)

    package = seen["package"]
    assert not package.is_error, package.content
    assert package.structured_content["stats"]["models"]["gate"] == "offline"
    assert package.structured_content["stats"]["gate_fail_open"] == 0
    note = package.structured_content["notes"][0]
    assert note.startswith("The client offers no MCP sampling, so the offline fit-gate answered")
    assert package.content[0].text.startswith(f"> {note}")
    assert "offline extractor" in seen["remembered"].structured_content["notes"][0]
