"""structlog JSON lines, with activity context bound once by an interceptor."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import structlog
from temporalio import activity
from temporalio.common import RawValue
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from ..contract import RUNTIME_ACTIVITIES


def add_pid(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    event["pid"] = os.getpid()
    return event


def configure_logging(level: int = logging.INFO) -> None:
    """Render structlog events and stdlib records (Temporal's, workflow.logger's) as JSON lines."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        add_pid,  # workers started by `--processes` share one output
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One line per request is noise, and a URL may carry a secret from an MCP server's config.
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)


class LoggingInterceptor(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _BindActivityContext(next)


class _BindActivityContext(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        fields: dict[str, Any] = {
            "workflow_id": info.workflow_id,
            "run_id": info.workflow_run_id,
            "activity": info.activity_type,
            "attempt": info.attempt,
        }
        if info.activity_type not in RUNTIME_ACTIVITIES:
            fields["tool"] = info.activity_type
        step = _step_of(input.args)
        if step is not None:
            fields["step"] = step
        with structlog.contextvars.bound_contextvars(**fields):
            return await super().execute_activity(input)


def _step_of(args: Sequence[Any]) -> int | None:
    """The ReAct step an activity serves, read from its input (a model request or a tool call)."""
    if not args:
        return None
    arg = args[0]
    if isinstance(arg, RawValue):  # dynamic activities (tools) get their input undecoded
        try:
            arg = activity.payload_converter().from_payload(arg.payload, dict)
        except Exception:  # not ours to judge here; the activity reports bad input itself
            return None
    step = arg.get("step") if isinstance(arg, dict) else getattr(arg, "step", None)
    return step if isinstance(step, int) else None


SECRET_KEYS = frozenset({"api_key", "apikey", "authorization", "token", "secret", "password"})
SECRET_SUFFIXES = ("_api_key", "_token", "_secret", "_password")  # not "total_tokens"


def redact_secrets(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """A structlog processor: values under secret-looking keys never reach the log."""
    return {k: _redact(k, v) for k, v in event.items()}


def _redact(key: str, value: Any) -> Any:
    lowered = key.lower()
    if lowered in SECRET_KEYS or lowered.endswith(SECRET_SUFFIXES):
        return "***"
    if isinstance(value, dict):
        return {k: _redact(str(k), v) for k, v in value.items()}
    return value
