"""The question a tool call asks a person (one at a time), and its answer.

The rules of an answer are in `rules.gate.check_answer`; this holds the open question, its
answer until the call takes it, and whether the person declined (or cancelled) it."""

from __future__ import annotations

import asyncio
from datetime import datetime

from temporalio import workflow

from ..contract import AnswerRequest, PendingQuestion, Question
from ..contract.bounds import Limits
from ..contract.state import ConversationState
from ..rules import gate, tracing
from ..rules.gate import Refusal
from ..rules.questions import DECLINED
from . import telemetry


class OpenQuestion:
    """The question waiting for a person, if any."""

    def __init__(self, state: ConversationState, limits: Limits) -> None:
        self._state = state
        self._limits = limits
        self.lock = asyncio.Lock()  # one question at a time
        self._question: PendingQuestion | None = None
        self._asked_at: datetime | None = None
        self._answer: str | None = None
        self.declined = False  # the person withdrew the question instead of answering it
        self.cancelled = False  # ...and said so as cancel (an MCP elicitation's third answer)

    def ask(self, call_id: str, question: Question) -> None:
        self._question = PendingQuestion(call_id=call_id, **question.model_dump())
        self._asked_at = workflow.now() if workflow.in_workflow() else None
        self._answer = None
        self.declined = self.cancelled = False

    def has_answer(self) -> bool:
        """Whether the open question was answered or declined."""
        return self._answer is not None or self.declined

    def take_answer(self) -> str | None:
        answer, self._question, self._answer = self._answer, None, None
        return answer

    def withdraw(self) -> None:
        """The round that asked stops half-way: nobody can answer it now."""
        self._question = self._answer = None

    def _open(self) -> PendingQuestion | None:
        return None if self.has_answer() else self._question

    def plan(self, request: AnswerRequest) -> gate.AnswerCheck | Refusal:
        """The answer as the tool will receive it, or why it must be refused. Changes nothing."""
        open_question = self._open()
        if open_question is None:
            return Refusal("no question is waiting for an answer", final=False)
        if request.call_id is not None and request.call_id != open_question.call_id:
            return Refusal(f"the question of call {request.call_id} is not the one open "
                           f"(call {open_question.call_id})", final=False)
        if request.declined or request.cancelled:
            return gate.AnswerCheck(text=DECLINED, values=[])
        return gate.check_answer(open_question.question(), request.values,
                                 self._limits.message_bytes)

    def answer(self, request: AnswerRequest) -> str | Refusal:
        """The accepted answer's text, or the refusal."""
        checked = self.plan(request)
        if isinstance(checked, Refusal):
            return checked
        if request.declined or request.cancelled:
            self.declined, self.cancelled = True, request.cancelled
        else:
            self._answer = checked.text
        self._trace(request, checked.text)
        return checked.text

    def _trace(self, request: AnswerRequest, text: str) -> None:
        """The question's span: from when it was asked to its answer, and who gave it."""
        question, turn = self._question, self._state.current
        if question is None or not workflow.in_workflow():
            return
        now = workflow.now()
        asked = self._asked_at or now
        telemetry.emit(f"question {question.kind}",
                       tracing.child_span(turn.trace, f"question/{question.call_id}/"
                                                        f"{tracing.ns(asked)}"),
                       turn.trace, asked, now,
                       {"gen_ai.tool.call.id": question.call_id, "agent.question.kind": question.kind,
                        "agent.question.answered_by": request.sender,
                        "agent.question.declined": request.declined,
                        "agent.question.wait_s": (now - asked).total_seconds()},
                       content={"agent.question.message": question.message,
                                "agent.question.answer": text})

    def pending_question(self) -> PendingQuestion | None:
        open_question = self._open()
        if open_question is None:
            return None
        return open_question.model_copy(update={"ref": open_question.call_id})
