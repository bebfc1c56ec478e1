"""How a failed activity or child workflow reads: its innermost cause, whether it failed
because the conversation itself is being cancelled, and what a failed model call says (and
whether another model entry may answer)."""

from __future__ import annotations

import asyncio

from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

# How an activity fails: an `ActivityError`, or a local activity's cause itself (not wrapped).
ACTIVITY_FAILURES = (ActivityError, ApplicationError, TimeoutError, CancelledError)


def cause_of(err: BaseException) -> BaseException | None:
    """What an activity failed of: an `ActivityError`'s cause, a local activity's failure."""
    return err.cause if isinstance(err, ActivityError) else err


def is_cancelled(err: ActivityError) -> bool:
    """The activity was cancelled (by the conversation, or with it)."""
    return isinstance(err.cause, CancelledError)


def raise_if_cancelled(err: BaseException) -> None:
    """An activity failed because the conversation is being cancelled: let that win."""
    if isinstance(cause_of(err), CancelledError):
        raise asyncio.CancelledError() from err


def failure_reason(err: BaseException) -> str:
    """The innermost readable cause of an activity failure."""
    cause: BaseException | None = err
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, TimeoutError):
        return f"timed out ({cause.type.name.lower().replace('_', '-') if cause.type else 'timeout'})"
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause)


# A model entry's failures another entry may not have: its endpoint down, overloaded or out of
# retries, the model unknown there, its key refused. A bad request would fail on every entry.
ENTRY_FAILURES = frozenset({"LLMTransientError", "LLMModelUnavailable", "LLMFormatError"})


def fallback_reason(err: ActivityError) -> str | None:
    """Why a failed model call may go to the next entry, or None (it is the request's fault, or
    the conversation's: a context miss, a cancellation)."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type in ENTRY_FAILURES:
        return f"the model entry failed: {failure_reason(err)}"
    if isinstance(cause, TimeoutError):
        return "the model entry timed out"
    return None


MIN_WINDOW_TOKENS = 256  # a window said smaller than this is not believed


def model_failure(err: ActivityError, attempts: int, timeout_s: float, heartbeat_s: float
                  ) -> str:
    """A failed model call as people read it: the reason, the attempts, and what may help."""
    reason, cause = failure_reason(err), err.cause
    tried = (f" (tried {attempts} times)"
             if err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED else "")
    hint = ""
    if isinstance(cause, TimeoutError) and cause.type == TimeoutType.START_TO_CLOSE:
        hint = (f"; a call may take {timeout_s:g} s: a slow model needs more (timeout_s on its "
                "entry in AGENT_MODELS)")
    elif isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT:
        hint = (f"; the worker gave no sign of the call for {heartbeat_s:g} s (a busy CPU, or "
                "a model slow to its first token: heartbeat_s on its entry in AGENT_MODELS)")
    elif isinstance(cause, ApplicationError) and cause.type == "LLMRequestRejected":
        hint = "; the endpoint refuses the request itself: asking again will not help"
    return f"model call failed{tried}: {reason}{hint}"


def refusal_said(err: ActivityError) -> dict:
    """What the endpoint's refusal of a prompt as too long said (`LLMContextTooLong`'s details:
    the window, the prompt's tokens, its user messages' counted tokens), where it said it."""
    details = err.cause.details if isinstance(err.cause, ApplicationError) else ()
    return details[0] if details and isinstance(details[0], dict) else {}


def is_context_too_long(err: ActivityError) -> bool:
    """The endpoint refused the prompt as longer than the model's context window."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type == "LLMContextTooLong"


def is_context_miss(err: ActivityError) -> bool:
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type == "ContextMiss"
