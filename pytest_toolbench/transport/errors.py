"""Transport errors: a case fails with one of these as its reason.

    TransportError            anything that kept a reply from arriving whole
      ├── ConnectFailed       no connection (refused, DNS, connect timeout)
      ├── ReadTimedOut        the server stalled past the read timeout
      │     └── DeadlineExceeded  the whole reply took longer than the total deadline
      ├── ReplyTooLarge       the reply went past the size or stream-event limit
      ├── ConnectionLost      the connection was reset or closed mid-response
      ├── ProtocolViolation   the bytes are not a response of the case's wire API
      ├── UnsendableRequest   the request cannot be sent as JSON (nothing was sent)
      ├── CircuitOpen         the endpoint's circuit breaker is open
      └── ReplayError         replay could not answer (unreadable cassette, different request...)
            └── CassetteMissing   there is no cassette: the message is the command that records it
"""

from __future__ import annotations


class TransportError(Exception):
    """A reply could not be obtained; ``str()`` is the reason shown to the user."""

    reason = "transport error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.retries: list[str] = []
        """The attempts that failed before this one, one line each (as ``PendingReply``'s)."""
        self.injected = False
        """What a fault injected did (a disconnect, a cut, a hold past the timeout), not
        the endpoint."""

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class ConnectFailed(TransportError):
    reason = "connect failed"


class ReadTimedOut(TransportError):
    reason = "read timed out"


class DeadlineExceeded(ReadTimedOut):
    reason = "deadline exceeded"


class ReplyTooLarge(TransportError):
    reason = "reply too large"


class ConnectionLost(TransportError):
    reason = "connection lost"


class ProtocolViolation(TransportError):
    reason = "protocol violation"


class UnsendableRequest(TransportError):
    """The request holds NaN or Infinity, which JSON has no word for. Case files and tools
    cannot put them there; a server can, in a reply the next request sends back as it came
    (a Responses output item, a Messages content block): Python's JSON reader accepts them."""

    reason = "request not sendable"


class CircuitOpen(TransportError):
    reason = "circuit open"


class ReplayError(TransportError):
    reason = "replay"


class CassetteMissing(ReplayError):
    """No cassette to replay: not a failed replay but one never recorded, so the message
    stands alone (it names the command that records it)."""

    def __str__(self) -> str:
        return self.message
