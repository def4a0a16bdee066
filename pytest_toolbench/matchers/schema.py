"""``$schema``: the value validates against a JSON Schema, offline and within the time limit.

Two things jsonschema does by default that a test run must not:

- fetch a remote ``$ref`` (``https://...``): replay would touch the network, and a case's
  verdict would hang on someone else's server. Here nothing is ever retrieved; a ``$ref``
  that does not resolve inside the schema (or to a JSON Schema meta-schema) is a collection
  error at its line, or, where only validation reaches it, a mismatch naming it.
- run ``pattern`` regexes with ``re``, which cannot be stopped, and compare every pair of
  items for ``uniqueItems``. Here patterns run on the ``regex`` package under the matching
  time limit, ``uniqueItems`` takes one pass, and every keyword looks at the clock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
import regex
from jsonschema_specifications import REGISTRY as _META_SCHEMAS  # type: ignore[import-untyped]

from .core import MatcherError as _MatcherError
from .core import Mismatch, Path, _Matcher, _require, _same, _short
from .limits import MatchTimeout, check_time, search, untimed

Keyword = Callable[[Any, Any, Any, Any], Any]
"""A jsonschema keyword function: (validator, keyword value, instance, schema) -> errors."""


def compile_schema(spec: Any, value: Any, path: Path) -> _Matcher:
    """``{$schema: value}`` at ``path``: a matcher, or ``MatcherError`` at the faulty key."""
    _require(isinstance(value, (Mapping, bool)), "'$schema' takes a JSON Schema object", path)
    dialect = value.get("$schema", "") if isinstance(value, Mapping) else ""
    # validator_for looks the dialect up in a dict: a mapping there is a TypeError.
    _require(isinstance(dialect, str), "a JSON Schema's own '$schema' is a URI string, got "
             f"{_short(dialect)}", path + ("$schema",))
    # An explicit default: an unknown "$schema" URI would otherwise warn at every compile.
    cls = jsonschema.validators.validator_for(value, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(value)
    except jsonschema.SchemaError as error:
        raise _MatcherError(f"invalid JSON Schema: {error.message}",
                            path + tuple(error.absolute_path)) from None
    if isinstance(value, Mapping):
        _check_refs(value, cls, path)
    return _Schema(spec, _offline(cls)(value, registry=_NOTHING_REMOTE))


class _Schema(_Matcher):
    def __init__(self, spec: Any, validator: jsonschema.protocols.Validator) -> None:
        super().__init__(spec)
        self._validator = validator

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        try:
            errors = list(self._validator.iter_errors(actual))
        except MatchTimeout:
            raise
        except referencing.exceptions.Unresolvable as error:
            return self._fail(path, f"schema: {_unresolvable(error)}", actual)
        except Exception as error:  # noqa: BLE001 - a schema problem must not crash the run
            return self._fail(path, f"could not validate against the schema: {error}", actual)
        return [Mismatch(path + tuple(error.absolute_path), f"schema: {error.message}",
                         self._spec, error.instance) for error in errors]


# --- references: resolved inside the schema, never fetched ---------------------------------


def _refuse(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


# Validators get this registry; jsonschema adds the meta-schemas of every draft to it, so a
# $ref resolves to those or to the schema itself, and nothing is retrieved.
_NOTHING_REMOTE: referencing.jsonschema.SchemaRegistry = referencing.Registry(
    retrieve=_refuse)  # type: ignore[call-arg]
# The same for the check at compile time, which has no validator to do the adding.
_OFFLINE: referencing.jsonschema.SchemaRegistry = _META_SCHEMAS.combine(_NOTHING_REMOTE)


def _check_refs(schema: Mapping[str, Any], cls: type[jsonschema.protocols.Validator],
                path: Path) -> None:
    """Every ``$ref`` of the schema's own keywords must resolve without a fetch."""
    dialect = cls.META_SCHEMA.get("$id") or cls.META_SCHEMA.get("id") or ""
    specification = referencing.jsonschema.specification_with(
        dialect, default=referencing.Specification.OPAQUE)
    root = specification.create_resource(schema)
    resolver = _OFFLINE.resolver_with_root(root)
    for contents, ref in _unresolved_refs(root, resolver):
        where = _path_to(contents, schema) or ()
        raise _MatcherError(_unresolvable_ref(ref), path + where + ("$ref",))


def _unresolved_refs(resource: referencing.Resource[Any],
                     resolver: Any) -> Iterator[tuple[Any, str]]:
    """(the subschema, its ``$ref``) for each ``$ref`` that does not resolve."""
    contents = resource.contents
    ref = contents.get("$ref") if isinstance(contents, Mapping) else None
    if isinstance(ref, str):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            yield contents, ref
    for sub in resource.subresources():
        yield from _unresolved_refs(sub, resolver.in_subresource(sub))


def _path_to(target: Any, tree: Any) -> Path | None:
    """The key path of ``target`` (by identity) inside ``tree``."""
    if tree is target:
        return ()
    children: Any = (tree.items() if isinstance(tree, Mapping) else
                     enumerate(tree) if isinstance(tree, list) else ())
    for key, child in children:
        found = _path_to(target, child)
        if found is not None:
            return (key, *found)
    return None


def _unresolvable_ref(ref: str, keyword: str = "$ref") -> str:
    if ref.startswith("#"):
        return f"{keyword} {ref!r} points at nothing in the schema"
    return (f"{keyword} {ref!r} is not fetched: a $schema resolves references only inside itself"
            " (replay never touches the network); copy the referenced schema under $defs and"
            " point at it with '#/$defs/NAME'")


def _unresolvable(error: referencing.exceptions.Unresolvable) -> str:
    # Validation reaches $dynamicRef too, so not "$ref" here.
    return _unresolvable_ref(str(getattr(error, "ref", error)), "reference")


# --- keywords: regexes with a timeout, and a look at the clock before each -----------------


@functools.cache
def _offline(cls: type[jsonschema.protocols.Validator]) -> type[jsonschema.protocols.Validator]:
    """``cls`` with the regex keywords on the ``regex`` package and every keyword timed."""
    keywords: dict[str, Keyword] = {**cls.VALIDATORS, **_OWN}
    keywords = {name: _timed(keyword) for name, keyword in keywords.items()}
    extended: type[jsonschema.protocols.Validator]
    extended = jsonschema.validators.extend(cls, keywords)  # type: ignore[no-untyped-call]
    return extended


def _timed(keyword: Keyword) -> Keyword:
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        check_time("$schema validation")
        return keyword(validator, value, instance, schema)

    return run


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern)


def _found(pattern: str, text: str) -> bool:
    with untimed():
        compiled = _compiled(pattern)
    return search(compiled, text, f"$schema pattern {pattern!r}")


# The three below are jsonschema's own, with ``_found`` for ``re.search``; then uniqueItems.


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _found(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _found(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any,
                           schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [key for key in instance
              if key not in known and not any(_found(p, key) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(p) for p in sorted(patterns))
            yield jsonschema.ValidationError(f"{listed} {verb} not match any of the regexes:"
                                             f" {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield jsonschema.ValidationError(
                f"Additional properties are not allowed ({listed} {verb} unexpected)")


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if unique and validator.is_type(instance, "array") and not _all_different(instance):
        yield jsonschema.ValidationError(f"{_short(instance)} has non-unique elements")


def _all_different(items: Sequence[Any]) -> bool:
    """One pass over hashable keys (jsonschema compares every pair: hours for 50,000)."""
    try:
        keys = [_json_key(item) for item in items]
    except TypeError:  # not JSON: jsonschema's own way, a look at the clock per item
        for index, item in enumerate(items):
            check_time("$schema uniqueItems")
            if any(_same(item, other) for other in items[:index]):
                return False
        return True
    return len(set(keys)) == len(keys)


def _json_key(value: Any) -> Hashable:
    """Equal for values JSON Schema calls equal: 1 and 1.0 are, true and 1 are not."""
    if isinstance(value, (bool, str)):
        return (type(value).__name__, value)
    if isinstance(value, Mapping):
        return ("object", frozenset((key, _json_key(item)) for key, item in value.items()))
    if isinstance(value, Sequence):
        return ("array", tuple(_json_key(item) for item in value))
    return ("value", value)  # numbers and null; an unhashable stranger raises TypeError


_OWN: dict[str, Keyword] = {"pattern": _pattern, "patternProperties": _pattern_properties,
                            "additionalProperties": _additional_properties,
                            "uniqueItems": _unique_items}
