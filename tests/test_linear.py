"""Linear in every input: hostile text costs work in proportion to its size, never its square.

A 64,000-space line took 76 s of CPU and a list indented 1,500 levels deep 82.6 s, inside the 5 MB
record ceiling (one regex in the session note's renderer backtracked over both runs of spaces of
``[ \\t]*\\|?[ \\t]*``). What a message goes through is run here on hypothesis-generated hostile
text at two sizes: extraction (the offline extractor, mistune included), the session note's
rendering, and the index's chunking of that note.

Two measures, for two kinds of quadratic:
- Python-level work is counted, not timed: every Python and C function call under ``sys.setprofile``
  (deterministic), at most ``CALLS_PER_BYTE`` per byte of text beyond a tiny message's cost.
- Work inside one C call (a regex backtracking) makes no calls to count, so that one is timed — CPU
  time (``time.process_time``, not wall time), the best of two runs, with a deliberately generous
  bound: for 8x the text linear work measured 4-8x, quadratic gives 64x; the test fails only above
  ``CPU_RATIO`` = 16x (scaled to the bytes), two to four times what linear work takes, so machine
  load does not decide it. The deep list's old cost grew with depth cubed: 46x for 4x the depth.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault_pipeline.index.chunk import chunk_markdown
from vault_pipeline.ingest.extract import extract_conversation
from vault_pipeline.ingest.notes import session_note
from vault_pipeline.ingest.parse.types import Conversation, Message
from vault_pipeline.models.offline import OfflineBackend

SCALE = 8
# Calls per byte of text beyond a tiny message's: about 7 measured on the hostile shapes below; a
# quadratic loop over 32 KB makes thousands.
CALLS_PER_BYTE = 24.0
TINY = "We chose Terraform for staging."
CPU_RATIO = 16.0  # generous on purpose (see the docstring): linear measured 4-8, quadratic 64
WHEN = datetime(2024, 3, 1, tzinfo=UTC)


def _through(text: str) -> None:
    """What one message's text goes through in ingest and index."""
    messages = (
        Message("a", "user", "user", text, WHEN),
        Message("b", "assistant", "assistant", "The answer names Terraform and its state backend.", WHEN),
    )
    conv = Conversation("chatgpt", "c1", "Hostile text", WHEN, WHEN, messages, "hostile.json")
    extraction = extract_conversation(conv, OfflineBackend())
    note = session_note(conv, extraction.summary)
    chunk_markdown(note.id, note.body)


def _calls(run: Callable[[], None]) -> int:
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


def _cpu(run: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(2):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best


# Shapes of hostile text at a size k; each grows in bytes in proportion to k (the staircase: to k²,
# so its CPU bound scales with the bytes: 16x for 4x the depth).
HOSTILE_CHARS = list(" \t|-*`#>_~.!?:<[](){}\\0123456789aZé")


def _run_of(char: str, k: int) -> str:
    return f"We chose Terraform for staging.\nA line {char * k} ends here.\n{char * k}\nThe team knows HCL well."


def _repeated(unit: str, k: int) -> str:
    return "We chose Terraform for staging.\n" + unit * k


def _staircase(depth: int, marker: str) -> str:
    return "\n".join("  " * i + f"{marker} item number {i} here" for i in range(depth))


def _assert_linear(small: str, large: str) -> None:
    _through(small)  # warm caches and lazy imports (parsers, models) before anything is measured
    _through(large)
    ratio = len(large) / len(small)
    base = _calls(lambda: _through(TINY))
    for text in (small, large):
        per_byte = (_calls(partial(_through, text)) - base) / len(text.encode("utf-8"))
        assert per_byte <= CALLS_PER_BYTE, (len(text), per_byte)
    cpu_small = max(_cpu(lambda: _through(small)), 1e-3)
    assert _cpu(lambda: _through(large)) / cpu_small <= CPU_RATIO * ratio / SCALE, (len(small), len(large))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(char=st.sampled_from(HOSTILE_CHARS))
def test_a_run_of_one_character_costs_work_in_proportion_to_its_length(char):
    _assert_linear(_run_of(char, 2_000), _run_of(char, 2_000 * SCALE))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(unit=st.lists(st.sampled_from([*HOSTILE_CHARS, "\n", "word "]), min_size=2, max_size=12).map("".join))
def test_repeated_hostile_text_costs_work_in_proportion_to_its_size(unit):
    _assert_linear(_repeated(unit, 4_000 // len(unit)), _repeated(unit, 4_000 * SCALE // len(unit)))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(marker=st.sampled_from(["-", "*", "1.", ">"]))
def test_a_deeply_indented_list_costs_work_in_proportion_to_its_bytes(marker):
    _assert_linear(_staircase(160, marker), _staircase(640, marker))  # 4x the depth: 16x the bytes
