"""Cases (`contract.case`) built from a conversation's recorded model calls, and read back: the
prompt a fork starts from, the recorded result of a tool call, the decision a person took on
it. Pure functions: the client fetches the history (`client.cases`), the eval worker answers
from a case (`worker.evals`), and the scores are `rules.scores`."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from ..contract import (
    AuditAction,
    AuditRecord,
    ChatMessage,
    ConversationInput,
    ConversationStatus,
    LLMReply,
)
from ..contract.bounds import canonical_json
from ..contract.case import Case, CaseCall, CaseDecision, CaseStep, CaseTurn
from ..contract.models import ToolCall, Usage

ASK_PREFIX = "ask_"  # the question tools (`rules.questions`): their result is the answer


@dataclass
class ModelCall:
    """One model call as the history holds it: the prompt as the endpoint received it, and the
    reply (None: the call failed)."""

    turn: int
    step: int
    prompt: list[dict[str, Any]]
    reply: LLMReply | None
    ms: int | None = None


@dataclass
class Recording:
    """What a conversation's history and its audit trail say of it."""

    conversation_id: str
    start: ConversationInput
    calls: list[ModelCall]
    tools: list[str] = field(default_factory=list)
    audit: list[AuditRecord] = field(default_factory=list)
    status: ConversationStatus | None = None
    ms: int | None = None
    full_results: dict[str, str] = field(default_factory=dict)  # by call id: results cut for the model


def call_args(call: ToolCall) -> dict[str, Any] | str:
    """A call's arguments as a JSON object, or the raw text when they are not one."""
    try:
        parsed = json.loads(call.function.arguments or "{}")
    except (json.JSONDecodeError, TypeError):
        return call.function.arguments
    return parsed if isinstance(parsed, dict) else call.function.arguments


def call_key(tool: str, args: dict[str, Any] | str) -> str:
    """What tells two calls apart: the tool and its arguments, canonically."""
    return tool + "\x00" + (canonical_json(args) if isinstance(args, dict) else args)


def _steps(calls: list[ModelCall]) -> list[tuple[ModelCall, ModelCall]]:
    """Each step's first call (its prompt) and last answered call (its reply), in order."""
    steps: dict[tuple[int, int], tuple[ModelCall, ModelCall | None]] = {}
    for call in calls:
        first, last = steps.get((call.turn, call.step), (call, None))
        steps[(call.turn, call.step)] = (first, call if call.reply is not None else last)
    return [(first, last) for first, last in steps.values() if last is not None]


def _results(prompt: list[dict[str, Any]], ids: set[str]) -> dict[str, str]:
    """The tool messages of a prompt that answer the given call ids (the latest of each)."""
    return {m["tool_call_id"]: m.get("content") or "" for m in prompt
            if m.get("role") == "tool" and m.get("tool_call_id") in ids}


def _last_user(prompt: list[dict[str, Any]]) -> str | None:
    return next((m.get("content") for m in reversed(prompt) if m.get("role") == "user"), None)


def build_case(rec: Recording, name: str, exported_at: datetime | None = None) -> Case:
    """The case of a recording: its turns and steps, each call with the observation the model
    was shown next and the decision the audit trail holds for it."""
    actions = {(r.turn, a.call_id): a for r in rec.audit if r.kind == "step" for a in r.actions}
    people = {r.turn: r for r in rec.audit if r.kind in ("start", "message")}
    stops = {r.turn: r.stop_reason for r in rec.audit if r.kind == "step" and r.stop_reason}
    pairs = _steps(rec.calls)
    steps: list[CaseStep] = []
    turns: dict[int, CaseTurn] = {}
    for index, (first, last) in enumerate(pairs, start=1):
        assert last.reply is not None
        message, usage = last.reply.message, last.reply.usage
        later = pairs[index][0].prompt if index < len(pairs) else []
        made = message.tool_calls or []
        results = _results(later, {c.id for c in made})
        calls = [_case_call(c, results.get(c.id), actions.get((first.turn, c.id)),
                            rec.full_results.get(c.id)) for c in made]
        steps.append(CaseStep(index=index, turn=first.turn, step=first.step,
                              text=message.content, calls=calls, usage=usage,
                              model=last.reply.model, ms=last.ms))
        if first.turn not in turns:
            said = people.get(first.turn)
            turns[first.turn] = CaseTurn(turn=first.turn, message=_last_user(first.prompt),
                                         by=said.by if said else None,
                                         stop_reason=stops.get(first.turn))
        turns[first.turn].final_answer = None if made else message.content
    status, total = rec.status, sum((s.usage for s in steps), Usage())
    return Case(
        name=name, conversation_id=rec.conversation_id, exported_at=exported_at,
        model=rec.start.model, system_prompt=rec.start.system_prompt,
        output_schema=rec.start.output_schema, tools=rec.tools, turns=list(turns.values()),
        steps=steps,
        final_answer=status.final_answer if status else (steps[-1].text if steps else None),
        final_output=status.final_output if status else None,
        usage=total, ms=rec.ms,
        forked_from=rec.start.fork.conversation_id if rec.start.fork else None,
        at_step=rec.start.fork.at_step if rec.start.fork else None,
    )


def _case_call(call: ToolCall, result: str | None, action: AuditAction | None,
               full: str | None = None) -> CaseCall:
    args = call_args(call)
    decision = None
    if action is not None and action.decision is not None:
        d = action.decision
        edited = action.input if isinstance(action.input, dict) and action.input != args else None
        decision = CaseDecision(approved=d.approved, by=d.approver, reason=d.reason,
                                edited_args=edited)
    asked = call.function.name.startswith(ASK_PREFIX) and action is not None
    return CaseCall(id=call.id, tool=call.function.name, args=args, result=result,
                    full_result=full if result is not None else None,
                    status=action.status if action is not None else None, decision=decision,
                    answer=result if asked and action.status == "ok" else None)


def steps_of(rec: Recording, turn: int | None = None) -> list[tuple[int, ModelCall]]:
    """The recording's steps (of one turn, or all), each with its index in the case and the
    first model call of it: the one whose prompt a fork starts from."""
    return [(index, first) for index, (first, _) in enumerate(_steps(rec.calls), start=1)
            if turn in (None, first.turn)]


def prompt_of(call: ModelCall) -> list[ChatMessage]:
    """The messages a model call was shown."""
    return [ChatMessage.model_validate(m) for m in call.prompt]


T = TypeVar("T")


class _InOrder(Generic[T]):
    """What was recorded for each key, handed out in order, the last one again once all were."""

    def __init__(self) -> None:
        self._found: dict[str, list[T]] = defaultdict(list)
        self._used: dict[str, int] = defaultdict(int)

    def add(self, key: str, value: T) -> None:
        self._found[key].append(value)

    def take(self, key: str) -> T | None:
        found = self._found.get(key)
        if not found:
            return None
        used = self._used[key]
        self._used[key] = used + 1
        return found[min(used, len(found) - 1)]


class RecordedTools:
    """A case's tool results and decisions, answered by tool and arguments: each recorded call
    once, in order, and the last one again for a call repeated more often than it was recorded.
    The args a person edited match a result too, since those are the ones that ran."""

    def __init__(self, case: Case) -> None:
        self._results: _InOrder[str] = _InOrder()
        self._decisions: _InOrder[CaseDecision] = _InOrder()
        for call in case.calls():
            key = call_key(call.tool, call.args)
            keys = {key}
            if call.decision is not None:
                self._decisions.add(key, call.decision)
                if call.decision.edited_args is not None:
                    keys.add(call_key(call.tool, call.decision.edited_args))
            for each in keys:
                if call.result is not None:  # the whole result, where it was cut for the model
                    self._results.add(each, call.full_result or call.result)

    def result(self, tool: str, args: dict[str, Any] | str) -> str | None:
        return self._results.take(call_key(tool, args))

    def decision(self, tool: str, args: dict[str, Any] | str) -> CaseDecision | None:
        return self._decisions.take(call_key(tool, args))
