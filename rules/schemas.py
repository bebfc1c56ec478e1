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

A schema's shape is outside work too: jsonschema follows `$ref` as often as a schema says, so
`$defs` that each point twice to the next cost 2^n checks of any value while `check_schema`
passes. So every check has a bounded cost, twice over: at the door, a schema whose checking
would visit more than `MAX_SCHEMA_VISITS` subschemas (its `$ref`s unfolded), or that refers back
to itself without descending into the value, is refused (`schema_problem`); and each check
spends a budget of `MAX_CHECK_STEPS` keyword applications, past which it stops with a reason
(`value_errors`), for what the door cannot foresee: recursion driven by the value's own depth.
Both are counted, not timed, so a replay meets the same refusal.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.protocols import Validator
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from ..contract.bounds import clip

MAX_DEPTH = 64  # of arguments' nesting: deep enough for any tool, far from the recursion limit
# Subschemas one check of a value may visit, `$ref`s unfolded: a large tool's schema visits a few
# hundred; a fan-out of `$ref`s passes this at 13 levels.
MAX_SCHEMA_VISITS = 5_000
# Keyword applications one check may make (about 13 µs each here): a check of a value of n
# parts gets `MAX_CHECK_STEPS` + n * `STEPS_PER_PART`, far more than a schema within
# `MAX_SCHEMA_VISITS` needs, and gives up on one whose `$ref`s recurse with the value.
MAX_CHECK_STEPS = 20_000
STEPS_PER_PART = 16
NOTHING_FETCHED = Registry()  # resolves a schema's own `#...` refs; any other is unresolvable

Search = Callable[[str, str], bool | None]
"""Whether `pattern` matches somewhere in `text`, or None when this matcher cannot run it."""

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a pattern RE2 cannot run is expected here, not news for stderr


class PatternTimeout(Exception):
    """A bounded `Search` gave up on a pattern: the arguments cannot be checked."""


class CheckTooCostly(Exception):
    """A check spent its `MAX_CHECK_STEPS`: the value cannot be checked against the schema."""


_steps_left: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "schema_check_steps", default=None)


def re2_search(pattern: str, text: str) -> bool | None:
    """RE2's answer, in time linear in `text`; None for a pattern (or text) RE2 cannot take."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS).search(text) is not None  # compiled ones cached
    except (re2.error, UnicodeEncodeError):  # lookaround, backreference; a lone surrogate
        return None


def depth_problem(value: Any) -> str | None:
    """Why `value` is nested too deeply to handle, or None. Iterative, so it never recurses."""
    return _walk(value)[1]


def _walk(value: Any) -> tuple[int, str | None]:
    """How many parts `value` has (itself included), and why it is nested too deeply, or None."""
    stack, parts = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        parts += 1
        if depth > MAX_DEPTH:
            return parts, f"they are nested more than {MAX_DEPTH} levels deep"
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return parts, None


def schema_problem(schema: Any) -> str | None:
    """Why a schema from outside cannot be used, or None: it must be a valid JSON Schema whose
    `$ref`s all resolve within itself, and whose checks cost a bounded amount (`cost_problem`).
    The cheap bounds come first, so that an outsized schema costs little to refuse."""
    if not isinstance(schema, dict):
        return "it is not a JSON object"
    problem = depth_problem(schema)
    if problem is not None:
        return f"it is nested too deeply ({problem})"
    objects = list(_objects(schema))
    if len(objects) > MAX_SCHEMA_VISITS:
        return f"it has more than {MAX_SCHEMA_VISITS:,} subschemas: flatten it"
    try:
        resolver = NOTHING_FETCHED.resolver_with_root(
            Resource.from_contents(schema, default_specification=DRAFT202012))
        targets = {ref: resolver.lookup(ref).contents for ref in
                   {d["$ref"] for d in objects if isinstance(d.get("$ref"), str)}}
        problem = cost_problem(schema, targets)
        if problem is not None:
            return problem
        error = best_match(_META_VALIDATOR.iter_errors(schema))  # compiles `format: regex` only
    except Exception as exc:  # Unresolvable, or whatever a foreign schema causes
        return _reason(exc)
    return None if error is None else _reason(SchemaError.create_from(error))


def _static_metaschema() -> dict[str, Any]:
    """Draft 2020-12's metaschema, its vocabularies in one resource and its `$dynamicRef`s
    made plain `$ref`s to its root: the same rules for a schema that extends nothing, checked
    six times faster than jsonschema's own `check_schema` (whose dynamic references cost
    0.6 ms a subschema: a 16 KB schema took 3 s)."""
    root = "https://json-schema.org/draft/2020-12/schema"

    def static(node: Any) -> Any:
        """A subschema of the metaschema, made static."""
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$dynamicRef":
                out["$ref"] = "#"
            elif key == "$ref":
                out["$ref"] = "#" + value.split("#", 1)[1]  # every $defs is merged into one
            elif key in ("properties", "patternProperties"):
                out[key] = {name: static(sub) for name, sub in value.items()}
            elif key in ("additionalProperties", "items", "propertyNames", "not"):
                out[key] = static(value)
            elif key in ("anyOf", "allOf", "oneOf"):
                out[key] = [static(sub) for sub in value]
            elif key not in ("$id", "$schema", "$vocabulary", "$dynamicAnchor"):
                out[key] = value
        return out

    def body(part: dict) -> dict:
        return static({k: v for k, v in part.items() if k not in ("$defs", "allOf")})

    top = SPECIFICATIONS.contents(root)
    parts = [SPECIFICATIONS.contents(f"https://json-schema.org/draft/2020-12/{d['$ref']}")
             for d in top["allOf"]]
    defs = {name: static(sub) for part in parts for name, sub in part.get("$defs", {}).items()}
    return {"$defs": defs, **body(top), "allOf": [body(part) for part in parts]}


_META_VALIDATOR = Draft202012Validator(_static_metaschema(),
                                       format_checker=Draft202012Validator.FORMAT_CHECKER)


# Where a schema's keywords hold subschemas, and whether each applies to the value itself (in
# place) or to a part of it. Only Draft 2020-12's: the validator applies no other.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
_PART_ONE = ("items", "contains", "additionalProperties", "propertyNames", "unevaluatedItems",
             "unevaluatedProperties")
_PART_LIST = ("prefixItems",)
_PART_MAP = ("properties", "patternProperties")


def _subschemas(node: dict) -> Iterator[tuple[Any, bool]]:
    """Each subschema `node` applies, and whether it applies in place."""
    for key in _IN_PLACE_ONE:
        if key in node:
            yield node[key], True
    for key in _IN_PLACE_LIST:
        if isinstance(node.get(key), list):
            yield from ((sub, True) for sub in node[key])
    if isinstance(node.get("dependentSchemas"), dict):
        yield from ((sub, True) for sub in node["dependentSchemas"].values())
    for key in _PART_ONE:
        if key in node:
            yield node[key], False
    for key in _PART_LIST:
        if isinstance(node.get(key), list):
            yield from ((sub, False) for sub in node[key])
    for key in _PART_MAP:
        if isinstance(node.get(key), dict):
            yield from ((sub, False) for sub in node[key].values())


def cost_problem(schema: Any, targets: dict[str, Any]) -> str | None:
    """Why checking a value against `schema` could cost too much, or None: it visits more than
    `MAX_SCHEMA_VISITS` subschemas with its `$ref`s (resolved: `targets`) unfolded, or it refers
    back to itself in place, which would never end. A reference back through a part of the
    value (a tree's node schema) counts once: the value's depth bounds it, and the check's
    budget too. Iterative, each subschema's count worked out once."""
    visits: dict[int, int] = {}
    path: list[list[Any]] = []  # [subschema, its children, next child, visits so far, in place]
    on_path: dict[int, int] = {}  # id of a subschema on the path: its index there

    def children(node: Any) -> list[tuple[Any, bool]]:
        if not isinstance(node, dict):
            return []
        found = list(_subschemas(node))
        ref = node.get("$ref")
        if isinstance(ref, str) and ref in targets:
            found.append((targets[ref], True))
        return found

    def enter(node: Any, in_place: bool) -> None:
        on_path[id(node)] = len(path)
        path.append([node, children(node), 0, 1, in_place])

    enter(schema, False)
    while path:
        frame = path[-1]
        node, subs, at = frame[0], frame[1], frame[2]
        if at < len(subs):
            frame[2] += 1
            child, in_place = subs[at]
            if id(child) in visits:
                frame[3] += visits[id(child)]
            elif id(child) in on_path:  # recursion: does it descend into the value on its way?
                start = on_path[id(child)]
                if in_place and all(f[4] for f in path[start + 1:]):
                    return "it refers back to itself without descending into the value, " \
                           "so checking any value would never end"
                frame[3] += 1
            else:
                enter(child, in_place)
            if frame[3] > MAX_SCHEMA_VISITS:
                break
            continue
        path.pop()
        del on_path[id(node)]
        visits[id(node)] = frame[3]
        if path:
            path[-1][3] += frame[3]
            if path[-1][3] > MAX_SCHEMA_VISITS:
                break
    total = max([visits.get(id(schema), 0), *(f[3] for f in path)])
    if total > MAX_SCHEMA_VISITS:
        return (f"checking a value against it would visit more than {MAX_SCHEMA_VISITS:,} "
                "subschemas (its $refs and allOf/anyOf/oneOf fan out): flatten it")
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
    parts, problem = _walk(value)
    if problem is not None:
        return f"{what} cannot be checked: {problem}"
    # the budget is set in a context of the check's own, which ends with it
    return contextvars.copy_context().run(_checked, schema, value, what, whose, search,
                                          MAX_CHECK_STEPS + parts * STEPS_PER_PART)


def _checked(schema: dict[str, Any], value: Any, what: str, whose: str, search: Search,
             steps: int) -> list[ValidationError] | str:
    _steps_left.set([steps])
    try:
        patterns_anywhere = any("patternProperties" in d for d in _objects(schema))
        validator = _validator_class(search, patterns_anywhere)(_one_dialect(schema),
                                                                registry=NOTHING_FETCHED)
        return list(validator.iter_errors(value))
    except (PatternTimeout, CheckTooCostly) as exc:
        return f"{what} cannot be checked: {exc}"
    except Exception as exc:
        return f"{whose} cannot be applied: {_reason(exc)}"


def _spend() -> None:
    """One keyword applied in the check under way (`value_errors`), out of its budget."""
    left = _steps_left.get()
    if left is not None:
        left[0] -= 1
        if left[0] < 0:
            raise CheckTooCostly("checking against the schema would take too many steps (its "
                                 "$refs fan out, or recurse with the value)")


def _counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Validator, value: Any, instance: Any, schema: Any) -> Any:
        _spend()
        return keyword(validator, value, instance, schema)
    return counted


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

    keywords = {**base, "pattern": pattern, "patternProperties": pattern_properties,
                "additionalProperties": additional_properties,
                "unevaluatedProperties": unevaluated_properties}
    # every keyword spends from the check's budget: `$ref` and the applicators re-enter here
    return validators.extend(Draft202012Validator,
                             {name: _counted(keyword) for name, keyword in keywords.items()})


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
