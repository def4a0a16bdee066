"""Credentials kept out of everything the plugin shows or writes.

An endpoint's secrets are its API key, its credential-looking header values and the
credentials of its base URL (userinfo, ``?api-key=`` and the like). The runner scrubs every
reply, turn, tool run and error as it makes them, and every exchange before a cassette keeps
it, so failure text, reports and cassettes only ever see scrubbed data; replies go back into
the conversation scrubbed, so an echoed key is never sent back in a request body.

Whatever path a credential takes (a toolbox keeps ``os.environ["OPENAI_API_KEY"]`` in its
state, an expectation reads ``${env.OPENAI_API_KEY}``, a server's command line holds it), it
came from an environment variable: the value of every variable whose name looks like a
credential's (``is_credential``) is a secret of every case (``environment_secrets``), and
the runner scrubs the failures, states and errors of each case's result too.

Every kind of case has its scrubber from one place, ``SessionRuntime.scrubber``: the
plugin's own loop, an agent case and a ``toolbench_agent`` test (whose proxy tap adds what
the agent sends as credentials: its credential headers and query values,
``sent_secrets``), the judge and the simulated user. Each secret it is given is masked in
the logs from then on too.

A value shorter than ``MIN_SECRET_LENGTH`` is not masked: a dummy key such as ``1`` would
otherwise rewrite every ``1`` of every recording. URLs in the plugin's own messages and in
log lines have their credentials masked whatever their length. Log lines are masked as
they are made, whichever logger makes them (httpx2, httpcore2, mcp, the openai SDK...):
``LogScrubber`` wraps logging's record factory while a session runs.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import fields, is_dataclass, replace
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit

from .records import Interaction, StreamEvent, Turn

SCRUBBED = "<scrubbed>"
MIN_SECRET_LENGTH = 8
_CREDENTIAL_WORDS = ("auth", "key", "token", "secret", "cookie", "pass", "sig")
_USERINFO = re.compile(r"(?<=://)[^/?#@\s]+@")
_QUERY_PARAM = re.compile(r"(?<=[?&])([^=&#\s]+)=([^&#\s]*)")


def is_credential(name: str) -> bool:
    """Whether a header or query parameter name looks like it carries a credential."""
    lowered = name.lower()
    return any(word in lowered for word in _CREDENTIAL_WORDS)


def environment_secrets(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The values of the credential-looking variables of ``environ``, those worth masking."""
    return _longest_first(value for name, value in environ.items()
                          if is_credential(name) and len(value) >= MIN_SECRET_LENGTH)


def endpoint_secrets(api_key: str | None, headers: Iterable[tuple[str, str]],
                     base_url: str) -> tuple[str, ...]:
    """The values to mask for one endpoint, longest first, those worth masking only."""
    values = [api_key or ""]
    for name, value in headers:
        if is_credential(name):
            values += [value, value.partition(" ")[2]]  # "Bearer xyz": xyz alone too
    values += _url_credentials(base_url)
    return _longest_first(value for value in values if len(value) >= MIN_SECRET_LENGTH)


def sent_secrets(headers: Iterable[tuple[str, str]], query: str) -> tuple[str, ...]:
    """The credentials a request carries: its credential-looking headers' values (``Bearer
    xyz``: xyz alone too) and query values (Gemini's ``?key=``), those worth masking."""
    return endpoint_secrets(None, headers, f"?{query}" if query else "")


def url_secrets(url: str) -> tuple[str, ...]:
    """The credentials of ``url`` (userinfo, credential query values), those worth masking."""
    return _longest_first(value for value in _url_credentials(url)
                          if len(value) >= MIN_SECRET_LENGTH)


def _url_credentials(url: str) -> list[str]:
    """Userinfo (and the Basic credentials httpx2 makes of it) and credential query values,
    as written in the URL and decoded."""
    parts = urlsplit(url)
    values: list[str] = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        user, _, password = userinfo.partition(":")
        values += [userinfo, user, password, unquote(userinfo), unquote(user), unquote(password)]
        basic = f"{unquote(user)}:{unquote(password)}".encode()
        values.append(base64.b64encode(basic).decode())
    for pair in parts.query.split("&"):
        name, _, value = pair.partition("=")
        if is_credential(unquote_plus(name)):
            values += [value, unquote_plus(value)]
    return values


def _longest_first(values: Iterable[str]) -> tuple[str, ...]:
    """Longest first, so a secret inside another is masked as part of the longer one."""
    return tuple(sorted(set(values), key=lambda value: (-len(value), value)))


def mask_urls(text: str) -> str:
    """``text`` with the userinfo and credential query values of any URL in it masked."""
    text = _USERINFO.sub(SCRUBBED + "@", text)
    return _QUERY_PARAM.sub(
        lambda m: f"{m[1]}={SCRUBBED}" if is_credential(unquote_plus(m[1])) else m[0], text)


class Scrubber:
    """Replaces every occurrence of the secrets in records; returns copies, never mutates."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = _longest_first(secrets)
        self._pattern = (re.compile("|".join(map(re.escape, self.secrets)))
                         if self.secrets else None)

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """What finds the secrets; ``None`` when there are none (nothing to scrub)."""
        return self._pattern

    def text(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(SCRUBBED, text)

    def data(self, value: Any) -> Any:
        """``value`` with every string inside scrubbed: JSON data and records alike."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self._pattern.sub(SCRUBBED, value)
        if isinstance(value, list):
            return [self.data(item) for item in value]
        if isinstance(value, dict):
            return {self.data(key): self.data(item) for key, item in value.items()}
        if isinstance(value, Interaction):
            return self.interaction(value)
        if is_dataclass(value) and not isinstance(value, type):
            return replace(value, **{f.name: self.data(getattr(value, f.name))
                                     for f in fields(value) if f.init})
        return value

    def turn(self, turn: Turn) -> Turn:
        """The turn as reports show it: request, reply, retries and error scrubbed, and the
        URLs of the client's error messages masked."""
        scrubbed: Turn = self.data(turn)
        if turn.error is None and not turn.retries:
            return scrubbed
        return replace(scrubbed, retries=[mask_urls(line) for line in scrubbed.retries],
                       error=None if scrubbed.error is None else mask_urls(scrubbed.error))

    def interaction(self, interaction: Interaction) -> Interaction:
        """The exchange as a cassette keeps it. A streamed reply's events are rewritten so
        that the text and arguments they reassemble to hold the mask, even where the
        server cut a secret across several deltas."""
        if self._pattern is None:
            return interaction
        events = None if interaction.events is None else self._events(interaction.events)
        # The body's text as a cassette spelled it is dropped: it would say what the body
        # said before the secrets were masked (a secret may be spelled with JSON escapes).
        return replace(interaction, request=self.data(interaction.request),
                       body=self.data(interaction.body), events=events, body_json=None)

    def _events(self, events: list[StreamEvent]) -> list[StreamEvent]:
        """The events scrubbed; the chunks parsed here are the copies that get rewritten."""
        chunks = [_json_object(event.data) for event in events]
        rewritten: set[int] = set()
        for pieces in _delta_strings(chunks).values():
            rewritten |= self._mask_across(pieces)
        return [replace(event, data=self.text(json.dumps(chunks[index], ensure_ascii=False)
                                              if index in rewritten else event.data))
                for index, event in enumerate(events)]

    def _mask_across(self, pieces: list[_Piece]) -> set[int]:
        """Mask the secrets found in the pieces joined; each mask goes to the piece where
        its secret starts, the rest of the secret is cut from the pieces it spans. Returns
        the events that changed."""
        assert self._pattern is not None
        texts = [container[key] for _, container, key in pieces]
        joined = "".join(texts)
        spans = [match.span() for match in self._pattern.finditer(joined)]
        if not spans:
            return set()
        masked = self._pattern.sub(SCRUBBED, joined)
        ends = [_moved(end, spans) for end in _running_ends(texts)]
        changed = set()
        for (index, container, key), old, start, end in zip(pieces, texts, [0, *ends], ends):
            if masked[start:end] != old:
                container[key] = masked[start:end]
                changed.add(index)
        return changed


_Piece = tuple[int, dict[str, Any], str]
"""A delta string: the event it is in, the JSON object holding it, and its key there."""


def _json_object(data: str) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _delta_strings(chunks: list[dict[str, Any] | None]) -> dict[tuple[Any, ...], list[_Piece]]:
    """The strings of the stream that are joined when it is reassembled, by what they
    build: each choice's text (content, reasoning...) and each tool call's arguments."""
    streams: dict[tuple[Any, ...], list[_Piece]] = {}
    for index, chunk in enumerate(chunks):
        for name, container, key in _pieces_of(chunk):
            streams.setdefault(name, []).append((index, container, key))
    return streams


def _pieces_of(chunk: dict[str, Any] | None) -> Iterator[tuple[tuple[Any, ...], dict[str, Any],
                                                               str]]:
    choices = chunk.get("choices") if chunk is not None else None
    for choice in choices if isinstance(choices, list) else []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            continue
        number = choice.get("index", 0)
        for key, value in delta.items():
            if isinstance(value, str):
                yield (number, key), delta, key
        legacy = delta.get("function_call")
        if isinstance(legacy, dict) and isinstance(legacy.get("arguments"), str):
            yield (number, "function_call"), legacy, "arguments"
        calls = delta.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else []):
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                yield (number, "tool_calls", call.get("index", position)), function, "arguments"


def _running_ends(texts: list[str]) -> Iterator[int]:
    end = 0
    for text in texts:
        end += len(text)
        yield end


def _moved(offset: int, spans: list[tuple[int, int]]) -> int:
    """Where ``offset`` of the joined text lands once every span is masked; an offset
    inside a span lands after its mask."""
    shift = 0
    for start, end in spans:
        if end <= offset:
            shift += len(SCRUBBED) - (end - start)
        elif start < offset:
            return start + shift + len(SCRUBBED)
        else:
            break
    return offset + shift


class LogScrubber(logging.Filter):
    """Masks credentials in every log record made while a session runs, whichever logger
    makes it: the record factory is wrapped, so each record is masked as it is made, before
    any handler (pytest's capture, a file, the terminal) sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.scrubber = Scrubber()
        self._adding = threading.Lock()  # the proxy's thread adds what an agent sent
        self._previous: Callable[..., logging.LogRecord] | None = None
        self._factory: Callable[..., logging.LogRecord] | None = None

    def add(self, secrets: Iterable[str]) -> None:
        with self._adding:
            known = set(self.scrubber.secrets)
            if not known.issuperset(secrets):
                self.scrubber = Scrubber(known.union(secrets))

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True  # a record that cannot be formatted: the handler reports it as usual
        masked = self.mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:  # a traceback's text may hold one too
            record.exc_text = self.mask(logging.Formatter().formatException(record.exc_info))
        return True

    def mask(self, text: str) -> str:
        """``text`` with the known secrets and the credentials of its URLs masked."""
        return mask_urls(self.scrubber.text(text))

    def install(self) -> None:
        previous = self._previous = logging.getLogRecordFactory()

        def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            self.filter(record)
            return record
        self._factory = make
        logging.setLogRecordFactory(make)

    def remove(self) -> None:
        """Put the factory back, unless another was installed over this one since (it
        calls this one's: masking then goes on, harmless)."""
        if self._factory is not None and logging.getLogRecordFactory() is self._factory:
            assert self._previous is not None
            logging.setLogRecordFactory(self._previous)
        self._factory = None
