"""A worker that starts with a policy (`AGENT_POLICY`) tells the conversations of its task
queue that wait for a person: each judges its waiting calls again under the policy's revision
(one it judged by already does nothing)."""

from __future__ import annotations

import structlog
from temporalio.client import Client
from temporalio.service import RPCError

from ..contract.names import POLICY_CHANGED_SIGNAL, WORKFLOW_TYPE
from ..contract.policy import PolicyChanged

log = structlog.get_logger()
MAX_TOLD = 1000  # conversations told at one start (the rest judge again at their next round)


def waiting_query(task_queue: str) -> str:
    return (f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' AND "
            f"TaskQueue = '{task_queue}' AND AgentStatus = 'waiting_for_confirmation'")


async def announce_policy(client: Client, task_queue: str, revision: str) -> int:
    """Signal the waiting conversations of `task_queue` with the policy's revision; how many
    were told. One that ended meanwhile is passed over."""
    told = 0
    async for found in client.list_workflows(waiting_query(task_queue), limit=MAX_TOLD):
        try:
            await client.get_workflow_handle(found.id, run_id=found.run_id).signal(
                POLICY_CHANGED_SIGNAL, PolicyChanged(revision=revision))
            told += 1
        except RPCError as err:
            log.info("conversation not told of the policy", workflow_id=found.id, error=str(err))
    log.info("waiting conversations told of the policy", revision=revision[:12], told=told)
    return told
