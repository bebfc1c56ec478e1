"""A person's decisions as one table: each is a signal and its Update twin, carrying one kind of
request, which the desk plans and the conversation applies (`ConversationWorkflow._human`). The
twin answers synchronously, and its validator refuses before anything reaches the history; the
signal drops a request it cannot read (`signal_guard.sent`)."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from ..contract import AnswerRequest, ConfirmRequest, RejectRequest, SignalOutcome, names
from .signal_guard import sent

# (the signal, its Update twin, the request both carry, the desk's plan of it)
DECISIONS = (
    (names.CONFIRM_SIGNAL, names.DECIDE_CONFIRM.name, ConfirmRequest, "plan_confirm"),
    (names.REJECT_SIGNAL, names.DECIDE_REJECT.name, RejectRequest, "plan_reject"),
    (names.ANSWER_SIGNAL, names.GIVE_ANSWER.name, AnswerRequest, "plan_answer"),
)


def decision_signal(name: str, request_type: type) -> Any:
    """The signal of a decision: a request it can read is applied."""
    async def handler(self: Any, request: Any = None) -> None:
        if sent(request, name):
            await self._human(request)

    handler.__name__ = handler.__qualname__ = name
    handler.__annotations__ = {"request": request_type | None, "return": None}
    return workflow.signal(name=name)(handler)


def decision_update(name: str, request_type: type, plan: str) -> Any:
    """The Update twin of a decision: refused in its validator if what it would do now is not
    allowed (a request id already taken answers as it did), else applied, with its outcome."""
    async def handler(self: Any, request: Any) -> SignalOutcome:
        return await self._human(request)

    def check(self: Any, request: Any) -> None:
        self._check_request(request, getattr(self._desk, plan)(request))

    for fn, returns in ((handler, SignalOutcome), (check, None)):
        fn.__annotations__ = {"request": request_type, "return": returns}
    handler.__name__ = handler.__qualname__ = name
    check.__name__ = check.__qualname__ = f"_check_{name}"
    update = workflow.update(name=name)(handler)
    update.validator(check)
    return update
