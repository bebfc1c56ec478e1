"""A case: a recorded conversation as a JSON document (`agent export`), what a fork
starts from and what an eval runs again (`docs/evals.md`). Version 1 of the schema; a reader
refuses any other version with a clear error rather than guess."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .bounds import clip, valid_json
from .models import Usage

CASE_SCHEMA = "durable-react-agent/case"
CASE_VERSION = 1
# A case holds less than the history it was read from, which Temporal caps at 50 MB.
MAX_CASE_BYTES = 50 * 1024 * 1024
# A case's own nesting (six levels to a call's arguments) and the arguments' (64 at most): deep
# enough for any recording, and far from the recursion limit of whatever reads it next.
MAX_CASE_DEPTH = 100
MAX_CASE_INTEGER_DIGITS = 4300  # Python's own limit on reading an integer


class CaseDecision(BaseModel):
    """A person's (or the system's) verdict on a call that waited for one."""

    approved: bool
    by: str
    reason: str | None = None
    edited_args: dict[str, Any] | None = None  # the args that ran, when they were edited


class CaseCall(BaseModel):
    """A tool call of the model, with what came of it."""

    id: str
    tool: str
    args: dict[str, Any] | str  # as the model wrote them (the raw text when not a JSON object)
    result: str | None = None  # the observation the model was shown (None: it never saw one)
    # the tool's whole result, when the model was shown it cut (kept by reference: `agent result`)
    full_result: str | None = None
    status: str | None = None  # ok, error, rejected, timed_out (from the audit trail)
    decision: CaseDecision | None = None
    answer: str | None = None  # a person's answer to the question this call asked (ask_*)


class CaseStep(BaseModel):
    """One model step: its place, its reply (calls, or the answer), its usage and latency."""

    index: int  # 1-based across the whole conversation: what `fork --at-step` takes
    turn: int
    step: int  # within its turn, as `history` numbers it
    text: str | None = None  # the reply's text: the thought beside calls, or the answer
    calls: list[CaseCall] = []
    usage: Usage = Field(default_factory=Usage)
    model: str = ""  # the model the endpoint said answered
    ms: int | None = None  # from the call's scheduling to its result


class CaseTurn(BaseModel):
    turn: int
    message: str | None = None  # the person's message that began it
    by: str | None = None
    final_answer: str | None = None
    stop_reason: str | None = None


class Case(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(default=CASE_SCHEMA, alias="schema")
    version: int = CASE_VERSION
    name: str
    conversation_id: str
    exported_at: datetime | None = None
    model: str | None = None  # the model the conversation was started with (None: the worker's)
    system_prompt: str | None = None  # None: the worker's default
    output_schema: dict[str, Any] | None = None
    tools: list[str] = []  # the tools it was offered
    turns: list[CaseTurn] = []
    steps: list[CaseStep] = []
    final_answer: str | None = None
    final_output: Any = None
    usage: Usage = Field(default_factory=Usage)
    ms: int | None = None  # from the first message to the last answer
    forked_from: str | None = None
    at_step: int | None = None

    def dump(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"

    def calls(self) -> list[CaseCall]:
        return [c for s in self.steps for c in s.calls]


class CaseError(ValueError):
    """A case file that cannot be read: not JSON, cut short, another schema or version."""


def load_case(text: str, source: str = "the case") -> Case:
    """A case from its JSON, or a `CaseError` that says what is wrong with it. A case is outside
    input: its size and nesting are bounded here, its numbers must be ones a double (or Python)
    can hold, and text that is not valid Unicode (a lone surrogate, valid in JSON's escapes) is
    made so, as any outside text is."""
    if len(text) > MAX_CASE_BYTES:
        raise CaseError(f"{source} is larger than {MAX_CASE_BYTES // 2**20} MiB: not a case")
    try:
        raw = json.loads(text, parse_int=_integer, parse_float=_finite, parse_constant=_no_number)
    except json.JSONDecodeError as err:
        ended = text.rstrip().endswith(("}", "]"))
        cut = "" if ended else " (the file looks cut short)"
        raise CaseError(f"{source} is not valid JSON{cut}: {err.msg} at line {err.lineno}"
                        ) from None
    except RecursionError:
        raise CaseError(f"{source} nests too deeply to read: not a case") from None
    except ValueError as err:  # from the parsers below
        raise CaseError(f"{source} cannot be read: {err}") from None
    if _deeper_than(raw, MAX_CASE_DEPTH):
        raise CaseError(f"{source} nests more than {MAX_CASE_DEPTH} levels deep: not a case")
    raw = valid_json(raw)
    if not isinstance(raw, dict) or raw.get("schema") != CASE_SCHEMA:
        raise CaseError(f"{source} is not a case: its \"schema\" must be {CASE_SCHEMA!r}")
    if raw.get("version") != CASE_VERSION:
        raise CaseError(f"{source} has case schema version {clip(repr(raw.get('version')), 40)}; "
                        f"this version reads version {CASE_VERSION}")
    try:
        return Case.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CaseError(f"{source} is not a valid case: {where}: {first['msg']}") from None


def _no_number(constant: str) -> Any:
    raise ValueError(f"it holds {constant}, which is no JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"it holds {clip(text, 40)}, beyond the range of a double")
    return value


def _integer(digits: str) -> int:
    if len(digits) > MAX_CASE_INTEGER_DIGITS:
        raise ValueError(f"it holds an integer of {len(digits.lstrip('-')):,} digits "
                         f"(at most {MAX_CASE_INTEGER_DIGITS:,})")
    return int(digits)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether a JSON value nests more than `limit` levels. Iterative, so it never recurses."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False
