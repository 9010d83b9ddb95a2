"""The Note Quality Gate judged by a model (``[models] quality``): through instructor and litellm's
``mock_response``, no network; the hard rules still apply, and a model that cannot answer leaves
its notes to the fitted gate."""

from __future__ import annotations

import json
import re

import pytest

from tests.ingest.test_keep import TODAY, add, atomic
from tests.support.fakes import run_vault
from vault_pipeline.ingest.keep import keep
from vault_pipeline.ingest.quality_model import QualityItem, judge_notes
from vault_pipeline.ingest.select import Selector
from vault_pipeline.models.litellm_backend import LiteLLMBackend


@pytest.fixture
def vault(make_vault):
    return make_vault()


NOTE = re.compile(r"^Note \[(n\d+)\] \(([^)]*)\): (.*)$", re.M)


def _judging(label_of):
    """A completion that labels every note of a request by ``label_of(sentence)`` through mock_response."""
    import litellm

    calls: list[dict] = []

    def completion(**kwargs):
        calls.append(kwargs)
        user = kwargs["messages"][-1]["content"]
        verdicts = []
        for key, _, sentence in NOTE.findall(user):
            label, reason = label_of(sentence)
            verdicts.append({"key": key, "reasoning": "read it against its source", "label": label, "reason": reason})
        return litellm.completion(mock_response=json.dumps({"verdicts": verdicts}), **kwargs)

    return completion, calls


def test_a_quality_model_judges_what_the_hard_rules_leave(vault):
    good, chat, long_one = add(
        vault,
        atomic("Postgres is the store of the notes."),
        atomic("Cats are asleep a lot.", category="fact"),
        atomic("This sentence is far too long to pass the gate because it keeps going on and on."),
    )
    completion, calls = _judging(lambda s: ("meaningless", "small talk") if "Cats" in s else ("good", ""))
    llm = LiteLLMBackend("openai/gpt-4o-mini", completion=completion)
    report = keep(vault, all_passing=True, today=TODAY, llm=llm)
    assert report.kept == [f"engrams/{good.stem}.md"]
    refused = dict(report.refused)
    assert refused[chat.relpath] == ["meaningless — small talk"]
    # The model passed the long note; the word limit is a hard rule and still refuses it.
    assert any("words (at most 15)" in p for p in refused[long_one.relpath])
    assert "quality: fails — meaningless — small talk" in (vault.root / chat.relpath).read_text()
    assert report.judge == "openai/gpt-4o-mini" and report.model_judged == 3 and report.model_errors == []
    # One call for the three notes, each shown with its category and (unreadable here) source.
    assert len(calls) == 1
    user = calls[0]["messages"][-1]["content"]
    assert "Note [n001] (fact): Cats are asleep a lot." in user and "Source: (not readable)" in user


def test_a_model_that_cannot_answer_leaves_its_notes_to_the_selector(vault):
    import litellm

    good, fragment = add(vault, atomic("Postgres is the store of the notes."), atomic("In the form of user stories."))

    def broken(**kwargs):
        return litellm.completion(mock_response="not json at all", **kwargs)

    llm = LiteLLMBackend("openai/gpt-4o-mini", completion=broken, max_reasks=0, transient_attempts=1)
    no_verb_refused = Selector({"sign:no_verb": -5.0}, 0.0, write=0.0, keep=0.5)
    report = keep(vault, all_passing=True, today=TODAY, llm=llm, selector=no_verb_refused)
    assert report.model_judged == 0 and len(report.model_errors) == 1
    assert report.model_errors[0].startswith("2 note(s) from n001: openai/gpt-4o-mini:")
    # The selector judged both instead: the same verdicts as with no model at all.
    assert report.kept == [f"engrams/{good.stem}.md"]
    assert "fragment, no verb" in dict(report.refused)[fragment.relpath][0]


def test_the_model_reads_the_part_of_a_long_source_where_the_note_stands():
    completion, calls = _judging(lambda s: ("good", ""))
    llm = LiteLLMBackend("openai/gpt-4o-mini", completion=completion)
    source = "Filler words come first here. " * 40 + "We chose Postgres for the notes store. " + "More after. " * 40
    items = [QualityItem("n001", "We chose Postgres for the notes store.", "decision", source)]
    judged = judge_notes(items, llm)
    assert set(judged.verdicts) == {"n001"} and judged.errors == []
    shown = re.search(r"^Source: (.*)$", calls[0]["messages"][-1]["content"], re.M)[1]
    assert "We chose Postgres for the notes store." in shown and len(shown) < len(source) / 2
    assert shown.startswith("… ") and shown.endswith(" …")


def test_cli_keep_names_its_judge_in_json(vault):
    add(vault, atomic("Postgres is the store of the notes."))
    proc = run_vault("keep", "--all-passing", "--json", "--vault", str(vault.root), cwd=vault.root)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["judge"] == {"by": "fitted gate", "model_judged": 0, "errors": []}


def test_the_model_reads_template_syntax_in_a_note_exactly_as_written():
    # instructor renders messages as Jinja when given a validation context; a chat about Django
    # holds "{% translate %}" and "{{ user.name }}", which must reach the model unchanged.
    completion, calls = _judging(lambda s: ("good", ""))
    llm = LiteLLMBackend("openai/gpt-4o-mini", completion=completion)
    source = "Use {% translate 'Hello' %} in the template and {{ user.name }} for the name; {# a comment #} {x}."
    items = [QualityItem("n001", "The template greets with {% translate %}.", "fact", source)]
    judged = judge_notes(items, llm)
    assert judged.errors == [] and set(judged.verdicts) == {"n001"}
    user = calls[0]["messages"][-1]["content"]
    assert f"Source: {source}" in user and "Note [n001] (fact): The template greets with {% translate %}." in user


def test_a_model_out_of_reach_is_asked_once_and_the_fitted_gate_judges_the_rest():
    calls = []

    def refused(**kwargs):
        calls.append(kwargs)
        raise ConnectionError("[Errno 111] Connection refused")

    llm = LiteLLMBackend("ollama/llama3.2:3b", completion=refused, max_reasks=0, transient_attempts=1)
    items = [QualityItem(f"n{i:03d}", f"Note number {i} is a plain fact.", "fact", None) for i in range(1, 46)]
    judged = judge_notes(items, llm)
    # Three batches of 20 would each wait on the same refusal: one call, then no more.
    assert len(calls) == 1 and judged.unreachable and judged.verdicts == {}
    (error,) = judged.errors
    assert error.startswith("45 note(s) from n001 on: ollama/llama3.2:3b: ") and error.endswith("; not asked again")
    assert "Connection refused" in error


def test_a_model_judge_leaves_the_faithfulness_rule_in_place():
    from vault_pipeline.ingest.keep import quality_problems

    frontmatter = {"category": "fact", "source_messages": ["m1"]}
    body = "Set `GCPPROJECTID` in the workflow.\n"
    source = "Set `GCP_PROJECT_ID` in the workflow."
    # The model passed it (no problems); the identifier is not its source's.
    problems = quality_problems(frontmatter, body, set(), source, judged=[])
    assert problems == ["not in its source: GCPPROJECTID"]
    assert quality_problems(frontmatter, "Set `GCP_PROJECT_ID` in the workflow.\n", set(), source, judged=[]) == []
