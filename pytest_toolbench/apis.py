"""The registry of wire APIs: one row per API a case can speak.

A row says what the rest of the plugin needs to know of an API without loading it: its
name (as cases, flags, cassettes and reports spell it), where its adapter lives (the
``WireApi`` of ``pytest_toolbench/wire/``: request builder and reader), where its key is
read from and how it is sent, its default base URL, and where its request bodies hold the
conversation. The flag's and the ini's choices, the case schema's allowed values, cassette
validation, the settings, conform, diff and the HTML report all read this table; adding an
API is a row here and an adapter file pair.

A leaf module: it imports nothing of the plugin, so the settings read it in every pytest
run without loading an adapter (``wire.wire_api`` imports one when a case needs it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

OPENAI_BASE_URL: Final = "https://api.openai.com/v1"


@dataclass(frozen=True)
class ApiRow:
    """One wire API, as the registry knows it."""

    name: str
    """As cases and flags name it: ``chat``, ``responses``..."""
    described: str
    """What it is, in the words of the flag's help: ``responses (OpenAI Responses)``."""
    adapter: str
    """``module:ATTRIBUTE`` below ``pytest_toolbench.wire``: the API's ``WireApi``."""
    key_envs: tuple[str, ...]
    """The environment variables its key is read from when no setting names one, the
    first set one winning."""
    key_header: str
    """The header that carries the key."""
    key_scheme: str = ""
    """What comes before the key in that header (``Bearer ``)."""
    base_url: str = OPENAI_BASE_URL
    """The base URL when neither a flag, the case, the ini nor the environment gives one."""
    base_url_envs: tuple[str, ...] = ("TOOLBENCH_BASE_URL", "OPENAI_BASE_URL")
    """The environment variables a base URL is read from, in order."""
    conversation_keys: tuple[str, ...] = ()
    """The request body's keys that hold the conversation (the rest are settings), for the
    reports."""


REGISTRY: Final = {row.name: row for row in (
    ApiRow("chat", "chat (chat completions, the default)", "chat:CHAT",
           ("OPENAI_API_KEY",), "Authorization", "Bearer ",
           conversation_keys=("messages",)),
    ApiRow("responses", "responses (OpenAI Responses)", "responses:RESPONSES",
           ("OPENAI_API_KEY",), "Authorization", "Bearer ",
           conversation_keys=("instructions", "input")),
    ApiRow("messages", "messages (Anthropic Messages)", "messages:MESSAGES",
           ("ANTHROPIC_API_KEY",), "x-api-key",
           base_url="https://api.anthropic.com/v1",
           base_url_envs=("TOOLBENCH_BASE_URL",),
           conversation_keys=("system", "messages")),
    ApiRow("gemini", "gemini (Google Gemini generateContent)", "gemini:GEMINI",
           ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "x-goog-api-key",
           base_url="https://generativelanguage.googleapis.com/v1beta",
           base_url_envs=("TOOLBENCH_BASE_URL",),
           conversation_keys=("systemInstruction", "contents")),
)}
"""Every wire API, by name; the first is the default."""

API_NAMES: Final = tuple(REGISTRY)
DEFAULT_API: Final = API_NAMES[0]
AGENT: Final = "agent"
"""What an agent case (``agent:``) speaks: whichever APIs its own code calls, each exchange
read by the API its path names. Its items and cassettes are named as a chat case's (no
API in the name); a cassette of one says ``api: agent``."""


def api_row(name: str) -> ApiRow:
    """The row of API ``name``; ValueError naming the choices when there is none."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown API {name!r}; choose from {', '.join(API_NAMES)}") from None


def api_names(text: str) -> tuple[str, ...]:
    """``"chat, responses"``: the wire APIs a comma-separated list names, each once, in the
    order given; ValueError naming the first unknown one. The command line, the ini and
    ``toolbench conform --api`` all read API lists with it."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for name in names:
        api_row(name)
    return names


def conversation_keys() -> tuple[str, ...]:
    """Every API's conversation keys, each once, each API's in its own order (a key goes
    before the first key after it in its row that is already placed: ``system`` before
    ``messages``)."""
    keys: list[str] = []
    for row in REGISTRY.values():
        for position, key in enumerate(row.conversation_keys):
            if key in keys:
                continue
            after = [keys.index(later) for later in row.conversation_keys[position + 1:]
                     if later in keys]
            keys.insert(min(after) if after else len(keys), key)
    return tuple(keys)


def key_envs_text() -> str:
    """Where each API's key is read from by default, for help texts:
    ``OPENAI_API_KEY; ANTHROPIC_API_KEY for messages``."""
    default = REGISTRY[DEFAULT_API].key_envs
    others = [f"{' or '.join(row.key_envs)} for {row.name}" for row in REGISTRY.values()
              if row.key_envs != default]
    return "; ".join([" or ".join(default), *others])


def base_urls_text() -> str:
    """Where each API's base URL is read from when no setting gives one, for help texts:
    ``TOOLBENCH_BASE_URL, else OPENAI_BASE_URL, else https://api.openai.com/v1 (chat,
    responses); ...``, one part per distinct pair of variables and default."""
    groups: dict[tuple[tuple[str, ...], str], list[str]] = {}
    for row in REGISTRY.values():
        groups.setdefault((row.base_url_envs, row.base_url), []).append(row.name)
    return "; ".join(f"{', else '.join((*envs, url))} ({', '.join(names)})"
                     for (envs, url), names in groups.items())


def with_version_path(api: str, base_url: str) -> str:
    """``base_url`` for API ``api``: as given when it has a path; a bare host (``http://
    127.0.0.1:8080``) gets the path of the API's own default base URL, its version segment
    (``/v1``; Gemini's ``/v1beta``), so one host serves every API at its own version."""
    _scheme, sep, rest = base_url.partition("://")
    if not sep or rest.rstrip("/").count("/"):
        return base_url
    default = REGISTRY[api].base_url
    return base_url.rstrip("/") + "/" + default.partition("://")[2].partition("/")[2]


def case_label(name: str, model: str | None, api: str, row: str | None = None) -> str:
    """The name of a case's item for one model and API (and ``parametrize`` row), and of
    its cassette: ``name``, ``name[model]``, ``name[model-api]``, ``name[api]``, with the
    row's id first in the brackets (``name[Paris-model]``). Chat, the default API, adds
    nothing, so ids and cassettes of chat cases stay as they were before a case could
    speak another API."""
    shown = None if api in (DEFAULT_API, AGENT) else api
    params = [part for part in (row, model, shown) if part is not None]
    return f"{name}[{'-'.join(params)}]" if params else name
