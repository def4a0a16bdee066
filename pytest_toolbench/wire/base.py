"""What every wire API adapter provides, and the helpers they share.

An adapter is stateless: one instance per API serves every case run. Its reading side never
raises on what a server sent; protocol slips go into ``Reply.problems``, each message
starting with the name of the check it broke (``responses stream: ...``), and the stage
fails on them with that reason (SPEC section 6).
"""

from __future__ import annotations

import difflib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from json.scanner import make_scanner
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, cast

from ..apis import ApiRow, api_row
from ..casefile.params import params_written
from ..casefile.strict import strict_schema_gaps
from ..faults import INJECTED
from ..records import Interaction, Reply, ToolCall

if TYPE_CHECKING:
    from ..casefile.schema import AllowedTools, Case, Tool, ToolChoiceFunction

KeyPath = tuple[str | int, ...]

class Event(Protocol):
    """One server-sent event, as the SSE decoder or a cassette gives it."""

    @property
    def data(self) -> str: ...

    @property
    def event(self) -> str: ...


class StreamReader(Protocol):
    """Reads one streamed reply event by event; ``finish`` gives the reassembled Reply."""

    on_call: Callable[[ToolCall], None] | None
    """Told of each tool call the moment the API marks its arguments complete."""

    def add(self, event: Event, offset_ms: float, wall_ms: float | None = None) -> None:
        """Read one event; ``offset_ms``: when it arrived, after the request was sent (a
        replayed stream's: as recorded; ``wall_ms``: in this run)."""

    def finish(self, *, truncated: bool = False) -> Reply:
        """The reply; ``truncated``: the stream ended inside an event."""


@dataclass(frozen=True)
class RequestParts:
    """What one request of a stage is made of, before any API shapes it."""

    model: str | None
    messages: list[dict[str, Any]]
    """The conversation so far, as chat-completions messages."""
    native: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """Assistant messages that came from a reply of this API, by their index in
    ``messages``: that reply's ``native_turn``. An adapter that has one sends it back as it
    came instead of the message (thinking blocks and reasoning items must go back
    unchanged); chat, which has none, translates every message."""
    failed_results: frozenset[int] = frozenset()
    """Tool messages whose tool run failed (``ToolRun.failed``), by their index in
    ``messages``: an API that has a word for it marks the result as an error (Messages:
    ``is_error: true``); the others send the error text the message holds."""
    tools: list[Tool] = field(default_factory=list)
    tool_choice: str | ToolChoiceFunction | AllowedTools | None = None
    params: dict[str, Any] = field(default_factory=dict)
    """The case's and the stage's params merged: the API's own keys, sent as they are
    (apart from the few each adapter translates, named in docs/case-format.md)."""
    stream: bool = False


@dataclass(frozen=True)
class AnswerTool:
    """The one tool a structured answer is given through, over an API whose structured
    output is a forced tool call: read by the adapters as the case schema's ``Tool`` is."""

    name: str
    description: str
    parameters: dict[str, Any]
    strict: bool | None = None


@dataclass(frozen=True)
class ToolNamed:
    """``tool_choice: {name: X}`` as the adapters read the case schema's."""

    name: str


@dataclass(frozen=True)
class Unsupported:
    """Something a case asks for that an API cannot express: a collection error."""

    message: str
    path: KeyPath


class WireApi(ABC):
    """One wire API: the request it builds, the replies it reads, what it cannot say."""

    name: str
    """As cases and flags name it: ``chat``, ``responses``, ``messages``."""
    title: str
    """The API's name as people say it, for messages."""

    path: str
    """Where requests go, below the base URL (``chat/completions``), when it depends on
    neither the model nor streaming."""
    reasoning_where: str
    """Where this API's replies carry reasoning, for messages (``thinking blocks``)."""

    @property
    def row(self) -> ApiRow:
        """The API's registry row: its key variables, how the key is sent, its base URL."""
        return api_row(self.name)

    @property
    def key_env(self) -> str:
        """The first environment variable the key is read from when no setting names one."""
        return self.row.key_envs[0]

    def url_path(self, model: str | None, stream: bool) -> str:
        """Where one request goes, below the base URL: ``path``, unless the API puts the
        model or the streaming choice in it."""
        return self.path

    def headers(self, api_key: str | None) -> dict[str, str]:
        """Headers of every request: the credentials as the registry row says they are
        sent, and what the API requires besides (``required_headers``)."""
        row = self.row
        credentials = {row.key_header: f"{row.key_scheme}{api_key}"} if api_key else {}
        return {**self.required_headers, **credentials}

    required_headers: ClassVar[Mapping[str, str]] = {}
    """Headers the API wants on every request, key or not (``anthropic-version``)."""

    def sent_reasoning(self, interactions: list[Interaction]) -> tuple[str, str]:
        """The reasoning and the text of recorded replies, for conform's check that the two
        are kept apart; an API whose text can hold reasoning markup reads it as sent."""
        replies = [self.read_interaction(interaction) for interaction in interactions]
        return ("".join(reply.reasoning or "" for reply in replies).strip(),
                "".join(reply.text for reply in replies))

    def call_id_problem(self, interaction: Interaction) -> str:
        """Why the tool calls of a recorded reply cannot be told apart, or ``""``: conform's
        parallel-calls check. The readers of APIs whose calls carry ids check them as they
        read (the reply's problems say it); an API whose ids the reader leaves alone says
        it here."""
        return ""

    @abstractmethod
    def request(self, parts: RequestParts) -> dict[str, Any]:
        """The JSON body of one request."""

    def structured(self, parts: RequestParts, name: str, schema: dict[str, Any]
                   ) -> RequestParts:
        """``parts`` asking for one JSON object of ``schema`` (an object of strings and
        enums, its keys in the order they must be written) in this API's own structured
        mode: here chat's ``response_format`` ``json_schema``, strict. The answer comes as
        the reply's text, or as a call of the tool ``name`` (``structured_answer``)."""
        return replace(parts, params={**parts.params, "response_format": {
            "type": "json_schema",
            "json_schema": {"name": name, "strict": True, "schema": schema}}})

    def sampling(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Of ``params`` (``temperature``, ``seed``...), those this API's request has a
        field for: a second model's settings asked of every API alike."""
        fields = self.request_fields
        return {key: value for key, value in params.items() if fields is None or key in fields}

    @abstractmethod
    def read_body(self, status: int, body: bytes | str, content_type: str) -> Reply:
        """A whole (not streamed) response of any status -> Reply."""

    @abstractmethod
    def stream_reader(self) -> StreamReader:
        """A reader for one streamed response."""

    def read_interaction(self, interaction: Interaction) -> Reply:
        """A recorded exchange (a cassette's) read back as this API's reply, whole or event
        by event, as replay would give it."""
        if interaction.events is None:
            body = interaction.body
            text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
            reply = self.read_body(interaction.status, text, interaction.content_type)
        else:
            reader = self.stream_reader()
            for event in interaction.events:
                if not event.cut:
                    reader.add(event, event.offset_ms)
            reply = reader.finish(truncated=any(event.cut for event in interaction.events))
        reply.status = interaction.status
        return reply

    def emptied(self, items: list[SseItem]) -> list[SseItem]:
        """An injected ``mutate: empty``: the reply (one whole body, or a stream's events)
        with no text and no calls, ending as a reply that has nothing more to say. Here
        chat's: ``choices[].message`` or ``delta`` without content or calls."""
        for item in items:
            for choice in _choices(item.data):
                for key in ("message", "delta"):
                    part = choice.get(key)
                    if isinstance(part, dict):
                        for dropped in ("content", "tool_calls", "function_call", "refusal"):
                            part.pop(dropped, None)
                        if key == "message":
                            part["content"] = ""
                if choice.get("finish_reason") in ("tool_calls", "function_call"):
                    choice["finish_reason"] = "stop"
        return items

    def truncated(self, items: list[SseItem]) -> list[SseItem]:
        """An injected ``mutate: truncated``: half the reply's text, no calls, and the
        API's finish reason for a reply cut by its token limit. Here chat's ``length``."""
        budget = Halver(sum(len(text) for item in items for choice in _choices(item.data)
                            for text in _chat_texts(choice)))
        for item in items:
            for choice in _choices(item.data):
                for key in ("message", "delta"):
                    part = choice.get(key)
                    if isinstance(part, dict):
                        part.pop("tool_calls", None)
                        part.pop("function_call", None)
                        if isinstance(part.get("content"), str):
                            part["content"] = budget.take(part["content"])
                if choice.get("finish_reason") is not None:
                    choice["finish_reason"] = "length"
        return items

    def fault_error(self, status: int, retry_after_s: float | None
                    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """An injected ``status`` fault as the service says it: the error body and the
        headers, so the API's SDK raises what it raises for the real service. Here
        OpenAI's shape (chat, Responses): ``{"error": {message, type, code}}``,
        ``x-request-id`` and ``retry-after``."""
        kind, code = _OPENAI_ERRORS.get(status, ("server_error", None))
        body = {"error": {"message": f"{fault_message(status)}", "type": kind,
                          "param": None, "code": code}}
        return body, fault_headers("x-request-id", retry_after_s)

    request_fields: frozenset[str] | None = None
    """The top-level fields of the API's request (as the official SDK's request type names
    them), and the ``params`` keys the adapter translates into them: a ``params`` key
    outside them is a collection error, as the service would refuse it. ``None``: any key
    goes (chat completions, whose servers take many extensions of their own)."""

    def unsupported(self, case: Case, models: Sequence[str | None] | None = None
                    ) -> list[Unsupported]:
        """What ``case`` asks that this API cannot express, run with ``models`` (the
        command line's, or the case's own: None); here, ``params`` keys its request has no
        field for; an adapter adds its own."""
        found = [] if self.request_fields is None else [
            Unsupported(self._unknown_field(key, value, own=path[-2] == self.name), path)
            for params in params_written(case, self.name)
            for key, (value, path) in params.items() if key not in self.request_fields]
        return found + self._strict_gaps(case) if self.sends_strict else found

    sends_strict: ClassVar[bool] = True
    """Whether the API has a strict mode for tools (``strict: true`` is sent), whose
    schemas the service holds to its rules (``casefile/strict.py``)."""

    def _strict_gaps(self, case: Case) -> list[Unsupported]:
        """The case's ``strict: true`` tools whose schema the service refuses in strict
        mode, each at its tool."""
        found = []
        for index, entry in enumerate(case.tools):
            strict = getattr(entry, "strict", None) is True  # only the case's own tools
            gaps = strict_schema_gaps(getattr(entry, "parameters", None)) if strict else []
            if gaps:
                found.append(Unsupported(
                    "strict: true needs every property in required (an optional one nullable)"
                    " and additionalProperties: false, on every object, or the services refuse"
                    f" the schema: {'; '.join(gaps)}", ("tools", index)))
        return found

    def _unknown_field(self, key: str, value: Any, own: bool) -> str:
        known = self.request_fields or frozenset()
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.9)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        refused = (f"the {self.title}'s request has no field {key!r}{hint}, and the service"
                   " refuses a field it does not know")
        if own:
            return f"{refused}: leave it out of params.{self.name}"
        shown = json.dumps(value) if isinstance(value, (int, float, str, bool)) else "..."
        return (f"{refused}: give it only to the APIs that take it (params: {{chat: {{{key}:"
                f" {shown}}}}}), or leave this API out (endpoint.apis)")


# --- shared by the adapters ---------------------------------------------------------------

REDACTED_REASONING = "[redacted reasoning]"
"""What reasoning the service sent only encrypted reads as, over every API: a Messages
``redacted_thinking`` block, a Responses ``reasoning`` item with ``encrypted_content`` and
no summary or content text. It holds no text to match, but the model did reason: the
marker makes the reasoning present (``{$absent: true}`` fails) and says why it is unread.
Readable reasoning of the same reply comes first, each part apart by a blank line."""

TOKEN_LIMIT_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
"""The names the three APIs give the reply's token limit; a case may use any of them and
each API gets its own."""


def take_token_limit(params: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """``params`` without its token limit, and the limit (None when there is none)."""
    rest = {key: value for key, value in params.items() if key not in TOKEN_LIMIT_KEYS}
    limit = next((params[key] for key in TOKEN_LIMIT_KEYS if key in params), None)
    return rest, limit


def message_text(content: Any) -> str:
    """Message content as text: a string, or a list of parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def with_token_totals(usage: Any, input_key: str, output_key: str) -> dict[str, Any] | None:
    """An API's usage object with the chat-completions names added where missing
    (``prompt_tokens``, ``completion_tokens``, ``total_tokens``), so one ``usage``
    expectation reads the same over every API; the API's own keys stay."""
    if not isinstance(usage, dict):
        return None
    merged = dict(usage)
    given_in, given_out = usage.get(input_key), usage.get(output_key)
    if isinstance(given_in, int):
        merged.setdefault("prompt_tokens", given_in)
    if isinstance(given_out, int):
        merged.setdefault("completion_tokens", given_out)
    if isinstance(given_in, int) and isinstance(given_out, int):
        merged.setdefault("total_tokens", given_in + given_out)
    return merged


_THINK = re.compile(r"\A\s*<think>(.*?)(?:</think>\s*|\Z)", re.DOTALL)


def split_think(text: str) -> tuple[str, str | None]:
    """Text that opens with a ``<think>`` block -> (the text after it, the block's content).

    Models trained to think in tags put it there when the server does not take it apart; a
    block never closed is all reasoning (the stream was cut, or the limit hit, mid-thought).
    """
    if "<think>" not in text:
        return text, None
    match = _THINK.match(text)
    if match is None:
        return text, None
    return text[match.end():], match.group(1).strip()


def arguments_json(raw: str) -> tuple[Any, str | None]:
    """Tool-call arguments text -> (the parsed value, None) or (None, why it is not JSON)."""
    try:
        return json.loads(raw.strip()), None
    except JSON_ERRORS as exc:
        return None, str(exc)


JSON_ERRORS = (ValueError, RecursionError)
"""What ``json.loads`` raises on a server's bytes: RecursionError, not ValueError, on deeply
nested input (``[[[[...``), which is a problem to report, never a crash."""

# typeshed mistypes make_scanner's argument; it takes the decoder whose settings it copies.
_scan_once: Callable[[str, int], tuple[Any, int]] = make_scanner(cast(Any, json.JSONDecoder()))


def loads_event(text: str) -> Any:
    """``json.loads`` of one stream event's data, without its per-call overhead, which shows
    at 100k events a stream.

    The C scanner reads one value from position 0; anything else (leading or trailing
    whitespace, garbage, an error to report) goes through ``json.loads`` itself, so the
    value and the error raised are always ``json.loads``'s.
    """
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        return json.loads(text)  # raises the ValueError with json's own message
    if end != len(text):
        return json.loads(text)
    return value


@dataclass(frozen=True)
class Body:
    """A whole response body as text, and its JSON (when it is JSON)."""

    text: str
    payload: Any = None
    parse_error: str = ""
    """Why the text is not JSON; ``""`` when it is."""


def read_body_json(body: bytes | str) -> Body:
    """The body as text (UTF-8, a leading BOM dropped) and parsed as JSON when it is."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    text = text.removeprefix("\ufeff")
    try:
        return Body(text, json.loads(text))
    except JSON_ERRORS as exc:
        return Body(text, None, str(exc))


def error_message(error: Any) -> str:
    """The message of an ``error`` member: an object with ``message``, or a string.

    An object whose message is empty and that says nothing else but its type or code
    (llama-cpp-python's server fails so on an assertion, e.g. a ``tool_choice`` its chat
    format does not handle) is said to be that: the reason is only in the server's log.
    """
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message.strip():
            return message
        if not any(value not in (None, "") for key, value in error.items()
                   if key not in ("message", "type", "code", "param")):
            kind = next((str(error[key]) for key in ("type", "code")
                         if error.get(key) not in (None, "")), "an error")
            return f"{kind}, with an empty message (no reason given; the server's log may say why)"
        return dumps(error)
    return error if isinstance(error, str) and error.strip() else dumps(error)


def http_error(status: int, body: Body) -> str:
    """The error message of a non-2xx response, whatever shape its body has: OpenAI's and
    llama-server's ``{"error": ...}``, Anthropic's ``{"type": "error", "error": {...}}``,
    FastAPI's ``detail``, a plain ``message``, a JSON string, or the body's text."""
    payload = body.payload
    if isinstance(payload, dict):
        for key in ("error", "detail", "message"):
            if payload.get(key) is not None:
                return error_message(payload[key])
    if isinstance(payload, str) and payload:
        return payload
    return body.text.strip() or f"HTTP {status} with an empty body"


TRANSIENT_ERRORS = {
    "overloaded_error": "the service was overloaded",
    "api_error": "the service failed on its side",
    "server_error": "the service failed on its side",
    "internal_server_error": "the service failed on its side",
    "timeout_error": "the service timed out",
    "rate_limit_error": "the rate limit was reached",
    "rate_limit_exceeded": "the rate limit was reached",
    "429": "the rate limit was reached",
    "503": "the service was overloaded",
    "529": "the service was overloaded",
}
"""Error types and codes a service sends in band that mean "try again later": Anthropic's
``type``s, OpenAI's ``code``s and ``type``s, and HTTP statuses given as a ``code``; any
other 5xx code is transient too (the service failed on its side)."""


def error_kind(error: Any) -> str | None:
    """The type or code of an in-band ``error`` object (``overloaded_error``,
    ``server_error``, ``503``): a transient one first, else the first one given."""
    if not isinstance(error, dict):
        return None
    given = [str(value) for value in (error.get("type"), error.get("code"))
             if (isinstance(value, str) and value and value != "error")
             or (isinstance(value, int) and not isinstance(value, bool))]
    return next((kind for kind in given if _transient(kind)), given[0] if given else None)


def _transient(kind: str) -> str | None:
    """Why an error of this kind is worth retrying, or None when it is not."""
    if kind in TRANSIENT_ERRORS:
        return TRANSIENT_ERRORS[kind]
    return "the service failed on its side" if kind.isdigit() and kind[0] == "5" else None


def stream_error(where: str, carrier: str, kind: str | None, message: str) -> str:
    """An error that came inside a stream, as the problem that fails the stage: where
    (``messages stream``), what carried it (``error event``), its type, and whether it is
    transient: ``messages stream: error event overloaded_error (transient: the service was
    overloaded; retry later): Overloaded``."""
    if kind is None:
        return f"{where}: {carrier}: {message}"
    why = _transient(kind)
    said = f" (transient: {why}; retry later)" if why else ""
    return f"{where}: {carrier} {kind}{said}: {message}"


def dumps(value: Any) -> str:
    """Compact JSON of data a server sent (an object where a string belongs)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except RecursionError:  # data just shallow enough to read can be too deep to write
        return "<JSON nested too deep to show>"
    except (TypeError, ValueError):
        return repr(value)


def snippet(text: str, limit: int = 80) -> str:
    """``text`` cut to fit a one-line message."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def structured_answer(reply: Reply, name: str) -> str | dict[str, Any]:
    """A structured answer as it came: the arguments of the call of the tool ``name`` (an
    API whose structured mode is a forced call), else the reply's text; JSON text to read
    as the server sent it (a key given twice still twice), or the arguments an API sent
    as an object."""
    call = next((call for call in reply.tool_calls if call.name == name), None)
    if call is None:
        return reply.text
    return call.arguments_raw or (call.arguments if isinstance(call.arguments, dict) else "")


_OPENAI_ERRORS: Final = {429: ("requests", "rate_limit_exceeded"),
                         500: ("server_error", None), 502: ("server_error", None),
                         503: ("server_error", None), 504: ("server_error", None),
                         529: ("server_error", None)}
"""An injected status as OpenAI's errors say it: (type, code)."""
_FAULT_MESSAGES: Final = {429: "Rate limit reached", 500: "The server had an error",
                          502: "Bad gateway", 503: "Service unavailable",
                          504: "Gateway timeout", 529: "Overloaded"}


def fault_message(status: int) -> str:
    """An injected error's message: the service's words, and who said them."""
    return f"{_FAULT_MESSAGES.get(status, 'Error')} (HTTP {status}, {INJECTED})"


def fault_headers(request_id_header: str, retry_after_s: float | None
                  ) -> list[tuple[str, str]]:
    """An injected error's headers: JSON, a request id under the API's own header name,
    and ``retry-after`` (seconds) with ``retry-after-ms`` when the fault gives one."""
    headers = [("content-type", "application/json"),
               (request_id_header, "req_toolbench_fault")]
    if retry_after_s is not None:
        headers += [("retry-after", f"{retry_after_s:g}"),
                    ("retry-after-ms", f"{retry_after_s * 1000:g}")]
    return headers


@dataclass
class SseItem:
    """One JSON item of a reply being changed (``transport/mutate.py``): a whole body
    (``event`` None), or one server-sent event; ``data`` parsed when it is JSON."""

    event: str | None
    data: Any


class Halver:
    """Hands out half of a text that comes in pieces: each piece cut to what is left of
    the first half of ``total`` characters."""

    def __init__(self, total: int) -> None:
        self.left = total // 2

    def take(self, piece: str) -> str:
        kept = piece[:max(self.left, 0)]
        self.left -= len(kept)
        return kept


def half(text: str) -> str:
    """The first half of a whole text."""
    return text[:len(text) // 2]


def _choices(data: Any) -> list[dict[str, Any]]:
    choices = data.get("choices") if isinstance(data, dict) else None
    return [choice for choice in choices or [] if isinstance(choice, dict)]


def _chat_texts(choice: dict[str, Any]) -> list[str]:
    return [part["content"] for key in ("message", "delta")
            if isinstance(part := choice.get(key), dict) and isinstance(part.get("content"), str)]
