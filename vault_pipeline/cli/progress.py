"""Progress of a long step, on stderr: a live bar on a terminal, plain lines elsewhere.

On a terminal a rich bar shows done/total, the rate (``310 rows/s``), the time taken and the
ETA, and goes away when the step ends. When stderr is a file or a pipe (``vault index > log 2>&1``, cron, CI) a bar would
print nothing readable, so a plain line is written every ``PLAIN_EVERY`` seconds instead:
``index: 4,096/102,400 notes (4%), 41.3/s, 1:39 elapsed, ETA 39:42``. A step shorter than
that prints no line at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from vault_pipeline.cli.common import err

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

PLAIN_EVERY = 5.0  # seconds between plain progress lines: a 26-minute index writes ~300 lines
LABEL_WIDTH = 40  # characters of an item's label (a conversation's title) shown beside the bar


class ProgressFn(Protocol):
    """What the library calls as a step advances: how many are done, of how many, and on what."""

    def __call__(self, done: int, total: int | None, label: str = "") -> None: ...


@contextmanager
def progress(
    name: str,
    unit: str,
    count: Callable[[], int | None] | None = None,
    status: Callable[[], str] | None = None,
) -> Iterator[ProgressFn]:
    """A progress callback for one step named ``name`` counting ``unit``. ``count`` gives the total
    where the library passes none (the ingest counts conversations before it starts); ``status`` a
    running figure shown beside the count (the ingest's model calls and cost so far)."""
    if err.is_terminal:
        with _bar(unit) as bar:
            task = bar.add_task(f"counting {unit}" if count else name, total=None)
            yield bar_callback(bar, task, count() if count else None, status)
    else:
        yield PlainProgress(err, name, unit, count() if count else None, every=PLAIN_EVERY, status=status)


def _bar(unit: str) -> Progress:
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
        _rate_column(unit),
        TimeElapsedColumn(),
        TimeRemainingColumn(),  # the ETA, where the total is known
        console=err,
        transient=True,
    )


def _rate_column(unit: str):
    """A bar column showing the task's rate (rich's own estimate over its recent updates)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.0f} {unit}/s" if speed else f"- {unit}/s", style="progress.data.speed")

    return RateColumn()


def bar_callback(
    bar: Progress, task: TaskID, known_total: int | None = None, status: Callable[[], str] | None = None
) -> ProgressFn:
    """A library progress callback driving one task of a rich bar."""

    def update(done: int, total: int | None, label: str = "") -> None:
        description = (label or "")[:LABEL_WIDTH]
        if status is not None:
            description = f"{description:<{LABEL_WIDTH}}  {status()}"
        bar.update(task, completed=done, total=total or known_total, description=description)

    return update


class PlainProgress:
    """A progress callback writing a plain line at most every ``every`` seconds."""

    def __init__(
        self,
        console: Console,
        name: str,
        unit: str,
        known_total: int | None = None,
        *,
        every: float = PLAIN_EVERY,
        clock: Callable[[], float] = time.monotonic,
        status: Callable[[], str] | None = None,
    ) -> None:
        self.console, self.name, self.unit, self.known_total = console, name, unit, known_total
        self.every, self.clock, self.status = every, clock, status
        self.started = self.last = clock()
        # The rate is measured from the first report on: a step may spend a while before its first
        # item (reading, finding candidates), which says nothing about how fast items go.
        self.first: tuple[float, int] | None = None

    def __call__(self, done: int, total: int | None, label: str = "") -> None:
        now = self.clock()
        if self.first is None:
            self.first = (now, done)
        if now - self.last < self.every:
            return
        self.last = now
        self.console.print(self.line(done, total or self.known_total, now), markup=False)
        self.console.file.flush()  # a line as it happens, also into a pipe

    def line(self, done: int, total: int | None, now: float) -> str:
        """``name: done/total unit (pct), rate/s, elapsed, ETA`` (what is not known yet is left out)."""
        since, done_then = self.first or (now, done)
        # No rate until 1% of the items (at least two) are done since the first report: a
        # step working in batches reports its first item late, and one item says little.
        enough = done - done_then >= max(2, (total or 0) / 100)
        rate = (done - done_then) / (now - since) if now > since and enough else None
        counted = f"{done:,}/{total:,} {self.unit} ({done / total:.0%})" if total else f"{done:,} {self.unit}"
        parts = [f"{self.name}: {counted}"]
        if rate is not None:
            parts.append(f"{rate:,.1f}/s")
        parts.append(f"{clock_time(now - self.started)} elapsed")
        if rate is not None and total:
            parts.append(f"ETA {clock_time(max(0, total - done) / rate)}")
        if self.status is not None:
            parts.append(self.status())
        return ", ".join(parts)


def clock_time(seconds: float) -> str:
    """Seconds as ``m:ss`` or ``h:mm:ss``."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
