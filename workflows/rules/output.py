"""Typed results: a conversation started with an `output_schema` answers with JSON that fits it.

The final answer is parsed and validated here (pure, bounded: `workflows.rules.schemas`). A
miss gets the model one corrective turn that says exactly what was wrong; after that the turn
ends with `stop_reason="invalid_output"`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from workflows.rules.bounds import MAX_OUTPUT_SCHEMA_BYTES, json_size
from workflows.rules.schemas import described, schema_problem, value_errors

MAX_CORRECTIONS = 1  # corrective requests per turn, before the turn ends as invalid_output
# A model that wraps its JSON in a Markdown code fence still answered with JSON.
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class Output:
    """A final answer that fits the schema: its parsed value."""

    value: Any


def check_output(text: str, schema: dict[str, Any]) -> Output | str:
    """The answer's JSON value if it fits `schema`, else exactly why not."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    try:
        value = json.loads(body)
    except ValueError as err:
        return f"the answer is not JSON ({err})"
    problem = described(value_errors(schema, value, "the answer", "the output schema"))
    if problem is not None:
        return f"the answer does not fit the output schema: {problem}"
    return Output(value)


def output_schema_problem(schema: Any) -> str | None:
    """Why a start input's `output_schema` cannot be used, or None."""
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
