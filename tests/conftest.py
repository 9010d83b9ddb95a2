"""Test-wide guards: no real network model call can happen in a test run."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest

# Importing litellm without this fetches the model cost map over the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parent.parent
ALLOW_NETWORK = os.environ.get("VAULT_LIVE_TESTS") == "1"


def _is_local(address) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX paths
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guarded_connect(self, address):
    if not _is_local(address):
        raise RuntimeError(f"network call to {address!r} blocked in tests (set VAULT_LIVE_TESTS=1 for live tests)")
    return _real_connect(self, address)


def _guarded_connect_ex(self, address):
    if not _is_local(address):
        raise RuntimeError(f"network call to {address!r} blocked in tests (set VAULT_LIVE_TESTS=1 for live tests)")
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True, scope="session")
def _no_network():
    """Fail any non-loopback connection, so a real model API call cannot slip into a test."""
    if ALLOW_NETWORK:
        yield
        return
    socket.socket.connect = _guarded_connect
    socket.socket.connect_ex = _guarded_connect_ex
    try:
        yield
    finally:
        socket.socket.connect = _real_connect
        socket.socket.connect_ex = _real_connect_ex


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``live`` unless VAULT_LIVE_TESTS=1."""
    if ALLOW_NETWORK:
        return
    skip = pytest.mark.skip(reason="live model test: set VAULT_LIVE_TESTS=1 and an API key")
    for item in items:
        if "live" in item.keywords:
            item.add_marker(skip)


def shared_data() -> Path:
    """Where ../shared/data lives (env VAULT_SHARED_DATA overrides)."""
    return Path(os.environ.get("VAULT_SHARED_DATA", REPO.parent / "shared" / "data"))
