"""The offline backend's algorithms, one per prompt name.

Each handler takes the prompt's variables and returns JSON-shaped data that the
caller's response model validates exactly as it would a model's answer. The
registry resolves lazily so a command only imports the algorithms it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from importlib import import_module
from typing import Any

_HANDLER_PATHS = {
    "extract": "vault_pipeline.models.offline.extraction:extract_units",
    "summarize": "vault_pipeline.models.offline.extraction:summarize",
    "thread_map": "vault_pipeline.models.offline.extraction:thread_map",
    "decompose": "vault_pipeline.models.offline.retrieval:decompose",
    "gate": "vault_pipeline.models.offline.retrieval:gate",
    "judge": "vault_pipeline.models.offline.judging:judge",
}


class _Registry(Mapping[str, Callable[[Mapping[str, Any]], Any]]):
    """Prompt name -> handler, imported on first use."""

    def __getitem__(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        module, attr = _HANDLER_PATHS[name].split(":")
        return getattr(import_module(module), attr)

    def __iter__(self) -> Iterator[str]:
        return iter(_HANDLER_PATHS)

    def __len__(self) -> int:
        return len(_HANDLER_PATHS)


HANDLERS = _Registry()
