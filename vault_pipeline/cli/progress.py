"""Progress of a long step, on stderr: a live bar on a terminal (done/total, time taken, ETA),
gone when the step ends; nothing when stderr is a file or a pipe."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from vault_pipeline.cli.common import err

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

LABEL_WIDTH = 40  # characters of an item's label (a conversation's title) shown beside the bar


class ProgressFn(Protocol):
    """What the library calls as a step advances: how many are done, of how many, and on what."""

    def __call__(self, done: int, total: int | None, label: str = "") -> None: ...


@contextmanager
def progress(name: str, unit: str, count: Callable[[], int | None] | None = None) -> Iterator[ProgressFn]:
    """A progress callback for one step named ``name`` counting ``unit``. ``count`` gives the total
    where the library passes none (the ingest counts conversations before it starts)."""
    if err.is_terminal:
        with _bar() as bar:
            task = bar.add_task(f"counting {unit}" if count else name, total=None)
            yield bar_callback(bar, task, count() if count else None)
    else:
        yield _quiet


def _quiet(done: int, total: int | None, label: str = "") -> None:
    """Off a terminal a bar prints nothing readable: no progress at all."""


def _bar() -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),  # the ETA, where the total is known
        console=err,
        transient=True,
    )


def bar_callback(bar: Progress, task: TaskID, known_total: int | None = None) -> ProgressFn:
    """A library progress callback driving one task of a rich bar."""

    def update(done: int, total: int | None, label: str = "") -> None:
        bar.update(task, completed=done, total=total or known_total, description=(label or "")[:LABEL_WIDTH])

    return update
