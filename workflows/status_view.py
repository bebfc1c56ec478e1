"""What a conversation says of itself: its status (the status query), its `AgentStatus` search
attribute and the Temporal UI's details, what its subagents report (each waiting call named by
its path from here), and, for a subagent, its report to its parent. `ConversationWorkflow` hands
it the state it reads, and tells it its phase."""

from __future__ import annotations

import asyncio
from typing import TypeVar

from temporalio import workflow

from ..contract import (
    CLOSED_STATUSES,
    WAITING_STATUSES,
    ChildRef,
    ChildReport,
    ConversationInput,
    ConversationStatus,
    PendingConfirmation,
    PendingQuestion,
    Status,
)
from ..contract.bounds import (
    MAX_CALLS_PER_REPLY,
)
from ..contract.names import CHILD_STATUS_SIGNAL, relative_id, version_label
from ..contract.state import ConversationState
from ..rules import tracing
from ..rules.commands import details_markdown
from ..rules.search_attributes import AGENT_STATUS
from .decisions import Decisions
from .model_step import ModelStep
from .reporting import Reporter

PendingT = TypeVar("PendingT", PendingConfirmation, PendingQuestion)


class StatusView:
    """The conversation's status view: its status query, the Temporal UI's details and search
    attributes, and the reports of its subagents (and, a subagent's, to its parent)."""

    def __init__(self, inp: ConversationInput, state: ConversationState, decisions: Decisions,
                 reporter: Reporter, model_step: ModelStep) -> None:
        self._input = inp
        self._state = state
        self._decisions = decisions
        self._reporter = reporter
        self._model_step = model_step
        self.phase: Status = "running"  # running | idle | completed | failed; waits: decisions
        self._published: Status | None = None
        self._reported: ChildReport | None = None  # a subagent's last report to its parent
        self.reports: list[asyncio.Future[None]] = []  # those reports, on their way

    def status(self) -> ConversationStatus:
        state, turn, fork = self._state, self._state.current, self._input.fork
        status = self.current()
        ended = status in CLOSED_STATUSES  # what waited for a person went with it
        return ConversationStatus(
            workflow_id=workflow.info().workflow_id, status=status,
            turn=turn.number, steps=turn.steps, llm_calls=state.llm_calls,
            tools_used=list(turn.tools_used), stop_reason=turn.stop_reason,
            final_answer=turn.final_answer, final_output=turn.final_output,
            pending_confirmations=[] if ended else self.pending_confirmations(),
            pending_question=None if ended else self.pending_question(),
            usage=state.usage,
            error=turn.error or ("; ".join(state.notices) or None),
            queued_messages=len(state.inbox) + len(state.steering),
            decisions=list(turn.decisions),
            turns=list(state.turns), runs=state.runs, context=self._model_step.context_use(),
            children=[ChildRef(workflow_id=c.workflow_id, profile=c.profile, status=c.status)
                      for c in turn.children],
            owner=self._input.owner, trace_id=tracing.trace_id_of(turn.trace),
            forked_from=fork.conversation_id if fork else None,
            at_step=fork.at_step if fork else None,
            version=running_version(),
            held=turn.share.waiting if turn.share and turn.in_progress and not ended else None,
        )

    def pending_confirmations(self) -> list[PendingConfirmation]:
        """The calls waiting for a decision: this conversation's, then its subagents'."""
        children = self._state.current.children
        return [*self._decisions.approvals.pending_confirmations(),
                *(p for c in children for p in c.pending_confirmations)]

    def pending_question(self) -> PendingQuestion | None:
        return self._decisions.question.pending_question() or next(
            (c.pending_question for c in self._state.current.children if c.pending_question),
            None)

    def take_child_report(self, report: ChildReport) -> None:
        """A subagent's status and what it waits for (its own subagents' calls and questions
        included), so that this conversation shows them, each named by its path from here."""
        for child in self._state.current.children:
            if child.workflow_id == report.workflow_id and child.status not in CLOSED_STATUSES:
                if None not in (report.seq, child.seq) and report.seq <= child.seq:
                    return  # an earlier report, delivered after a later one
                child.seq = report.seq
                waited = (child.pending_confirmations, child.pending_question)
                child.status = report.status
                child.pending_confirmations = [
                    self._owned(p, report.workflow_id)
                    for p in report.pending_confirmations[:MAX_CALLS_PER_REPLY]]
                question = report.pending_question
                child.pending_question = question and self._owned(question, report.workflow_id)
                waits = (child.pending_confirmations, child.pending_question)
                if waits != waited and (waits[0] or waits[1]):  # what this one's watchers wake on
                    self._reporter.emit("child_waiting", text=child.workflow_id,
                                        tool=child.profile, status=child.status)
                self.sync()

    def _owned(self, pending: PendingT, child_id: str) -> PendingT:
        """A subagent's pending call or question, with the conversation that owns it and its
        ref from here: the owner's id relative to this one's, then the call id."""
        owner = pending.conversation_id or child_id
        path = relative_id(owner, workflow.info().workflow_id)
        return pending.model_copy(update={"conversation_id": owner,
                                          "ref": f"{path}/{pending.call_id}"})

    def current(self) -> Status:
        if self.phase == "running":
            return self._decisions.waiting_status() or _children_waiting(
                self._state.current.children) or "running"
        return self.phase

    def set_phase(self, phase: Status) -> None:
        self.phase = phase
        self.sync()

    def sync(self) -> None:
        """Publish the status to the `AgentStatus` search attribute and the UI, when it changed
        (and, for a subagent, tell its parent what it waits for)."""
        status = self.current()
        self._report_to_parent(status)
        if status == self._published:
            return
        self._published = status
        turn = self._state.current
        workflow.upsert_search_attributes([AGENT_STATUS.value_set(status)])
        details = details_markdown(workflow.info().workflow_id, status, turn.number,
                                   turn.stop_reason, turn.error,
                                   self._decisions.approvals.pending_confirmations(),
                                   self._decisions.question.pending_question(), self._input.owner,
                                   turn.children)
        version = running_version()
        if version is not None:
            details += f"\n\n**Version:** `{version}`"
        workflow.set_current_details(details)


    def _report_to_parent(self, status: Status) -> None:
        parent = workflow.info().parent
        if parent is None or self._input.profile is None:
            return
        report = ChildReport(workflow_id=workflow.info().workflow_id, profile=self._input.profile,
                             status=status, pending_confirmations=self.pending_confirmations(),
                             pending_question=self.pending_question())
        if status in CLOSED_STATUSES or report == (self._reported or ChildReport(
                workflow_id=report.workflow_id, profile=report.profile, status="running")):
            return  # the parent learns the end from the child's result
        self._reported = report
        self._state.reported += 1
        report = report.model_copy(update={"seq": self._state.reported})
        handle = workflow.get_external_workflow_handle(parent.workflow_id)
        self.reports.append(asyncio.ensure_future(handle.signal(CHILD_STATUS_SIGNAL, report)))


def running_version() -> str | None:
    """The Worker Deployment Version (`NAME:ID`) this workflow task runs on, as recorded in the
    history (so replays agree); None on an unversioned worker."""
    return version_label(workflow.info().get_current_deployment_version())


def new_version() -> bool:
    """Whether this run's deployment has a new target version to move to (Temporal says so in
    each workflow task; always False on an unversioned worker)."""
    return workflow.info().is_target_worker_deployment_version_changed()


def moved_here(state: ConversationState) -> bool:
    """Whether this run, begun at a turn boundary from a carried state, runs on another Worker
    Deployment Version than the one that listed its tools (it moved)."""
    version = running_version()
    return (version is not None and version != state.handshake_version
            and not state.current.in_progress)


def _children_waiting(children: list[ChildReport]) -> Status | None:
    statuses = {c.status for c in children}
    return next((waiting for waiting in WAITING_STATUSES if waiting in statuses), None)
