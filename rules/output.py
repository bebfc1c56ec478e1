"""Typed results: a conversation started with an `output_schema` answers with JSON that fits it.

The final answer is parsed and validated here (pure, bounded: `rules.schemas`). A
miss gets the model one corrective turn that says exactly what was wrong; after that the turn
ends with `stop_reason="invalid_output"`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..contract.bounds import MAX_OUTPUT_SCHEMA_BYTES, json_size, valid_json
from .repair import fence_inside
from .schemas import described, schema_problem, value_errors

MAX_CORRECTIONS = 1  # corrective requests per turn, before the turn ends as invalid_output


@dataclass(frozen=True)
class Output:
    """A final answer that fits the schema: its parsed value."""

    value: Any


def check_output(text: str, schema: dict[str, Any]) -> Output | str:
    """The answer's JSON value if it fits `schema`, else exactly why not."""
    try:
        value = valid_json(json.loads(unfenced(text)))
    except (ValueError, RecursionError) as err:
        return f"the answer is not JSON ({err or type(err).__name__})"
    problem = described(value_errors(schema, value, "the answer", "the output schema"))
    if problem is not None:
        return f"the answer does not fit the output schema: {problem}"
    return Output(value)


def unfenced(text: str) -> str:
    """A model that wraps its JSON in a Markdown code fence (its own lines: ```` ```json ````
    first, ```` ``` ```` last) still answered with JSON: the inside, else the text. A linear
    scan, never a backtracking pattern over the model's text."""
    inner = fence_inside(text.strip())
    if inner is None:
        return text
    head = inner[:len(inner) - len(inner.lstrip())]
    tail = inner[len(inner.rstrip()):]
    if not inner.strip():
        return "" if inner.count("\n") >= 2 else text
    if "\n" not in head or "\n" not in tail:
        return text
    # from the fence's own line to the closing fence's: what stands on the lines between
    return inner[head.rfind("\n") + 1:len(inner) - len(tail) + tail.rfind("\n")]


def output_schema_problem(schema: Any) -> str | None:
    """Why a start input's `output_schema` cannot be used, or None (None too for no schema)."""
    if schema is None:
        return None
    if (size := json_size(schema)) > MAX_OUTPUT_SCHEMA_BYTES:
        return (f"the output schema is {size:,} bytes, over the limit of "
                f"{MAX_OUTPUT_SCHEMA_BYTES:,} bytes")
    problem = schema_problem(schema)
    return None if problem is None else f"the output schema is not usable: {problem}"


def correction(problem: str, schema: dict[str, Any]) -> str:
    """What the model reads after an answer that missed the schema."""
    return (f"Your final answer was rejected: {problem}. Reply again with only a JSON value that "
            f"fits this JSON Schema, and nothing else:\n{json.dumps(schema, ensure_ascii=False)}")


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's structured-output request for the schema; not strict, which accepts any schema
    (strict mode takes only a subset), so the answer is still checked here."""
    return {"type": "json_schema",
            "json_schema": {"name": "final_output", "schema": schema, "strict": False}}
