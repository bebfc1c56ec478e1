"""A server's patterns, matched in the worker before a call: RE2 first, then `regex`, in a budget.

The workflow matched the arguments with RE2 only, leaving a pattern RE2 cannot run (a lookaround,
a backreference) unchecked. Here such a pattern runs on the `regex` module, which can stop
mid-match; all of one call's fallback matches share `PATTERN_BUDGET_S`, past which the call is
refused with an error observation. A worker never matches an outside pattern with Python's `re`,
which holds the GIL until it finishes, if ever.
"""

from __future__ import annotations

import time

import regex

from ...rules.schemas import PatternTimeout, re2_search

PATTERN_BUDGET_S = 0.5  # of fallback matching per call; a sane pattern needs microseconds


class BoundedSearch:
    """A `Search` for one call's arguments: what RE2 cannot run gets what is left of `budget_s`
    since this was made."""

    def __init__(self, budget_s: float = PATTERN_BUDGET_S):
        self._budget_s = budget_s
        self._deadline = time.monotonic() + budget_s

    def __call__(self, pattern: str, text: str) -> bool:
        found = re2_search(pattern, text)
        if found is not None:
            return found
        try:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            return regex.search(pattern, text, timeout=left) is not None
        except TimeoutError:
            raise PatternTimeout(
                f"matching the pattern {pattern!r} took over {self._budget_s:g} s") from None
