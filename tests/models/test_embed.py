"""Embedders: the offline MiniLM default, the LiteLLM adapter, the factory and the test fake."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.support.fakes import HashEmbedder
from tests.support.paths import REPO
from vault_pipeline.errors import ConfigError, ModelError
from vault_pipeline.models.embed import (
    DEFAULT_CALIBRATION,
    MINILM_CALIBRATION,
    MINILM_LEGACY_TOKENS,
    Calibration,
    Embedder,
    LiteLLMEmbedder,
    MiniLMEmbedder,
    build_embedder,
    calibration_of,
    is_minilm,
)

TEXTS = [
    "We decided to keep the vault as the single source of truth.",
    "ok",
    "The nightly sweep collapses near-duplicate notes into one canonical note and archives the rest, "
    "keeping links both ways so that nothing a user wrote is ever lost.",
    "Open question: should the fit-gate judge against the subject domain?",
    "",
    "LanceDB tables can live on object storage.",
]


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder(batch_size=4)


def _conforms(embedder: Embedder) -> None:
    """The Embedder Protocol's members, checked without triggering a probe call."""
    assert isinstance(embedder.name, str) and isinstance(embedder.dim, int) and callable(embedder.embed)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_minilm_shape_dtype_and_unit_rows(minilm):
    vectors = minilm.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.name == "minilm-l6-v2-int8-128" and minilm.dim == 384
    _conforms(minilm)


def test_minilm_empty_input_does_not_load_the_model():
    fresh = MiniLMEmbedder()
    out = fresh.embed([])
    assert out.shape == (0, 384) and out.dtype == np.float32
    assert fresh._session is None  # constructing and embedding nothing stay cheap


def test_minilm_order_restored_and_batch_matches_alone(minilm):
    # batch_size=4 with 6 texts of very different lengths: sorted, split, then restored.
    batched = minilm.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        alone = minilm.embed([text])[0]
        assert _cos(batched[i], alone) >= 0.999, text


def test_minilm_is_deterministic_across_calls(minilm):
    assert np.array_equal(minilm.embed(TEXTS), minilm.embed(TEXTS))


def test_minilm_paraphrase_beats_unrelated(minilm):
    a, para, other = minilm.embed(
        [
            "We chose LanceDB for the vector index.",
            "LanceDB was picked as our vector store.",
            "My grandmother grows tomatoes in her garden.",
        ]
    )
    assert _cos(a, para) > _cos(a, other) + 0.2


def test_minilm_reads_128_tokens_and_the_legacy_cut_256(minilm):
    # [CLS] + 100 words + the ending + [SEP]: within 128 the endings differ; past it they are cut off.
    short, long = "word " * 100, "word " * 130
    endings = ["alpha beta gamma", "completely different ending"]
    one, two = minilm.embed([short + e for e in endings])
    assert _cos(one, two) < 0.999
    one, two = minilm.embed([long + e for e in endings])
    assert _cos(one, two) > 0.9999
    legacy = MiniLMEmbedder(max_tokens=MINILM_LEGACY_TOKENS)
    one, two = legacy.embed([long + e for e in endings])
    assert _cos(one, two) < 0.999 and legacy.name == "minilm-l6-v2-int8"  # the name every older index holds
    one, two = legacy.embed(["word " * 300 + e for e in endings])
    assert _cos(one, two) > 0.9999


def test_a_text_within_the_cut_has_one_vector_under_either_name(minilm):
    legacy = MiniLMEmbedder(max_tokens=MINILM_LEGACY_TOKENS)
    assert np.array_equal(minilm.embed(TEXTS[:2]), legacy.embed(TEXTS[:2]))
    assert is_minilm(minilm.name) and is_minilm(legacy.name) and not is_minilm("text-embedding-3-small")


def test_importing_embed_does_not_load_onnxruntime_or_tokenizers():
    code = "import vault_pipeline.models.embed, sys; print('onnxruntime' in sys.modules, 'tokenizers' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.stdout.strip() == "False False"


def test_minilm_turns_onnxruntime_telemetry_off_before_importing_it(tmp_path):
    from tests.test_privacy import empty_home_env, written_under

    env = {**empty_home_env(tmp_path), "PYTHONPATH": str(REPO)}
    bare = subprocess.run([sys.executable, "-c", "import onnxruntime"], env=env, capture_output=True, check=True)
    # The control: bare, the import writes a device id and an event queue under HOME (and a .ses under TMPDIR).
    if not written_under(tmp_path / "home"):  # pragma: no cover - an onnxruntime without telemetry
        pytest.skip(f"a bare onnxruntime import wrote nothing under HOME here: nothing to switch off ({bare.stderr!r})")
    for folder in ("home", "tmp"):
        shutil.rmtree(tmp_path / folder)
        (tmp_path / folder).mkdir()
    code = (
        "import os; from vault_pipeline.models.embed import MiniLMEmbedder; "
        "e = MiniLMEmbedder(); e.preload().join(); print(e.embed(['hello']).shape, os.environ['ORT_DISABLE_TELEMETRY'])"
    )
    # Even a user's ORT_DISABLE_TELEMETRY=0 is overridden: the offline default writes nothing outside the vault.
    out = subprocess.run(
        [sys.executable, "-c", code], env={**env, "ORT_DISABLE_TELEMETRY": "0"}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(1,", "384)", "1"]
    assert written_under(tmp_path / "home", tmp_path / "tmp") == []


class _FakeEmbedFn:
    """Records (model, texts) and returns un-normalised vectors of a fixed dimension."""

    def __init__(self, dim: int = 3):
        self.dim = dim
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, model: str, texts: list[str]) -> list[list[float]]:
        self.calls.append((model, list(texts)))
        return [[float(len(t)) + 1.0] + [2.0] * (self.dim - 1) for t in texts]


def test_litellm_embedder_normalises_and_learns_dim():
    fn = _FakeEmbedFn(dim=3)
    emb = LiteLLMEmbedder("openai/text-embedding-3-small", fn, batch_size=2)
    out = emb.embed(["a", "bb", "ccc"])
    assert out.shape == (3, 3) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    assert emb.dim == 3 and emb.name == "openai/text-embedding-3-small"
    assert fn.calls == [("openai/text-embedding-3-small", ["a", "bb"]), ("openai/text-embedding-3-small", ["ccc"])]
    _conforms(emb)


def test_litellm_embedder_probes_dim_once_when_asked_first():
    fn = _FakeEmbedFn(dim=5)
    emb = LiteLLMEmbedder("ollama/nomic-embed-text", fn)
    assert emb.dim == 5 and emb.dim == 5
    assert len(fn.calls) == 1
    assert emb.embed([]).shape == (0, 5) and len(fn.calls) == 1


def test_litellm_embedder_given_dim_and_empty_input_make_no_call():
    fn = _FakeEmbedFn(dim=4)
    emb = LiteLLMEmbedder("m", fn, dim=4)
    assert emb.embed([]).shape == (0, 4)
    assert fn.calls == []


def test_litellm_embedder_rejects_bad_answers():
    with pytest.raises(ModelError, match="expected dimension 4"):
        LiteLLMEmbedder("m", _FakeEmbedFn(dim=3), dim=4).embed(["x"])
    with pytest.raises(ModelError, match="expected 2 vectors"):
        LiteLLMEmbedder("m", lambda model, texts: [[1.0, 0.0]]).embed(["x", "y"])
    with pytest.raises(ModelError, match="NaN"):
        LiteLLMEmbedder("m", lambda model, texts: [[float("nan"), 1.0]]).embed(["x"])


def test_build_embedder():
    assert isinstance(build_embedder("minilm"), MiniLMEmbedder)
    assert isinstance(build_embedder(" MiniLM "), MiniLMEmbedder)
    assert isinstance(build_embedder(""), MiniLMEmbedder)
    emb = build_embedder("openai/text-embedding-3-small", embed_fn=_FakeEmbedFn())
    assert isinstance(emb, LiteLLMEmbedder) and emb.model == "openai/text-embedding-3-small"
    with pytest.raises(ConfigError, match="embed_fn"):
        build_embedder("ollama/nomic-embed-text")


def test_each_embedder_carries_its_calibration():
    assert calibration_of(MiniLMEmbedder()) == MINILM_CALIBRATION == Calibration(floor=0.20, related_floor=0.60)
    fn = _FakeEmbedFn()
    litellm = LiteLLMEmbedder("openai/text-embedding-3-small", fn)
    assert calibration_of(litellm) == DEFAULT_CALIBRATION and fn.calls == []  # reading it never probes dim
    measured = Calibration(floor=0.35)
    assert calibration_of(LiteLLMEmbedder("m", fn, calibration=measured)) is measured
    assert calibration_of(HashEmbedder()) == DEFAULT_CALIBRATION  # an embedder without one gets the default
    with pytest.raises(AttributeError):
        MINILM_CALIBRATION.floor = 0.5  # frozen: one embedder's numbers cannot leak into another's


def test_hash_embedder_fake_is_deterministic_and_relates_near_words():
    emb = HashEmbedder(dim=64)
    a, b = emb.embed(["the index rebuild", "the index rebuild"])
    assert np.array_equal(a, b)
    rows = emb.embed(["retrieval of notes", "retrieving notes", "quarterly taxes due", ""])
    assert rows.shape == (4, 64) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    assert rows[0] @ rows[1] > rows[0] @ rows[2]
    _conforms(emb)
