"""Google's Gemini API (``POST models/{model}:generateContent``, streamed
``models/{model}:streamGenerateContent?alt=sse``): the conversation as ``contents``.

The key goes in ``x-goog-api-key`` (the registry row: ``GEMINI_API_KEY``, else
``GOOGLE_API_KEY``); the model is in the path, so a case over this API needs a model.

The request, from the chat-shaped conversation:

- every ``system`` (or ``developer``) message -> ``systemInstruction: {parts: [{text}]}``,
  joined with blank lines;
- ``user`` -> a ``user`` turn of ``text`` parts (``image_url`` parts as ``inlineData`` when a
  ``data:`` URL, else ``fileData``);
- ``assistant`` -> a ``model`` turn: a ``text`` part when it has text, one ``functionCall``
  part (``name``, ``args`` an object) per call;
- an ``assistant`` message that came from a reply -> that reply's parts exactly as the
  service sent them (``RequestParts.native``): thought signatures ride on whichever part
  carried them (a call, a text part, the final ``{"text": ""}``) and the next request is
  refused without them;
- ``tool`` -> a ``functionResponse`` part (``name`` of the call it answers, ``response:
  {output}``, ``{error}`` when the tool run failed, and the call's ``id`` when the service
  gave the call one) in a ``user`` turn; consecutive turns of one role merge, so the
  results of parallel calls go back together;
- tools -> ``tools: [{functionDeclarations: [{name, description, parametersJsonSchema}]}]``
  (the JSON Schema as written);
- ``tool_choice`` -> ``toolConfig.functionCallingConfig``: ``auto`` -> ``AUTO``,
  ``required`` -> ``ANY``, ``none`` -> ``NONE``, ``{name: X}`` -> ``ANY`` with
  ``allowedFunctionNames: [X]``, ``allowed_tools`` with mode ``required`` -> ``ANY`` with
  those names (mode ``auto`` cannot be said: a collection error);
- ``params``: the shared ones go into ``generationConfig`` in its words (the token limit
  as ``maxOutputTokens``, ``temperature``, ``top_p``/``topP``, ``top_k``/``topK``, ``stop``
  as ``stopSequences``, ``seed``, the penalties, ``candidateCount``...); the reasoning
  settings (``thinking_budget``, ``thinking_level``, ``include_thoughts``, or a whole
  ``thinkingConfig``) into ``generationConfig.thinkingConfig``; the request's own
  top-level fields (``safetySettings``, ``cachedContent``, ``generationConfig``...) as
  they are. Any other key is a collection error.

Refused at collection, as the service would refuse the request: no model; ``thinkingBudget``
together with ``thinkingLevel``; ``presencePenalty`` or ``frequencyPenalty`` on a 2.5
model; ``allowed_tools`` with mode ``auto``; a role the API has no word for; a tool
message without ``tool_call_id`` (its ``functionResponse`` is named after the call).

Reading is ``gemini_reader.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..casefile.params import Located, stage_params
from ..records import Reply
from .base import (
    JSON_ERRORS,
    Halver,
    RequestParts,
    SseItem,
    StreamReader,
    Unsupported,
    WireApi,
    fault_headers,
    fault_message,
    message_text,
    take_token_limit,
)
from .gemini_reader import GeminiStream, read_gemini_body

if TYPE_CHECKING:
    from ..casefile.schema import Case

__all__ = ["GEMINI", "GeminiApi"]

_TITLE = "the Gemini API"

GENERATION_CONFIG = {
    # the shared names -> generationConfig's
    "temperature": "temperature", "top_p": "topP", "top_k": "topK", "seed": "seed",
    "stop": "stopSequences", "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty", "n": "candidateCount",
    "response_logprobs": "responseLogprobs", "logprobs": "logprobs",
    # generationConfig's own names, as they are
    **{name: name for name in (
        "topP", "topK", "stopSequences", "presencePenalty", "frequencyPenalty",
        "candidateCount", "responseMimeType", "responseSchema", "responseJsonSchema",
        "responseModalities", "responseLogprobs", "maxOutputTokens", "mediaResolution",
        "speechConfig", "enableEnhancedCivicAnswers")},
}
"""``params`` keys that go into ``generationConfig``, and the name each is sent as."""

THINKING = {"thinking_budget": "thinkingBudget", "thinking_level": "thinkingLevel",
            "include_thoughts": "includeThoughts", "thinkingBudget": "thinkingBudget",
            "thinkingLevel": "thinkingLevel", "includeThoughts": "includeThoughts"}
"""``params`` keys that go into ``generationConfig.thinkingConfig``."""

TOP_LEVEL = frozenset({"safetySettings", "cachedContent", "generationConfig", "labels",
                       "serviceTier", "store"})
"""The request's own top-level fields a case may set in ``params``."""

REQUEST_FIELDS = frozenset({*GENERATION_CONFIG, *THINKING, *TOP_LEVEL, "thinkingConfig",
                            "max_tokens", "max_completion_tokens", "max_output_tokens"})

_CHOICES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_FAULT_STATUS = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 504: "DEADLINE_EXCEEDED"}
"""An injected status as Google's errors name it; the others: ``UNAVAILABLE``."""


class GeminiApi(WireApi):
    name = "gemini"
    title = "Gemini API"
    path = "models"
    reasoning_where = "thought parts (includeThoughts)"
    request_fields = REQUEST_FIELDS
    sends_strict = False  # no strict mode: a tool's strict is not sent

    def emptied(self, items: list[SseItem]) -> list[SseItem]:
        """No parts, ``STOP``."""
        return _kept_parts(items, lambda part: False, Halver(0), "STOP")

    def truncated(self, items: list[SseItem]) -> list[SseItem]:
        """Text parts only, their text halved, ``MAX_TOKENS``."""
        total = sum(len(part["text"]) for part in _parts(items)
                    if isinstance(part.get("text"), str) and not part.get("thought"))
        return _kept_parts(items, lambda part: "functionCall" not in part, Halver(total),
                           "MAX_TOKENS")

    def fault_error(self, status: int, retry_after_s: float | None
                    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """Google's shape: ``{"error": {code, message, status}}`` (``RESOURCE_EXHAUSTED``
        for a 429, with a ``RetryInfo`` detail when the fault gives a wait)."""
        error: dict[str, Any] = {"code": status, "message": fault_message(status),
                                 "status": _FAULT_STATUS.get(status, "UNAVAILABLE")}
        if retry_after_s is not None:
            error["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                 "retryDelay": f"{retry_after_s:g}s"}]
        return {"error": error}, fault_headers("x-request-id", retry_after_s)

    def url_path(self, model: str | None, stream: bool) -> str:
        """``models/{model}:generateContent``; streamed, ``:streamGenerateContent?alt=sse``
        (without ``alt=sse`` the route answers one JSON array)."""
        name = (model or "").removeprefix("models/")
        return f"models/{name}:streamGenerateContent?alt=sse" if stream \
            else f"models/{name}:generateContent"

    def structured(self, parts: RequestParts, name: str, schema: dict[str, Any]
                   ) -> RequestParts:
        """``responseMimeType: application/json`` and a ``responseSchema`` (the API's
        OpenAPI subset: upper-case types, ``propertyOrdering`` for the keys' order)."""
        return replace(parts, params={**parts.params, "responseMimeType": "application/json",
                                      "responseSchema": _response_schema(schema)})

    def request(self, parts: RequestParts) -> dict[str, Any]:
        system, contents = _conversation(parts)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        if parts.tools:
            body["tools"] = [{"functionDeclarations": [_declaration(tool) for tool in parts.tools]}]
        if parts.tool_choice is not None and parts.tools:
            body["toolConfig"] = {"functionCallingConfig": _calling_config(parts.tool_choice)}
        body.update(_params(parts.params))
        return body

    def read_body(self, status: int, body: bytes | str, content_type: str) -> Reply:
        return read_gemini_body(status, body, content_type)

    def stream_reader(self) -> StreamReader:
        return GeminiStream()

    def unsupported(self, case: Case, models: Sequence[str | None] | None = None
                    ) -> list[Unsupported]:
        found = super().unsupported(case, models)
        models = case.models if models is None else models
        if not all(models):
            found.append(Unsupported(f"{_TITLE} puts the model in the request's path"
                                     " (models/MODEL:generateContent): give the case a model",
                                     ()))
        found += _generation_unsupported(case, [model for model in models if model])
        for index, stage in enumerate(case.stages):
            allowed = getattr(stage.tool_choice, "allowed_tools", None)
            if allowed is not None and allowed.mode != "required":
                found.append(Unsupported(
                    f"{_TITLE} limits calls to some functions only in mode ANY"
                    " (allowedFunctionNames): give allowed_tools mode required, or leave this"
                    " API out of the case's (endpoint.apis: [chat, responses])",
                    ("stages", index, "tool_choice")))
            for position, message in enumerate(stage.messages):
                found += _message_unsupported(message, ("stages", index, "messages", position))
        return found


# --- collection ---------------------------------------------------------------------------


def _generation_unsupported(case: Case, models: list[str]) -> list[Unsupported]:
    """What the service refuses in the generation settings of ``case`` run with ``models``,
    once per key."""
    found: dict[tuple[str | int, ...], str] = {}
    for index in range(len(case.stages)):
        given = stage_params(case, index, GeminiApi.name)
        params = {key: value for key, (value, _path) in given.items()}

        def where(key: str, given: Located = given) -> tuple[str | int, ...]:
            return given[key][1]

        thinking = _thinking(params)
        if "thinkingBudget" in thinking and "thinkingLevel" in thinking:
            key = next(k for k in params if THINKING.get(k) == "thinkingLevel"
                       or k == "thinkingConfig")
            found.setdefault(where(key), (
                f"{_TITLE} refuses thinkingBudget together with thinkingLevel: give one"
                " (thinkingLevel for Gemini 3 models, thinkingBudget for 2.5)"))
        for key in params:
            if GENERATION_CONFIG.get(key) in ("presencePenalty", "frequencyPenalty"):
                old = [model for model in models if "gemini-2.5" in model]
                if old:
                    found.setdefault(where(key), (
                        f"{_TITLE} refuses {GENERATION_CONFIG[key]} on {old[0]} (2.5 models"
                        " take no penalties): leave it out of params for this model"))
    return [Unsupported(message, path) for path, message in found.items()]


def _message_unsupported(message: dict[str, Any], path: tuple[str | int, ...]
                         ) -> list[Unsupported]:
    role = message.get("role")
    if role not in _ROLES:
        return [Unsupported(f"{_TITLE} has no {role!r} role; use system, user, assistant or"
                            " tool", (*path, "role"))]
    if role == "tool" and not message.get("tool_call_id"):
        return [Unsupported(f"{_TITLE} names each function response after its call; give"
                            " this tool message the tool_call_id of an assistant message's"
                            " call", path)]
    return []


# --- the request ----------------------------------------------------------------------------


def _params(params: dict[str, Any]) -> dict[str, Any]:
    """The case's params in the request's words (see the module's docstring)."""
    rest, limit = take_token_limit(params)
    top = {key: value for key, value in rest.items() if key in TOP_LEVEL}
    config = dict(top.pop("generationConfig", None) or {})
    for key, value in rest.items():
        if key in GENERATION_CONFIG:
            config[GENERATION_CONFIG[key]] = value
    if limit is not None:
        config["maxOutputTokens"] = limit
    thinking = _thinking(rest)
    if thinking:
        config["thinkingConfig"] = {**config.get("thinkingConfig", {}), **thinking}
    if config:
        top["generationConfig"] = config
    return top


def _thinking(params: dict[str, Any]) -> dict[str, Any]:
    """The thinking settings of ``params``: a whole ``thinkingConfig`` and the single keys."""
    given = params.get("thinkingConfig")
    thinking = dict(given) if isinstance(given, dict) else {}
    config = params.get("generationConfig")
    if isinstance(config, dict) and isinstance(config.get("thinkingConfig"), dict):
        thinking = {**config["thinkingConfig"], **thinking}
    thinking.update({THINKING[key]: value for key, value in params.items() if key in THINKING})
    return thinking


def _conversation(parts: RequestParts) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the ``contents`` turns, consecutive turns of a role merged."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(parts.messages):
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(message_text(message.get("content")))
            continue
        if role == "assistant":
            native = parts.native.get(index)
            said = [dict(part) for part in native] if native is not None \
                else _model_parts(message)
            _add(turns, "model", said)
        elif role == "tool":
            _add(turns, "user", [_function_response(parts, index, index in parts.failed_results)])
        else:
            _add(turns, "user", _user_parts(message.get("content")))
    return "\n\n".join(text for text in system if text), turns


def _add(turns: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["parts"].extend(parts)
    else:
        turns.append({"role": role, "parts": list(parts)})


def _user_parts(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"text": content if isinstance(content, str) else ""}]
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            parts.append({"text": part["text"]})
        elif part.get("type") == "image_url":
            parts.append(_image(part.get("image_url")))
    return parts


def _image(image_url: Any) -> dict[str, Any]:
    """A chat ``image_url`` part: a ``data:`` URL inline, any other by its URI."""
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    url = url if isinstance(url, str) else ""
    header, comma, data = url.partition(",")
    if url.startswith("data:") and comma and header.endswith(";base64"):
        return {"inlineData": {"mimeType": header.removeprefix("data:").removesuffix(";base64"),
                               "data": data}}
    return {"fileData": {"fileUri": url}}


def _model_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message the case wrote: its text, then its calls."""
    parts: list[dict[str, Any]] = []
    text = message_text(message.get("content"))
    if text:
        parts.append({"text": text})
    for call in _calls_of(message):
        function = _function(call)
        parts.append({"functionCall": {"name": str(function.get("name") or ""),
                                       "args": _args(function.get("arguments"))}})
    return parts


def _calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def _function(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    return function if isinstance(function, dict) else {}


def _args(arguments: Any) -> dict[str, Any]:
    """Call arguments as the ``args`` object; anything but a JSON object is ``{}``."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except JSON_ERRORS:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def _function_response(parts: RequestParts, index: int, failed: bool) -> dict[str, Any]:
    """A tool message as the ``functionResponse`` of the call it answers: that call's name,
    and its id when the service gave one (an id the reader made stays here)."""
    message = parts.messages[index]
    content = message.get("content")
    text = message_text(content) if isinstance(content, list) else content
    name, google_id = _answered_call(parts, index, str(message.get("tool_call_id") or ""))
    response: dict[str, Any] = {"name": name,
                                "response": {"error" if failed else "output": _output(text)}}
    if google_id is not None:
        response["id"] = google_id
    return {"functionResponse": response}


def _output(text: Any) -> Any:
    """A tool's answer: its JSON when it is JSON, else the text."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except JSON_ERRORS:
        return text


def _answered_call(parts: RequestParts, index: int, call_id: str) -> tuple[str, str | None]:
    """The name of the call ``call_id`` (the nearest assistant message before ``index`` that
    made it), and the id the service gave that call, if it gave one."""
    for position in range(index - 1, -1, -1):
        message = parts.messages[position]
        calls = _calls_of(message) if message.get("role") == "assistant" else []
        for number, call in enumerate(calls):
            if str(call.get("id") or "") != call_id:
                continue
            function = _function(call)
            return str(function.get("name") or ""), _google_id(parts.native.get(position), number)
    return "", None


def _google_id(native: list[dict[str, Any]] | None, number: int) -> str | None:
    """The ``id`` of the reply's ``number``-th function call part, when it had one."""
    calls = [part["functionCall"] for part in native or ()
             if isinstance(part.get("functionCall"), dict)]
    if number >= len(calls):
        return None
    given = calls[number].get("id")
    return given if isinstance(given, str) and given else None


def _declaration(tool: Any) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": tool.name}
    if tool.description:
        declaration["description"] = tool.description
    declaration["parametersJsonSchema"] = tool.parameters
    return declaration


def _calling_config(choice: Any) -> dict[str, Any]:
    if isinstance(choice, str):
        return {"mode": _CHOICES.get(choice, choice.upper())}
    allowed = getattr(choice, "allowed_tools", None)
    if allowed is not None:
        return {"mode": "ANY", "allowedFunctionNames": list(allowed.tools)}
    return {"mode": "ANY", "allowedFunctionNames": [choice.name]}


def _response_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema of objects, strings and enums in the words of Gemini's ``Schema``."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out["type"] = value.upper()
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: _response_schema(sub) for name, sub in value.items()}
            out["propertyOrdering"] = list(value)
        elif key in ("required", "enum", "description"):
            out[key] = value
    return out


GEMINI = GeminiApi()


def _candidates(items: list[SseItem]) -> list[dict[str, Any]]:
    return [candidate for item in items if isinstance(item.data, dict)
            for candidate in item.data.get("candidates") or [] if isinstance(candidate, dict)]


def _parts(items: list[SseItem]) -> list[dict[str, Any]]:
    return [part for candidate in _candidates(items)
            for part in (candidate.get("content") or {}).get("parts") or []
            if isinstance(part, dict)]


def _kept_parts(items: list[SseItem], keep: Callable[[dict[str, Any]], bool],
                budget: Halver, finish: str) -> list[SseItem]:
    """Every candidate with only the parts ``keep`` says, their text cut by ``budget``
    (thoughts left whole), each finish reason ``finish``."""
    for candidate in _candidates(items):
        content = candidate.get("content")
        if isinstance(content, dict) and isinstance(content.get("parts"), list):
            parts = [part for part in content["parts"] if isinstance(part, dict) and keep(part)]
            for part in parts:
                if isinstance(part.get("text"), str) and not part.get("thought"):
                    part["text"] = budget.take(part["text"])
            content["parts"] = parts
        if candidate.get("finishReason") is not None:
            candidate["finishReason"] = finish
    return items
