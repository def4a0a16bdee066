"""The case-file schema (SPEC sections 3-6) as pydantic models.

Every model forbids unknown keys. Matcher fields hold *compiled* matchers: a bad regex or
JSON Schema fails validation at its key path, so it becomes a collection error at its line.
Which expectations a case gives is ``Expect.model_fields_set``: an absent key checks nothing.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,  # what is sent must be JSON; YAML also reads dates and binary, which are not
    PlainSerializer,
    PrivateAttr,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema

from ..agent_imports import importing
from ..apis import AGENT, API_NAMES
from ..defaults import JUDGE_SAMPLES_MAX, SIMULATED_TURNS_MAX
from ..faults import Fault
from ..keypaths import KeyedError, KeyPath, raise_all
from ..matchers import (
    Matcher,
    compile_matcher,
    compile_path,
    compile_tool_calls,
    compile_trajectory,
)
from .files import read_beside
from .operands import check_expectation
from .tables import row_ids, table_rows
from .toolbox import MethodTool, describe_methods, public_methods

if TYPE_CHECKING:
    ApiName = str
else:  # the registry's names, each allowed (and listed in the JSON Schema) as a literal
    ApiName = Literal[API_NAMES]

_MATCHER_SCHEMA = {"description": "A value, or a mapping of $ operators (SPEC section 4)."}


def _spec_of(matcher: Matcher | None) -> Any:
    # None is the default of every optional matcher field: dumping it (or the JSON
    # Schema's defaults) must not fail.
    return None if matcher is None else matcher.spec


MatcherField = Annotated[
    Any, AfterValidator(compile_matcher), PlainSerializer(_spec_of), WithJsonSchema(_MATCHER_SCHEMA)
]
ToolCallsField = Annotated[
    Any,
    AfterValidator(compile_tool_calls),
    PlainSerializer(_spec_of),
    WithJsonSchema({"description": "A list of {name, arguments} matchers (SPEC section 5)."}),
]
TrajectoryField = Annotated[
    Any,
    AfterValidator(compile_trajectory),
    PlainSerializer(_spec_of),
    WithJsonSchema({"description": "The calls made, in order: a list of {name, arguments}"
                    " matchers, or {$ordered, $unordered, $includes, $contains, $not:"
                    " [...], max_calls: N}."}),
]
PathField = Annotated[
    Any,
    AfterValidator(compile_path),
    PlainSerializer(_spec_of),
    WithJsonSchema({"description": "The stages a run went through, by name: a list in order,"
                    " or {$ordered, $contains, $unordered, $includes, $not: [...]} or another"
                    " operator on the list."}),
]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
ToolName = Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]


def _field_docstrings(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Each field's attribute docstring as its description in the JSON Schema, so editors
    show them (``json_schema_extra`` of every model here).

    pydantic's ``use_attribute_docstrings`` does the same, but reads every model's source
    when the class is built, at every collection (a third of importing this module); the
    schema is generated rarely, so the docstrings are read then."""
    docstrings = {name: text for klass in reversed(model.__mro__)
                  for name, text in _attribute_docstrings().get(klass.__name__, {}).items()}
    for name, field in schema.get("properties", {}).items():
        # As pydantic: a description the field gives itself wins, a docstring beats its
        # type's (a matcher field's generic one).
        if name in docstrings and model.model_fields[name].description is None:
            field["description"] = docstrings[name]


@functools.cache
def _attribute_docstrings() -> dict[str, dict[str, str]]:
    """Class name -> field name -> the string literal right after the field, cleaned as
    ``inspect.cleandoc`` does (as pydantic reads attribute docstrings)."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    found: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = dict(_docstrings_in(node.body))
    return found


def _docstrings_in(body: list[ast.stmt]) -> Iterator[tuple[str, str]]:
    for statement, following in itertools.pairwise(body):
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            yield statement.target.id, inspect.cleandoc(following.value.value)


class StrictModel(BaseModel):
    # allow_inf_nan: what is sent must be JSON, and JSON has no NaN or Infinity (YAML has).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                              json_schema_extra=_field_docstrings)


class Endpoint(StrictModel):
    """Where a case sends its requests; each key given overrides ini and environment."""

    base_url: str | None = None
    """Base URL of the OpenAI-compatible API, e.g. ``http://127.0.0.1:8080/v1``."""
    api_key_env: str | None = None
    """The NAME of the environment variable holding the API key; keys never appear in files."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra request headers."""
    timeout_s: float | None = Field(default=None, gt=0)
    """Connect and read timeout in seconds (the total deadline defaults to ten times it)."""
    retries: int | None = Field(default=None, ge=0)
    """Retries of transient failures (connect errors, 429, 5xx)."""
    api: ApiName | None = None
    """The wire API the case speaks: ``chat`` (chat completions, the default) or another
    of those the enum lists (docs/case-format.md, Wire APIs, says what each one sends).
    ``--toolbench-api`` overrides it."""
    apis: list[ApiName] | None = Field(default=None, min_length=1)
    """The wire APIs the case runs over, and the only ones: one item each, and under
    ``--toolbench-api`` the items of the flag's other APIs are skipped."""
    unsupported: Literal["fail", "skip"] = "fail"
    """What the item of an API that cannot express the case does (a params key its
    request lacks, ``allowed_tools`` over Messages...): ``fail`` (the default), saying
    why at the line, or ``skip`` with that reason. The case's other APIs' items run."""

    @field_validator("apis")
    @classmethod
    def _unique_apis(cls, apis: list[str] | None) -> list[str] | None:
        if apis is not None:
            _reject_duplicates("API", apis, key=None)
        return apis

    @model_validator(mode="after")
    def _api_or_apis(self) -> Endpoint:
        if self.api is not None and self.apis is not None:
            raise KeyedError("give api (the case's API, which --toolbench-api overrides) or"
                             " apis (the only APIs it runs over), not both", ("apis",))
        return self


def _any_object() -> dict[str, JsonValue]:
    """The parameters of a tool that declares none: an object, any properties."""
    return {"type": "object", "properties": {}}


class Tool(StrictModel):
    """A tool offered to the model, and how the agent loop answers its calls."""

    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=_any_object)
    """JSON Schema of the arguments, sent as the OpenAI function schema."""
    result: JsonValue = None
    """Canned result (any JSON; a string is sent as is)."""
    python: str | None = None
    """``module:function`` called with the arguments; sync or async."""
    error: str | None = None
    """The tool fails with this message."""
    timeout_s: float = Field(default=30, gt=0)
    background: bool = False
    """A ``python`` tool the model starts and never waits for: its call is answered at once
    with ``{"status": "started", "task": ID}`` and the function runs on its own (its result
    goes to the report, never to the model)."""
    strict: bool | None = None
    """Ask the server to hold the arguments to ``parameters`` exactly (structured outputs):
    every object of the schema must list all its properties in ``required`` and set
    ``additionalProperties: false``. Unset: chat and Messages send none (the server's
    default, not strict); the Responses API, strict by default, is sent ``strict: false``."""

    @field_validator("python")
    @classmethod
    def _importable(cls, value: str | None) -> str | None:
        if value is not None:
            resolve_callable(value)
        return value

    @model_validator(mode="after")
    def _one_implementation(self) -> Tool:
        given = [key for key in ("result", "python", "error") if key in self.model_fields_set]
        if len(given) > 1:
            raise ValueError(f"give only one of result, python, error (got {', '.join(given)})")
        return self

    @model_validator(mode="after")
    def _background_runs_code(self) -> Tool:
        if self.background and self.python is None:
            raise KeyedError("background: true runs a python tool on its own; this tool has"
                             " no python function to run", ("background",))
        return self

    @property
    def has_implementation(self) -> bool:
        return bool({"result", "python", "error"} & self.model_fields_set)


class McpServer(StrictModel):
    """An MCP server whose tools a case offers: started over stdio (``command``) or reached
    over streamable HTTP (``url``). ``${NAME}`` and ``${env.NAME}`` in its strings read the
    environment when the server starts."""

    command: list[str] | None = Field(default=None, min_length=1)
    """stdio: the program and its arguments, e.g. ``[python, -m, mcp_server_time]``."""
    env: dict[str, str] = Field(default_factory=dict)
    """stdio: environment variables set for the server, over a minimal default environment."""
    cwd: str | None = None
    """stdio: the server's working directory (relative to the case file's folder)."""
    url: str | None = None
    """Streamable HTTP: the server's endpoint, e.g. ``http://127.0.0.1:8931/mcp``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Streamable HTTP: headers of every request (``Authorization: "Bearer ${TOKEN}"``)."""
    scope: Literal["case", "session"] = "case"
    """``case``: started fresh for every case that uses it; ``session``: one server shared
    by every case of the session that uses this definition."""
    startup_timeout_s: float = Field(default=30, gt=0)
    """How long the server may take to start and list its tools."""
    call_timeout_s: float = Field(default=60, gt=0)
    """How long one ``tools/call`` may take."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        wrong = ({"env", "cwd"} if self.url is not None else {"headers"}) & self.model_fields_set
        if wrong:
            kind = "streamable HTTP (url)" if self.url is not None else "stdio (command)"
            raise KeyedError(f"{', '.join(sorted(wrong))} is not for a {kind} server",
                             (min(wrong),))
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


class McpTools(StrictModel):
    """``{mcp: NAME}``: the tools an MCP server lists, all or those ``include`` names."""

    mcp: Name
    """The server, as ``mcp_servers`` names it (the case's, or its file's)."""
    include: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, min_length=1)
    """Only these of the server's tools; each must be one the server lists."""
    background: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """The server's tools the model starts and never waits for (``background: true`` on a
    ``python`` tool); each must be one the server lists (and ``include`` names)."""

    @field_validator("include", "background")
    @classmethod
    def _unique_includes(cls, include: list[str] | None) -> list[str] | None:
        if include is not None:
            _reject_duplicates("included tool", include, key=None)
        return include

    @model_validator(mode="after")
    def _background_included(self) -> McpTools:
        for index, name in enumerate(self.background):
            if self.include is not None and name not in self.include:
                raise KeyedError(f"background names {name!r}, which include leaves out",
                                 ("background", index))
        return self


class BfclToolbox(StrictModel):
    """BFCL's own backend classes for one multi-turn record, from the installed ``bfcl-eval``
    package (``pip install --no-deps bfcl-eval mpmath``)."""

    involved_classes: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    """BFCL's class names (``GorillaFileSystem``, ``MathAPI``...): their function docs are
    the tools, in this order; their instances run the calls."""
    initial_config: dict[str, JsonValue] = Field(default_factory=dict)
    """Class name -> the scenario each class loads (``_load_scenario``)."""
    long_context: bool = False
    """Load the scenarios with BFCL's long-context setting (more files, longer results)."""
    held_back: dict[Name, list[Annotated[str, Field(min_length=1)]]] = Field(
        default_factory=dict)
    """Stage name -> functions not offered before that stage, offered from it on
    (BFCL's ``missed_function``)."""

    @field_validator("involved_classes")
    @classmethod
    def _installed(cls, classes: list[str]) -> list[str]:
        from ..bfcl.backend import backend_class  # imports bfcl-eval: only cases that use it

        _reject_duplicates("class", classes, key=None)
        for index, name in enumerate(classes):
            try:
                backend_class(name)
            except ValueError as error:
                raise KeyedError(str(error), (index,)) from None
        return classes

    @model_validator(mode="after")
    def _held_back_documented(self) -> BfclToolbox:
        from ..bfcl.backend import function_docs

        names = {doc["name"] for cls in self.involved_classes for doc in function_docs(cls)}
        for stage, functions in self.held_back.items():
            for index, function in enumerate(functions):
                if function not in names:
                    raise KeyedError(f"held-back function {function!r} is not one of the"
                                     " involved classes' functions", ("held_back", stage, index))
        return self


class BfclTools(StrictModel):
    """``{bfcl: {...}}``: a BFCL multi-turn record's tools, run on BFCL's own classes."""

    bfcl: BfclToolbox


class ToolboxClass(StrictModel):
    """The class a toolbox is an instance of, and how it is built."""

    python: str
    """``module:Class``; a fresh instance is built for every run of the case."""
    init: dict[str, JsonValue] = Field(default_factory=dict)
    """Keyword arguments of the class's constructor."""

    @model_validator(mode="after")
    def _buildable(self) -> ToolboxClass:
        cls = self.cls
        try:
            inspect.signature(cls).bind(**self.init)
        except TypeError as exc:
            raise KeyedError(f"init does not fit {cls.__qualname__}(): {exc}", ("init",)
                             ) from None
        except ValueError:
            pass  # a constructor without a signature to read: building it tells
        return self

    @property
    def cls(self) -> type:
        try:
            target = resolve_callable(self.python)
        except ValueError as exc:
            raise KeyedError(str(exc).replace("'module:function'", "'module:Class'"),
                             ("python",)) from None
        if not isinstance(target, type):
            raise KeyedError(f"{self.python!r} is not a class", ("python",))
        return target


class MethodSchema(StrictModel):
    """What the model is told of one method, instead of what is read from it."""

    description: str | None = None
    parameters: dict[str, JsonValue] | None = None
    """JSON Schema of the arguments; given, the arguments reach the method as they came."""


class Toolbox(StrictModel):
    """``{toolbox: {python: module:Class, init: {...}}}``: an instance's methods as tools,
    and its state for ``expect.state``."""

    toolbox: ToolboxClass
    name: Name | None = None
    """How ``expect.state`` names the toolbox; the class's name unless given."""
    include: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, min_length=1)
    """Only these methods (any public method of the class, ``state`` included)."""
    schemas: dict[str, MethodSchema] = Field(default_factory=dict)
    """Method name -> its description and parameters as the model is told them."""
    timeout_s: float = Field(default=30, gt=0)
    """How long one call into the toolbox may take: a method, its constructor, ``state()``
    or a deep copy (a retried stage); past it the call is abandoned and named."""
    background: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Methods the model starts and never waits for (``background: true`` on a ``python``
    tool): each call is answered at once, the method runs on its own."""

    _methods: list[MethodTool] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _described(self) -> Toolbox:
        cls = _keyed(("toolbox",), lambda: self.toolbox.cls)
        if self.include is not None:
            _reject_duplicates("included method", self.include, key=None)
        names = self.include if self.include is not None else public_methods(cls)
        paths: dict[str, KeyPath] = {name: ("include", index)
                                     for index, name in enumerate(self.include or [])}
        for name in self.schemas:
            if name not in names:
                raise KeyedError(f"schemas names {name!r}, which is not one of the toolbox's"
                                 f" tools ({', '.join(names) or 'none'})", ("schemas", name))
            paths[name] = ("schemas", name)
        _reject_duplicates("background method", self.background, key=None)
        for index, name in enumerate(self.background):
            if name not in names:
                raise KeyedError(f"background names {name!r}, which is not one of the"
                                 f" toolbox's tools ({', '.join(names) or 'none'})",
                                 ("background", index))
        given = {name: schema.model_dump(exclude_unset=True)
                 for name, schema in self.schemas.items()}
        self._methods = describe_methods(cls, names, given, paths)
        return self

    @property
    def label(self) -> str:
        """The toolbox's name in ``expect.state`` and in reports."""
        return self.name or self.toolbox.python.rpartition(":")[2]

    @property
    def methods(self) -> list[MethodTool]:
        return self._methods

    @property
    def tools(self) -> list[Tool]:
        """The methods as every request offers them."""
        return [Tool.model_construct({"name", "description", "parameters"}, name=method.name,
                                     description=method.description,
                                     parameters=method.parameters)
                for method in self._methods]


def _keyed(path: KeyPath, make: Any) -> Any:
    """``make()``, its ``KeyedError`` placed below ``path``."""
    try:
        return make()
    except KeyedError as error:
        raise KeyedError(error.message, (*path, *error.path)) from None


def _tool_kind(value: Any) -> str:
    """Which kind of ``tools`` entry a value is: an MCP server's tools, a toolbox, BFCL's
    classes, or one tool."""
    if isinstance(value, dict):
        return next((kind for key, kind in _ENTRY_KEYS.items() if key in value), "Tool")
    return (type(value).__name__ if isinstance(value, (McpTools, Toolbox, BfclTools))
            else "Tool")


_ENTRY_KEYS = {"mcp": "McpTools", "toolbox": "Toolbox", "bfcl": "BfclTools"}
"""The key that makes a ``tools`` entry other than a tool."""


ToolEntry = Annotated[
    Annotated[Tool, Tag("Tool")] | Annotated[McpTools, Tag("McpTools")]
    | Annotated[BfclTools, Tag("BfclTools")] | Annotated[Toolbox, Tag("Toolbox")],
    Discriminator(_tool_kind),
]


_IMPORT_HINT = (
    "; pytest imports tools from sys.path, which holds neither the working directory nor"
    " the case file's unless told: add a conftest.py (it may be empty) beside the module,"
    " or set `pythonpath = .` (the module's directory, relative to the ini file) in the"
    " pytest ini"
)
"""Said when the tool's own module is not found (not a module it imports in turn)."""


def resolve_callable(path: str) -> Any:
    """Import ``module:function``; raise ValueError saying why it cannot be used."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"python must be 'module:function', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        hint = _IMPORT_HINT if f"{module_name}.".startswith(f"{missing}.") else ""
        raise ValueError(f"cannot import {module_name!r}: {exc}{hint}") from None
    except Exception as exc:  # noqa: BLE001 - any failure importing user code is a case error
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - sys.exit() on import must not end the session
        raise ValueError(f"cannot import {module_name!r}: importing it raised {exc!r}") from None
    target = getattr(module, attribute, None)
    if not callable(target):
        # ValueError, not TypeError: pydantic reports only ValueError as a validation error.
        raise ValueError(f"{module_name!r} has no callable {attribute!r}")  # noqa: TRY004
    return target


class Agent(StrictModel):
    """``agent:``: the team's own agent code, driven stage by stage in place of the plugin's
    loop; its requests go through the plugin's proxy (docs/agents.md)."""

    python: str
    """``module:callable``: the factory, called once per run of the case with ``init`` as
    keyword arguments (and ``model=`` when the case names one and it takes a ``model``,
    ``toolbench=`` when it takes a ``toolbench``); it returns the
    agent, a callable from the stage's user text to the reply text, plain or async."""
    init: dict[str, JsonValue] = Field(default_factory=dict)
    """Keyword arguments of the factory."""

    @field_validator("python")
    @classmethod
    def _importable(cls, value: str) -> str:
        try:
            with importing():  # a client built at import time gets the proxy's URL
                resolve_callable(value)
        except ValueError as exc:
            raise ValueError(str(exc).replace("'module:function'", "'module:callable'")
                             ) from None
        return value

    @model_validator(mode="after")
    def _callable_with_init(self) -> Agent:
        factory = resolve_callable(self.python)
        try:
            parameters = inspect.signature(factory).parameters
        except (TypeError, ValueError):
            return self  # no signature to read: calling it tells
        given = {name: None for name in self.init}
        given.update({name: None for name in AGENT_PARAMETERS if name in parameters})
        try:
            inspect.signature(factory).bind(**given)
        except TypeError as exc:
            raise KeyedError(f"init does not fit {self.python}: {exc}", ("init",)) from None
        return self


AGENT_PARAMETERS = ("model", "toolbench")
"""What the plugin passes an agent factory that takes a parameter of that name."""

LOOP_ONLY_KEYS = ("tools", "system", "params", "mcp_servers")
"""A case's keys that only the plugin's own loop uses: an agent builds its own requests."""
LOOP_ONLY_STAGE_KEYS = ("messages", "params", "tool_choice", "run_tools", "stream",
                        "max_turns", "await_background")
"""The same, of a stage."""


class ToolChoiceFunction(StrictModel):
    """``tool_choice: {name: X}``: the model must call tool X."""

    name: str


class AllowedToolsChoice(StrictModel):
    mode: Literal["auto", "required"] = "auto"
    """``auto``: the model may call one of ``tools``; ``required``: it must."""
    tools: list[str] = Field(min_length=1)
    """Names of the case's tools the model may call in this stage."""


class AllowedTools(StrictModel):
    """``tool_choice: {allowed_tools: {mode, tools}}``: only these tools, this stage."""

    allowed_tools: AllowedToolsChoice


class Retry(StrictModel):
    attempts: int = Field(ge=1)
    """Total attempts, the first included."""


def _can_hold_check(cls: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """The expectation given is not empty and can hold (``operands.py``)."""
    assert info.field_name is not None
    spec = value.spec if hasattr(value, "spec") else value  # a matcher, or a model
    check_expectation(info.field_name, spec)
    return value


def _not_empty(value: Any) -> Any:
    """``expect:`` with nothing under it (YAML's null): a typo, not "expect nothing".
    ``expect: {}`` is written on purpose: the checks every stage gets (a 200, the protocol
    checks) and nothing more."""
    if value is None:
        raise ValueError("`expect:` is empty: give at least one expectation under it, or"
                         " leave the key out")
    return value


class Repeat(StrictModel):
    runs: int = Field(ge=1)
    min_pass_rate: float = Field(default=1.0, ge=0, le=1)


class StreamExpect(StrictModel):
    """Stream checks (SPEC section 6)."""

    done: bool = True
    """The stream ended properly: ``data: [DONE]``, or the API's terminal event."""
    chunks: MatcherField = None
    """Matcher on the number of data events."""
    ttft_ms: MatcherField = None
    """Matcher on the time to the first content or tool-call delta."""
    usage: bool | None = None
    """True: a usage object must arrive; false: none may."""
    progressive: bool | None = None
    """True: every call of the reply streamed its arguments in more than one event and
    they were complete before the stream ended, in time (a server that sends its calls
    whole at the end fails it); false: not so."""

    _can_hold = field_validator("*")(classmethod(_can_hold_check))


class BfclExpect(StrictModel):
    """BFCL's per-turn check of a multi-turn record (the case needs a ``bfcl`` tools entry)."""

    ground_truth: list[str]
    """The turn's ground-truth calls, BFCL's literal Python calls (``cd(folder='docs')``),
    run on the ground-truth instances; empty: the turn is not checked."""

    @field_validator("ground_truth")
    @classmethod
    def _calls(cls, calls: list[str]) -> list[str]:
        from ..bfcl.backend import parse_call

        for index, call in enumerate(calls):
            try:
                parse_call(call)
            except ValueError as error:
                raise KeyedError(str(error), (index,)) from None
        return calls


class ProbeCall(StrictModel):
    name: ToolName
    arguments: dict[str, JsonValue] = Field(default_factory=dict)


class Probe(StrictModel):
    """A call the harness makes itself once the agent loop is done, and what it must answer."""

    call: ProbeCall
    """The tool (a toolbox's, a ``python`` one, an MCP server's) and its arguments."""
    result: MatcherField = None
    """Matcher on the answer: its JSON when it is JSON, else its text."""
    error: MatcherField = None
    """The call must fail, its message matching this; unless given, a failed probe fails."""

    @model_validator(mode="after")
    def _result_or_error(self) -> Probe:
        if {"result", "error"} <= self.model_fields_set:
            raise ValueError("give result or error, not both")
        return self


class AgentExpect(StrictModel):
    """What the agent did to the world, after a stage or at the case's end."""

    state: MatcherField = None
    """Matcher on the toolboxes' state, by toolbox name: ``{Account: {balance: 70}}``."""
    probe: list[Probe] | None = None
    """Calls made after the agent loop, each with the answer it must get."""
    trajectory: TrajectoryField = None
    """Matcher on every call the agent loop made, in order."""
    background_errors: MatcherField = None
    """Matcher on the list of errors (each ``NAME: ERROR``) of the background tasks that
    failed and that no earlier check judged: a stage's (with ``await_background``) once
    it waited, the case's at the run's end. Given, those errors fail the case only if it
    does not hold; not given, each fails it."""

    _can_hold = field_validator("*")(classmethod(_can_hold_check))


class CaseExpect(AgentExpect):
    """What must hold once a run has reached ``end``: the world, every call, the route."""

    path: PathField = None
    """Matcher on the names of the stages the run went through, in order (a stage a loop
    ran again is there again): ``{$contains: [ask, confirm]}``."""


class Criterion(StrictModel):
    """An ``expect.judge`` criterion with its options."""

    criterion: str = Field(min_length=1)
    """What the judge model checks, in words: ``Says the order was refunded``."""
    samples: int = Field(default=1, ge=1, le=JUDGE_SAMPLES_MAX)
    """How many times the judge is asked (odd, at most 25): the majority decides, the
    split is shown."""

    @field_validator("samples")
    @classmethod
    def _odd(cls, samples: int) -> int:
        if samples % 2 == 0:
            raise ValueError(f"samples must be odd, so a majority decides; got {samples}")
        return samples


def _criterion_kind(value: Any) -> str:
    return "text" if isinstance(value, str) else "options"


JudgeCriterion = Annotated[
    Annotated[str, Tag("text"), Field(min_length=1)] | Annotated[Criterion, Tag("options")],
    Discriminator(_criterion_kind)]
"""A criterion in words, or ``{criterion, samples}``."""


class Expect(AgentExpect):
    """What must hold after a stage; every key given must hold (SPEC section 4)."""

    status: MatcherField = Field(default=200, validate_default=True)
    """HTTP status of the last response. Any other status fails unless this names it, or
    ``error`` is given (an error must then have come)."""
    error: MatcherField = None
    """Matcher on the error message of a non-2xx response, or on the transport's failure
    after its retries, as ``ExceptionType: message`` (``ConnectionLost: ...``); an agent
    case: on what its agent raised, as ``ExceptionType: message`` (the stage then passes
    only if it raised)."""
    finish_reason: MatcherField = None
    """Matcher on why the reply ended, in chat completions' words whatever the API."""
    api_finish_reason: MatcherField = None
    """Matcher on why the reply ended in the API's own words (``end_turn``, ``completed``)."""
    text: MatcherField = None
    reasoning: MatcherField = None
    """Matcher on the model's reasoning; ``{$absent: true}`` when none may come."""
    tool_calls: ToolCallsField = None
    usage: MatcherField = None
    latency_ms: MatcherField = None
    requests: MatcherField = None
    """Matcher on the number of model requests the stage sent (an agent case: every request
    its agent sent to a model API), e.g. ``2`` or ``{$lte: 3}``."""
    python: str | None = None
    """``module:function`` called with the stage's outcome (``text``, ``tool_calls``...)
    and the agent (None without one); an AssertionError fails the stage with its message."""
    stream: StreamExpect | None = None
    bfcl: BfclExpect | None = None
    """BFCL's multi-turn check of the stage as one turn: state, results, calls made."""
    judge: list[JudgeCriterion] | None = Field(default=None, min_length=1)
    """Criteria the judge model checks the conversation so far against (the case's
    ``judge``); each must pass. Judged once every other expectation holds."""
    ended: Literal["stop", "max_turns"] | None = None
    """``simulate_user``: how the conversation must end: ``stop`` (the simulated user
    wrote ###STOP###) or ``max_turns`` (it ran out of turns)."""

    @field_validator("python")
    @classmethod
    def _importable(cls, value: str | None) -> str | None:
        if value is not None:
            resolve_callable(value)
        return value

    @property
    def criteria(self) -> list[Criterion]:
        """``judge``'s criteria, each with its options."""
        return [Criterion(criterion=item) if isinstance(item, str) else item
                for item in self.judge or []]


class SimulateUser(StrictModel):
    """A simulated user: a second model that talks with the agent until its goal is met."""

    instructions: str = Field(min_length=1)
    """Who the user is and what they want (built-in guidelines are added)."""
    model: str | None = None
    """The simulator model; else the judge's."""
    opening: str | None = None
    """A fixed first message; else the simulator writes it."""
    max_turns: int = Field(default=10, ge=1, le=SIMULATED_TURNS_MAX)
    """The most messages the simulated user sends (at most 50)."""


class JudgeModel(StrictModel):
    """The judge: the second model of ``expect.judge`` (and of ``simulate_user``, unless
    it names its own)."""

    model: str = Field(min_length=1)
    endpoint: Endpoint = Field(default_factory=Endpoint)
    """Resolved as a case's endpoint is; unset keys: the case's own."""


class StageRoutes(StrictModel):
    """Where each verdict of a stage leads: a stage's name, or ``end``."""

    pass_: str | None = Field(default=None, alias="pass", min_length=1, description=(
        "When the stage passes; unsaid: the next stage in the file (the last: ``end``)."))
    fail: str | None = Field(default=None, min_length=1)
    """When it fails (a branch, not a failure of the case); unsaid: the run ends, failed."""

    @model_validator(mode="after")
    def _a_route(self) -> StageRoutes:
        if self.pass_ is None and self.fail is None:
            raise ValueError("next takes a stage name, end, or {pass: X, fail: Y}")
        return self


class Stage(StrictModel):
    """One step of the conversation: append messages, send, check."""

    name: Name
    user: str | None = None
    """Shorthand for one user message."""
    messages: list[dict[str, JsonValue]] = Field(default_factory=list)
    """Messages appended in order, after ``user``."""
    tool_choice: (Literal["auto", "none", "required"] | ToolChoiceFunction | AllowedTools
                  | None) = None
    stream: bool | Literal["both"] = False
    run_tools: bool | Literal["once", "progressive"] = False
    """``true``: the agent loop, until a reply calls no tool (or ``max_turns``); ``once``:
    the calls of the first reply are run and their results sent, and the reply to them
    ends the stage; ``progressive``: the agent loop, each call of a streamed reply run the
    moment its arguments are complete in the stream; ``false``: one request."""
    await_background: bool = False
    """Wait for every background tool the case started (each within its timeout) before
    the stage's checks, so ``state`` and ``probe`` see what they did."""
    max_turns: int = Field(default=5, ge=1)
    params: dict[str, JsonValue] = Field(default_factory=dict)
    """Merged over the case's params for this stage's requests."""
    expect: Annotated[Expect, BeforeValidator(_not_empty)] = Field(default_factory=Expect)
    capture: dict[str, str] = Field(default_factory=dict)
    """Name -> path (``tool_calls.0.arguments.city``) saved for ``${name}`` in later stages."""
    retry: Retry | None = None
    simulate_user: SimulateUser | None = None
    """Instead of ``user``: a simulated user talks with the agent, turn by turn."""
    next: Annotated[str, Field(min_length=1)] | StageRoutes | None = None
    """Where the run goes after the stage: a stage's name or ``end`` when it passes (a
    failure ends the run), or ``{pass: X, fail: Y}``; unsaid: the next stage, if it passed."""
    faults: list[Fault] = Field(default_factory=list)
    """Faults injected into the stage's model requests (docs/case-format.md#faults)."""

    @model_validator(mode="after")
    def _simulated_alone(self) -> Stage:
        if self.simulate_user is None:
            if self.expect.ended is not None:
                raise KeyedError("expect.ended says how a simulated conversation ended: the"
                                 " stage needs simulate_user", ("expect", "ended"))
            return self
        for key in ("user", "messages"):
            if key in self.model_fields_set:
                raise KeyedError(f"give simulate_user or {key}, not both: the simulated user"
                                 " writes the user's messages", (key,))
        if self.stream == "both":
            raise KeyedError("stream: both runs a stage twice; a simulated conversation runs"
                             " once: give true or false", ("stream",))
        return self

    @field_validator("run_tools", mode="before")
    @classmethod
    def _run_tools_choice(cls, value: Any) -> Any:
        if value is True or value is False or value in ("once", "progressive"):
            return value
        raise ValueError(f"run_tools takes true (the agent loop), once (one round of tool"
                         f" runs), progressive (the agent loop, each call run as its"
                         f" arguments close in the stream) or false; got {value!r}")

    @model_validator(mode="after")
    def _progressive_streams(self) -> Stage:
        if self.run_tools == "progressive" and self.stream is False:
            raise KeyedError("run_tools: progressive runs each call as its arguments close in"
                             " the stream: the stage needs stream: true", ("run_tools",))
        return self


class Table(StrictModel):
    """``parametrize`` read: its rows, each an item, and their ids (``tables.py``)."""

    rows: list[dict[str, JsonValue]]
    ids: list[str]

    @property
    def names(self) -> list[str]:
        return list(self.rows[0]) if self.rows else []

    def row(self, row_id: str) -> dict[str, JsonValue]:
        """The values of the row ``row_id`` names (KeyError: no such row)."""
        if row_id not in self.ids:
            raise KeyError(row_id)
        return self.rows[self.ids.index(row_id)]


def _read_table(value: Any, info: ValidationInfo) -> Any:
    if value is None or isinstance(value, Table):
        return value
    rows = table_rows(value, info.context)
    return {"rows": rows, "ids": row_ids(rows)}


def _read_system(value: Any, info: ValidationInfo) -> Any:
    """``system: {file: prompts/support.md}``: the prompt, read beside the case file."""
    if isinstance(value, dict) and set(value) == {"file"}:
        return read_beside(info.context, value["file"], "a system prompt")[1]
    if isinstance(value, dict):
        raise ValueError(  # noqa: TRY004 - pydantic reports ValueError only
            "system is the prompt's text, or {file: PATH} (relative to the case file)")
    return value


_TABLE_SCHEMA = {
    "description": "A table of inputs, one item per row, its values filled in as ${name}:"
                   " a mapping of name -> list of values (the cross product), a list of rows"
                   " (mappings of name -> value), or {file: rows.csv|.jsonl|.yaml}.",
    "anyOf": [{"type": "object", "additionalProperties": {"type": "array", "minItems": 1}},
              {"type": "array", "minItems": 1, "items": {"type": "object"}},
              {"type": "object", "properties": {"file": {"type": "string"}},
               "required": ["file"], "additionalProperties": False}]}
_SYSTEM_SCHEMA = {
    "description": "The first system message: its text, or {file: PATH} to read it from a"
                   " file (relative to the case file).",
    "anyOf": [{"type": "string"}, {"type": "null"},
              {"type": "object", "properties": {"file": {"type": "string"}},
               "required": ["file"], "additionalProperties": False}]}


class Case(StrictModel):
    """One conversation with a model, checked stage by stage."""

    name: Name
    description: str = ""
    marks: list[str | dict[str, Any]] = Field(default_factory=list)
    model: str | list[str] | None = None
    endpoint: Endpoint = Field(default_factory=Endpoint)
    params: dict[str, JsonValue] = Field(default_factory=dict)
    system: Annotated[str | None, BeforeValidator(_read_system),
                      WithJsonSchema(_SYSTEM_SCHEMA)] = None
    parametrize: Annotated[Table | None, BeforeValidator(_read_table),
                           WithJsonSchema(_TABLE_SCHEMA)] = None
    """A table of inputs: one item per row, its values filled in as ``${name}``."""
    mcp_servers: dict[Name, McpServer] = Field(default_factory=dict)
    """MCP servers whose tools ``{mcp: NAME}`` entries of ``tools`` offer; a name the file's
    shared ``mcp_servers`` document defines too is this case's own."""
    tools: list[ToolEntry] = Field(default_factory=list)
    repeat: Repeat | None = None
    stages: list[Stage] = Field(min_length=1)
    max_iterations: int = 20
    """The most stage runs in one run of the case (routes may run a stage again); past
    it the run fails with the path so far."""
    expect: Annotated[CaseExpect | None, BeforeValidator(_not_empty)] = None
    """Checked when the run has reached ``end`` with no failure: the state, probes, every
    call of the case (all its stages) as the trajectory, and the path."""
    agent: Agent | None = None
    """The team's own agent under test, in place of the plugin's loop (docs/agents.md)."""
    faults: list[Fault] = Field(default_factory=list)
    """Faults injected into every stage's model requests (docs/case-format.md#faults)."""

    @model_validator(mode="after")
    def _agent_case(self) -> Case:
        """An agent builds its own requests: the loop's keys have no say in them."""
        if self.agent is None:
            return self
        said = "is for the plugin's own loop, and an agent case's agent builds its own requests"
        # Every problem at once, each at its line: not one a run of `toolbench validate`.
        problems = [KeyedError(f"{key} {said}", (key,))
                    for key in LOOP_ONLY_KEYS if key in self.model_fields_set]
        if self.endpoint.api is not None:
            problems.append(KeyedError("api: an agent's requests name their own wire API"
                                       " (their paths say which)", ("endpoint", "api")))
        for index, stage in enumerate(self.stages):
            problems += [KeyedError(f"{key} {said}", ("stages", index, key))
                         for key in LOOP_ONLY_STAGE_KEYS if key in stage.model_fields_set]
            if stage.user is None and stage.simulate_user is None:
                problems.append(KeyedError("an agent case's stage needs `user` (the text its"
                                           " agent is called with) or `simulate_user`",
                                           ("stages", index)))
        for path, expect in self._agent_expects():
            if expect.probe:
                problems.append(KeyedError("probe calls the case's tools, and an agent case"
                                           " has none of its own", (*path, "probe")))
            if "background_errors" in expect.model_fields_set:
                problems.append(KeyedError("background_errors reads the case's background"
                                           " tools, and an agent case has none of its own",
                                           (*path, "background_errors")))
        raise_all(problems)
        return self

    @property
    def api(self) -> str | None:
        """What the case speaks: ``agent`` for an agent case, else its ``endpoint.api``."""
        return AGENT if self.agent is not None else self.endpoint.api
    judge: JudgeModel | None = None
    """The judge model of ``expect.judge`` (``--toolbench-judge-model`` and the ini key
    ``toolbench_judge_model`` name one too)."""

    @property
    def judged(self) -> bool:
        """Whether a stage has ``expect.judge`` criteria."""
        return any(stage.expect.judge for stage in self.stages)

    @property
    def simulated(self) -> bool:
        """Whether a stage is a ``simulate_user`` conversation."""
        return any(stage.simulate_user is not None for stage in self.stages)

    @property
    def wants_judge(self) -> list[KeyPath]:
        """Where the case needs a judge model it does not name (a criterion, a simulated
        user without a model of its own): none anywhere is a collection error there."""
        if self.judge is not None:
            return []
        return [path for index, stage in enumerate(self.stages) for path in (
            *((("stages", index, "expect", "judge"),) if stage.expect.judge else ()),
            *((("stages", index, "simulate_user"),)
              if stage.simulate_user is not None and stage.simulate_user.model is None
              else ()))]

    @field_validator("marks")
    @classmethod
    def _one_name_per_mark(cls, marks: list[str | dict[str, Any]]) -> list[str | dict[str, Any]]:
        for index, mark in enumerate(marks):
            if isinstance(mark, dict) and len(mark) != 1:
                raise ValueError(f"a mark is a name or a one-key mapping, got {mark!r}")
            # What pytest.mark would raise on at collection, with a traceback.
            name, value = (mark, None) if isinstance(mark, str) else next(iter(mark.items()))
            if not name or name.startswith("_"):
                raise KeyedError(f"a mark name cannot be empty or start with '_', got {name!r}",
                                   (index,))
            if isinstance(value, dict) and not all(isinstance(key, str) for key in value):
                raise KeyedError(f"the keyword arguments of mark {name!r} need string names,"
                                   f" got {value!r}", (index, name))
        return marks

    @field_validator("max_iterations")
    @classmethod
    def _at_least_one_run(cls, bound: int) -> int:
        if bound < 1:
            raise ValueError(f"max_iterations bounds the stage runs of one run of the case:"
                             f" 1 or more, got {bound}")
        return bound

    @field_validator("model")
    @classmethod
    def _unique_models(cls, model: str | list[str] | None) -> str | list[str] | None:
        if isinstance(model, list):
            _reject_duplicates("model", model, key=None)
        return model

    @field_validator("stages")
    @classmethod
    def _unique_stage_names(cls, stages: list[Stage]) -> list[Stage]:
        _reject_duplicates("stage", [stage.name for stage in stages])
        return stages

    @field_validator("tools")
    @classmethod
    def _unique_tool_names(cls, tools: list[ToolEntry]) -> list[ToolEntry]:
        seen: set[tuple[str, str]] = set()
        for index, entry in enumerate(tools):
            if isinstance(entry, BfclTools):
                continue  # one a case, named by nothing
            kind, key, name = _entry_name(entry)
            if (kind, name) in seen:
                raise KeyedError(f"duplicate {kind} name {name!r}", (index, key))
            seen.add((kind, name))
        _unique_offered_names(tools)
        return tools

    @model_validator(mode="after")
    def _bfcl_turns(self) -> Case:
        """A BFCL entry's instances carry over from stage to stage: a stage runs once."""
        entries = [index for index, tool in enumerate(self.tools) if isinstance(tool, BfclTools)]
        if len(entries) > 1:
            raise KeyedError("one bfcl entry a case: its classes are one record's", (
                "tools", entries[1]))
        stages = {stage.name for stage in self.stages}
        for index in entries:
            entry = self.tools[index]
            assert isinstance(entry, BfclTools)
            for name in entry.bfcl.held_back:
                if name not in stages:
                    raise KeyedError(f"held_back names stage {name!r}, which the case lacks",
                                     ("tools", index, "bfcl", "held_back", name))
        for index, stage in enumerate(self.stages):
            if stage.expect.bfcl is not None and not entries:
                raise KeyedError("expect.bfcl needs a `bfcl` entry in the case's tools",
                                 ("stages", index, "expect", "bfcl"))
            if entries and (stage.stream == "both" or stage.retry is not None):
                key = "stream" if stage.stream == "both" else "retry"
                raise KeyedError(f"{key} runs a stage twice, but BFCL's instances keep what"
                                 " the first run did: not with a bfcl entry", ("stages", index,
                                                                              key))
        return self

    @model_validator(mode="after")
    def _agent_expectations_fit(self) -> Case:
        """``state`` needs a toolbox (the tools a probe calls: ``names.py``)."""
        boxes = [box.label for box in self.toolboxes]
        for path, expect in self._agent_expects():
            if "state" in expect.model_fields_set and not boxes and self.agent is None:
                raise KeyedError("expect.state reads the state of the case's toolboxes, and"
                                 " it has none (tools: [{toolbox: {python: module:Class}}])",
                                 (*path, "state"))
        return self

    def _agent_expects(self) -> Iterator[tuple[KeyPath, AgentExpect]]:
        for index, stage in enumerate(self.stages):
            yield ("stages", index, "expect"), stage.expect
        if self.expect is not None:
            yield ("expect",), self.expect

    @property
    def models(self) -> list[str | None]:
        if isinstance(self.model, list):
            return list(self.model) or [None]
        return [self.model]

    @property
    def function_tools(self) -> list[Tool]:
        """The tools the case defines itself (canned, ``python`` or ``error``)."""
        return [tool for tool in self.tools if isinstance(tool, Tool)]

    @property
    def toolboxes(self) -> list[Toolbox]:
        """The ``{toolbox: ...}`` entries of ``tools``."""
        return [tool for tool in self.tools if isinstance(tool, Toolbox)]

    @property
    def offered_tools(self) -> list[Tool]:
        """Every tool known before a server is started: the case's own, then each
        toolbox's methods."""
        return [*self.function_tools, *(tool for box in self.toolboxes for tool in box.tools)]

    @property
    def mcp_tools(self) -> list[McpTools]:
        """The ``{mcp: NAME}`` entries of ``tools``."""
        return [tool for tool in self.tools if isinstance(tool, McpTools)]

    @property
    def bfcl_tools(self) -> list[BfclTools]:
        """The ``{bfcl: ...}`` entry of ``tools`` (one at most)."""
        return [tool for tool in self.tools if isinstance(tool, BfclTools)]

    def tool(self, name: str) -> Tool | None:
        return next((tool for tool in self.function_tools if tool.name == name), None)


def _entry_name(entry: Tool | McpTools | Toolbox) -> tuple[str, str, str]:
    """What names a ``tools`` entry among its kind: the kind, the key, the name."""
    if isinstance(entry, McpTools):
        return "MCP server", "mcp", entry.mcp
    if isinstance(entry, Toolbox):
        return "toolbox", "name" if entry.name else "toolbox", entry.label
    return "tool", "name", entry.name


def _unique_offered_names(tools: list[ToolEntry]) -> None:
    """A toolbox's methods are offered beside the case's tools: no name twice."""
    offered = {tool.name: "the case's tool" for tool in tools if isinstance(tool, Tool)}
    for index, entry in enumerate(tools):
        if not isinstance(entry, Toolbox):
            continue
        for tool in entry.tools:
            if tool.name in offered:
                raise KeyedError(f"tool name {tool.name!r} clash: toolbox {entry.label!r} and"
                                 f" {offered[tool.name]} both offer it; leave one out"
                                 " (toolboxes: `include`)", (index,))
            offered[tool.name] = f"toolbox {entry.label!r}"


class SharedMcpServers(StrictModel):
    """A case file's document that holds ``mcp_servers`` alone: servers every case of the
    file may use by name."""

    mcp_servers: dict[Name, McpServer]


def _reject_duplicates(kind: str, names: list[str], key: str | None = "name") -> None:
    """``key``: where the name sits in each item (``None``: the item is the name)."""
    seen = set()
    for index, name in enumerate(names):
        if name in seen:
            where: tuple[str | int, ...] = (index, key) if key else (index,)
            raise KeyedError(f"duplicate {kind} name {name!r}", where)  # names its own line
        seen.add(name)


class CaseJsonSchema(GenerateJsonSchema):
    """The case models' JSON Schema, with each default a factory makes shown as it is made.

    Mutable defaults (``{}``, ``[]``, ``Endpoint()``) are factories: pydantic deep-copies a
    default it cannot hash for every model it validates, four copies a case."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()  # type: ignore[call-arg]
        return super().get_default_value(schema)
