"""A conversation from Temporal's own client: start it, approve what it asks to write, read its
status. Run a worker first (`agent-worker`); then `python examples/client_script.py "PROMPT"`."""

import asyncio
import os
import sys
import uuid

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_react_agent.contract import (
    ConfirmRequest,
    ConversationInput,
    ConversationStatus,
    names,
)


async def main(prompt: str) -> None:
    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"),
                                  data_converter=pydantic_data_converter)
    conversation = await client.start_workflow(
        names.WORKFLOW_TYPE, ConversationInput(prompt=prompt), id=f"script-{uuid.uuid4().hex[:8]}",
        task_queue=os.environ.get("AGENT_TASK_QUEUE", "react-agent"))
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
