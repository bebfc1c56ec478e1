"""Tool schemas and arguments from outside, applied safely. Pure functions.

A tool's input schema comes from an MCP server and its arguments from the model: neither may
raise in workflow code, and no `$ref` is ever fetched. A schema that cannot be applied gives a
reason (the tool is left out at discovery, or the call becomes an observation); arguments nested
deeper than any tool needs are refused before anything walks them recursively.

A schema's patterns are outside code too: Python's `re` can take exponential time (`^(a+)+$`),
holding the GIL, which freezes the whole worker. So every keyword that matches one (`pattern`,
`patternProperties`, and `additionalProperties` next to it) matches it by a `Search`: here RE2,
deterministic and linear in the text: arguments bounded in bytes before they get here (the
model's by `MAX_CALL_ARGS_BYTES`, a human's edits by `Limits.args_bytes`).
A pattern RE2 cannot run (a lookaround, a backreference) is left unchecked in the workflow; the
worker checks it again before the call, bounded in time (`activities.mcp.patterns`). Left to the
tool's server, which checks its own input: `unevaluatedProperties` in a schema with any
`patternProperties` (jsonschema sorts those keys out with `re`). A `$schema` is ignored, as
jsonschema would swap in its stock validator for it: all is read as Draft 2020-12. No `format` is
asserted, so `format: regex` compiles nothing here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from contract.bounds import clip

MAX_DEPTH = 64  # of arguments' nesting: deep enough for any tool, far from the recursion limit
NOTHING_FETCHED = Registry()  # resolves a schema's own `#...` refs; any other is unresolvable

Search = Callable[[str, str], bool | None]
"""Whether `pattern` matches somewhere in `text`, or None when this matcher cannot run it."""

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a pattern RE2 cannot run is expected here, not news for stderr


class PatternTimeout(Exception):
    """A bounded `Search` gave up on a pattern: the arguments cannot be checked."""


def re2_search(pattern: str, text: str) -> bool | None:
    """RE2's answer, in time linear in `text`; None for a pattern (or text) RE2 cannot take."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS).search(text) is not None  # compiled ones cached
    except (re2.error, UnicodeEncodeError):  # lookaround, backreference; a lone surrogate
        return None


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
        Draft202012Validator.check_schema(schema)  # compiles patterns (format: regex), never runs one
        resolver = NOTHING_FETCHED.resolver_with_root(
            Resource.from_contents(schema, default_specification=DRAFT202012))
        for ref in (d["$ref"] for d in _objects(schema) if isinstance(d.get("$ref"), str)):
            resolver.lookup(ref)
    except Exception as exc:  # SchemaError, Unresolvable, or whatever a foreign schema causes
        return _reason(exc)
    return None


def argument_errors(
    schema: dict[str, Any], arguments: Any, search: Search = re2_search
) -> list[ValidationError] | str:
    """Every way `arguments` miss `schema`, or why they cannot be checked. Never raises."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    return value_errors(schema, arguments, "the arguments", "the tool's schema", search)


def value_errors(schema: dict[str, Any], value: Any, what: str, whose: str,
                 search: Search = re2_search) -> list[ValidationError] | str:
    """Every way a JSON value misses `schema`, or why it cannot be checked (`what` names the
    value, `whose` the schema, in that reason). Never raises."""
    problem = depth_problem(value)
    if problem is not None:
        return f"{what} cannot be checked: {problem}"
    try:
        patterns_anywhere = any("patternProperties" in d for d in _objects(schema))
        validator = _validator_class(search, patterns_anywhere)(_one_dialect(schema),
                                                                registry=NOTHING_FETCHED)
        return list(validator.iter_errors(value))
    except PatternTimeout as exc:
        return f"{what} cannot be checked: {exc}"
    except Exception as exc:
        return f"{whose} cannot be applied: {_reason(exc)}"


def argument_problem(schema: dict[str, Any], arguments: Any, search: Search = re2_search) -> str | None:
    """Why `arguments` do not fit `schema`, or None when they do. Never raises: a schema that
    cannot be applied is a reason too."""
    return described(argument_errors(schema, arguments, search))


def described(errors: list[ValidationError] | str) -> str | None:
    """The errors of `value_errors` as one line, or None for none."""
    if isinstance(errors, str):
        return errors
    parts = []
    for err in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        where = ".".join(str(p) for p in err.absolute_path)
        parts.append(f"{where}: {err.message}" if where else err.message)
    return "; ".join(parts) or None


@functools.lru_cache(maxsize=8)
def _validator_class(search: Search, patterns_anywhere: bool) -> type[Validator]:
    """Draft 2020-12 with each keyword that matches a pattern matching it by `search`. A pattern
    `search` cannot run is not checked: it fails no string, and rules no key in or out. Made once
    for each (`search`, `patterns_anywhere`): making a validator class took 4% of a worker's CPU
    when it was made for every call's arguments."""
    base = Draft202012Validator.VALIDATORS

    def pattern(validator: Validator, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
        if validator.is_type(instance, "string") and search(patrn, instance) is False:
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Validator, patterns: dict, instance: Any,
                           schema: Any) -> Iterator[ValidationError]:
        if validator.is_type(instance, "object"):
            for patrn, subschema in patterns.items():
                for key, value in instance.items():
                    if search(patrn, key):
                        yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    def additional_properties(validator: Validator, extra: Any, instance: Any,
                              schema: Any) -> Iterator[ValidationError]:
        patterns = schema.get("patternProperties") or {}
        if not patterns:  # no pattern involved: jsonschema's own
            yield from base["additionalProperties"](validator, extra, instance, schema)
            return
        if not validator.is_type(instance, "object"):
            return
        known = schema.get("properties") or {}
        extras = [k for k in instance if k not in known and all(search(p, k) is False for p in patterns)]
        if validator.is_type(extra, "object"):
            for key in extras:
                yield from validator.descend(instance[key], extra, path=key)
        elif not extra and extras:  # jsonschema's message, word for word
            verb = "does" if len(extras) == 1 else "do"
            yield ValidationError(f"{', '.join(map(repr, sorted(extras)))} {verb} not match any of "
                                  f"the regexes: {', '.join(map(repr, sorted(patterns)))}")

    def unevaluated_properties(validator: Validator, unevaluated: Any, instance: Any,
                               schema: Any) -> Iterator[ValidationError]:
        # jsonschema sorts the keys out with Python's `re` when a patternProperties is in reach
        if not patterns_anywhere:
            yield from base["unevaluatedProperties"](validator, unevaluated, instance, schema)

    return validators.extend(Draft202012Validator, {
        "pattern": pattern,
        "patternProperties": pattern_properties,
        "additionalProperties": additional_properties,
        "unevaluatedProperties": unevaluated_properties,
    })


def _one_dialect(node: Any) -> Any:
    """A copy without `$schema`: at one, jsonschema would swap in its stock validator of that
    draft, whose keywords match patterns with Python's `re`. All is read as Draft 2020-12."""
    if isinstance(node, dict):
        return {k: _one_dialect(v) for k, v in node.items() if not (k == "$schema" and isinstance(v, str))}
    if isinstance(node, list):
        return [_one_dialect(v) for v in node]
    return node


def _objects(node: Any) -> Iterator[dict]:
    """Every JSON object in `node`, itself included. Iterative, so it never recurses."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _reason(exc: Exception) -> str:
    if isinstance(exc, Unresolvable):
        ref = clip(str(getattr(exc, "ref", "")), 200)
        return f"its $ref {ref!r} does not resolve within the schema, and nothing is fetched"
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return clip(f"{type(exc).__name__}: {message}", 300) or ""
