"""A loopback stand-in for Google's Gemini API, in the real service's shape.

It serves ``POST /v1beta/models/{model}:generateContent`` (and under ``/v1``, the version
google-genai calls by default, as the service does) and
``:streamGenerateContent?alt=sse`` (the stream's events are ``data: {json}`` separated by
CRLF CRLF, each a whole ``GenerateContentResponse``, with no end marker), and refuses what
the service refuses: a model turn whose function calls come back without the thought
signature the service gave them (400 ``INVALID_ARGUMENT``), and a key in neither
``x-goog-api-key`` nor ``?key=`` when one is required. The rest is the ChatServer's: replies
scripted by a queue or a handler, every request recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from support.chat_server import (
    ChatServer,
    JsonReply,
    RecordedRequest,
    Reply,
    SSEReply,
    json_reply,
    sse_reply,
)

ROUTE = re.compile(r"\A/v1(?:beta)?/models/([^/:?]+):(generateContent|streamGenerateContent)"
                   r"(\?.*)?\Z")


def gemini_error(code: int, message: str, status: str,
                 details: list[dict[str, Any]] | None = None) -> JsonReply:
    """Google's error body, ``{"error": {"code", "message", "status", "details"}}``."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        error["details"] = details
    return json_reply({"error": error}, status=code)


def retry_info(delay: str) -> dict[str, Any]:
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}


def response(*parts: dict[str, Any], finish: str | None = "STOP",
             usage: dict[str, Any] | None = None, **candidate: Any) -> dict[str, Any]:
    """One ``GenerateContentResponse`` with one candidate of ``parts``."""
    body: dict[str, Any] = {"candidates": [{"content": {"role": "model", "parts": list(parts)},
                                            **candidate}],
                            "modelVersion": "gemini-2.5-flash", "responseId": "resp-1"}
    if finish is not None:
        body["candidates"][0]["finishReason"] = finish
    body["usageMetadata"] = usage or {"promptTokenCount": 12, "candidatesTokenCount": 5,
                                      "totalTokenCount": 17}
    return body


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"text": value, **extra}


def call(name: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args}, **extra}


def gemini_sse(events: Iterable[Mapping[str, Any] | bytes], split_bytes: int | None = None
               ) -> SSEReply:
    """The stream as the service sends it: CRLF CRLF after each event, no end marker."""
    raw = [event if isinstance(event, bytes)
           else b"data: " + json.dumps(event).encode() + b"\r\n\r\n" for event in events]
    return sse_reply(raw, done=False, split_bytes=split_bytes)


class GeminiServer(ChatServer):
    """A ChatServer on Gemini's routes; ``base_url`` ends in ``/v1beta``."""

    signatures: dict[str, str]

    def start(self) -> GeminiServer:
        super().start()
        self.base_url = self.base_url.removesuffix("/v1") + "/v1beta"
        self.signatures = {}
        return self

    def _reply_for(self, request: RecordedRequest) -> Reply:
        match = ROUTE.match(request.path)
        if request.method != "POST" or match is None:
            return gemini_error(404, f"no route for {request.method} {request.path}",
                                "NOT_FOUND")
        if match.group(2) == "streamGenerateContent" and "alt=sse" not in (match.group(3) or ""):
            return json_reply([], status=200)  # the service answers a JSON array then
        refusal = self.refusal(request.json())
        if refusal is not None:
            return refusal
        with self._lock:
            handler = self._handler
            queued = self._queue.popleft() if handler is None and self._queue else None
        if handler is not None:
            return self._call_handler(handler, request)
        return queued or gemini_error(500, "no scripted reply", "INTERNAL")

    def remember(self, name: str, args: dict[str, Any], signature: str) -> None:
        """The service gave the call ``name(args)`` this signature: it must come back."""
        self.signatures[_call_key(name, args)] = signature

    def refusal(self, body: dict[str, Any]) -> JsonReply | None:
        """The 400 the service answers a request with whose function calls lost the
        signature it gave them, or None."""
        for turn_index, turn in enumerate(body.get("contents", [])):
            if turn.get("role") != "model":
                continue
            for part_index, part in enumerate(turn.get("parts", [])):
                function = part.get("functionCall") or {}
                wanted = self.signatures.get(_call_key(function.get("name"),
                                                       function.get("args")))
                if wanted is not None and part.get("thoughtSignature") != wanted:
                    return gemini_error(
                        400, f"Function call is missing a thought_signature in functionCall"
                        f" parts. contents[{turn_index}].parts[{part_index}]",
                        "INVALID_ARGUMENT")
        return None


def _call_key(name: Any, args: Any) -> str:
    return f"{name}({json.dumps(args, sort_keys=True)})"
