"""The answer cache: what it keys an answer by, and that nothing stale comes back."""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ValidationInfo, field_validator

from tests.support.fakes import ScriptedLLM
from vault_pipeline.models.answers import AnswerCache, CachedLLM, answer_key
from vault_pipeline.models.calllog import CallLog
from vault_pipeline.models.prompts import Prompt

PROMPT = Prompt(name="echo", version="1", temperature=0.0, system="Answer in JSON.", template="Say {{ thing }}.")


class Said(BaseModel):
    text: str

    @field_validator("text")
    @classmethod
    def _short(cls, value: str, info: ValidationInfo) -> str:
        limit = (info.context or {}).get("limit", 5)
        if len(value.split()) > limit:
            raise ValueError(f"at most {limit} words")
        return value


def key(**changes) -> str:
    args = {
        "model": "openai/m",
        "api_base": None,
        "prompt": PROMPT,
        "variables": {"thing": "hi"},
        "response_model": Said,
        "context": None,
    } | changes
    return answer_key(**args)


def test_the_key_changes_with_everything_that_decides_the_answer():
    base = key()
    assert key() == base  # stable
    assert key(model="openai/other") != base
    assert key(api_base="http://127.0.0.1:8080/v1") != base
    assert key(prompt=replace(PROMPT, template="Say {{ thing }} twice.")) != base  # an edited prompt file
    assert key(prompt=replace(PROMPT, temperature=0.1)) != base
    assert key(variables={"thing": "ho"}) != base
    assert key(context={"limit": 2}) != base


def test_a_cached_answer_is_not_asked_again(tmp_path):
    answers = AnswerCache(tmp_path / "answers.sqlite")
    log = CallLog(None)
    inner = ScriptedLLM(lambda name, v: {"text": f"said {v['thing']}"}, model="openai/m")
    llm = CachedLLM(inner, answers, log=log)
    assert llm.call(PROMPT, {"thing": "hi"}, Said).text == "said hi"
    assert llm.call(PROMPT, {"thing": "hi"}, Said).text == "said hi"
    assert len(inner.calls) == 1 and log.usage.cached == 1
    llm.call(PROMPT, {"thing": "ho"}, Said)
    assert len(inner.calls) == 2  # other variables: another call


def test_another_model_or_prompt_version_never_reuses_an_answer(tmp_path):
    answers = AnswerCache(tmp_path / "answers.sqlite")
    first = ScriptedLLM(lambda name, v: {"text": "from the first"}, model="openai/first")
    CachedLLM(first, answers).call(PROMPT, {"thing": "hi"}, Said)
    second = ScriptedLLM(lambda name, v: {"text": "from the second"}, model="openai/second")
    assert CachedLLM(second, answers).call(PROMPT, {"thing": "hi"}, Said).text == "from the second"
    edited = replace(PROMPT, version="2")
    assert CachedLLM(first, answers).call(edited, {"thing": "hi"}, Said).text == "from the first"
    assert len(first.calls) == 2 and len(answers) == 3


def test_an_answer_todays_validators_refuse_is_asked_again(tmp_path):
    answers = AnswerCache(tmp_path / "answers.sqlite")
    inner = ScriptedLLM(answers=[{"text": "one two three four"}, {"text": "one two"}], model="openai/m")
    llm = CachedLLM(inner, answers)
    llm.call(PROMPT, {"thing": "hi"}, Said)
    answers.put(llm.key(PROMPT, {"thing": "hi"}, Said, {"limit": 2}), '{"text": "one two three four"}')
    assert llm.call(PROMPT, {"thing": "hi"}, Said, context={"limit": 2}).text == "one two"
    assert len(inner.calls) == 2


def test_answers_survive_the_process(tmp_path):
    path = tmp_path / "answers.sqlite"
    inner = ScriptedLLM(lambda name, v: {"text": "kept"}, model="openai/m")
    CachedLLM(inner, AnswerCache(path)).call(PROMPT, {"thing": "hi"}, Said)
    again = ScriptedLLM(answers=[], model="openai/m")  # would fail if asked
    assert CachedLLM(again, AnswerCache(path)).call(PROMPT, {"thing": "hi"}, Said).text == "kept"
