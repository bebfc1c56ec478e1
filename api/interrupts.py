"""AG-UI interrupts: what a conversation waiting for a person becomes (one interrupt per pending
confirmation, or one for the pending question, each with a `responseSchema`), and how a run's
`resume` entries map back to confirm, reject or answer requests (`plan_resume`), checked as a
whole before any is sent. Pure: `api.agui` runs it against the conversation."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import Interrupt, ResumeEntry

from ..client.checks import UsageError
from ..contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationStatus,
    DecideRequest,
    HumanRequest,
    PendingConfirmation,
    PendingQuestion,
    RejectRequest,
)
from ..contract.policy import REMEMBER_SCOPES
from ..rules.gate import Refusal, check_answer
from ..rules.grants import MAX_GRANT_S, MAX_GRANT_USES, remember_refusal


def digest(*parts: str) -> str:
    """A bounded, plain id from a client's ids, whatever they hold."""
    joined = "\0".join(parts).encode(errors="surrogatepass")
    return hashlib.sha256(joined).hexdigest()[:32]


def confirmation_schema(parameters: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean", "description": "run the call (true) or not (false)"},
            "reason": {"type": "string", "description": "why not; the model reads it"},
            "args": {**(parameters or {"type": "object"}),
                     "description": "edited arguments to run instead (optional)"},
            "remember": {"type": "string", "enum": list(REMEMBER_SCOPES),
                         "description": "with approved: remember the approval, so later calls "
                                        "run without asking: args (this tool with these "
                                        "arguments), conversation (this tool, in this "
                                        "conversation), owner (this tool, in every "
                                        "conversation of its owner); call: this call only. "
                                        "The conversation refuses what may not be remembered"},
            "for_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_GRANT_S,
                      "description": "with remember: how many seconds it lasts"},
            "uses": {"type": "integer", "minimum": 1, "maximum": MAX_GRANT_USES,
                     "description": "with remember: how many calls it lets run"},
        },
        "required": ["approved"],
        "additionalProperties": False,
    }


def question_schema(q: PendingQuestion) -> dict[str, Any]:
    answer: dict[str, Any]
    match q.kind:
        case "choice":
            answer = {"type": "string", "enum": q.options}
        case "multi_choice":
            answer = {"type": "array", "items": {"type": "string", "enum": q.options},
                      "uniqueItems": True}
        case "confirm":
            answer = {"type": "boolean"}
        case "elicitation":  # an MCP server's request: its own schema
            answer = q.answer_schema or {"type": "object"}
        case _:
            answer = {"type": "string", "minLength": 1}
    return {"type": "object", "properties": {"answer": answer}, "required": ["answer"],
            "additionalProperties": False}


def interrupt_id(pending: PendingConfirmation | PendingQuestion) -> str:
    """What an interrupt is named by: the ref, so that a subagent's never shares an id."""
    return pending.ref or pending.call_id


def open_interrupt_ids(status: ConversationStatus) -> list[str]:
    q = status.pending_question
    return [*map(interrupt_id, status.pending_confirmations), *([interrupt_id(q)] if q else [])]


def interrupts(status: ConversationStatus, schemas: dict[str, dict[str, Any]]) -> list[Interrupt]:
    found = [
        Interrupt(
            id=interrupt_id(p), reason="tool_approval", tool_call_id=interrupt_id(p),
            message=f"{p.tool}({json.dumps(p.args, ensure_ascii=False)}) is {p.risk} and waits "
                    "for approval",
            response_schema=confirmation_schema(schemas.get(interrupt_id(p))),
            metadata={"tool": p.tool, "args": p.args, "risk": p.risk,
                      "conversation_id": p.conversation_id or status.workflow_id},
        )
        for p in status.pending_confirmations
    ]
    q = status.pending_question
    if q is not None:
        found.append(Interrupt(
            id=interrupt_id(q), reason="input_required", message=q.message,
            response_schema=question_schema(q),
            metadata={"kind": q.kind, "options": q.options,
                      "conversation_id": q.conversation_id or status.workflow_id},
        ))
    return found


@dataclass
class ResumePlan:
    """What a run's `resume` entries do: the requests to send, and the entries ignored."""

    requests: dict[str, HumanRequest] = field(default_factory=dict)  # by interrupt id
    ignored: list[dict[str, str]] = field(default_factory=list)  # {interruptId, reason}

    def request(self, run: str) -> HumanRequest | DecideRequest:
        """What the resume sends: its one request, or all of them as one (`DecideRequest`),
        under a request id of the run and the interrupts it answers."""
        parts = list(self.requests.values())
        if len(parts) == 1:
            return parts[0]
        return DecideRequest(
            request_id=resume_request_id(run, " ".join(sorted(self.requests))),
            confirm=[p for p in parts if isinstance(p, ConfirmRequest)],
            reject=[p for p in parts if isinstance(p, RejectRequest)],
            answer=[p for p in parts if isinstance(p, AnswerRequest)])


def plan_resume(entries: list[ResumeEntry], status: ConversationStatus, principal: str,
                run: str, roles: Sequence[str] = ()) -> ResumePlan:
    """The requests a run's resume entries stand for, checked as a whole before any is sent, so
    which of them apply never depends on their order. An entry naming no open interrupt (one
    already answered, say by this same resume sent again, or one never raised) is ignored, as
    AG-UI says; the open interrupts must all be answered, unless no entry names any: then the
    run just reports what the conversation waits for now. Raises UsageError (nothing sent)."""
    open_ids = open_interrupt_ids(status)
    plan, seen = ResumePlan(), set()
    for entry in entries:
        if entry.interrupt_id in seen:
            raise UsageError(f"interrupt {entry.interrupt_id} is answered twice")
        seen.add(entry.interrupt_id)
        if entry.interrupt_id not in open_ids:
            plan.ignored.append({"interruptId": entry.interrupt_id,
                                 "reason": "no open interrupt has this id (answered already, "
                                           "or never raised)"})
            continue
        request_id = resume_request_id(run, entry.interrupt_id)
        plan.requests[entry.interrupt_id] = resume_request(entry, status, principal, request_id,
                                                           roles)
    missing = [i for i in open_ids if i not in plan.requests]
    if plan.requests and missing:
        raise UsageError("a resume answers every open interrupt; not answered: "
                         f"{', '.join(missing)}")
    return plan


def resume_request_id(run: str, interrupt_id: str) -> str:
    """The request id of a run's answer to one interrupt: the same resume sent again (the same
    run id) is the same request, which the conversation takes once."""
    return f"agui:{digest(run, interrupt_id)}"


def resume_request(entry: ResumeEntry, status: ConversationStatus, principal: str,
                   request_id: str, roles: Sequence[str] = ()) -> HumanRequest:
    """The confirm, reject or answer an entry for an open interrupt stands for; UsageError for a
    payload that does not fit the interrupt's `responseSchema`, or an answer the question
    would refuse. `roles` are the principal's, which a confirm carries."""
    q = status.pending_question
    if q is not None and entry.interrupt_id == interrupt_id(q):
        if entry.status == "cancelled":  # the question is withdrawn: the model reads so
            return AnswerRequest(request_id=request_id, values=[], call_id=q.call_id,
                                 declined=True, cancelled=q.kind == "elicitation",
                                 sender=principal)
        payload = entry.payload
        value = payload.get("answer") if isinstance(payload, dict) else payload
        if q.kind == "elicitation" and isinstance(value, dict):  # the server's form, filled
            values = [json.dumps(value)]
        elif isinstance(value, bool):
            values = ["yes" if value else "no"]
        elif isinstance(value, str):
            values = [value]
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            values = value
        else:
            raise UsageError("the answer to a question is {\"answer\": ...}: a string, a list "
                             "of strings, a boolean, or (an MCP server's) an object")
        checked = check_answer(q.question(), values)
        if isinstance(checked, Refusal):
            raise UsageError(f"the answer to {entry.interrupt_id} is refused: {checked.reason}")
        return AnswerRequest(request_id=request_id, values=values, call_id=q.call_id,
                             sender=principal)
    ids = [entry.interrupt_id]
    if entry.status == "cancelled":
        return RejectRequest(request_id=request_id, call_ids=ids, reason="cancelled",
                             approver=principal)
    payload = entry.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        raise UsageError("a tool approval is resumed with {\"approved\": true|false, "
                         "\"reason\"?: str, \"args\"?: {...}, \"remember\"?: str, "
                         "\"for_s\"?: number, \"uses\"?: int}")
    remembered = _remembered(payload)
    if not payload["approved"]:
        if remembered:
            raise UsageError("remember, for_s and uses apply to an approval, not a rejection")
        reason = payload.get("reason")
        return RejectRequest(request_id=request_id, call_ids=ids,
                             reason=reason if isinstance(reason, str) else "", approver=principal)
    args = payload.get("args")
    if args is not None and not isinstance(args, dict):
        raise UsageError("edited args must be a JSON object")
    return ConfirmRequest(request_id=request_id, call_ids=ids, args=args, approver=principal,
                          roles=list(roles), **remembered)


def _remembered(payload: dict[str, Any]) -> dict[str, Any]:
    """An approval's `remember`, `for_s` and `uses`, as its responseSchema has them (those
    given); UsageError for values the conversation would refuse whatever its state."""
    remember, for_s, uses = (payload.get(k) for k in ("remember", "for_s", "uses"))
    if isinstance(uses, float) and uses.is_integer():  # JSON Schema's integer: 2.0 too
        uses = int(uses)
    if remember is not None and not isinstance(remember, str):
        raise UsageError("remember is one of " + ", ".join(REMEMBER_SCOPES))
    if for_s is not None and (isinstance(for_s, bool) or not isinstance(for_s, int | float)):
        raise UsageError("for_s is a number of seconds")
    if uses is not None and (isinstance(uses, bool) or not isinstance(uses, int)):
        raise UsageError("uses is a whole number")
    why = remember_refusal(remember, for_s, uses)
    if why is not None:
        raise UsageError(why)
    given = {"remember": remember, "for_s": for_s, "uses": uses}
    return {k: v for k, v in given.items() if v is not None}
