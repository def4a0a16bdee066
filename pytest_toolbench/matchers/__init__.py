"""The matcher language of ``expect:`` (SPEC sections 4 and 5).

A spec is compiled once, at collection time, into a ``Matcher``; every problem with the spec
itself (unknown operator, bad regex, bad schema...) is a ``MatcherError`` raised then, with
the key path inside the spec. Matching never raises: it returns a list of ``Mismatch`` (empty
when the value matched), each with its path inside the actual value and a one-line message.

    MatcherError(ValueError)   the spec is invalid; ``.message`` and ``.path``

The modules, each importing only those above it:

    core.py        Mismatch, MatcherError, MISSING, the Matcher base; JSON value semantics
    compiled.py    the compiled matchers: literal, object, list, and operators of matchers
    pairing.py     $unordered / $includes: one-to-one pairing in any order (bipartite)
    operators.py   the operators that judge the value alone ($eq, $regex, $gt, $approx...)
    compiler.py    the $ operator table and compile_matcher
    tool_calls.py  compile_tool_calls: expected calls against ToolCall records
"""

from __future__ import annotations

from .compiler import compile_matcher
from .core import MISSING, Matcher, MatcherError, Mismatch
from .tool_calls import compile_tool_calls

__all__ = [
    "MISSING",
    "Matcher",
    "MatcherError",
    "Mismatch",
    "compile_matcher",
    "compile_tool_calls",
]
