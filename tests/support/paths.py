"""Where the tests find the repository, its test data and the shared data outside it."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


def shared_data() -> Path:
    """Where ../shared/data lives (env VAULT_SHARED_DATA overrides)."""
    return Path(os.environ.get("VAULT_SHARED_DATA", REPO.parent / "shared" / "data"))
