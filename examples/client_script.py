"""A conversation from Temporal's own client: start it, approve what it asks to write, read its
status. Run a worker first (`agent-worker`); then `python examples/client_script.py "PROMPT"`."""

import asyncio
import os
import sys
import uuid

from durable_react_agent.client.connection import TemporalSettings, connect
from durable_react_agent.contract import (
    ConfirmRequest,
    ConversationInput,
    ConversationStatus,
    names,
)


async def main(prompt: str) -> None:
    # TEMPORAL_ADDRESS, AGENT_TASK_QUEUE, and payloads as the worker keeps them (AGENT_PAYLOAD_*:
    # sealed with its keys, large ones by reference): Temporal's client with the product's converter
    settings = TemporalSettings.from_env()
    client = await connect(settings)
    conversation = await client.start_workflow(
        names.WORKFLOW_TYPE, ConversationInput(prompt=prompt), id=f"script-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue)
    approved: set[str] = set()
    while True:
        status = await conversation.query(names.STATUS.name, result_type=ConversationStatus)
        for call in status.pending_confirmations:  # a risky call waits for a person: approve it
            if (ref := call.ref or call.call_id) not in approved:
                print(f"approving {call.tool} {call.args}")
                await conversation.signal(names.CONFIRM_SIGNAL, ConfirmRequest(
                    call_ids=[ref], approver="script", request_id=uuid.uuid4().hex))
                approved.add(ref)
        if status.status in ("idle", "completed", "failed"):  # the turn has its answer
            print(status.final_answer)
            return
        await asyncio.sleep(0.5)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "What's the weather in Paris? Save it as a note."))
    sys.stdout.flush()
    os._exit(0)  # skip the teardown, where Temporal's runtime may abort (sdk-python #300)
