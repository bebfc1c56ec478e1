"""The request bodies, with every rule a request can break written into the schema (or, where a
schema cannot say it, into the field's description), so that a schema-valid request is never
refused by a rule the client could not see. A refusal that depends on the conversation's state (no
such call, no question waiting) is the conversation's, a 409."""

from __future__ import annotations

import copy
import json
import math
import sys
from typing import Annotated, Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ..client.checks import (
    CONVERSATION_ID_PATTERN,
    MAX_JSON_DEPTH,
    MIN_CONTEXT_TOKENS,
    UsageError,
    targets,
    unsendable,
)
from ..contract.bounds import (
    DEFAULT_MESSAGE_BYTES,
    MAX_CALL_ARGS_BYTES,
    MAX_CONTEXT_BUDGET_TOKENS,
    json_size,
)
from ..contract.policy import REMEMBER_SCOPES, Remember
from ..rules.grants import MAX_GRANT_S, MAX_GRANT_USES

# Blank is what Python's str.strip() removes (the conversation strips) and what ECMAScript's \s
# matches (JSON Schema validators), so that both agree a text is not blank.
BLANK = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
NOT_BLANK = f"[^{BLANK}]"
# A character takes at most 6 bytes of JSON (`\u0001`), and the conversation counts JSON bytes.
MESSAGE_CHARS = DEFAULT_MESSAGE_BYTES // 6
MAX_ANSWER_VALUES = 16
MAX_REF_CHARS = 1000  # a call's ref: the path of call ids from the conversation to its owner
# The values together, quotes and commas included, fit the bytes of one message.
ANSWER_CHARS = ((DEFAULT_MESSAGE_BYTES - 1) // MAX_ANSWER_VALUES - 3) // 6
TEXT_RULE = (f"not blank; at most {MESSAGE_CHARS:,} characters (the conversation takes "
             f"{DEFAULT_MESSAGE_BYTES // 1024} KiB of JSON, and a character takes at most 6)")

Message = Annotated[str, Field(min_length=1, max_length=MESSAGE_CHARS, pattern=NOT_BLANK)]
AnswerValue = Annotated[str, Field(min_length=1, max_length=ANSWER_CHARS, pattern=NOT_BLANK)]


def _whole(value: Any) -> Any:
    """JSON Schema's `integer` is any number without a fraction, `2.0` too."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


WholeNumber = Annotated[int, BeforeValidator(_whole)]


class Body(BaseModel):
    """Unknown fields are refused (an `approver` among them), and so is what no Temporal payload
    can carry: a lone surrogate (`"\\ud800"` is valid JSON, but not Unicode text) or nesting
    deeper than MAX_JSON_DEPTH. Values are taken as their JSON types say, never coerced (`true`
    is no number, `"5"` no integer), as the schema promises."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _sendable(cls, data: Any) -> Any:
        reason = unsendable(data)
        if reason is not None:
            raise ValueError(reason)
        return data


class StartBody(Body):
    prompt: Message = Field(description=f"the first message: {TEXT_RULE}")
    id: str | None = Field(default=None, pattern=CONVERSATION_ID_PATTERN,
                           description="the conversation id, 1-200 letters, digits and _ . : @ + "
                                       "= - (not starting with . : @ + = -); the same id makes "
                                       "the call idempotent (default: a fresh one)")
    one_shot: bool = Field(default=False, description="complete after the first answer")
    model: str | None = Field(default=None, description="default: the worker's OPENAI_MODEL")
    max_steps: WholeNumber = Field(default=10, ge=1, description="LLM rounds per turn")
    max_parallel_tools: WholeNumber = Field(default=8, ge=1, le=64, description=(
        "a step's tool calls running at once; the rest wait their turn"))
    max_parallel_subagents: WholeNumber = Field(default=4, ge=1, le=64, description=(
        "of those, subagents running at once; the rest wait their turn"))
    # (the bounds before the validator, so that the schema says them as JSON Schema does)
    max_calls_per_step: Annotated[int, Field(ge=1, le=64),
                                  BeforeValidator(_whole)] | None = Field(
        default=None, description="the tool calls a step may make; the rest are not run, and "
                                  "the model reads why (default: as many as a reply holds, 64)")
    max_cost_usd: float | None = Field(default=None, gt=0,
                                       description="stop a turn once the conversation has cost "
                                                   "this many dollars")
    # (the bounds before the validator, so that the schema says them as JSON Schema does)
    context_budget_tokens: Annotated[int, Field(ge=MIN_CONTEXT_TOKENS,
                                                le=MAX_CONTEXT_BUDGET_TOKENS),
                                     BeforeValidator(_whole)] | None = Field(
        default=None, description="the tokens a prompt may take before older turns fold into a summary "
                    "(default 24,000; less where the model's window is known to be smaller)")
    system_prompt: str | None = None
    output_schema: dict[str, Any] | None = Field(
        default=None, description="a JSON Schema (at most 16 KiB) the final answer must fit; the "
                                  "status then carries it parsed as `final_output`")


class MessageBody(Body):
    text: Message = Field(description=f"the next user message: {TEXT_RULE}")
    steer: bool = Field(default=False, description=(
        "mid-turn: the model gets it at the turn's next step (after the tool round in flight), "
        "not the next turn; the outcome's `reason` says so. A turn that ends first answers it "
        "next; with no turn running it is a message as any other"))


def _one_of(*branches: dict[str, Any]) -> dict[str, Any]:
    """The ways a decision may name its calls, for the schema (the validator below enforces
    the same)."""
    return {"oneOf": copy.deepcopy(list(branches))}


NAMED = {"required": ["call_ids"], "properties": {"call_ids": {"minItems": 1},
                                                  "all": {"const": False}}}
ALL = {"required": ["all"], "properties": {"all": {"const": True}, "call_ids": {"maxItems": 0}}}


class Targets(Body):
    call_ids: list[str] = Field(default=[], description="the pending calls to decide, by ref "
                                "(a call id, or a subagent's `call_0/call_0`); or set `all`")
    all: bool = Field(default=False, description="every call waiting for a decision; or name "
                                                 "them in `call_ids`")
    seen: dict[str, str] = Field(default={}, description="call ref -> the `args_hash` of the "
                                 "arguments shown to the human: other arguments are refused")

    @model_validator(mode="after")
    def _names_its_calls(self) -> Targets:
        try:
            targets(self.call_ids, self.all, "all")
        except UsageError as err:
            raise ValueError(str(err)) from None
        return self


# `for_s` and `uses` bound a remembered approval: given, `remember` must say what to remember.
REMEMBERED = [scope for scope in REMEMBER_SCOPES if scope != "call"]
BOUNDS_A_GRANT = {
    "if": {"anyOf": [{"required": ["for_s"], "properties": {"for_s": {"type": "number"}}},
                     {"required": ["uses"], "properties": {"uses": {"type": "integer"}}}]},
    "then": {"required": ["remember"], "properties": {"remember": {"enum": REMEMBERED}}},
}


class ConfirmBody(Targets):
    model_config = ConfigDict(json_schema_extra={**_one_of(
        {**NAMED, "properties": {**NAMED["properties"], "args": {"type": "null"}}},
        {"required": ["call_ids", "args"],
         "properties": {"call_ids": {"minItems": 1, "maxItems": 1}, "all": {"const": False},
                        "args": {"type": "object"}}},
        {**ALL, "properties": {**ALL["properties"], "args": {"type": "null"}}},
    ), **copy.deepcopy(BOUNDS_A_GRANT)})

    args: dict[str, Any] | None = Field(
        default=None, description=f"edited arguments, for exactly one call named in `call_ids`: "
        f"at most {MAX_CALL_ARGS_BYTES // 1024} KiB of JSON, nested at most {MAX_JSON_DEPTH} "
        "levels; the tool's schema (GET .../schemas) is checked by the conversation")

    remember: Remember | None = Field(
        default=None, description="remember the approval, so that later calls run without "
        "asking: `args` (the same tool with the same arguments, in this conversation), "
        "`conversation` (the tool, in this conversation), `owner` (the tool, in every "
        "conversation of this one's owner); `call` or unset: this call only. The conversation "
        "refuses the whole decision (409) when the approval may not be remembered: a "
        "destructive call (unless a policy rule says it may be), a call under four eyes "
        "(AGENT_FOUR_EYES), or a conversation that holds its most grants already")
    for_s: float | None = Field(
        default=None, gt=0, le=MAX_GRANT_S,
        description="how many seconds the remembered approval lasts (default: no time limit); "
                    "only with `remember` args, conversation or owner")
    uses: Annotated[int, Field(ge=1, le=MAX_GRANT_USES),
                    BeforeValidator(_whole)] | None = Field(
        default=None,
        description="how many calls the remembered approval lets run (default: no limit); "
                    "only with `remember` args, conversation or owner")

    @model_validator(mode="after")
    def _bounds_what_it_remembers(self) -> ConfirmBody:
        if (self.for_s is not None or self.uses is not None) and self.remember in (None, "call"):
            raise ValueError("for_s and uses apply to a remembered approval: set remember to "
                             f"{', '.join(REMEMBERED)}")
        return self

    @model_validator(mode="after")
    def _edits_one_call(self) -> ConfirmBody:
        if self.args is None:
            return self
        if len(self.call_ids) != 1:
            raise ValueError("edited args apply to exactly one call id, named explicitly")
        if (size := json_size(self.args)) > MAX_CALL_ARGS_BYTES:
            raise ValueError(f"edited args are {size:,} bytes of JSON, over the limit of "
                             f"{MAX_CALL_ARGS_BYTES:,}")
        return self


class RejectBody(Targets):
    model_config = ConfigDict(json_schema_extra=_one_of(NAMED, ALL))

    reason: str = Field(default="", description="why; the model reads it")


class AnswerBody(Body):
    call_id: str | None = Field(
        default=None, max_length=MAX_REF_CHARS,
        description="the question answered, by its ref (`pending_question.ref`): a later "
                    "question, or another subagent's, refuses the answer; unset, the answer is "
                    "for whichever question is open")
    values: list[AnswerValue] = Field(
        min_length=1, max_length=MAX_ANSWER_VALUES,
        description=f"text, one option, several, or yes/no; each value not blank and at most "
                    f"{ANSWER_CHARS:,} characters, so that together they fit the "
                    f"{DEFAULT_MESSAGE_BYTES // 1024} KiB of a message")


class DeclineBody(Body):
    call_id: str | None = Field(
        default=None, max_length=MAX_REF_CHARS,
        description="the question said no to, by its ref (`pending_question.ref`): a later "
                    "question, or another subagent's, refuses it; unset, whichever is open")
    cancel: bool = Field(
        default=False, description="an MCP server's question: tell the server cancel rather "
                                   "than decline")


class EndBody(Body):
    pass


class StopBody(Body):
    pass


# ----- reading a body as JSON -----

def strict_json(body: bytes) -> Any:
    """A body as RFC 8259 JSON: UTF-8 (a BOM is skipped), and numbers a double can hold (no NaN,
    no Infinity). Every failure is a JSONDecodeError, which FastAPI answers as `json_invalid`."""
    try:
        return json.loads(body.decode("utf-8-sig"), parse_constant=_not_json,
                          parse_float=_finite, parse_int=_whole)
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError as err:
        raise json.JSONDecodeError(f"it is not UTF-8 ({err.reason} at byte {err.start})",
                                   "", 0) from None
    except RecursionError:
        raise json.JSONDecodeError("it nests too deeply to read", "", 0) from None
    except ValueError as err:  # from the parsers below
        raise json.JSONDecodeError(str(err), "", 0) from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _whole(text: str) -> int:
    if len(text) > sys.get_int_max_str_digits():
        raise ValueError(f"an integer of {len(text):,} digits is too long")
    return int(text)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond the range of a double")
    return value


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = strict_json(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """A route that reads its body with `strict_json`: where Python's json would take invalid
    UTF-8 (as lone surrogates), NaN or Infinity, or fail with something FastAPI answers as a bare
    400, the client gets a 422 that says why."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict


class ForkBody(Body):
    at_step: WholeNumber = Field(ge=1, description="the original's step to go on from: 1 for the "
                                                   "first, as its export numbers them; with "
                                                   "`turn`, as the audit trail numbers the "
                                                   "steps of that turn")
    turn: WholeNumber | None = Field(default=None, ge=1,
                                     description="the turn `at_step` counts in (default: the "
                                                 "whole conversation)")
    id: str | None = Field(default=None, pattern=CONVERSATION_ID_PATTERN,
                           description="the fork's id (default: a fresh one)")
    model: str | None = Field(default=None, description="default: the original's")
    system_prompt: str | None = Field(default=None, max_length=MESSAGE_CHARS,
                                      description="default: the original's")
