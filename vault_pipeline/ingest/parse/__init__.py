"""The parse stage: chat exports (ChatGPT, Claude, transcripts, LoCoMo) -> Conversation records.

``read_export`` accepts a file, a folder or an export ``.zip``, detects the format by content,
streams JSON arrays element by element, and yields a ``ParseIssue`` for every bad record while
the good records beside it still come through.
"""

from __future__ import annotations

from vault_pipeline.ingest.parse.detect import detect_kind
from vault_pipeline.ingest.parse.jsonstream import TruncatedJSON, iter_json_array
from vault_pipeline.ingest.parse.read import read_export
from vault_pipeline.ingest.parse.types import Conversation, Kind, Message, ParseIssue, Role

__all__ = [
    "Conversation",
    "Kind",
    "Message",
    "ParseIssue",
    "Role",
    "TruncatedJSON",
    "detect_kind",
    "iter_json_array",
    "read_export",
]
