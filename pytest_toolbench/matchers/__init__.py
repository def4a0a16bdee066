"""The matcher language of ``expect:`` (SPEC sections 4 and 5).

A spec is compiled once, at collection time, into a ``Matcher``; every problem with the spec
itself (unknown operator, bad regex, bad schema...) is a ``MatcherError`` raised then, with
the key path inside the spec. Matching returns a list of ``Mismatch`` (empty when the value
matched), each with its path inside the actual value and a one-line message; it raises
nothing but ``MatchTimeout``, once the deadline of ``time_limit`` has passed.

    MatcherError(ValueError)   the spec is invalid; ``.message`` and ``.path``
    MatchTimeout(Exception)    matching ran past its time limit; ``.what`` names the matcher

The modules, each importing only those above it:

    core.py        Mismatch, MatcherError, MISSING, the Matcher base; JSON value semantics
    regex_ways.py  how many ways re can try a pattern: the bound that lets re search it
    limits.py      the time limit: time_limit, MatchTimeout, regex searches with a timeout,
                   and re's own search for patterns whose work is bounded
    compiled.py    the compiled matchers: literal, object, list, and operators of matchers
    pairing.py     $unordered / $includes: one-to-one pairing in any order (bipartite)
    operators.py   the operators that judge the value alone ($eq, $regex, $gt, $approx...)
    schema.py      $schema: offline $ref resolution, regex keywords under the time limit
    compiler.py    the $ operator table and compile_matcher (schema.py, and jsonschema with
                   it, imported at the first $schema)
    tool_calls.py  compile_tool_calls: expected calls against ToolCall records
    trajectory.py  compile_trajectory: every call of a stage or case, in order, subsequence,
                   never, at most
    path.py        compile_path: the stages a run went through, matched as a trajectory is
"""

from __future__ import annotations

from .compiler import compile_matcher
from .core import MISSING, Matcher, MatcherError, Mismatch
from .limits import MatchTimeout, time_limit
from .path import compile_path
from .tool_calls import compile_tool_calls
from .trajectory import compile_trajectory

__all__ = [
    "MISSING",
    "MatchTimeout",
    "Matcher",
    "MatcherError",
    "Mismatch",
    "compile_matcher",
    "compile_path",
    "compile_tool_calls",
    "compile_trajectory",
    "time_limit",
]
