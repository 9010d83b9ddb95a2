"""The lanes of a query: one embedding call, or two for a splittable embedder, the same hits."""

from __future__ import annotations

import numpy as np

from tests.index.test_index import NOTES
from tests.support.fakes import HashEmbedder
from vault_pipeline.index.search import Index
from vault_pipeline.index.sync import sync
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.lanes import search_lanes
from vault_pipeline.retrieve.state import Tools
from vault_pipeline.retrieve.types import FunnelConfig


class SplittableHashEmbedder(HashEmbedder):
    """The hash embedder (each text's vector its own), saying so."""

    splittable = True


QUERIES = [
    ("original", "Where do we store vectors?"),
    ("concept", "vector storage on disk"),
    ("methodology", "methods for storing vectors"),
    ("continuity", "earlier decisions about the query budget"),
]
UNSEARCHED = {"methods for storing vectors", "earlier decisions about the query budget"}


INTENT = "the intent: vector storage"


def _lanes(vault, embedder, unsearched, extra):
    index = Index.open(vault, embedder)
    tools = Tools(index, embedder, OfflineBackend(), OfflineBackend())
    return search_lanes(QUERIES, tools, FunnelConfig(), unsearched, extra)


def test_a_splittable_embedder_embeds_the_searched_texts_first_and_finds_the_same(make_vault):
    vault = make_vault(notes=NOTES)
    sync(vault, HashEmbedder(dim=64))
    plain, split = HashEmbedder(dim=64), SplittableHashEmbedder(dim=64)
    for unsearched, extra in ((UNSEARCHED, [INTENT]), (set(), [INTENT]), (set(), [])):
        want, want_vectors = _lanes(vault, plain, unsearched, extra)
        got, got_vectors = _lanes(vault, split, unsearched, extra)
        assert got == want and want and np.array_equal(got_vectors, want_vectors)
    texts = [text for _, text in QUERIES]
    searched = [text for text in texts if text not in UNSEARCHED]
    assert plain.calls == [[*texts, INTENT], [*texts, INTENT], texts]
    assert split.calls == [searched, [t for t in texts if t in UNSEARCHED] + [INTENT], texts, [INTENT], texts]
