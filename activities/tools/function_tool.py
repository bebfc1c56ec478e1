"""`@tool`: a plain function becomes a `ToolSpec`. Its signature is the argument schema (a pydantic
model built from the type hints), its docstring the descriptions (Google, NumPy or Sphinx style),
and its return value the observation. Anything that cannot become a tool is refused where the
function is decorated, so a bad tools module fails when the worker imports it, not mid-call."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, get_args, get_origin, get_type_hints, overload

import docstring_parser
import pydantic_core
from pydantic import BaseModel, Field, PydanticUserError, TypeAdapter, create_model
from pydantic.fields import FieldInfo
from temporalio.exceptions import ApplicationError

from ...contract import Risk
from .registry import ToolContext, ToolSpec, name_problem

ToolFunction = Callable[..., Any]


class ToolDefinitionError(TypeError):
    """A function `@tool` cannot turn into a tool."""


@dataclass(frozen=True, kw_only=True)
class FunctionTool(ToolSpec):
    """A tool made by `@tool`. Calling it calls the function as written, so a tool's own tests
    need no worker."""

    function: ToolFunction = field(repr=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


@overload
def tool(function: ToolFunction, /) -> FunctionTool: ...
@overload
def tool(*, name: str | None = None, risk: Risk = "safe", idempotent: bool = True,
         keyed: bool = False, timeout_s: float = 30.0, max_attempts: int = 3,
         local: bool | None = None) -> Callable[[ToolFunction], FunctionTool]: ...


def tool(function: ToolFunction | None = None, /, *, name: str | None = None, risk: Risk = "safe",
         idempotent: bool = True, keyed: bool = False, timeout_s: float = 30.0,
         max_attempts: int = 3, local: bool | None = None
         ) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
    """Make a tool of a function, sync or async: `@tool` or `@tool(risk="sensitive", ...)`.

    - `name`: the function's name unless given.
    - `risk`: "safe" runs at once; "sensitive" and "destructive" wait for a human's approval.
    - `idempotent`: running it twice does no harm, so a failed attempt is retried.
    - `keyed`: it writes under `ctx.idempotency_key`, so a retry finds what it wrote; a tool that
      is neither idempotent nor keyed runs at most once.
    - `timeout_s`: how long one attempt may take; `max_attempts`: attempts of a retry-safe tool.
    - `local`: run in the worker of the conversation's workflow task, as a Temporal local
      activity, which saves a server round trip per step. Every safe tool whose `timeout_s` is
      at most 30 s does unless it says `local=False`, as a long read should (signals and queries
      wait while a local run goes on, and it heartbeats no details); a tool that waits for
      approval, or that may not run again (neither idempotent nor keyed), cannot.

    A parameter typed `ToolContext` receives the call's context and is not shown to the model.
    A tool whose only other parameter is a pydantic model takes the model's fields as its
    arguments (and keeps the model's validators)."""

    def make(fn: ToolFunction) -> FunctionTool:
        return function_tool(fn, name=name or fn.__name__, risk=risk, idempotent=idempotent,
                             keyed=keyed, timeout_s=timeout_s, max_attempts=max_attempts,
                             local=local)

    return make if function is None else make(function)


def function_tool(fn: ToolFunction, *, name: str, risk: Risk, idempotent: bool, keyed: bool,
                  timeout_s: float, max_attempts: int, local: bool | None = None) -> FunctionTool:
    where = f"tool {name!r} ({fn.__module__}.{fn.__qualname__})"
    try:
        problem = name_problem(name)
        if problem is not None:
            raise ToolDefinitionError(problem)
        if risk not in get_args(Risk):
            raise ToolDefinitionError(f"risk must be one of {', '.join(get_args(Risk))}, "
                                      f"not {risk!r}")
        if timeout_s <= 0 or max_attempts < 1:
            raise ToolDefinitionError("timeout_s must be positive and max_attempts at least 1")
        if local and risk != "safe":
            raise ToolDefinitionError(f"local=True is for safe tools: a {risk} call waits for "
                                      "approval and runs as an activity of its own")
        if local and not (idempotent or keyed):
            raise ToolDefinitionError("local=True is for tools that may run again (idempotent "
                                      "or keyed): a local run whose worker dies runs again")
        doc = docstring_parser.parse(inspect.getdoc(fn) or "")
        description = first_paragraph(doc)
        if not description:
            raise ToolDefinitionError("it has no description: its docstring's first paragraph, "
                                      "which the model reads")
        args_model, ctx_param, whole = arguments(fn, name, doc)
        spec = FunctionTool(
            name=name, description=description, args_model=args_model,
            handler=_handler(fn, ctx_param, whole), risk=risk, idempotent=idempotent, keyed=keyed,
            timeout_s=timeout_s, max_attempts=max_attempts, local=local, function=fn,
        )
        spec.definition()  # the schema and the options, checked now rather than at first use
    except (ToolDefinitionError, PydanticUserError) as err:
        raise ToolDefinitionError(f"{where}: {_first_line(err)}") from None
    return spec


def first_paragraph(doc: docstring_parser.Docstring) -> str:
    """The docstring's first paragraph, on one line: the parser keeps only its first line as the
    short description when it wraps, and the rest opens the long one."""
    text = doc.short_description or ""
    if doc.long_description and not doc.blank_after_short_description:
        text += " " + doc.long_description.split("\n\n")[0]
    return " ".join(text.split())


def arguments(fn: ToolFunction, name: str, doc: docstring_parser.Docstring
              ) -> tuple[type[BaseModel], str | None, str | None]:
    """The args model; the parameter that takes the context; the one that takes the whole model,
    when a model is the only argument."""
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as err:  # noqa: BLE001 (NameError, TypeError: whatever a hint raises)
        raise ToolDefinitionError(f"its type hints cannot be resolved: {err}") from None
    described = {p.arg_name: " ".join(p.description.split()) for p in doc.params if p.description}
    fields: dict[str, tuple[Any, FieldInfo]] = {}
    ctx_param = None
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            star = "*" if p.kind is p.VAR_POSITIONAL else "**"
            raise ToolDefinitionError(f"it takes {star}{p.name}: name each argument instead")
        if p.kind is p.POSITIONAL_ONLY:
            raise ToolDefinitionError(f"parameter {p.name!r} is positional-only; the model "
                                      "passes arguments by name")
        if p.name not in hints:
            raise ToolDefinitionError(f"parameter {p.name!r} has no type annotation")
        hint = hints[p.name]
        if hint is ToolContext:
            if ctx_param is not None:
                raise ToolDefinitionError("it takes the ToolContext twice")
            ctx_param = p.name
            continue
        try:
            TypeAdapter(hint).json_schema()
        except PydanticUserError as err:
            raise ToolDefinitionError(
                f"parameter {p.name!r}: {hint!r} has no JSON schema ({_first_line(err)})"
            ) from None
        options: dict[str, Any] = {}
        if p.default is not p.empty:
            options["default"] = p.default
        if p.name in described and not _has_description(hint):
            options["description"] = described[p.name]
        fields[p.name] = (hint, Field(**options))
    if len(fields) == 1:
        [(only, (hint, info))] = fields.items()
        if isinstance(hint, type) and issubclass(hint, BaseModel) and info.is_required():
            return hint, ctx_param, only
    return create_model(name, **fields), ctx_param, None  # type: ignore[call-overload]


def observation(value: Any) -> str:
    """What the model reads of a tool's result: a `str` as it is; anything else (numbers, dicts,
    lists, pydantic models and lists of them, None as `null`) as compact JSON."""
    if isinstance(value, str):
        return value
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError as err:
        # The tool's own bug, which no retry can cure.
        raise ApplicationError(f"the tool's result cannot become JSON: {err}",
                               type="ToolResultNotJson", non_retryable=True) from None


def _handler(fn: ToolFunction, ctx_param: str | None, whole: str | None):
    is_async = inspect.iscoroutinefunction(fn)

    async def handler(args: BaseModel, ctx: ToolContext) -> str:
        kwargs: dict[str, Any] = {whole: args} if whole else dict(args)
        if ctx_param is not None:
            kwargs[ctx_param] = ctx
        if is_async:
            return observation(await fn(**kwargs))
        return observation(await asyncio.to_thread(fn, **kwargs))  # never blocks the worker

    return handler


def _has_description(hint: Any) -> bool:
    """Whether `Annotated[..., Field(description=...)]` describes it (which wins over the
    docstring)."""
    return get_origin(hint) is Annotated and any(
        isinstance(m, FieldInfo) and m.description is not None for m in get_args(hint)[1:])


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0]
