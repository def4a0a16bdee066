"""Scripted second models on the loopback servers: a judge's verdicts and a simulated
user's messages in each wire API's own shape, and a handler that tells the judge's, the
simulator's and the model's requests apart by what they ask.

    script = Script(api="messages", judge=[verdict("messages", "pass", "It says so.")])
    server.set_handler(script)
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Iterable
from typing import Any

from support.chat_server import JsonReply, RecordedRequest, Reply, completion, json_reply
from support.gemini_server import response as gemini_response
from support.gemini_server import text as gemini_text

USAGE = {"input_tokens": 20, "output_tokens": 7, "total_tokens": 27}


def verdict(api: str, said: str, reasoning: str = "The transcript shows it.") -> JsonReply:
    """The judge's answer ``{"reasoning", "verdict": said}`` in ``api``'s structured form."""
    return structured(api, {"reasoning": reasoning, "verdict": said})


def structured(api: str, answer: Any) -> JsonReply:
    """``answer`` as ``api``'s structured output: JSON text, or (Messages) the input of the
    forced ``verdict`` tool call."""
    if api == "messages":
        return json_reply(_message([{"type": "tool_use", "id": "toolu_1", "name": "verdict",
                                     "input": answer}], "tool_use"))
    return text(api, json.dumps(answer))


def text(api: str, said: str, finish: str | None = None) -> JsonReply:
    """A plain text reply of ``api``; ``finish``: chat's finish reason, mapped to the API's
    own (``length``)."""
    if api == "chat":
        return json_reply(completion(said, finish_reason=finish))
    if api == "responses":
        body: dict[str, Any] = {
            "id": "resp_1", "object": "response", "model": "judge-model",
            "status": "incomplete" if finish == "length" else "completed",
            "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": said, "annotations": []}]}],
            "usage": USAGE}
        if finish == "length":
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        return json_reply(body)
    if api == "messages":
        return json_reply(_message([{"type": "text", "text": said}],
                                   "max_tokens" if finish == "length" else "end_turn"))
    return json_reply(gemini_response(gemini_text(said),
                                      finish="MAX_TOKENS" if finish == "length" else "STOP"))


def refusal(api: str) -> JsonReply:
    """The judge declines: each API's refusal."""
    if api == "chat":
        body = completion(None)
        body["choices"][0]["message"]["refusal"] = "I can't judge that."
        return json_reply(body)
    if api == "responses":
        return json_reply({
            "id": "resp_1", "object": "response", "model": "judge-model", "status": "completed",
            "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "refusal", "refusal": "I can't judge that."}]}],
            "usage": USAGE})
    if api == "messages":
        return json_reply(_message([], "refusal"))
    return json_reply(gemini_response(finish="SAFETY"))


def _message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "judge-model",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 20, "output_tokens": 7}}


def role_of(request: RecordedRequest) -> str:
    """Who sent ``request``: the judge (its prompt holds the transcript's delimiter), the
    simulated user (its prompt says it plays a user) or the model under test."""
    if b"<<<TRANSCRIPT" in request.body:
        return "judge"
    if b"You play a user" in request.body:
        return "simulator"
    return "model"


class Script:
    """A server handler answering each role from its own queue, in order; a role whose
    queue is empty gets a 500 naming it. ``requests`` keeps each role's request bodies."""

    def __init__(self, *, judge: Iterable[Reply] = (), simulator: Iterable[Reply] = (),
                 model: Iterable[Reply] = ()) -> None:
        self.queues = {"judge": collections.deque(judge),
                       "simulator": collections.deque(simulator),
                       "model": collections.deque(model)}
        self.requests: dict[str, list[Any]] = {"judge": [], "simulator": [], "model": []}
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply:
        role = role_of(request)
        with self._lock:
            self.requests[role].append(request.json())
            queue = self.queues[role]
            if queue:
                return queue.popleft()
        return json_reply({"error": {"message": f"no scripted {role} reply"}}, status=500)

    def left(self) -> dict[str, int]:
        """Replies not asked for, per role."""
        with self._lock:
            return {role: len(queue) for role, queue in self.queues.items() if queue}
