"""Faults on cue: what a case asks the model service to do wrong, and when.

A fault entry (``faults:`` on a stage, on the case, in a ``defaults:`` document, or
``--toolbench-fault``) has one key that says what happens to the request it selects
(``KINDS``) and keys that say which requests it selects (``request``, ``every``, ``rate``
with ``seed``, ``api``, ``times``). Each stage attempt gets a ``FaultPlan`` of the faults
that apply to it; whoever answers the stage's requests (the agent proxy's tap, the plugin's
own transport) asks it, request by request, which fault (if any) applies (``decide``).
The plan holds no random state: a ``rate`` picks by a hash of its seed and the request's
place, so the same requests are picked in every run and in every mode.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .apis import API_NAMES
from .keypaths import KeyedError, KeyPath

if TYPE_CHECKING:
    ApiName = str
else:
    ApiName = Literal[API_NAMES]

KINDS: Final = ("status", "disconnect", "stall_s", "cut", "delay", "mutate")
"""The keys that say what a fault does; an entry has exactly one."""
SELECTORS: Final = ("request", "every", "rate")
"""The keys that say which requests it selects (none: every request)."""
STATUSES: Final = (429, 500, 502, 503, 504, 529)
MUTATIONS: Final = ("malformed_arguments", "unknown_tool", "empty", "truncated")
INJECTED: Final = "a fault injected by pytest-toolbench"
"""How messages mark what an injected fault did, never the service's own."""
ANSWERED: Final = frozenset({"status", "disconnect"})
"""The kinds the injector answers itself (the proxy toward an agent, the plugin's client
toward a case of its own loop): the request never reaches the service or a cassette. The
others act on its real reply, live or replayed (``transport/reshape.py``)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Cut(_Strict):
    after_chunks: int = Field(ge=0)
    """How many chunks of the reply are sent before the connection closes."""


class Delay(_Strict):
    first_byte_ms: float = Field(default=0, ge=0)
    """Held back before the reply's first byte."""
    chunk_ms: float = Field(default=0, ge=0)
    """Held back before each further chunk of a streamed reply."""


class Fault(_Strict):
    """One fault entry: what happens (one of ``KINDS``) to the requests it selects."""

    status: Literal[429, 500, 502, 503, 504, 529] | None = None
    """The request is answered with this status, in its API's own error shape and
    headers, by the plugin: it never reaches the service."""
    retry_after_s: float | None = Field(default=None, ge=0)
    """With ``status``: the ``retry-after`` the error carries."""
    disconnect: Literal[True] | None = None
    """The connection is closed with no reply."""
    stall_s: float | None = Field(default=None, gt=0)
    """No byte for this many seconds, then the reply."""
    cut: Cut | None = None
    """The reply stops after ``after_chunks`` chunks, no terminator (a whole reply: at
    half its body)."""
    delay: Delay | None = None
    """The reply, slowed."""
    mutate: Literal["malformed_arguments", "unknown_tool", "empty", "truncated"] | None = None
    """The reply changed in its API's own shape."""
    request: int | None = Field(default=None, ge=1)
    """The stage's Nth request to a model API (retries count), 1-based."""
    every: int | None = Field(default=None, ge=1)
    """Every Kth request of the stage."""
    rate: float | None = Field(default=None, gt=0, le=1)
    """This share of the stage's requests, picked by ``seed``."""
    seed: int | None = None
    """Which requests ``rate`` picks: the same ones in every run and mode."""
    api: ApiName | None = None
    """Only requests of this wire API."""
    times: int | None = Field(default=None, ge=1)
    """Stop after this many injections."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError(  # noqa: TRY004 - pydantic reports ValueError only
                f"a fault is a mapping with one of {', '.join(KINDS)}, and optionally"
                f" request, every, rate (with seed), api, times; got {data!r}")
        known = set(cls.model_fields)
        for key in data:
            if key not in known:
                raise KeyedError(f"unknown fault key {key!r}: a fault is one of"
                                 f" {', '.join(KINDS)}, selected by {', '.join(SELECTORS)},"
                                 " seed, api, times", (key,))
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> Fault:
        kinds = [key for key in KINDS if getattr(self, key) is not None]
        if len(kinds) != 1:
            said = f"got {', '.join(kinds)}" if kinds else "got none"
            raise ValueError(f"a fault has exactly one of {', '.join(KINDS)}; {said}")
        selectors = [key for key in SELECTORS if getattr(self, key) is not None]
        if len(selectors) > 1:
            raise KeyedError(f"a fault selects by one of request, every or rate; got"
                             f" {' and '.join(selectors)}", (selectors[1],))
        if self.rate is not None and self.seed is None:
            raise KeyedError("rate needs a seed (seed: 7), so the same requests are picked"
                             " in every run", ("rate",))
        if self.seed is not None and self.rate is None:
            raise KeyedError("seed says which requests rate picks: give rate too", ("seed",))
        if self.retry_after_s is not None and self.status is None:
            raise KeyedError("retry_after_s goes with status", ("retry_after_s",))
        return self

    @property
    def kind(self) -> str:
        return next(key for key in KINDS if getattr(self, key) is not None)

    def describe(self) -> str:
        """What it does, as transcripts say it: ``status 429 (retry-after 0 s)``."""
        kind = self.kind
        if kind == "status":
            after = f" (retry-after {self.retry_after_s:g} s)" if self.retry_after_s is not None else ""
            return f"status {self.status}{after}"
        if kind == "disconnect":
            return "disconnect (no reply)"
        if kind == "stall_s":
            return f"stall {self.stall_s:g} s"
        if kind == "cut":
            assert self.cut is not None
            return f"cut after {self.cut.after_chunks} chunks"
        if kind == "delay":
            assert self.delay is not None
            return (f"delay {self.delay.first_byte_ms:g} ms to the first byte,"
                    f" {self.delay.chunk_ms:g} ms a chunk")
        return f"mutate: {self.mutate}"

    def selection(self) -> str:
        """Which requests it selects, in words: ``request 1``, ``every 2nd request``."""
        if self.request is not None:
            chosen = f"request {self.request}"
        elif self.every is not None:
            chosen = "every request" if self.every == 1 else f"every {_nth(self.every)} request"
        elif self.rate is not None:
            chosen = f"{self.rate:g} of requests (seed {self.seed})"
        else:
            chosen = "every request"
        if self.api is not None:
            chosen += f" of {self.api}"
        if self.times is not None:
            chosen += f", at most {self.times} time{'s' if self.times != 1 else ''}"
        return chosen

    def entry(self) -> dict[str, Any]:
        """The entry as written (the keys given), for reports."""
        return self.model_dump(mode="json", exclude_none=True)

    def picks(self, number: int, salt: str) -> bool:
        """Whether it selects the stage's request ``number`` (1-based)."""
        if self.request is not None:
            return number == self.request
        if self.every is not None:
            return number % self.every == 0
        if self.rate is not None:
            digest = hashlib.sha256(f"{self.seed}/{salt}/{number}".encode()).digest()
            return int.from_bytes(digest[:8], "big") / 2.0**64 < self.rate
        return True

    @property
    def must_select(self) -> bool:
        """Whether selecting nothing is an error: a fault at a place (``request``,
        ``every``); a ``rate`` picks by chance."""
        return self.rate is None


def _nth(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(
        number % 10, "th")
    return f"{number}{suffix}"


# -- the compact form of --toolbench-fault ------------------------------------------------

COMPACT_FORM: Final = "KIND=VALUE[,KEY=VALUE...][@N]"


def parse_compact(text: str) -> dict[str, Any]:
    """``status=429@1`` -> ``{status: 429, request: 1}``: the entry ``--toolbench-fault``
    gives (``fault_from``: validated). ``@N`` is ``request: N``; ``cut=N`` is
    ``cut: {after_chunks: N}``; ``delay=F`` or ``delay=F/C`` is ``delay: {first_byte_ms:
    F, chunk_ms: C}``; ``disconnect`` alone is ``disconnect: true``; every other key is the
    entry's own (``retry_after_s=0``, ``every=2``, ``rate=0.3``, ``seed=7``, ``api=messages``,
    ``times=1``)."""
    body, at, request = text.strip().rpartition("@") if "@" in text else (text.strip(), "", "")
    entry: dict[str, Any] = {}
    if at:
        entry["request"] = _scalar(request.strip())
    for part in filter(None, (piece.strip() for piece in body.split(","))):
        key, equals, value = part.partition("=")
        key = key.strip()
        if not equals:
            if key != "disconnect":
                raise ValueError(f"{part!r} has no value: write KEY=VALUE (only disconnect"
                                 " stands alone)")
            entry[key] = True
        elif key == "cut":
            entry[key] = {"after_chunks": _scalar(value)}
        elif key == "delay":
            first, _, chunk = value.partition("/")
            entry[key] = {"first_byte_ms": _scalar(first),
                          **({"chunk_ms": _scalar(chunk)} if chunk else {})}
        else:
            entry[key] = _scalar(value)
    if not entry:
        raise ValueError("no fault given")
    return entry


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def fault_from(text: str) -> Fault:
    """The fault ``--toolbench-fault`` gives; ValueError saying what is wrong, in the
    words of the compact form."""
    from pydantic import ValidationError

    try:
        return Fault.model_validate(parse_compact(text))
    except KeyedError as error:
        raise ValueError(error.message) from None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the fault'}:"
                             f" {e['msg'].removeprefix('Value error, ')}"
                             for e in error.errors())
        raise ValueError(problems) from None


@functools.cache
def faults_from(texts: tuple[str, ...]) -> tuple[Fault, ...]:
    """The faults of ``--toolbench-fault``, each ``fault_from`` its text: parsed once a
    run, though every case reads them (a ``Fault`` is frozen, so the cases share it)."""
    return tuple(fault_from(text) for text in texts)


# -- a stage's plan -------------------------------------------------------------------------


@dataclass
class Planned:
    """A fault of a stage's plan, and where it came from."""

    fault: Fault
    label: str
    """How messages name it: ``fault 1 of stage ask``, ``fault 1 of the case``,
    ``--toolbench-fault status=429@1``."""
    path: KeyPath
    """Where it is written in the case (``("stages", 0, "faults", 0)``); ``()``: the
    command line."""
    own: bool
    """Written on the stage itself: selecting nothing there is the stage's error."""
    hits: list[int] = field(default_factory=list)
    """The requests it was injected into."""


@dataclass(frozen=True)
class Injection:
    """A fault applied to one request: what the transport does and the reports show."""

    fault: Fault
    label: str
    request: int
    """The stage's request it was applied to."""

    def before(self) -> str:
        """The line a replay mismatch after it ends with: requests that stop matching the
        recording mostly follow from the fault."""
        return (f"the fault injected just before: {self.label}, {self.fault.describe()} at"
                f" request {self.request}")

    def record(self, delivered: bool = True) -> dict[str, Any]:
        """As the JSON report keeps it (a turn's ``fault``); ``delivered``: whether a reply
        (the service's, or the fault's own answer) reached the agent or the loop whole, not
        cut, dropped or given up on while the fault held it back."""
        return {"injected": True, "kind": self.fault.kind, "does": self.fault.describe(),
                "entry": self.fault.entry(), "source": self.label, "request": self.request,
                "delivered": delivered}


def delivery_note(record: Mapping[str, Any]) -> str:
    """What the transcript and the HTML report add after a turn's fault (``record``) when
    no reply came through whole; else nothing."""
    return "" if record.get("delivered", True) else "; no reply came through whole"


class FaultPlan:
    """The faults of one stage attempt, deciding request by request; thread-safe (the
    proxy asks on its loop, the run reads on its own)."""

    def __init__(self, planned: list[Planned], stage: str, salt: str = "") -> None:
        self.planned = planned
        self.stage = stage
        self.salt = salt
        """What a ``rate`` hashes beside its seed and the request's number (the run and
        stage), so each run of a ``repeat`` draws its own requests, the same every time."""
        self.requests = 0
        self.injections: list[Injection] = []
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.planned)

    def decide(self, api: str | None) -> Injection | None:
        """Count one request of wire API ``api`` (None: no model API, not counted) and
        say which fault, if any, applies to it: the first in the plan that selects it."""
        if api is None or not self.planned:
            return None
        with self._lock:
            self.requests += 1
            number = self.requests
            for planned in self.planned:
                fault = planned.fault
                if fault.api is not None and fault.api != api:
                    continue
                if fault.times is not None and len(planned.hits) >= fault.times:
                    continue
                if fault.picks(number, self.salt):
                    planned.hits.append(number)
                    injection = Injection(fault, planned.label, number)
                    self.injections.append(injection)
                    return injection
        return None

    def unselected(self) -> list[tuple[str, KeyPath]]:
        """The stage's own faults that selected nothing, each as its error and its path."""
        sent = self.requests
        return [((f"{planned.label} selected nothing: the stage sent {sent}"
                 f" request{'' if sent == 1 else 's'}"), planned.path)
                for planned in self.planned
                if planned.own and planned.fault.must_select and not planned.hits]

    def lines(self) -> list[str]:
        """The plan in words, one line a fault (``--toolbench-dry-run``)."""
        return [f"{planned.label}: {planned.fault.describe()} at {planned.fault.selection()}"
                for planned in self.planned]


def stage_plan(stage_faults: list[Fault], case_faults: list[Fault], run_faults: list[Fault],
               stage_index: int, stage_name: str, salt: str = "") -> FaultPlan:
    """The plan of one stage attempt: its own faults, then the case's (every stage's),
    then the run's (``--toolbench-fault``), the first that selects a request applying."""
    planned = [Planned(fault, f"fault {index + 1} of stage {stage_name}",
                       ("stages", stage_index, "faults", index), True)
               for index, fault in enumerate(stage_faults)]
    planned += [Planned(fault, f"fault {index + 1} of the case", ("faults", index), False)
                for index, fault in enumerate(case_faults)]
    planned += [Planned(fault, f"--toolbench-fault {index + 1}", (), False)
                for index, fault in enumerate(run_faults)]
    return FaultPlan(planned, stage_name, f"{salt}/{stage_index}")
