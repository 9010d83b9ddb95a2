"""What the MCP ``query`` tool returns, measured: text and structured result against the budget.

Asks the export's questions (answerable and absent, ``evidence_sets``) through ``VaultTools.query``
and the server's own result builder, as a client receives them, and prints per budget the tokens
(``text.estimate_tokens``) of the text, of the structured result (compact JSON) and of both, and
the bytes of the whole tool result as the SDK serialises it. The aim: both together at most the
budget plus 10 %.

    python benchmarks/bench_mcp_size.py [--vault DIR] [--budget 1500 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evidence_sets import export_questions, export_vault

from vault_pipeline.config import load_settings
from vault_pipeline.models.embed import build_embedder
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.signals import load_relevance
from vault_pipeline.retrieve.types import FunnelConfig
from vault_pipeline.serve.mcp import _package_result
from vault_pipeline.serve.tools import VaultTools
from vault_pipeline.text import estimate_tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=Path("/tmp/vault-evidence-export"), help="a vault of the export")
    parser.add_argument("--budget", type=int, nargs="+", default=[1500, 2000])
    args = parser.parse_args(argv)
    export_vault(args.vault).close()
    embedder = build_embedder("minilm")
    config = FunnelConfig.from_settings(load_settings(args.vault), embedder)
    gate = OfflineBackend(relevance=load_relevance(args.vault))
    tools = VaultTools(
        args.vault,
        embedder=embedder,
        llm_extract=OfflineBackend(),
        llm_plan=OfflineBackend(),
        llm_gate=gate,
        config=config,
    )
    queries = [row["query"] for row in export_questions()]
    for budget in args.budget:
        totals, texts, structured, sizes = [], [], [], []
        for query in queries:
            result = _package_result(tools.query(query, None, budget))
            text = result.content[0].text
            data = json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
            texts.append(estimate_tokens(text))
            structured.append(estimate_tokens(data))
            totals.append(texts[-1] + structured[-1])
            sizes.append(len(result.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")))
        over = sum(t > 1.1 * budget for t in totals)
        print(
            f"budget {budget}: {len(queries)} queries; text mean {statistics.mean(texts):.0f} tokens, structured mean "
            f"{statistics.mean(structured):.0f}, both max {max(totals)} ({max(totals) / budget:.1%} of the budget); "
            f"over budget + 10 %: {over}; the whole tool result {statistics.mean(sizes) / 1024:.1f} KB mean, "
            f"{max(sizes) / 1024:.1f} KB max"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
