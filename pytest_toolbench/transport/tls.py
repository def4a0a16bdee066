"""One SSL context for every client of the process, built once.

httpx2 builds an SSL context for each transport it makes, and building one reads the
system's certificate authorities: ~25 ms of processor time, even for a plain ``http://``
endpoint. A session makes a client for each endpoint as its cases start, on the event loop
every live case shares, so with cases started together each one's start was counted
against the timeouts of those already waiting for a connection or a reply (sixteen
endpoints: ~0.4 s; on a loaded machine one other case could be enough to overrun a short
connect timeout). A context is safe to share between connections, threads and loops.
"""

from __future__ import annotations

import ssl
import threading

import httpx2

_contexts: dict[bool, ssl.SSLContext] = {}
_lock = threading.Lock()


def shared_ssl_context(*, trust_env: bool = True) -> ssl.SSLContext:
    """The context httpx2 would build for a transport (``trust_env``: ``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR`` are read), built by the first caller and shared by every later one."""
    with _lock:
        context = _contexts.get(trust_env)
        if context is None:
            context = _contexts[trust_env] = httpx2.create_ssl_context(trust_env=trust_env)
        return context
