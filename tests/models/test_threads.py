"""BLAS on one thread in the CLI's process, unless the user chose a thread count."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy  # noqa: F401 (loads the BLAS library these tests read)
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from vault_pipeline import cli
from vault_pipeline.models.threads import USER_CHOICE, one_blas_thread


def blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


@pytest.fixture
def unset(monkeypatch):
    """No thread count chosen in the environment (restored afterwards, also what the function sets)."""
    for name in USER_CHOICE:
        monkeypatch.setenv(name, "")  # remembers the value before, so teardown puts it back
        monkeypatch.delenv(name)


@pytest.fixture
def two_threads():
    """BLAS at two threads for the test, so that one shows on any machine (restored afterwards)."""
    if not blas_threads():
        pytest.skip("this NumPy has no BLAS library threadpoolctl can set")
    with threadpool_limits(limits=2, user_api="blas"):
        yield


def test_one_thread_once_numpy_is_loaded(unset, two_threads):
    assert blas_threads() == {2}
    assert one_blas_thread() is True
    assert blas_threads() == {1}
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"  # and for the processes it starts


@pytest.mark.parametrize("name", USER_CHOICE)
def test_a_users_thread_count_is_left_alone(unset, two_threads, monkeypatch, name):
    monkeypatch.setenv(name, "3")
    assert one_blas_thread() is False
    assert blas_threads() == {2}
    assert all(os.environ.get(other) is None for other in USER_CHOICE if other != name)


def test_before_numpy_loads_the_environment_sets_it():
    code = (
        "import sys\n"
        "from vault_pipeline.models.threads import one_blas_thread\n"
        "assert 'numpy' not in sys.modules and one_blas_thread()\n"
        "import numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "print(sorted({p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas'}))\n"
    )
    if not blas_threads():
        pytest.skip("this NumPy has no BLAS library threadpoolctl can read")
    env = {k: v for k, v in os.environ.items() if k not in USER_CHOICE}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "[1]"


def test_the_cli_sets_it_at_start(monkeypatch):
    calls = []
    monkeypatch.setattr(cli, "one_blas_thread", lambda: calls.append(True))
    monkeypatch.setattr(sys, "argv", ["vault", "--help"])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 0
    assert calls == [True]
