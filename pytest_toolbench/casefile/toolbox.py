"""A toolbox class described as tools: each method's name, description and JSON Schema.

A method's parameters come from its signature and type hints (a pydantic model built from
them gives the JSON Schema, and validates each call's arguments); its description and its
parameters' descriptions from its docstring (Google, NumPy or reST style, read by
``docstring_parser``). A schema given in the case for a method wins over what is read from
it, key by key. A method that cannot be described (``*args``, a parameter without a type
hint, a type with no JSON Schema) is a ``KeyedError`` naming it: a collection error.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, create_model
from pydantic.errors import PydanticInvalidForJsonSchema, PydanticSchemaGenerationError

from ..keypaths import KeyedError, KeyPath

STATE_METHOD = "state"
"""A toolbox's own view of its state, for ``expect.state``: never offered as a tool."""


@dataclass(frozen=True)
class MethodTool:
    """One method of a toolbox as a tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    arguments: type[BaseModel] | None
    """Validates a call's arguments (and converts them to the hinted types), each field
    aliased by its parameter's name; ``None`` when the case gives the parameters' schema
    itself: the arguments then go as they came."""


def public_methods(cls: type) -> list[str]:
    """The class's public methods, its own first, each in the order it defines them."""
    names: list[str] = []
    for klass in cls.__mro__[:-1]:  # object's methods are no tools
        for name, member in vars(klass).items():
            if (not name.startswith("_") and name not in names and name != STATE_METHOD
                    and _is_method(member)):
                names.append(name)
    return names


def _is_method(member: Any) -> bool:
    return isinstance(member, (staticmethod, classmethod)) or inspect.isfunction(member)


def describe_methods(cls: type, names: list[str], given: Mapping[str, Mapping[str, Any]],
                     paths: Mapping[str, KeyPath]) -> list[MethodTool]:
    """Each named method of ``cls`` as a tool. ``given``: the case's own description and
    parameters of some methods; ``paths``: where each method is named in the case, for
    messages (the entry itself when it is not)."""
    return [_describe(cls, name, given.get(name, {}), paths.get(name, ())) for name in names]


def _describe(cls: type, name: str, given: Mapping[str, Any], path: KeyPath) -> MethodTool:
    method = getattr(cls, name, None)
    where = f"{cls.__name__}.{name}"
    if not callable(method) or name.startswith("_"):
        raise KeyedError(f"{cls.__qualname__} has no public method {name!r} (its methods:"
                         f" {', '.join(public_methods(cls)) or 'none'})", path)
    docs = _docstring(method)
    description = given.get("description", docs.get("", ""))
    if "parameters" in given:
        return MethodTool(name, description, dict(given["parameters"]), None)
    # Read from the class: a plain method still takes self; a classmethod comes bound, and a
    # staticmethod takes none.
    bound = inspect.ismethod(method) or isinstance(inspect.getattr_static(cls, name),
                                                   staticmethod)
    model = _arguments_model(where, method, docs, path, bound)
    return MethodTool(name, description, _parameters(where, model, path), model)


def _docstring(method: Callable[..., Any]) -> dict[str, str]:
    """The docstring's description (key ``""``) and each parameter's, by name."""
    text = inspect.getdoc(method)
    if not text:
        return {}
    import docstring_parser  # only a case with a toolbox reads docstrings

    parsed = docstring_parser.parse(text)
    found = {"": "\n\n".join(part for part in (parsed.short_description,
                                                  parsed.long_description) if part)}
    found.update({param.arg_name: param.description for param in parsed.params
                  if param.description})
    return found


def _arguments_model(where: str, method: Callable[..., Any], docs: Mapping[str, str],
                     path: KeyPath, bound: bool) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for parameter in _parameters_of(where, method, path, bound):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            stars = "*" if parameter.kind is parameter.VAR_POSITIONAL else "**"
            raise KeyedError(f"{where} takes {stars}{parameter.name}, which no JSON Schema can"
                             " describe: give the method's parameters in `schemas:"
                             f" {{{where.rpartition('.')[2]}: {{parameters: ...}}}}`", path)
        if parameter.annotation is parameter.empty:
            raise KeyedError(f"parameter {parameter.name!r} of {where} has no type hint: add"
                             " one, or give the method's parameters in `schemas`", path)
        default = ... if parameter.default is parameter.empty else parameter.default
        # Each field under a name of its own and the parameter's as its alias: a parameter
        # may be called as a pydantic model's attributes are (json, copy, model_config).
        fields[f"argument_{len(fields)}"] = (parameter.annotation, Field(
            default, alias=parameter.name, description=docs.get(parameter.name)))
    try:
        return create_model(where.replace(".", "_"), __config__=_ARGUMENTS, **fields)
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError, NameError) as exc:
        raise KeyedError(f"a parameter type of {where} has no JSON Schema"
                         f" ({_first_sentence(exc)}): give the method's parameters in"
                         f" `schemas: {{{where.rpartition('.')[2]}: {{parameters: ...}}}}`",
                         path) from None


_ARGUMENTS = ConfigDict(extra="forbid", arbitrary_types_allowed=False)


def _parameters_of(where: str, method: Callable[..., Any], path: KeyPath,
                   bound: bool) -> list[inspect.Parameter]:
    """The parameters a call gives (``self`` left out unless ``bound``); hints resolved."""
    try:
        signature = inspect.signature(method, eval_str=True)
    except (NameError, SyntaxError, TypeError, ValueError) as exc:
        raise KeyedError(f"the signature of {where} cannot be read: {exc}", path) from None
    except Exception as exc:  # noqa: BLE001 - evaluating a hint runs the user's code ("1/0")
        raise KeyedError(f"the signature of {where} cannot be read: a type hint raised"
                         f" {type(exc).__name__}: {exc}", path) from None
    parameters = list(signature.parameters.values())
    return parameters if bound else parameters[1:]


def _parameters(where: str, model: type[BaseModel], path: KeyPath) -> dict[str, Any]:
    try:
        schema = model.model_json_schema()
    except (PydanticInvalidForJsonSchema, PydanticSchemaGenerationError,
            PydanticUserError) as exc:
        raise KeyedError(f"a parameter type of {where} has no JSON Schema"
                         f" ({_first_sentence(exc)}): give the method's parameters in"
                         f" `schemas: {{{where.rpartition('.')[2]}: {{parameters: ...}}}}`",
                         path) from None
    schema.pop("title", None)
    schema.pop("additionalProperties", None)  # the call is checked here; keep what is sent lean
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema


def _first_sentence(exc: BaseException) -> str:
    """pydantic's own advice (``arbitrary_types_allowed``) is not the fix here."""
    text = str(exc).strip()
    return text.splitlines()[0].split(". ")[0].rstrip(".") if text else type(exc).__name__
