"""A support agent on google-genai (Gemini): its own loop of contents and function calls,
whole or streamed, with the SDK's automatic function calling off."""

from __future__ import annotations

import json
from typing import Any

from google import genai
from google.genai import types

from support.agents.shop import SYSTEM, TOOLS, Shop, converse


def _config(system: str, max_tokens: int | None) -> types.GenerateContentConfig:
    declarations = [types.FunctionDeclaration(name=tool["name"], description=tool["description"],
                                              parameters_json_schema=tool["parameters"])
                    for tool in TOOLS]
    return types.GenerateContentConfig(
        system_instruction=system, max_output_tokens=max_tokens, tools=[types.Tool(function_declarations=declarations)],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


class GeminiAgent:
    def __init__(self, client: genai.Client, model: str, stream: bool, system: str,
                 max_tokens: int | None = None) -> None:
        self.client, self.model, self.stream = client, model, stream
        self.shop = Shop()
        self.contents: list[types.Content] = []
        self.config = _config(system, max_tokens)

    def __call__(self, user_text: str) -> str:
        self.contents.append(types.Content(role="user", parts=[types.Part(text=user_text)]))
        return converse(self._reply, self.take)

    def close(self) -> None:
        self.client.close()

    def _reply(self) -> list[types.Part]:
        request: dict[str, Any] = {"model": self.model, "contents": self.contents,
                                   "config": self.config}
        if not self.stream:
            response = self.client.models.generate_content(**request)
            return list(_parts(response))
        parts: list[types.Part] = []
        for chunk in self.client.models.generate_content_stream(**request):
            parts.extend(_parts(chunk))
        return parts

    def take(self, parts: list[types.Part]) -> str | None:
        self.contents.append(types.Content(role="model", parts=parts))
        calls = [part.function_call for part in parts if part.function_call]
        if not calls:
            return "".join(part.text or "" for part in parts if not part.thought)
        answers = [types.Part.from_function_response(
            name=call.name or "", response=json.loads(self.shop.run(call.name or "",
                                                                     call.args or {})))
            for call in calls]
        self.contents.append(types.Content(role="user", parts=answers))
        return None

    def state(self) -> dict[str, Any]:
        return self.shop.state()


def _parts(response: types.GenerateContentResponse) -> list[types.Part]:
    candidates = response.candidates or []
    content = candidates[0].content if candidates else None
    return list(content.parts or []) if content else []


def make_agent(stream: bool = False, model: str = "gemini-2.5-flash",
               system: str = SYSTEM, max_tokens: int | None = None) -> GeminiAgent:
    """Its client reads GOOGLE_GEMINI_BASE_URL (no version: the SDK adds ``/v1beta``) and
    GEMINI_API_KEY or GOOGLE_API_KEY."""
    return GeminiAgent(genai.Client(), model, stream, system, max_tokens)
