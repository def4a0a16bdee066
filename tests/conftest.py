"""Fixtures shared by the project's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.chat_server import ChatServer, start_chat_server


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A scripted chat-completions server on loopback, closed after the test.

    It serves from its own thread, so it keeps answering while the test runs an
    in-process ``pytester.runpytest()``.
    """
    with start_chat_server() as server:
        yield server
