"""Unit tests run with network sockets disabled, as LangChain partner packages run theirs
(``pytest --disable-socket --allow-unix-socket``): everything here is local (the tiny model, the packaged
embedder, SQuAD from the package), so any connection attempt is a bug. Unix sockets stay allowed
(asyncio's event loop uses a socket pair)."""

from __future__ import annotations

import pytest
import pytest_socket


@pytest.fixture(autouse=True)
def _sockets_disabled():
    pytest_socket.disable_socket(allow_unix_socket=True)
    yield
    pytest_socket.enable_socket()
