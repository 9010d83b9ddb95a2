"""The model seam: prompts, the offline backend, the LiteLLM path with mock responses, the call log."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import BaseModel, ValidationInfo, field_validator

from tests.support.fakes import queued_completion
from vault_pipeline.errors import ConfigError, ModelError
from vault_pipeline.models.build import build_llm
from vault_pipeline.models.calllog import CallLog, redact
from vault_pipeline.models.litellm_backend import LiteLLMBackend, is_remote
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.models.prompts import Prompt, load_prompt


class Short(BaseModel):
    text: str

    @field_validator("text")
    @classmethod
    def at_most_three_words(cls, value: str, info: ValidationInfo) -> str:
        limit = (info.context or {}).get("limit", 3)
        if len(value.split()) > limit:
            raise ValueError(f"{len(value.split())} words, at most {limit} allowed")
        return value


PROMPT = Prompt(
    name="echo",
    version="1",
    temperature=0.0,
    system="Answer in JSON.",
    template="Say {{ thing }} in at most three words.",
)


def test_every_prompt_file_loads_with_settings():
    for name in ("extract", "summarize", "thread_map", "decompose", "gate", "judge"):
        prompt = load_prompt(name)
        assert prompt.name == name
        assert prompt.temperature == 0.0
        assert len(prompt.hash) == 12


def test_missing_variable_is_an_error_not_an_empty_string():
    with pytest.raises(ConfigError, match="thing"):
        PROMPT.render({})


def test_render_gives_system_and_user_messages():
    messages = PROMPT.render({"thing": "hello"})
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "hello" in messages[1]["content"]


def test_offline_backend_validates_with_the_same_validators(tmp_path):
    log = CallLog(tmp_path / "calls.jsonl")
    backend = OfflineBackend(log=log, handlers={"echo": lambda v: {"text": v["thing"]}})
    assert backend.call(PROMPT, {"thing": "two words"}, Short).text == "two words"
    with pytest.raises(ModelError, match="validation"):
        backend.call(PROMPT, {"thing": "far too many words here"}, Short)
    entries = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [e["outcome"] for e in entries] == ["ok", "invalid"]
    assert entries[0]["prompt_hash"] == PROMPT.hash and entries[0]["model"] == "offline"


def test_offline_backend_passes_validation_context():
    backend = OfflineBackend(handlers={"echo": lambda v: {"text": "one two three four"}})
    assert backend.call(PROMPT, {"thing": "x"}, Short, context={"limit": 4}).text == "one two three four"


def test_litellm_path_reasks_after_invalid_answer(tmp_path):
    completion, calls = queued_completion(['{"text": "one two three four five"}', '{"text": "one two"}'])
    log = CallLog(tmp_path / "calls.jsonl")
    backend = LiteLLMBackend("openai/gpt-4o-mini", completion=completion, log=log)
    result = backend.call(PROMPT, {"thing": "hi"}, Short)
    assert result.text == "one two"
    assert len(calls) == 2
    assert "5 words, at most 3 allowed" in json.dumps(calls[1]["messages"])
    assert calls[0]["temperature"] == 0.0
    entry = json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[-1])
    assert entry["outcome"] == "ok" and entry["tokens"]["prompt"] > 0


def test_litellm_path_gives_up_with_model_error(tmp_path):
    completion, calls = queued_completion(['{"text": "a b c d e"}'] * 5)
    backend = LiteLLMBackend("openai/gpt-4o-mini", completion=completion, max_reasks=1)
    with pytest.raises(ModelError) as info:
        backend.call(PROMPT, {"thing": "hi"}, Short)
    assert info.value.attempts == 2
    assert len(calls) == 2


def test_transient_errors_are_retried_by_tenacity():
    import litellm

    completion, calls = queued_completion(['{"text": "fine"}'])
    failures = iter([litellm.RateLimitError("slow down", llm_provider="openai", model="gpt-4o-mini")])

    def flaky(**kwargs):
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return completion(**kwargs)

    backend = LiteLLMBackend("openai/gpt-4o-mini", completion=flaky)
    backend._transient_attempts = 3
    assert backend.call(PROMPT, {"thing": "hi"}, Short).text == "fine"
    assert len(calls) == 1  # the rate-limited attempt never reached the model; the retry did


def test_call_log_never_holds_api_keys(tmp_path):
    log = CallLog(tmp_path / "calls.jsonl")
    log.record({"variables": {"note": "my key is sk-abcdefghijklmnopqrstuv"}, "error": "api_key=SECRETSECRET123"})
    text = (tmp_path / "calls.jsonl").read_text()
    assert "sk-abcdefghijklmnopqrstuv" not in text and "SECRETSECRET123" not in text
    assert redact("Authorization: Bearer abcdefghijklmnop").count("abcdefghijklmnop") == 0


def test_call_log_can_be_turned_off_or_trimmed(tmp_path):
    CallLog(None).record({"x": 1})
    trimmed = CallLog(tmp_path / "c.jsonl", payloads=False)
    trimmed.record({"prompt": "p", "variables": {"secret": "text"}, "output": {"a": 1}})
    entry = json.loads((tmp_path / "c.jsonl").read_text())
    assert entry == {"prompt": "p"}


def test_build_llm_and_remote_detection():
    assert isinstance(build_llm("offline"), OfflineBackend)
    assert build_llm("openai/gpt-4o-mini").remote is True
    assert is_remote("ollama/llama3.1") is False
    assert is_remote("openai/local", "http://127.0.0.1:8080/v1") is False
    assert is_remote("openai/gpt-4o-mini", "https://api.example.org/v1") is True
    with pytest.raises(ConfigError):
        build_llm("gpt-4o-mini")


def test_offline_path_does_not_import_litellm():
    code = (
        "import sys; from vault_pipeline.models.build import build_llm; build_llm('offline'); "
        "import vault_pipeline.cli; print('litellm' in sys.modules, 'lancedb' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False False"


def test_check_names_real_looking_keys_not_a_tutorials_placeholders():
    from vault_pipeline.models.calllog import holds_secret

    assert holds_secret("my key is sk-proj-msgsecret1234567890abcdef")
    assert holds_secret('headers = {"Authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.abc123"}')
    for placeholder in (
        '"Authorization": "Bearer YOUR_API_KEY"',
        'openai.api_key = "your_openai_api_key_here"',
        'openai.api_key = os.environ["OPENAI_API_KEY"]',
        "Implement authorization Configure and apply Django REST permissions",
        "api_key = sk-...<your key>",
    ):
        assert not holds_secret(placeholder), placeholder
