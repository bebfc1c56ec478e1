"""An eval's scores: a case run again (`got`) against its recording (`expected`). Pure
functions; `client.evals` runs the cases and reports these."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..contract.bounds import canonical_json
from ..contract.case import Case, CaseCall
from .cases import call_key

CallsMode = Literal["order", "set", "off"]
AnswerMode = Literal["auto", "exact", "contains", "json", "judge", "off"]
CALLS_MODES: tuple[str, ...] = ("order", "set", "off")
ANSWER_MODES: tuple[str, ...] = ("auto", "exact", "contains", "json", "judge", "off")


@dataclass
class Check:
    """One score: whether it passed, what was expected and got, and the difference in words."""

    name: str
    passed: bool
    detail: str = ""
    expected: Any = None
    got: Any = None


@dataclass
class Measure:
    """A number of the run beside the recording's (steps, tokens, dollars, milliseconds)."""

    recorded: float | None
    now: float | None

    @property
    def ratio(self) -> float | None:
        if not self.recorded or self.now is None:
            return None
        return self.now / self.recorded


@dataclass
class Score:
    checks: list[Check] = field(default_factory=list)
    measures: dict[str, Measure] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [asdict(c) for c in self.checks],
                "measures": {k: {**asdict(m), "ratio": m.ratio} for k, m in self.measures.items()}}


def shown_call(call: CaseCall) -> str:
    args = canonical_json(call.args) if isinstance(call.args, dict) else call.args
    return f"{call.tool}({args})"


def compare_calls(expected: Case, got: Case, mode: CallsMode) -> Check | None:
    """The same tool calls: names and arguments, in the same order or as a set."""
    if mode == "off":
        return None
    want, have = expected.calls(), got.calls()
    shown = ([shown_call(c) for c in want], [shown_call(c) for c in have])
    if mode == "set":
        missing = Counter(call_key(c.tool, c.args) for c in want)
        extra = Counter(call_key(c.tool, c.args) for c in have)
        missing, extra = missing - extra, extra - missing
        if not missing and not extra:
            return Check("tool calls", True, f"{len(want)} call(s), as a set", *shown)
        words = [f"{sum(missing.values())} recorded call(s) not made" if missing else "",
                 f"{sum(extra.values())} call(s) not recorded" if extra else ""]
        return Check("tool calls", False, "; ".join(w for w in words if w), *shown)
    for i, (w, h) in enumerate(zip(want, have), start=1):
        if call_key(w.tool, w.args) != call_key(h.tool, h.args):
            return Check("tool calls", False, f"call {i}: expected {shown_call(w)}, got "
                         f"{shown_call(h)}", *shown)
    if len(want) != len(have):
        longer = want if len(want) > len(have) else have
        words = "missing" if longer is want else "not recorded"
        return Check("tool calls", False, f"expected {len(want)} call(s), got {len(have)}: "
                     f"call {min(len(want), len(have)) + 1} {words}: "
                     f"{shown_call(longer[min(len(want), len(have))])}", *shown)
    return Check("tool calls", True, f"{len(want)} call(s), in order", *shown)


def compare_answer(expected: Case, got: Case, mode: AnswerMode) -> Check | None:
    """The final answer: exact (blanks at the ends aside), contained, or JSON-equal (a typed
    output's, or the answer parsed as JSON). `auto`: JSON for a typed output, else exact."""
    if mode in ("off", "judge"):  # a judge is a model call: `client.evals` asks it
        return None
    if mode == "auto":
        mode = "json" if expected.final_output is not None else "exact"
    want, have = expected.final_answer or "", got.final_answer or ""
    if mode == "json":
        a = expected.final_output if expected.final_output is not None else _json(want)
        b = got.final_output if got.final_output is not None else _json(have)
        passed = a is not None and a == b
        return Check("final answer", passed, "JSON-equal" if passed else "not JSON-equal", a, b)
    if mode == "contains":
        passed = want.strip() in have
        return Check("final answer", passed, "contains the recorded answer" if passed
                     else "does not contain the recorded answer", want, have)
    passed = want.strip() == have.strip()
    return Check("final answer", passed, "the same" if passed else _first_difference(want, have),
                 want, have)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _first_difference(want: str, have: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
    return f"differs at character {at + 1}: expected {want[at:at + 40]!r}, got {have[at:at + 40]!r}"


def measures(expected: Case, got: Case) -> dict[str, Measure]:
    return {
        "steps": Measure(len(expected.steps), len(got.steps)),
        "tokens": Measure(expected.usage.total_tokens, got.usage.total_tokens),
        "cost_usd": Measure(expected.usage.cost_usd, got.usage.cost_usd),
        "ms": Measure(expected.ms, got.ms),
    }


def score(expected: Case, got: Case, calls: CallsMode = "order",
          answer: AnswerMode = "auto") -> Score:
    checks = [c for c in (compare_calls(expected, got, calls),
                          compare_answer(expected, got, answer)) if c is not None]
    return Score(checks=checks, measures=measures(expected, got))
