"""vault_pipeline: chat archives in, atomic provenance-weighted notes out, precise context back.

The public API, in the order of the flow (each name is loaded on first use, so importing the
package, or any one module of it, loads nothing else)::

    import vault_pipeline as vp

    llm, embedder = vp.build_llm("offline"), vp.build_embedder("minilm")
    vault = vp.Vault.open(Path("notes"))                          # a folder made by `vault init`
    report = vp.ingest(vault, [Path("export.zip")], llm)          # -> IngestReport
    vp.keep(vault, all_passing=True)                              # -> KeepReport
    vp.index(vault, embedder)                                     # -> IndexReport
    for package in vp.query(vault, [("When is the deadline?", None)], embedder=embedder,
                            llm_plan=llm, llm_gate=llm):          # -> ContextPackage
        print(package.to_markdown())
    vp.check(vault)                                               # -> CheckReport
    vp.clean(vault, embedder=embedder, llm=llm)                   # -> CleanReport

Models come from ``build_llm`` and ``build_embedder`` (``"offline"`` and ``"minilm"`` need no key or
network); settings from ``load_settings``; every error is a ``VaultError``.
"""

from __future__ import annotations

import functools
import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_WHERE = {
    "ingest": "vault_pipeline.pipeline",
    "estimate_ingest": "vault_pipeline.pipeline",
    "keep": "vault_pipeline.pipeline",
    "index": "vault_pipeline.pipeline",
    "query": "vault_pipeline.pipeline",
    "search": "vault_pipeline.pipeline",
    "gate_llm": "vault_pipeline.pipeline",
    "status": "vault_pipeline.pipeline",
    "check": "vault_pipeline.pipeline",
    "plan_clean": "vault_pipeline.pipeline",
    "clean": "vault_pipeline.pipeline",
    "undo_clean": "vault_pipeline.pipeline",
    "IngestReport": "vault_pipeline.pipeline",
    "VaultStatus": "vault_pipeline.pipeline",
    "KeepReport": "vault_pipeline.ingest.keep",
    "IndexReport": "vault_pipeline.index.sync",
    "CheckReport": "vault_pipeline.index.check",
    "ContextPackage": "vault_pipeline.retrieve.package",
    "FunnelConfig": "vault_pipeline.retrieve.types",
    "Plan": "vault_pipeline.clean.types",
    "CleanReport": "vault_pipeline.clean.apply",
    "UndoReport": "vault_pipeline.clean.undo",
    "Vault": "vault_pipeline.vault.files",
    "Settings": "vault_pipeline.config",
    "load_settings": "vault_pipeline.config",
    "build_llm": "vault_pipeline.models.build",
    "build_embedder": "vault_pipeline.models.embed",
    "StructuredLLM": "vault_pipeline.models.protocol",
    "Embedder": "vault_pipeline.models.embed",
    "VaultError": "vault_pipeline.errors",
}

__all__ = [
    "CheckReport",
    "CleanReport",
    "ContextPackage",
    "Embedder",
    "FunnelConfig",
    "IndexReport",
    "IngestReport",
    "KeepReport",
    "Plan",
    "Settings",
    "StructuredLLM",
    "UndoReport",
    "Vault",
    "VaultError",
    "VaultStatus",
    "__version__",
    "build_embedder",
    "build_llm",
    "check",
    "clean",
    "estimate_ingest",
    "gate_llm",
    "index",
    "ingest",
    "keep",
    "load_settings",
    "plan_clean",
    "query",
    "search",
    "status",
    "undo_clean",
]


# API functions that share their name with a stage sub-package.
_STAGES = frozenset({"ingest", "index", "clean"})


class _StageFunction:
    """An API function named like a stage sub-package: calling it calls the function; its other
    (non-dunder) attributes are the sub-package's, so ``vault_pipeline.index.sync``, ``import
    vault_pipeline.index.sync as s`` and ``mock.patch("vault_pipeline.index.sync.sync")`` reach the
    module. ``inspect.signature`` and ``typing.get_type_hints`` read the function (``__wrapped__``)."""

    def __init__(self, function: Any, package: str) -> None:
        functools.update_wrapper(self, function)
        self._package = package

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self.__wrapped__)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        package = import_module(self._package)
        try:
            return getattr(package, name)
        except AttributeError:
            pass
        try:
            return import_module(f"{self._package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{self._package}.{name}":
                raise
            raise AttributeError(f"{self._package!r} has no attribute {name!r}") from None


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in _WHERE:
        raise AttributeError(f"module 'vault_pipeline' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    if name in _STAGES:
        value = _StageFunction(value, f"{__name__}.{name}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Facade(ModuleType):
    """The package module: ``ingest``, ``index`` and ``clean`` name both a function of the API and a
    stage sub-package. The function wins: importing the sub-package (which would set the attribute
    to it) leaves the name alone; the sub-package is still imported by its full name
    (``from vault_pipeline.index.sync import sync``, ``import vault_pipeline.index.sync as s``), and
    the function's attributes reach it (``_StageFunction``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _WHERE and isinstance(value, ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade


if TYPE_CHECKING:
    from vault_pipeline.clean.apply import CleanReport
    from vault_pipeline.clean.types import Plan
    from vault_pipeline.clean.undo import UndoReport
    from vault_pipeline.config import Settings, load_settings
    from vault_pipeline.errors import VaultError
    from vault_pipeline.index.check import CheckReport
    from vault_pipeline.index.sync import IndexReport
    from vault_pipeline.ingest.keep import KeepReport
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.models.embed import Embedder, build_embedder
    from vault_pipeline.models.protocol import StructuredLLM
    from vault_pipeline.pipeline import (
        IngestReport,
        VaultStatus,
        check,
        clean,
        estimate_ingest,
        gate_llm,
        index,
        ingest,
        keep,
        plan_clean,
        query,
        search,
        status,
        undo_clean,
    )
    from vault_pipeline.retrieve.package import ContextPackage
    from vault_pipeline.retrieve.types import FunnelConfig
    from vault_pipeline.vault.files import Vault
