"""Fixtures shared by the project's tests."""

from __future__ import annotations

from collections.abc import Iterator

# Two imports here once, before any pytester run, because pytester drops the modules an
# in-process run imported when it ends. httpx2 imports httpcore2 lazily, with its first
# transport, and keeps a table of httpcore2's exception classes from then on: were httpcore2
# first imported inside a pytester run, the next import would make new classes the table
# does not know, and a reset would reach a test as httpcore2.ReadError, not httpx2's.
import httpcore2  # noqa: F401
import pytest
from hypothesis_profiles import load_default_profile
from support.chat_server import ChatServer, start_chat_server

# The plugin imports its machinery as it needs it: collection with the first case file,
# validation with the first case validated, the runner with the first case run. Imported
# here once, for every in-process run to share: PyYAML's C extension cannot be imported a
# second time, and the rest would otherwise be imported anew by each run.
import pytest_toolbench.casefile.schema
import pytest_toolbench.items
import pytest_toolbench.report.failure
import pytest_toolbench.session  # noqa: F401

load_default_profile()  # before the hypothesis plugin applies --hypothesis-profile, if given


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A scripted chat-completions server on loopback, closed after the test.

    It serves from its own thread, so it keeps answering while the test runs an
    in-process ``pytester.runpytest()``.
    """
    with start_chat_server() as server:
        yield server


@pytest.fixture(autouse=True)
def isolated_inner_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytester runs see no endpoint or key from the developer's shell, and leave out
    two plugins the dev environment may hold: hypothesis (pytester imports it anew for every
    in-process run, ~0.7 s each) and pytest-benchmark (it warns under xdist, which
    ``filterwarnings = error`` makes fatal).
    """
    if "pytester" not in request.fixturenames:
        return
    request.getfixturevalue("pytester")  # first: pytester clears PYTEST_ADDOPTS when it starts
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:benchmark")
    # CI and BUILD_NUMBER make pytest print whole failure messages in its short summary:
    # inner runs read the same on a laptop and in CI.
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TOOLBENCH_BASE_URL", "CI",
                 "BUILD_NUMBER"):
        monkeypatch.delenv(name, raising=False)
