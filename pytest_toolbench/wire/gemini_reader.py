"""Gemini replies -> :class:`Reply`: one ``GenerateContentResponse``, a JSON array of them,
or their SSE stream.

Every event of a stream is a whole ``GenerateContentResponse`` whose parts are new content
to append; a body is one of them (or, from the streaming route without ``alt=sse``, an
array of them). All are folded the same way, first candidate only:

- ``text`` parts are the text, ``thought: true`` text parts the reasoning (they come only
  with ``includeThoughts``); ``functionCall`` parts the calls, each whole in one part
  (``args`` an object). A call without an ``id`` (the service often sends none, and
  parallel calls can be identical) gets one of the reader's own, ``call_N`` (N its place in
  the reply); the request sends only the service's own ids back;
- ``Reply.native_turn`` is every part exactly as received, the final ``{"text": ""}`` and
  its ``thoughtSignature`` included: the next request sends them back as they are;
- ``finishReason`` is ``api_finish_reason``; the normalised one: ``STOP`` -> ``stop`` (or
  ``tool_calls`` when the reply calls a function: the service ends those ``STOP`` too),
  ``MAX_TOKENS`` -> ``length``, ``SAFETY``, ``RECITATION``, ``BLOCKLIST``,
  ``PROHIBITED_CONTENT``, ``SPII``, ``IMAGE_SAFETY``, ``IMAGE_PROHIBITED_CONTENT``,
  ``MODEL_ARMOR`` -> ``content_filter``, others as sent; ``MALFORMED_FUNCTION_CALL``,
  ``UNEXPECTED_TOOL_CALL``, ``TOO_MANY_TOOL_CALLS`` and ``MISSING_THOUGHT_SIGNATURE`` fail
  the stage, naming them and quoting ``finishMessage``;
- a prompt the service refused has no candidates, only ``promptFeedback.blockReason``: the
  finish reason is ``content_filter``, ``api_finish_reason`` the block reason;
- ``usageMetadata`` is restated on every event (not summed; the last one wins), with the
  chat names added: ``prompt_tokens`` (``promptTokenCount``), ``completion_tokens``
  (``candidatesTokenCount`` plus ``thoughtsTokenCount``), ``total_tokens``;
- an error body ``{"error": {"code", "message", "status", "details"}}`` is the reply's
  error; a ``RetryInfo`` detail's ``retryDelay`` (``"34.4s"``) is how long the client
  waits before it retries a 429.

The checks, each a problem that starts with its name (``gemini stream: ...``,
``gemini body: ...``):

- ``JSON``: an event or body that is not a JSON object (or an array of them);
- ``response shape``: ``candidates`` that is not a list, a candidate, ``content`` or part
  that is not an object, ``parts`` that is not a list, or a response with neither
  candidates, prompt feedback nor usage;
- ``function call``: a ``functionCall`` without a name, or whose ``args`` is not an object
  (a call always arrives whole, so a piece of one is a broken call);
- ``terminal event``: content after the event that gave the ``finishReason``;
- ``finish reason``: ``MALFORMED_FUNCTION_CALL`` or ``UNEXPECTED_TOOL_CALL``;
- ``error event``: an in-band ``error`` object.

A stream has no end marker: it is done when an event gave a ``finishReason`` (or the
prompt was blocked); one that closes before is seen by ``StreamStats.done``, which
``expect.stream.done`` checks.
"""

from __future__ import annotations

import re
from typing import Any

from ..records import Reply
from .base import Event, dumps, error_message, read_body_json, snippet
from .stream import CallPart, StreamAccumulator, ToolCallParts, read_whole

__all__ = ["BODY", "STREAM", "GeminiStream", "read_gemini_body"]

STREAM = "gemini stream"
BODY = "gemini body"
END = "an event with a finishReason"

FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
          "RECITATION": "content_filter", "BLOCKLIST": "content_filter",
          "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
          "IMAGE_SAFETY": "content_filter", "IMAGE_PROHIBITED_CONTENT": "content_filter",
          "MODEL_ARMOR": "content_filter"}
"""``finishReason`` -> the normalised finish reason; any other word stays as sent."""

FAILED_CALLS = {"MALFORMED_FUNCTION_CALL": "the model's function call was malformed",
                "UNEXPECTED_TOOL_CALL": "the model called a tool when none was allowed",
                "TOO_MANY_TOOL_CALLS": "the model made more tool calls than the service allows",
                "MISSING_THOUGHT_SIGNATURE": "a function call went back without its thought"
                                             " signature"}
"""Finish reasons that fail the stage: the model tried a call and it went wrong."""

_DELAY = re.compile(r"\A\s*(\d+(?:\.\d+)?)s\s*\Z")


class GeminiStream(StreamAccumulator):
    """Folds ``GenerateContentResponse`` objects, streamed or whole, into one Reply."""

    where = STREAM
    end = END

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[dict[str, Any]] = []
        self._text: list[str] = []
        self._thoughts: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._finish: str | None = None
        self._finish_message: str | None = None
        self._blocked: str | None = None
        self.calls = ToolCallParts(CallPart)
        """Each call whole in one part: keyed by none, as identical calls are two."""

    def read(self, event: Event, offset_ms: float) -> None:
        response = self.payload(event)
        if response is not None:
            self.fold(response, offset_ms)

    def fold(self, response: Any, offset_ms: float) -> None:
        """One ``GenerateContentResponse``: its parts appended, its usage restated."""
        if not isinstance(response, dict):
            self.problem(f"JSON: event {self.events} is not a JSON object:"
                         f" {snippet(dumps(response))}")
            return
        if response.get("error") is not None:
            self.in_band_error("error event", response["error"])
            return
        self.set_usage(response.get("usageMetadata"))  # the chat names added once, at the end
        feedback = response.get("promptFeedback")
        if isinstance(feedback, dict) and isinstance(feedback.get("blockReason"), str):
            self._blocked = feedback["blockReason"]
            self.done = True
        candidates = response.get("candidates")
        if candidates is None:
            if feedback is None and "usageMetadata" not in response:
                self.problem(f"response shape: event {self.events} has no candidates, no"
                             f" promptFeedback and no usageMetadata: {snippet(dumps(response))}")
            return
        if not isinstance(candidates, list) or (candidates and not isinstance(candidates[0], dict)):
            self.problem(f"response shape: event {self.events}: candidates is not a list of"
                         f" objects: {snippet(dumps(candidates))}")
            return
        if candidates:
            self._candidate(candidates[0], offset_ms)

    def _candidate(self, candidate: dict[str, Any], offset_ms: float) -> None:
        parts = self._parts_of(candidate.get("content"))
        if parts and self._finish is not None:
            self.problem(f"terminal event: event {self.events} adds content after the"
                         f" finishReason {self._finish}")
        for part in parts:
            self._part(part, offset_ms)
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            self._finish, self.done = reason, True
            message = candidate.get("finishMessage")
            self._finish_message = message if isinstance(message, str) else None

    def _parts_of(self, content: Any) -> list[dict[str, Any]]:
        """The parts of a candidate's content; ``{}``, no ``parts`` or no content: none."""
        if content is None:
            return []
        parts = content.get("parts", []) if isinstance(content, dict) else None
        if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
            self.problem(f"response shape: event {self.events}: content is not an object with"
                         f" a list of part objects: {snippet(dumps(content))}")
            return [part for part in parts or () if isinstance(part, dict)] \
                if isinstance(parts, list) else []
        return parts

    def _part(self, part: dict[str, Any], offset_ms: float) -> None:
        self._parts.append(part)
        text = part.get("text")
        if isinstance(text, str) and text:
            if part.get("thought") is True:
                self._thoughts.append(text)
            else:
                self._text.append(text)
                self.first_output(offset_ms)
        call = part.get("functionCall")
        if call is not None:
            self._function_call(call, offset_ms)

    def _function_call(self, call: Any, offset_ms: float) -> None:
        name = call.get("name") if isinstance(call, dict) else None
        args = call.get("args", {}) if isinstance(call, dict) else None
        if not isinstance(name, str) or not name or not isinstance(args, dict):
            self.problem(f"function call: event {self.events}: a functionCall needs a name and"
                         f" args as an object, and comes whole: {snippet(dumps(call))}")
        self.first_output(offset_ms)
        part = self.calls.open()
        given = call.get("id") if isinstance(call, dict) else None
        part.id = given if isinstance(given, str) and given else f"call_{part.position}"
        part.name = name if isinstance(name, str) else ""
        part.arguments(dumps(args) if isinstance(args, dict) else dumps(args or {}), offset_ms)
        self.closed_call(part, offset_ms)  # a part is whole: its call is complete

    def complete(self, reply: Reply) -> None:
        reply.usage = _usage(self.usage)
        reply.text = "".join(self._text)
        reply.reasoning = "".join(self._thoughts) or None
        reply.tool_calls = [part.build() for part in self.calls.parts]
        reply.native_turn = self._parts
        if self._blocked is not None and self._finish is None:
            reply.api_finish_reason, reply.finish_reason = self._blocked, "content_filter"
            return
        reply.api_finish_reason = self._finish
        reply.finish_reason = "tool_calls" if self._finish == "STOP" and reply.tool_calls \
            else FINISH.get(self._finish or "", self._finish)
        if self._finish in FAILED_CALLS:
            said = f": {self._finish_message}" if self._finish_message else ""
            self.problem(f"finish reason: {self._finish} ({FAILED_CALLS[self._finish]}){said}")


def _usage(usage: Any) -> dict[str, Any] | None:
    """``usageMetadata`` with the chat names added (thought tokens are output tokens)."""
    if not isinstance(usage, dict):
        return None
    merged = dict(usage)
    prompt, total = usage.get("promptTokenCount"), usage.get("totalTokenCount")
    output: list[int] = [value for key in ("candidatesTokenCount", "thoughtsTokenCount")
                         if isinstance(value := usage.get(key), int)
                         and not isinstance(value, bool)]
    if _is_int(prompt):
        merged.setdefault("prompt_tokens", prompt)
    if output:
        merged.setdefault("completion_tokens", sum(output))
    if _is_int(total):
        merged.setdefault("total_tokens", total)
    return merged


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_gemini_body(status: int, body: bytes | str, content_type: str) -> Reply:
    """A whole response of any status -> Reply (see the module's docstring)."""
    reply, payload = read_whole(BODY, status, body, content_type)
    if reply.error is not None:
        reply.retry_after_s = _retry_delay(read_whole_error(body))
    if payload is None:
        return reply
    if isinstance(payload, dict) and payload.get("error") is not None:
        reply.error = error_message(payload["error"])
        return reply
    fold = _BodyFold()
    for response in payload if isinstance(payload, list) else [payload]:
        fold.events += 1
        fold.fold(response, 0.0)
    folded = fold.finish()
    folded.status, folded.stream, folded.ttft_ms = status, None, None
    return folded


class _BodyFold(GeminiStream):
    """A whole body's responses, folded as a stream's events are; its problems are the
    body's."""

    where = BODY


def read_whole_error(body: bytes | str) -> Any:
    """The ``error`` object of an error body, when it is JSON with one."""
    payload = read_body_json(body).payload
    return payload.get("error") if isinstance(payload, dict) else None


def _retry_delay(error: Any) -> float | None:
    """A ``google.rpc.RetryInfo`` detail's ``retryDelay`` (``"34.4s"``) in seconds."""
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else ():
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        match = _DELAY.match(delay) if isinstance(delay, str) else None
        if match:
            return float(match.group(1))
    return None
