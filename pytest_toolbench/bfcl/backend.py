"""BFCL's backend classes, from the installed ``bfcl-eval`` package, run as BFCL runs them.

Nothing of BFCL is copied here: its classes, their function docs and the list of stateless
classes are read from the package (``pip install --no-deps bfcl-eval mpmath``). What this
module adds is how BFCL's multi-turn checker (bfcl-eval 2026.3.23) uses them, without its
``eval`` of call strings:

- a chain is one instance of each involved class, built with ``cls()`` then
  ``_load_scenario(deepcopy(config), long_context=...)`` (a stateless class gets none; a
  class missing from the config loads from ``{}``);
- a call runs any public method of the chain's instances (a later class's method wins a
  name both define); an unknown name answers ``name 'x' is not defined``;
- a result becomes the string the model receives and the checker compares (``result_text``).

Ground-truth calls are BFCL's strings, literal Python calls (``sort('report.pdf')``):
``parse_call`` reads them with ``ast`` into positional and keyword arguments.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

INSTALL_HINT: Final = "pip install --no-deps bfcl-eval mpmath"
"""How a user gets BFCL's classes without its inference dependencies (vllm, torch...)."""
BLOCKED: Final = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})
"""Names BFCL's executor refuses to call, whoever defines them."""


class BfclMissing(ValueError):
    """``bfcl-eval`` is not installed, or lacks something a case names."""


@dataclass(frozen=True)
class Backend:
    """What the installed ``bfcl-eval`` provides: class modules, docs, stateless classes."""

    modules: dict[str, str]
    """Class name -> the module that defines it."""
    doc_files: dict[str, Path]
    """Class name -> its function-doc file (JSON Lines)."""
    stateless: frozenset[str]


@functools.cache
def backend() -> Backend:
    """The installed package's mappings; ``BfclMissing`` naming the install command."""
    try:
        config = importlib.import_module("bfcl_eval.constants.executable_backend_config")
        paths = importlib.import_module("bfcl_eval.constants.eval_config")
    except ImportError as error:
        raise BfclMissing(f"BFCL's backend classes come from the bfcl-eval package, which"
                          f" cannot be imported ({error}); install it with: {INSTALL_HINT}"
                          ) from None
    doc_dir = Path(paths.MULTI_TURN_FUNC_DOC_PATH)
    return Backend(dict(config.CLASS_FILE_PATH_MAPPING),
                   {name: doc_dir / file
                    for name, file in config.MULTI_TURN_FUNC_DOC_FILE_MAPPING.items()},
                   frozenset(config.STATELESS_CLASSES))


@functools.cache
def backend_class(name: str) -> type:
    """The class BFCL calls ``name``, imported from its module."""
    found = backend()
    if name not in found.modules:
        raise BfclMissing(f"bfcl-eval has no backend class {name!r} (it has:"
                          f" {', '.join(sorted(found.modules))})")
    try:
        cls = getattr(importlib.import_module(found.modules[name]), name)
    except ImportError as error:
        raise BfclMissing(f"cannot import BFCL's class {name!r} ({error}); install with:"
                          f" {INSTALL_HINT}") from None
    return cls  # type: ignore[no-any-return]


@functools.cache
def function_docs(name: str) -> tuple[dict[str, Any], ...]:
    """The function docs of class ``name``, in the order of its doc file."""
    path = backend().doc_files.get(name)
    if path is None:
        raise BfclMissing(f"bfcl-eval has no function docs for class {name!r}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise BfclMissing(f"cannot read BFCL's function docs {path}: {error}") from None
    return tuple(json.loads(line) for line in lines if line.strip())


@functools.cache
def _public_methods(cls: type) -> tuple[str, ...]:
    """What BFCL's executor maps to an instance: its public bound methods' names."""
    probe = cls()
    return tuple(name for name, _ in inspect.getmembers(probe, predicate=inspect.ismethod)
                 if not name.startswith("_"))


class Chain:
    """One instance of each involved class, built from the record's initial config, that
    persists across the turns of one run."""

    def __init__(self, classes: list[str], config: dict[str, Any], long_context: bool) -> None:
        stateless = backend().stateless
        self.instances: dict[str, Any] = {}
        self._methods: dict[str, Any] = {}
        for name in classes:
            cls = backend_class(name)
            instance = cls()
            if name not in stateless:
                instance._load_scenario(copy.deepcopy(config.get(name, {})),
                                        long_context=long_context)
            self.instances[name] = instance
            for method in _public_methods(cls):
                self._methods[method] = instance  # a later class wins, as in BFCL

    def has(self, name: str) -> bool:
        return name in self._methods

    def call(self, name: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
             ) -> str:
        """Run one call; its result (or its exception) as the string BFCL makes of it."""
        try:
            if name in BLOCKED:
                raise RuntimeError(f"Function call {name} is not allowed.")
            if name not in self._methods:
                raise NameError(f"name {name!r} is not defined")
            method: Callable[..., Any] = getattr(self._methods[name], name)
            return result_text(method(*args, **(kwargs or {})))
        except Exception as error:  # noqa: BLE001 - BFCL answers any failure as its text
            return f"Error during execution: {error}"


def result_text(result: Any) -> str:
    """A result as BFCL's executor writes it: a ``str`` as is, a ``dict`` as ``json.dumps``
    (ASCII escapes, default separators; ``str()`` when it holds what JSON cannot), anything
    else ``str()``."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except Exception:  # noqa: BLE001 - BFCL falls back on any failure
            return str(result)
    return str(result)


@dataclass(frozen=True)
class ParsedCall:
    """A ground-truth call: the method's name and its literal arguments."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def parse_call(text: str) -> ParsedCall:
    """``name(literal, key=literal, ...)`` -> its parts; ValueError saying what is wrong."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise ValueError(f"not a Python call: {text!r} ({error.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a call of a plain name: {text!r}")  # noqa: TRY004 - pydantic reports ValueError
    try:
        args = tuple(ast.literal_eval(arg) for arg in node.args)
        kwargs = {str(kw.arg): ast.literal_eval(kw.value) for kw in node.keywords}
    except ValueError:
        raise ValueError(f"arguments are not Python literals: {text!r}") from None
    if any(kw.arg is None for kw in node.keywords) or any(
            isinstance(arg, ast.Starred) for arg in node.args):
        raise ValueError(f"unpacked arguments are not literals: {text!r}")
    return ParsedCall(node.func.id, args, kwargs)


def as_arguments(call: ParsedCall, classes: list[str]) -> dict[str, Any]:
    """A ground-truth call's arguments by name, positional ones mapped through the
    signature of the method that runs it (as a model would send them)."""
    owner = None
    for name in classes:
        if call.name in _public_methods(backend_class(name)):
            owner = backend_class(name)
    if owner is None or not call.args:
        return dict(call.kwargs)
    signature = inspect.signature(getattr(owner, call.name))
    bound = signature.bind(None, *call.args, **call.kwargs)  # None stands for self
    return {key: value for key, value in list(bound.arguments.items())[1:]}
