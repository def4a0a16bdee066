"""A case's ``params`` as each wire API gets them.

``params`` (the case's and each stage's) are shared by every API the case runs over, but a
key named like a registered API (``chat``, ``responses``, ``messages``, ``gemini``) whose
value is a mapping holds that API's own params, merged over the shared ones for that API
and left out for the others::

    params: {temperature: 0, max_tokens: 48, chat: {seed: 7}, responses: {store: false}}

Only a mapping counts: ``params: {messages: [...]}`` (a list) still replaces chat's
conversation, as it did before a case could give params per API. The order, last winning:
the case's shared params, the case's for the API, the stage's shared, the stage's for the
API. The request builders, the runner and each API's collection checks read params through
here, so the key path of every value (``params.chat.seed``) is the one a message names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..apis import REGISTRY
from ..keypaths import KeyPath

if TYPE_CHECKING:
    from .schema import Case

Located = dict[str, tuple[Any, KeyPath]]
"""Param name -> (its value, the key path it was written at)."""


def for_an_api(key: str, value: Any) -> bool:
    """Whether ``key: value`` of a ``params`` mapping holds one API's own params."""
    return key in REGISTRY and isinstance(value, dict)


def located(params: Mapping[str, Any], where: KeyPath, api: str) -> Located:
    """One ``params`` mapping (at ``where``) as ``api`` gets it, each value with its path."""
    found = {key: (value, (*where, key)) for key, value in params.items()
             if not for_an_api(key, value)}
    own = params.get(api)
    if isinstance(own, dict):  # a mapping under the API's name: its own params
        found.update({key: (value, (*where, api, key)) for key, value in own.items()})
    return found


def api_params(params: Mapping[str, Any], api: str) -> dict[str, Any]:
    """One ``params`` mapping as ``api`` gets it: the shared keys, its own over them."""
    return {key: value for key, (value, _path) in located(params, (), api).items()}


def stage_params(case: Case, index: int, api: str) -> Located:
    """What stage ``index`` of ``case`` sends over ``api``: the case's params, the stage's
    over them, each value with the key path it was written at."""
    stage = case.stages[index]
    return {**located(case.params, ("params",), api),
            **located(stage.params, ("stages", index, "params"), api)}


def params_written(case: Case, api: str) -> list[Located]:
    """Each ``params`` mapping of ``case`` as ``api`` gets it: the case's, then each
    stage's (not merged: a key is named where it is written)."""
    return [located(case.params, ("params",), api),
            *(located(stage.params, ("stages", index, "params"), api)
              for index, stage in enumerate(case.stages))]
