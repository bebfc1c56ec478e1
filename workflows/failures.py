"""How a failed activity or child workflow reads: its innermost cause, and whether it failed
because the conversation itself is being cancelled."""

from __future__ import annotations

import asyncio

from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutError,
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
