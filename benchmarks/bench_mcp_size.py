"""What the MCP tools return, measured: the ``query`` package against its budget by a real tokenizer,
and every tool's result size against the size bound.

Asks the export's questions (answerable and absent, ``evidence_sets``) through ``VaultTools.query``
and the server's own result builder, as a client receives them. Per budget and per counter the
package was built with (the old bytes estimate, and cl100k, the offline default), it prints by the
package's language (English, Dutch: ``text.prompt_languages``) the tokens the result reports and
cl100k's count of what it returns (text and structured result together), the largest share of the
budget, and how many results exceed it. Then the bytes of whole tool results as the SDK serialises
them: ``query`` with ``explain`` at budget 500, and ``read_note``, ``search``, ``list_notes``,
``recent`` and ``neighbours`` at their largest.

    python benchmarks/bench_mcp_size.py [--vault DIR] [--budget 500 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evidence_sets import export_questions, export_vault

from vault_pipeline.config import load_settings
from vault_pipeline.models.embed import build_embedder
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.metering import BYTES, token_counter
from vault_pipeline.retrieve.signals import load_relevance
from vault_pipeline.retrieve.types import FunnelConfig
from vault_pipeline.serve.mcp import _note_result, _package_result, _search_result
from vault_pipeline.serve.mcp_notes import listing, neighbourhood
from vault_pipeline.serve.tools import VaultTools
from vault_pipeline.text import prompt_languages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=Path("/tmp/vault-evidence-export"), help="a vault of the export")
    parser.add_argument("--budget", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--sizes-only", action="store_true", help="only the result sizes, not the token counts")
    args = parser.parse_args(argv)
    export_vault(args.vault).close()
    embedder = build_embedder("minilm")
    config = FunnelConfig.from_settings(load_settings(args.vault), embedder)
    gate = OfflineBackend(relevance=load_relevance(args.vault))

    def tools_with(tokenizer: str) -> VaultTools:
        return VaultTools(
            args.vault,
            embedder=embedder,
            llm_extract=OfflineBackend(),
            llm_plan=OfflineBackend(),
            llm_gate=gate,
            config=replace(config, tokenizer=tokenizer),
        )

    real = token_counter("cl100k_base").count
    queries = [row["query"] for row in export_questions()]
    for budget in [] if args.sizes_only else args.budget:
        for tokenizer in (BYTES, "cl100k_base"):
            tools = tools_with(tokenizer)
            rows: dict[str, list[tuple[int, int]]] = {"english": [], "dutch": []}
            for query in queries:
                result = _package_result(tools.query(query, None, budget))
                text = result.content[0].text
                data = json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
                language = "dutch" if "dutch" in prompt_languages(text) else "english"
                rows[language].append((result.structured_content["tokens"], real(text) + real(data)))
            for language, pairs in rows.items():
                if not pairs:
                    continue
                reported, counted = [p[0] for p in pairs], [p[1] for p in pairs]
                error = statistics.mean(abs(r - c) / c for r, c in pairs)
                print(
                    f"budget {budget}, counted by {tokenizer}, {language}: {len(pairs)} packages; reported mean "
                    f"{statistics.mean(reported):.0f}, cl100k mean {statistics.mean(counted):.0f} (mean error "
                    f"{error:.1%}); cl100k max {max(counted)} ({max(counted) / budget:.1%} of the budget); "
                    f"over the budget: {sum(c > budget for c in counted)}"
                )
    tools = tools_with("cl100k_base")
    sizes = [_bytes(_package_result(tools.query(q, None, 500), explain=True)) for q in queries]
    print(f"query explain=true budget 500: {statistics.mean(sizes) / 1024:.1f} KB mean, {max(sizes) / 1024:.1f} KB max")
    for name, size in _other_tools(tools).items():
        print(f"{name}: {size / 1024:.1f} KB")
    return 0


def _bytes(result) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8"))


def _other_tools(tools: VaultTools) -> dict[str, int]:
    """The bytes of the other tools' results at their largest on this vault."""
    entries = tools.notes.catalogue.entries()
    largest = max(entries, key=lambda e: e.size)
    session = max((e for e in entries if e.type == "session"), key=lambda e: e.size)
    return {
        f"read_note {largest.path} ({largest.size / 1024:.0f} KB file), first page": _bytes(
            _note_result(tools.read_note(largest.path))
        ),
        "search limit 100": _bytes(_search_result(tools.search("python error", 100))),
        "list_notes folder sessions limit 100": _bytes(
            listing(tools.notes.list_notes(folder="sessions", limit=100), "note(s)")
        ),
        "recent since 20000d limit 100": _bytes(listing(tools.notes.recent("20000d", 100), "changed")),
        f"neighbours {session.path} limit 100": _bytes(neighbourhood(tools.notes.neighbours(session.path, limit=100))),
    }


if __name__ == "__main__":
    raise SystemExit(main())
