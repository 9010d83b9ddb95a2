"""A package's tokens by a real tokenizer, offline: English and Dutch packages keep their budget by
tiktoken's own count of what they return, the count comes from litellm's bundled files without
importing litellm, and a missing file falls back to the bytes estimate and says so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vault_pipeline.retrieve import metering
from vault_pipeline.retrieve.metering import BYTES, token_counter, tokenizer_for
from vault_pipeline.text import estimate_tokens

ENGLISH = [
    "The billing service stores every invoice in PostgreSQL, partitioned by month.",
    "Invoices older than seven years are archived to cold storage on the first of January.",
    "The invoice numbering restarts each year with the prefix of the year and a dash.",
    "A refund creates a credit note that links back to the invoice it corrects.",
    "The billing service sends invoices as PDF attachments from the finance mailbox.",
    "Late invoices get a reminder after fourteen days and a second one after thirty days.",
    "The invoice template shows the VAT number of the customer below the address block.",
    "Billing exports a CSV of all invoices of the month for the accountant on the fifth.",
]
DUTCH = [
    "De facturatiedienst bewaart elke factuur in PostgreSQL, gepartitioneerd per maand.",
    "Facturen ouder dan zeven jaar gaan op één januari naar de koude opslag.",
    "De factuurnummering begint elk jaar opnieuw met het jaartal en een streepje.",
    "Een terugbetaling maakt een creditnota die verwijst naar de gecorrigeerde factuur.",
    "De facturatiedienst verstuurt facturen als PDF-bijlage vanuit de financiële mailbox.",
    "Te late facturen krijgen na veertien dagen een herinnering en na dertig dagen nog één.",
    "Het factuursjabloon toont het btw-nummer van de klant onder het adresblok.",
    "De facturatie exporteert op de vijfde een CSV met alle facturen van de maand voor de boekhouder.",
]
PROMPTS = {
    "en": "How are invoices stored and archived by the billing service?",
    "nl": "Hoe bewaart en archiveert de facturatiedienst de facturen?",
}


def real_count(text: str, monkeypatch) -> int:
    """tiktoken's cl100k count, loaded the way tiktoken documents it (TIKTOKEN_CACHE_DIR)."""
    import tiktoken

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(metering.tokenizer_files()))
    return len(tiktoken.get_encoding("cl100k_base").encode(text))


@pytest.mark.parametrize("language", ["en", "nl"])
@pytest.mark.parametrize("budget", [150, 400])
def test_a_package_keeps_its_budget_by_the_real_tokenizer(make_vault, monkeypatch, language, budget):
    from tests.support.fakes import HashEmbedder
    from vault_pipeline import pipeline
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.retrieve.types import FunnelConfig

    sentences = ENGLISH if language == "en" else DUTCH
    notes = {
        f"engrams/{language}-{i}.md": (f"e-{language}-{i}", s, {"tier": "engram"}) for i, s in enumerate(sentences)
    }
    vault = make_vault(notes=notes)
    embedder = HashEmbedder(dim=64)
    pipeline.index(vault, embedder)
    llm = build_llm("offline")
    config = FunnelConfig(budget=budget, floor=-1.0, stop=0.0, gate_enabled=False)
    (package,) = pipeline.query(
        vault, [(PROMPTS[language], None)], embedder=embedder, llm_plan=llm, llm_gate=llm, config=config
    )
    markdown = package.to_markdown()
    real = real_count(markdown, monkeypatch)
    assert package.blocks and package.tokenizer == "cl100k_base"
    assert abs(package.tokens - real) <= 0.05 * real and real <= budget
    assert package.to_dict()["tokenizer"] == "cl100k_base"
    if language == "nl":  # the bytes estimate the package used to report is off by more than 5 % here
        assert abs(estimate_tokens(markdown) - real) > 0.05 * real


def test_the_mcp_result_counts_text_and_structured_result_by_the_same_tokenizer(make_vault, monkeypatch):
    import json

    from tests.support.fakes import HashEmbedder
    from vault_pipeline import pipeline
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.retrieve.types import FunnelConfig

    notes = {f"engrams/nl-{i}.md": (f"e-nl-{i}", s, {"tier": "engram"}) for i, s in enumerate(DUTCH)}
    vault = make_vault(notes=notes)
    embedder = HashEmbedder(dim=64)
    pipeline.index(vault, embedder)
    llm = build_llm("offline")
    config = FunnelConfig(budget=200, floor=-1.0, stop=0.0, gate_enabled=False, structured=True)
    (package,) = pipeline.query(
        vault, [(PROMPTS["nl"], None)], embedder=embedder, llm_plan=llm, llm_gate=llm, config=config
    )
    text, data = package.to_mcp()
    real = real_count(text, monkeypatch) + real_count(
        json.dumps(data, ensure_ascii=False, separators=(",", ":")), monkeypatch
    )
    assert data["tokens"] == real <= 200


def test_the_tokenizer_follows_the_model_family():
    assert tokenizer_for("openai/gpt-4o-mini") == "o200k_base"
    assert tokenizer_for("gpt-4-turbo") == "cl100k_base"
    assert tokenizer_for("anthropic/claude-3-5-haiku") == "claude"
    assert tokenizer_for("offline") == tokenizer_for("ollama/llama3.1") == "cl100k_base"
    for name in ("o200k_base", "claude", "p50k_base"):
        counter = token_counter(name)
        assert counter.name == name and 0 < counter.count("Hoe bewaart de dienst facturen?") < 30


def test_counting_does_not_import_litellm():
    code = (
        "import sys\n"
        "from vault_pipeline.retrieve.metering import token_counter\n"
        "assert token_counter('cl100k_base').name == 'cl100k_base'\n"
        "assert token_counter('claude').name == 'claude'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'litellm'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_missing_tokenizer_files_fall_back_to_the_bytes_estimate_and_say_so(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(metering, "tokenizer_files", lambda: tmp_path)
    token_counter.cache_clear()
    try:
        counter = token_counter("o200k_base")
        assert counter.name == BYTES and counter.count("abcdefgh") == 2
        (tmp_path / "fb374d419588a4632f3f557e76b4b70aebbca790").write_bytes(b"IQ== 0\n")  # not the real file
        token_counter.cache_clear()
        assert token_counter("o200k_base").name == BYTES
        assert list(tmp_path.iterdir()) == [tmp_path / "fb374d419588a4632f3f557e76b4b70aebbca790"]  # nothing removed
    finally:
        token_counter.cache_clear()
    assert "not available offline" in caplog.text
