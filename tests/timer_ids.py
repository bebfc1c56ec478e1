"""Whether a replay starts the timers its history recorded, under the same ids.

Temporal's replay matches a timer the code starts to the next one the history holds by kind, not
by id. A timer started and cancelled in one activation leaves no event but uses up an id; so if
the code takes another path on replay than it took live (a decision taken before or after the
call it names was held), the ids shift, the replay still passes, and the next command naming a
timer by its id (its cancellation) is refused by the server, whatever worker takes the task:
the conversation is wedged (`BadCancelTimerAttributes`: a chaos run found one). This replays a
history and compares the ids."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import temporalio.worker._workflow_instance as instance
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory


@contextmanager
def timers_started(workflow_id: str) -> Iterator[list[tuple[str, int]]]:
    """The timers the workflow code starts and cancels while replaying, in order, as
    ("start" | "cancel", id), but for those it starts and cancels in one activation (they
    leave no event). It reads the SDK's activations of `workflow_id` (no public hook sees a
    timer), and no other workflow's: a worker of the tests may run in this process meanwhile."""
    seen: list[tuple[str, int]] = []
    activate = instance._WorkflowInstanceImpl.activate

    def recording(self, act):
        completion = activate(self, act)
        if act.is_replaying and self._info.workflow_id == workflow_id:
            timers = [(kind.split("_")[0], getattr(command, kind).seq)
                      for command in completion.successful.commands
                      if (kind := command.WhichOneof("variant")) in ("start_timer",
                                                                      "cancel_timer")]
            # one started and cancelled in the same activation leaves no event
            elided = {n for kind, n in timers if kind == "start"} & {
                n for kind, n in timers if kind == "cancel"}
            seen.extend(t for t in timers if t[1] not in elided)
        return completion

    instance._WorkflowInstanceImpl.activate = recording
    try:
        yield seen
    finally:
        instance._WorkflowInstanceImpl.activate = activate


def recorded_timers(history: WorkflowHistory) -> list[tuple[str, int]]:
    started, fired = EventType.EVENT_TYPE_TIMER_STARTED, EventType.EVENT_TYPE_TIMER_CANCELED
    return [("start", int(e.timer_started_event_attributes.timer_id)) if e.event_type == started
            else ("cancel", int(e.timer_canceled_event_attributes.timer_id))
            for e in history.events if e.event_type in (started, fired)]
