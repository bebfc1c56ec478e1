"""What a signal must be to reach the conversation: one request per signal, and a request the
workflow can read. An interceptor the worker installs (`worker.app`)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.worker import (
    HandleSignalInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)


def sent(request: object, signal: str) -> bool:
    """Whether a signal came with its request; one without is dropped, with a warning."""
    if request is None:
        workflow.logger.warning("signal %s came without its request; dropped", signal)
        return False
    return True


class SignalGuard(Interceptor):
    """Drops a signal sent with more than the one request every signal here takes: the SDK
    would call its handler with all of them, and the TypeError would fail the workflow task
    (a signal without its request is `_sent`'s to drop). The worker and every replayer run it."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _OneRequestPerSignal


class _OneRequestPerSignal(WorkflowInboundInterceptor):
    async def handle_signal(self, input: HandleSignalInput) -> None:
        if len(input.args) > 1:
            workflow.logger.warning("signal %s came with %d arguments, not one; dropped",
                                    input.signal, len(input.args))
            return
        await super().handle_signal(input)
