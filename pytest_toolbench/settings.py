"""One frozen Settings per session, resolved in one place.

Precedence, highest first: command line > the case's ``endpoint`` > ini > environment >
default. Every flag ``--toolbench-X`` has the ini twin ``toolbench_X``; bad values raise
``pytest.UsageError`` naming the valid choices.
"""

from __future__ import annotations

import enum
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from .apis import DEFAULT_API, REGISTRY, api_names, base_urls_text, key_envs_text
from .defaults import CASSETTE_FOLDER
from .defaults import MATCH_TIMEOUT_S as DEFAULT_MATCH_TIMEOUT_S
from .transport.breaker import DEFAULT_COOLDOWN_S, DEFAULT_THRESHOLD
from .transport.limits import DEFAULT_MAX_REPLY_BYTES, DEFAULT_MAX_STREAM_EVENTS, ReplyLimits

DEFAULT_TIMEOUT_S = 60.0
DEADLINE_PER_TIMEOUT = 10
"""Without ``--toolbench-deadline``, a reply may take 10 timeouts (600 s by default): far
beyond a slow model's reply, yet a server that never finishes is cut off."""
DEFAULT_RETRIES = 2
DEFAULT_FILES = ("*.case.yaml", "*.case.yml")

if TYPE_CHECKING:  # the case schema is pydantic: loaded with the first case file, not here
    from collections.abc import Callable

    from .casefile.schema import Endpoint

SETTINGS_KEY = pytest.StashKey["Settings"]()
"""Where the session's Settings live: ``config.stash[SETTINGS_KEY]``."""
LATE_REQUESTS_KEY: pytest.StashKey[Callable[[], dict[str, int]]] = pytest.StashKey()
"""Where the session's runtime, once made, says which agent cases' requests came after
their case had ended (refused by the proxy), by node id, since it was last asked."""


class Mode(enum.Enum):
    """Where answers come from."""

    REPLAY = "replay"  # from cassettes; nothing touches the network
    RECORD = "record"  # live, and the cassettes are rewritten
    MISSING = "missing"  # replay what is recorded, record the rest
    LIVE = "live"  # live, nothing written

    @property
    def is_live(self) -> bool:
        return self is not Mode.REPLAY


@dataclass(frozen=True)
class ResolvedEndpoint:
    """The endpoint one case talks to, after precedence is applied."""

    base_url: str
    api_key_env: str
    """Where the key is read from; when no setting named one, the API's first default."""
    key_env_fallbacks: tuple[str, ...] = ()
    """The API's other default variables, read in order when ``api_key_env`` is unset
    (``GOOGLE_API_KEY`` after ``GEMINI_API_KEY``)."""
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    limits: ReplyLimits = field(default_factory=ReplyLimits)

    def api_key(self) -> str | None:
        """The key's value, read from the environment only when a request is built."""
        return next((os.environ[name] for name in (self.api_key_env, *self.key_env_fallbacks)
                     if os.environ.get(name)), None)


Given = tuple[Any, str]
"""A setting's raw value and the name to show for it: the flag or the ini key it came from."""

@dataclass(frozen=True)
class Option:
    """One pytest option, declared once: the flag ``--toolbench-<name>``, its ini twin
    ``toolbench_<name>``, its default and its help, which says the default."""

    name: str
    metavar: str
    help: str
    default: Any = None
    """The value when neither the command line nor the ini sets one (None: none, the
    feature is off); ``Settings`` applies the same constant."""
    shown: str | None = None
    """How the help says the default when the value alone would not say it."""
    ini_type: str | None = None
    """pytest's ini type (``linelist``); None: a string."""

    @property
    def flag(self) -> str:
        return "--toolbench-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return f"toolbench_{self.name}"

    @property
    def help_text(self) -> str:
        if self.default is None and self.shown is None:
            return self.help
        return f"{self.help} (default {self.shown or _shown(self.default)})"


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value.value if isinstance(value, enum.Enum) else value)


DEFAULT_CONCURRENCY = 8
DEFAULT_REPLAY_SPEED = 0.0

OPTIONS: tuple[Option, ...] = (
    Option("mode", "MODE", "where answers come from: replay, record, missing, live",
           Mode.REPLAY),
    Option("base_url", "URL", "base URL of the API (.../v1), whichever wire API it speaks",
           shown=base_urls_text()),
    Option("api_key_env", "NAME", "the environment variable holding the API key",
           shown=key_envs_text()),
    Option("timeout", "S",
           "the longest wait for a connection or for the next bytes of a reply, seconds",
           DEFAULT_TIMEOUT_S),
    Option("deadline", "S", "the longest one reply may take, from sending the request to its"
           " last byte, seconds", shown=f"{DEADLINE_PER_TIMEOUT} x the timeout"),
    Option("max_reply_bytes", "N",
           "the largest reply body or stream, in bytes once decompressed",
           DEFAULT_MAX_REPLY_BYTES,
           shown=f"{DEFAULT_MAX_REPLY_BYTES}: {DEFAULT_MAX_REPLY_BYTES / 2**20:g} MiB"),
    Option("max_stream_events", "N", "the most SSE events one streamed reply may send",
           DEFAULT_MAX_STREAM_EVENTS),
    Option("model", "A[,B...]", "run every case against these models"),
    Option("api", "NAME[,NAME...]",
           "run every case over these wire APIs, one item each: "
           + ", ".join(row.described for row in REGISTRY.values()),
           shown="the case's endpoint.api, else chat"),
    Option("repeat", "N", "run every case N times (the case's min_pass_rate applies)"),
    Option("judge_model", "MODEL",
           "the judge model of expect.judge criteria and simulated users (the command line"
           " wins over a case's judge.model, which wins over the ini)"),
    Option("concurrency", "N", "live/record cases run at most N at a time",
           DEFAULT_CONCURRENCY),
    Option("replay_speed", "X", "0 replays instantly; 1 with the recorded timing",
           DEFAULT_REPLAY_SPEED),
    Option("match_timeout", "S",
           "the longest a stage's expectations may take to check, seconds",
           DEFAULT_MATCH_TIMEOUT_S),
    Option("report", "PATH", "write a JSON report of every case, stage and attempt"),
    Option("html", "PATH",
           "write one self-contained HTML report: overview, filters, every conversation"),
    Option("cassette_dir", "DIR", "where cassettes live",
           shown=f"{CASSETTE_FOLDER} beside each case file"),
    Option("max_tokens", "N",
           "live/record cases stop being started once the replies used N tokens; the rest"
           " are skipped (under -n each worker holds N / workers)"),
    Option("rpm", "N",
           "live requests a minute at most, per endpoint, paced evenly (under -n each worker"
           " N / workers); 429s and rate-limit headers slow requests down too"),
    Option("tpm", "N",
           "live tokens a minute at most, per endpoint, as the replies report them (under -n"
           " each worker N / workers)"),
    Option("breaker_threshold", "N",
           "consecutive transport failures that open an endpoint's circuit (0: never)",
           DEFAULT_THRESHOLD),
    Option("breaker_cooldown", "S",
           "seconds an open circuit fails requests at once before one may try again",
           DEFAULT_COOLDOWN_S),
    Option("files", "GLOBS", "globs of case files: comma-separated on the command line, one"
           " per line in the ini", DEFAULT_FILES, ini_type="linelist"),
    Option("allow_connect", "HOST[:PORT],...",
           "hosts agent code (agent cases, the toolbench_agent fixture) may connect to besides"
           " the plugin's proxy, which is all it may reach by default: comma-separated on the"
           " command line, one per line in the ini", ini_type="linelist"),
)
"""Every option with a value; ``--toolbench-record`` and ``--toolbench-live`` are
shorthands for ``--toolbench-mode``, flags without an ini twin."""


@dataclass(frozen=True)
class Settings:
    mode: Mode = Mode.REPLAY
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float | None = None
    ini_base_url: str | None = None
    ini_api_key_env: str | None = None
    ini_timeout_s: float | None = None
    models: tuple[str, ...] = ()
    apis: tuple[str, ...] = ()
    """``--toolbench-api``: every case runs over each of these, whatever it says."""
    ini_apis: tuple[str, ...] = ()
    """ini ``toolbench_api``: the APIs of a case whose endpoint names none."""
    repeat: int | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    replay_speed: float = DEFAULT_REPLAY_SPEED
    match_timeout_s: float = DEFAULT_MATCH_TIMEOUT_S
    """A catastrophic regex or a huge $schema check fails the stage past this."""
    report: Path | None = None
    html: Path | None = None
    files: tuple[str, ...] = DEFAULT_FILES
    cassette_dir: Path | None = None
    breaker_threshold: int = DEFAULT_THRESHOLD
    breaker_cooldown_s: float = DEFAULT_COOLDOWN_S
    deadline_s: float | None = None
    """None: ``DEADLINE_PER_TIMEOUT`` times each endpoint's timeout."""
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    max_stream_events: int = DEFAULT_MAX_STREAM_EVENTS
    max_tokens: int | None = None
    """The token budget of live cases; None: none."""
    max_tokens_source: str = "--toolbench-max-tokens"
    """The flag or ini key the budget came from, as messages name it."""
    rpm: float | None = None
    """Live requests a minute, per endpoint; None: no limit of ours."""
    tpm: float | None = None
    """Live tokens a minute, per endpoint; None: no limit of ours."""
    dry_run: bool = False
    """``--toolbench-dry-run``: each case item's first request shown, nothing sent."""
    judge_model: str | None = None
    """``--toolbench-judge-model``: the judge of every case, whatever it names."""
    ini_judge_model: str | None = None
    """ini ``toolbench_judge_model``: the judge of a case that names none."""
    rejudge: bool = False
    """``--toolbench-rejudge``: replay the model, ask the judge live (with
    ``--toolbench-record``, its new exchanges written in place of the old)."""
    faults: tuple[str, ...] = ()
    """``--toolbench-fault``: faults for every stage of every case, in the compact form
    (``status=429@1``); ``fault_plan`` reads them."""
    allow_connect: tuple[str, ...] = ()
    """``--toolbench-allow-connect``: where agent code may connect besides the proxy
    (``host`` or ``host:port`` each, checked)."""

    def fault_plan(self) -> tuple[Any, ...]:
        """``faults`` as fault entries (``faults.Fault``; read when a case runs)."""
        if not self.faults:
            return ()
        from .faults import faults_from

        return faults_from(self.faults)

    @classmethod
    def from_config(cls, config: pytest.Config) -> Settings:
        def cli(name: str) -> Any:
            return config.getoption(f"toolbench_{name}")

        def ini(name: str) -> Any:
            value = config.getini(f"toolbench_{name}")
            return value or None

        def either(name: str) -> Any:
            value = cli(name)
            return ini(name) if value is None else value

        def flag(name: str) -> Given:
            return cli(name), "--toolbench-" + name.replace("_", "-")

        def ini_key(name: str) -> Given:
            return ini(name), f"ini toolbench_{name}"

        def given(name: str) -> Given:
            """The command line's value, else the ini file's, named as the user wrote it."""
            return flag(name) if cli(name) is not None else ini_key(name)

        return cls(
            mode=_mode(cli("mode"), ini("mode"), cli("record"), cli("live")),
            base_url=cli("base_url"),
            api_key_env=cli("api_key_env"),
            timeout_s=_seconds(flag("timeout")),
            ini_base_url=ini("base_url"),
            ini_api_key_env=ini("api_key_env"),
            ini_timeout_s=_seconds(ini_key("timeout")),
            models=tuple(m.strip() for m in (either("model") or "").split(",") if m.strip()),
            apis=_apis(flag("api")),
            ini_apis=_apis(ini_key("api")),
            repeat=_number(given("repeat"), int, minimum=1),
            concurrency=_or(_number(given("concurrency"), int, minimum=1), DEFAULT_CONCURRENCY),
            replay_speed=_or(_number(given("replay_speed"), float, minimum=0),
                             DEFAULT_REPLAY_SPEED),
            match_timeout_s=_or(_seconds(given("match_timeout")), DEFAULT_MATCH_TIMEOUT_S),
            report=_path(config, either("report")),
            html=_path(config, either("html")),
            files=_globs(cli("files")) or tuple(config.getini("toolbench_files") or DEFAULT_FILES),
            cassette_dir=_path(config, either("cassette_dir")),
            breaker_threshold=_or(_number(given("breaker_threshold"), int, minimum=0),
                                  DEFAULT_THRESHOLD),
            breaker_cooldown_s=_or(_number(given("breaker_cooldown"), float, minimum=0),
                                   DEFAULT_COOLDOWN_S),
            deadline_s=_seconds(given("deadline")),
            max_reply_bytes=_or(_number(given("max_reply_bytes"), int, minimum=1),
                                DEFAULT_MAX_REPLY_BYTES),
            max_stream_events=_or(_number(given("max_stream_events"), int, minimum=1),
                                  DEFAULT_MAX_STREAM_EVENTS),
            max_tokens=_number(given("max_tokens"), int, minimum=1),
            max_tokens_source=given("max_tokens")[1],
            rpm=_number(given("rpm"), float, 0, above=True),
            tpm=_number(given("tpm"), float, 0, above=True),
            dry_run=_dry_run(config),
            judge_model=cli("judge_model") or None,
            ini_judge_model=ini("judge_model"),
            rejudge=bool(cli("rejudge")),
            faults=_faults(config.getoption("toolbench_fault") or []),
            allow_connect=_allowed(flag("allow_connect"), ini_key("allow_connect")),
        )

    def replays(self, recorded: Callable[[], bool]) -> bool:
        """Whether a case (or ``toolbench_agent`` test) answers from its cassette, which
        exists when ``recorded()`` says so: always in replay mode (none fails it); in
        missing mode, or with ``--toolbench-rejudge`` in any mode, when there is one."""
        if self.mode is Mode.REPLAY:
            return True
        return (self.mode is Mode.MISSING or self.rejudge) and recorded()

    @property
    def writes_verdicts(self) -> bool:
        """``--toolbench-rejudge`` with ``--toolbench-record`` (or missing mode): the judge's
        new exchanges are written into the replayed cassettes, in place of the old ones,
        every other exchange kept as it was."""
        return self.rejudge and self.mode in (Mode.RECORD, Mode.MISSING)

    def judge_model_for(self, case_judge: str | None) -> str | None:
        """The judge model of a case whose ``judge.model`` is ``case_judge``: command line >
        case > ini; None: no judge anywhere."""
        model: str | None = _first(self.judge_model, case_judge, self.ini_judge_model)
        return model

    def apis_for(self, case_api: str | None, only: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The wire APIs a case makes items for: CLI > the case's ``endpoint.apis`` (``only``)
        or ``endpoint.api`` > ini > chat. Under the flag, the items of APIs a case's
        ``endpoint.apis`` leaves out are made, and skipped (``items.py``)."""
        if self.apis:
            return self.apis
        if only:
            return only
        if case_api is not None:
            return (case_api,)
        return self.ini_apis or (DEFAULT_API,)

    def endpoint_for(self, case: Endpoint, api: str = DEFAULT_API) -> ResolvedEndpoint:
        """Apply CLI > case > ini > env > default to one case's endpoint, for ``api`` (whose
        registry row gives the default key variables and base URL)."""
        timeout_s = _first(self.timeout_s, case.timeout_s, self.ini_timeout_s) or DEFAULT_TIMEOUT_S
        named = _first(self.api_key_env, case.api_key_env, self.ini_api_key_env)
        defaults = REGISTRY[api].key_envs
        return ResolvedEndpoint(
            base_url=self.base_url_for(case.base_url, api),
            api_key_env=named or defaults[0],
            key_env_fallbacks=() if named else defaults[1:],
            headers=tuple(sorted(case.headers.items())),
            timeout_s=timeout_s,
            retries=DEFAULT_RETRIES if case.retries is None else case.retries,
            limits=ReplyLimits(self.deadline_s or DEADLINE_PER_TIMEOUT * timeout_s,
                               self.max_reply_bytes, self.max_stream_events),
        )

    def base_url_for(self, case_base_url: str | None = None, api: str = DEFAULT_API) -> str:
        """The base URL of a case that sets ``case_base_url`` (None: one that sets none),
        over ``api`` (whose row names the environment variables and the default)."""
        row = REGISTRY[api]
        base_url = _first(self.base_url, case_base_url, self.ini_base_url,
                          *(os.environ.get(name) for name in row.base_url_envs))
        return (base_url or row.base_url).rstrip("/")


def hosted_service(endpoint: ResolvedEndpoint, api: str) -> bool:
    """Whether ``endpoint`` is ``api``'s own hosted service (the host of the registry's
    default base URL), which refuses a request without a key; a local server takes none."""
    def host(url: str) -> str:
        return (urlsplit(url).hostname or "").lower()

    return host(endpoint.base_url) == host(REGISTRY[api].base_url)


def key_variables(endpoint: ResolvedEndpoint) -> str:
    """The variables ``endpoint``'s key is read from, as a message says what to set."""
    return " or ".join((endpoint.api_key_env, *endpoint.key_env_fallbacks))


def missing_key(endpoint: ResolvedEndpoint, api: str, api_key: str | None) -> str | None:
    """Why a live request over ``api`` to ``endpoint`` is not sent: there is no key
    (``api_key``: what its variables hold) and the endpoint is the API's own hosted service.
    None when there is a key, or the server is another."""
    if api_key or not hosted_service(endpoint, api):
        return None
    return (f"no API key for {endpoint.base_url}, the {api} API's own service, which refuses"
            f" a request without one; nothing was sent: set {key_variables(endpoint)}, or give"
            " the base URL of another server (--toolbench-base-url, TOOLBENCH_BASE_URL or the"
            " case's endpoint.base_url)")


def summary_shown(config: pytest.Config) -> bool:
    """Whether the toolbench summary is printed (``-q`` hides it)."""
    return config.get_verbosity() >= 0


def records_read(config: pytest.Config) -> bool:
    """Whether the session reads its case records: the summary, or a report file. When
    nothing does, items make none (a record costs a replayed case about as much as its
    request)."""
    settings = config.stash[SETTINGS_KEY]
    return summary_shown(config) or settings.report is not None or settings.html is not None


def _faults(given: list[str]) -> tuple[str, ...]:
    """``--toolbench-fault``, each checked now: a bad one is a usage error, not a failure
    of every case."""
    if not given:
        return ()
    from .faults import COMPACT_FORM, fault_from  # pydantic: only when a fault is given

    for text in given:
        try:
            fault_from(text)
        except ValueError as error:
            raise pytest.UsageError(f"--toolbench-fault {text!r}: {error} (the form:"
                                    f" {COMPACT_FORM}, e.g. status=429@1; docs/running.md)"
                                    ) from None
    return tuple(given)


def _dry_run(config: pytest.Config) -> bool:
    """``--toolbench-dry-run``, which runs in one process: pytest-xdist's controller
    collects nothing, and its workers would each show their share."""
    if not config.getoption("toolbench_dry_run"):
        return False
    if getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
        raise pytest.UsageError("--toolbench-dry-run runs in one process: leave out -n")
    return True


def _apis(given: Given) -> tuple[str, ...]:
    """``chat,responses``: the named wire APIs, each once, in the order given."""
    value, name = given
    try:
        return api_names(value or "")
    except ValueError as error:
        raise pytest.UsageError(f"{name}: {error}") from None


def _globs(value: str | None) -> tuple[str, ...]:
    """``--toolbench-files "*.case.yaml,*.tb.yaml"``: comma-separated on the command line."""
    return tuple(glob.strip() for glob in (value or "").split(",") if glob.strip())


def _allowed(flag: Given, ini: Given) -> tuple[str, ...]:
    """``--toolbench-allow-connect`` (comma-separated) and the ini's lines, each checked."""
    from .netguard import Allowed

    entries = [(entry, flag[1]) for entry in _globs(flag[0])]
    entries += [(line.strip(), ini[1]) for line in ini[0] or () if line.strip()]
    for entry, name in entries:
        try:
            Allowed.parse(entry)
        except ValueError as error:
            raise pytest.UsageError(f"{name}: {error}") from None
    return tuple(entry for entry, _name in entries)


def _or(value: Any, default: Any) -> Any:
    """``value`` unless it was not given (``0`` is a given value)."""
    return default if value is None else value


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def _mode(flag: str | None, ini: str | None, record: bool, live: bool) -> Mode:
    if record and live:
        raise pytest.UsageError("--toolbench-record and --toolbench-live exclude each other")
    if record or live:
        chosen = Mode.RECORD if record else Mode.LIVE
        if flag is not None and flag != chosen.value:
            raise pytest.UsageError(
                f"--toolbench-mode={flag} contradicts --toolbench-{chosen.value}"
            )
        return chosen
    value = flag or ini or Mode.REPLAY.value
    try:
        return Mode(value)
    except ValueError:
        choices = ", ".join(mode.value for mode in Mode)
        raise pytest.UsageError(
            f"--toolbench-mode must be one of {choices}; got {value!r}"
        ) from None


def _number(given: Given, kind: type[Any], minimum: float, *,
            above: bool = False, unit: str = "") -> Any:
    """The value as a finite ``kind`` at or ``above`` ``minimum``; None when not given.

    ``float()`` takes "nan" and "inf": a NaN compares false with every bound, so finiteness
    is checked on its own.
    """
    value, name = given
    if value is None or value == "":
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError, OverflowError):
        number = None
    if (number is None or not math.isfinite(number) or number < minimum
            or (above and number == minimum)):
        wanted = "a whole number" if kind is int else "a finite number"
        bound = f"{'>' if above else '>='} {minimum:g}"
        raise pytest.UsageError(f"{name} must be {wanted}{unit} {bound}; got {value!r}")
    return number


def _seconds(given: Given) -> float | None:
    """A duration: finite and above zero (a zero timeout would fail every request at once)."""
    seconds: float | None = _number(given, float, 0, above=True, unit=" of seconds")
    return seconds


def _path(config: pytest.Config, value: str | None) -> Path | None:
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path
