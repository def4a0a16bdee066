"""The live tier: a real llama-cpp-python server with Gemma 3 270M (the ``[local]`` extra).

The server starts once per session, on a free loopback port, and stops at the end. Without
the extra the tier skips, unless ``TOOLBENCH_REQUIRE_LIVE=1`` (as in CI) makes that a
failure: a suite that silently skips its only real endpoint proves nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pytest_toolbench.commands.local_server import (
    ExtraNotInstalled,
    LocalServer,
    require_extra,
    start_local_server,
)

REQUIRE_LIVE = "TOOLBENCH_REQUIRE_LIVE"
READY_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def local_extra() -> None:
    """Skip the test when the ``[local]`` extra is missing (fail if the tier is required)."""
    try:
        require_extra()
    except ExtraNotInstalled as error:
        if os.environ.get(REQUIRE_LIVE) == "1":
            pytest.fail(f"{REQUIRE_LIVE}=1 and {error}", pytrace=False)
        pytest.skip(f"live tier skipped: {error}")


@pytest.fixture(scope="session")
def local_server(local_extra: None) -> Iterator[LocalServer]:
    """The running model server; its ``base_url`` ends in ``/v1``."""
    with start_local_server(timeout_s=READY_TIMEOUT_S) as server:
        yield server
