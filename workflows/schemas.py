"""Tool schemas and arguments from outside, applied safely. Pure functions.

A tool's input schema comes from an MCP server and its arguments from the model: neither may
raise in workflow code, and no `$ref` is ever fetched. A schema that cannot be applied gives a
reason (the tool is left out at discovery, or the call becomes an observation); arguments nested
deeper than any tool needs are refused before anything walks them recursively.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from workflows.bounds import clip

MAX_DEPTH = 64  # of arguments' nesting: deep enough for any tool, far from the recursion limit
NOTHING_FETCHED = Registry()  # resolves a schema's own `#...` refs; any other is unresolvable


def depth_problem(value: Any) -> str | None:
    """Why `value` is nested too deeply to handle, or None. Iterative, so it never recurses."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"they are nested more than {MAX_DEPTH} levels deep"
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return None


def schema_problem(schema: Any) -> str | None:
    """Why a tool's input schema cannot be used, or None: it must be a valid JSON Schema whose
    `$ref`s all resolve within itself."""
    if not isinstance(schema, dict):
        return "it is not a JSON object"
    problem = depth_problem(schema)
    if problem is not None:
        return f"it is nested too deeply ({problem})"
    try:
        Draft202012Validator.check_schema(schema)
        resolver = NOTHING_FETCHED.resolver_with_root(
            Resource.from_contents(schema, default_specification=DRAFT202012))
        for ref in _refs(schema):
            resolver.lookup(ref)
    except Exception as exc:  # SchemaError, Unresolvable, or whatever a foreign schema causes
        return _reason(exc)
    return None


def argument_problem(schema: dict[str, Any], arguments: Any) -> str | None:
    """Why `arguments` do not fit `schema`, or None when they do. Never raises: a schema that
    cannot be applied is a reason too."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    problem = depth_problem(arguments)
    if problem is not None:
        return f"the arguments cannot be checked: {problem}"
    try:
        validator = Draft202012Validator(schema, registry=NOTHING_FETCHED)
        errors = sorted(validator.iter_errors(arguments),
                        key=lambda e: [str(p) for p in e.absolute_path])
    except Exception as exc:
        return f"the tool's schema cannot be applied: {_reason(exc)}"
    if not errors:
        return None
    parts = []
    for err in errors:
        where = ".".join(str(p) for p in err.absolute_path)
        parts.append(f"{where}: {err.message}" if where else err.message)
    return "; ".join(parts)


def _refs(schema: Any) -> list[str]:
    found, stack = [], [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _reason(exc: Exception) -> str:
    if isinstance(exc, Unresolvable):
        ref = clip(str(getattr(exc, "ref", "")), 200)
        return f"its $ref {ref!r} does not resolve within the schema, and nothing is fetched"
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return clip(f"{type(exc).__name__}: {message}", 300) or ""
