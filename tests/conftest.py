"""Test-wide guards and fixtures: no real network model call in a test run; slow tests only when asked.

The fixtures hand out the shared helpers of ``tests/support`` (vault builders, model fakes, real
index rows); tests may also import them from there directly.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest

from tests.support import fakes
from tests.support.paths import REPO

# Importing litellm without this fetches the model cost map over the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ALLOW_NETWORK = os.environ.get("VAULT_LIVE_TESTS") == "1"


def _is_local(address) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX paths
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guarded_connect(self, address):
    if not _is_local(address):
        raise RuntimeError(f"network call to {address!r} blocked in tests (set VAULT_LIVE_TESTS=1 for live tests)")
    return _real_connect(self, address)


def _guarded_connect_ex(self, address):
    if not _is_local(address):
        raise RuntimeError(f"network call to {address!r} blocked in tests (set VAULT_LIVE_TESTS=1 for live tests)")
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True, scope="session")
def _no_network():
    """Fail any non-loopback connection, so a real model API call cannot slip into a test."""
    if ALLOW_NETWORK:
        yield
        return
    socket.socket.connect = _guarded_connect
    socket.socket.connect_ex = _guarded_connect_ex
    try:
        yield
    finally:
        socket.socket.connect = _real_connect
        socket.socket.connect_ex = _real_connect_ex


def pytest_addoption(parser):
    parser.addoption(
        "--slow", action="store_true", help="also run the tests marked slow (deselected by default; .ci/run runs them)"
    )


def pytest_collection_modifyitems(config, items):
    """Deselect tests marked ``slow`` unless --slow or a -m expression asks; skip ``live`` unless VAULT_LIVE_TESTS=1."""
    if not config.getoption("--slow") and not config.getoption("markexpr"):
        slow = [item for item in items if "slow" in item.keywords]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if "slow" not in item.keywords]
    if ALLOW_NETWORK:
        return
    skip = pytest.mark.skip(reason="live model test: set VAULT_LIVE_TESTS=1 and an API key")
    for item in items:
        if "live" in item.keywords:
            item.add_marker(skip)


# --------------------------------------------------------------------------- shared fixtures
# The reusable classes and builders live in tests/support/fakes.py; these fixtures hand them out.


def _check_protocol(llm):
    protocol = fakes.structured_llm_protocol()
    if protocol is not None and getattr(protocol, "_is_runtime_protocol", False):
        assert isinstance(llm, protocol), f"{type(llm).__name__} no longer satisfies {protocol.__qualname__}"
    return llm


@pytest.fixture(scope="session")
def indexed_example(tmp_path_factory) -> Path:
    """vault_example/vault, indexed once (with the offline embedder): copy it, never write to it."""
    import shutil

    from vault_pipeline import pipeline
    from vault_pipeline.models.embed import build_embedder
    from vault_pipeline.vault.files import Vault

    root = tmp_path_factory.mktemp("template") / "vault"
    shutil.copytree(REPO / "vault_example" / "vault", root)
    vault = Vault.open(root)
    try:
        pipeline.index(vault, build_embedder("minilm"))
    finally:
        vault.close()
    return root


@pytest.fixture
def make_vault(tmp_path):
    """Factory: ``make_vault(name="vault", notes=None)`` -> an initialised Vault under tmp_path.

    ``notes`` maps relpath -> file text (written verbatim) or -> ``(note_id, body)`` /
    ``(note_id, body, {frontmatter})`` (written with write_note). Vaults are closed at teardown.
    """
    from vault_pipeline.vault.files import Vault

    made = []

    def make(name: str = "vault", notes: dict | None = None):
        root = tmp_path / name
        Vault.init(root).close()
        for relpath, spec in (notes or {}).items():
            if isinstance(spec, str):
                fakes.write_file(root, relpath, spec)
            else:
                note_id, body, *rest = spec
                fakes.write_note(root, relpath, note_id, body, **(rest[0] if rest else {}))
        vault = Vault.open(root)
        made.append(vault)
        return vault

    yield make
    for vault in made:
        vault.close()


@pytest.fixture
def write_note():
    """``write_note(vault, relpath, note_id, body, **frontmatter)``: a real note file with real frontmatter."""
    return fakes.write_note


@pytest.fixture
def write_file():
    """``write_file(vault, relpath, text)``: ``text`` written verbatim at ``vault.root/relpath``."""
    return fakes.write_file


@pytest.fixture
def fake_row():
    """``fake_row(**fields)``: the real index Row with a default for every field."""
    return fakes.fake_row


@pytest.fixture
def scripted_llm():
    """Factory: ``scripted_llm(fn)`` or ``scripted_llm(answers=[...])`` -> a ScriptedLLM (StructuredLLM)."""
    return lambda *args, **kwargs: _check_protocol(fakes.ScriptedLLM(*args, **kwargs))


@pytest.fixture
def raising_llm():
    """Factory: ``raising_llm(error=None, model="broken")`` -> a StructuredLLM that always fails."""
    return lambda *args, **kwargs: _check_protocol(fakes.RaisingLLM(*args, **kwargs))


@pytest.fixture
def sleeping_llm():
    """Factory: ``sleeping_llm(fn=..., timeout=5.0)`` -> a StructuredLLM answering once ``.release`` is set.

    Every one made is released at teardown, so no thread is left waiting.
    """
    made = []

    def make(*args, **kwargs):
        llm = _check_protocol(fakes.SleepingLLM(*args, **kwargs))
        made.append(llm)
        return llm

    yield make
    for llm in made:
        llm.release.set()


@pytest.fixture
def queued_llm():
    """Factory: ``queued_llm(answers, model="openai/gpt-4o-mini", **backend_kwargs)`` -> (backend, calls).

    The real LiteLLM backend (instructor parsing, re-asks, validators) over litellm's
    ``mock_response``, one queued answer a call (non-string answers are sent as JSON); ``calls``
    records every request. No network.
    """
    import json

    def make(answers, model: str = "openai/gpt-4o-mini", **backend_kwargs):
        texts = [a if isinstance(a, str) else json.dumps(a) for a in answers]
        completion, calls = fakes.queued_completion(texts)
        backend = fakes.litellm_backend_class()(model, completion=completion, **backend_kwargs)
        return _check_protocol(backend), calls

    return make


@pytest.fixture
def openai_server():
    """A started ``ScriptedServer`` (tests/support/openai_server.py) on 127.0.0.1; stopped at teardown."""
    from tests.support.openai_server import ScriptedServer

    server = ScriptedServer().start()
    yield server
    server.stop()


@pytest.fixture
def closed_api_base() -> str:
    """An ``api_base`` on 127.0.0.1 where nothing listens."""
    from tests.support.openai_server import closed_port_url

    return closed_port_url()
