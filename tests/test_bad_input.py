"""Bad input, generated: only the project's own error escapes, and good records still come through."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault_pipeline.errors import VaultError
from vault_pipeline.notes import safe_stem, split_frontmatter
from vault_pipeline.parse import Conversation, ParseIssue, read_export

GOOD = {"id": "good", "title": "Fine", "current_node": "u", "mapping": {
    "r": {"id": "r", "parent": None, "children": ["u"], "message": None},
    "u": {"id": "u", "parent": "r", "children": [], "message": {
        "id": "u", "author": {"role": "user"}, "content": {"content_type": "text", "parts": ["Hello there."]}}}}}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)
odd_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=300)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(odd_text)
def test_frontmatter_reader_raises_only_its_own_error(text):
    try:
        frontmatter, body = split_frontmatter(text)
    except VaultError:
        return
    assert isinstance(frontmatter, dict) and isinstance(body, str)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(json_values, max_size=5))
def test_random_records_beside_a_good_one(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("bad") / "conversations.json"
    path.write_text(json.dumps([GOOD, *records, GOOD]), encoding="utf-8")
    items = list(read_export(path))
    assert all(isinstance(i, (Conversation, ParseIssue)) for i in items)
    assert [i.id for i in items if isinstance(i, Conversation)].count("good") >= 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_arbitrary_bytes_give_a_parse_error_or_issues(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "conversations.json"
    path.write_bytes(data)
    try:
        items = list(read_export(path))
    except VaultError:
        return
    assert all(isinstance(i, (Conversation, ParseIssue)) for i in items)


@given(st.text(max_size=400))
def test_titles_never_escape_the_folder(title):
    stem = safe_stem(title, "a-0123456789ab")
    assert stem and "/" not in stem and "\\" not in stem and ".." not in stem
    assert len(stem.encode("utf-8")) <= 120 and "\x00" not in stem


def test_path_traversal_titles():
    for title in ("../../etc/passwd", "..", "/" * 300, "a" * 300, "CON", "nul.txt"):
        stem = safe_stem(title, "a-0123456789ab")
        assert ".." not in stem and "/" not in stem and len(stem.encode()) <= 120
