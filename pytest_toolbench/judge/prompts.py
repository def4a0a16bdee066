"""The prompt templates of the second models, shipped in the package and versioned.

A template is a text file ``templates/<version>.txt`` whose parts begin with a line
``--- name ---``; ``$name`` placeholders are filled with ``string.Template``. A changed
template is a new file with a new version (``judge-v2``), never an edit: reports name the
version every verdict was given under, and a recorded judge request holds the prompt, so an
edit would fail every replay.
"""

from __future__ import annotations

import functools
import json
import re
import string
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..wire.base import message_text

JUDGE_TEMPLATE = "judge-v1"
SIMULATOR_TEMPLATE = "simulator-v1"

OPEN, CLOSE = "<<<TRANSCRIPT", "TRANSCRIPT>>>"
"""The delimiters of the transcript in the judge's prompt."""

_PART = re.compile(r"^--- (\w+) ---\n", re.MULTILINE)


@dataclass(frozen=True)
class Template:
    version: str
    parts: dict[str, str]

    def fill(self, part: str, **values: str) -> str:
        return string.Template(self.parts[part]).substitute(values)


@functools.cache
def template(version: str) -> Template:
    """The template ``version``, read from the package once."""
    text = resources.files(__package__).joinpath("templates", f"{version}.txt").read_text(
        encoding="utf-8")
    pieces = _PART.split(text)[1:]
    return Template(version, {name: body.strip("\n") for name, body in
                              zip(pieces[::2], pieces[1::2])})


def transcript(messages: list[dict[str, Any]]) -> str:
    """The conversation as the judge reads it: the user's and the agent's text, each tool
    call with its arguments and each result, one line each (the system prompt left out).
    The delimiters are broken up wherever the conversation writes them, so nothing in it
    can close the transcript early."""
    lines: list[str] = []
    for message in messages:
        role = message.get("role")
        text = message_text(message.get("content"))
        if role == "user":
            lines.append(f"USER: {text}")
        elif role == "assistant":
            if text:
                lines.append(f"AGENT: {text}")
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                lines.append(f"AGENT CALLS {function.get('name')}"
                             f"({function.get('arguments', '')})")
        elif role == "tool":
            lines.append(f"TOOL RESULT: {text}")
    return "\n".join(_defused(line) for line in lines)


def _defused(line: str) -> str:
    return line.replace(OPEN, "<< <TRANSCRIPT").replace(CLOSE, "TRANSCRIPT> >>")


def compact(value: Any) -> str:
    """A JSON value on one line, for messages."""
    return json.dumps(value, ensure_ascii=False)
