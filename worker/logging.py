"""structlog JSON lines, with activity context bound once by an interceptor."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog
from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

RUNTIME_ACTIVITIES = frozenset({"llm_call", "list_tools"})


def configure_logging(level: int = logging.INFO) -> None:
    """Render structlog events and stdlib records (Temporal's, workflow.logger's) as JSON lines."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
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
        with structlog.contextvars.bound_contextvars(**fields):
            return await super().execute_activity(input)
