"""`python -m bench.peers pydantic_ai|openai_agents`: serve one peer's tour on AGENT_TASK_QUEUE
until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker

from bench.peers import PEER_WORKFLOWS


async def peer_worker(peer: str) -> Worker:
    address, queue = os.environ["TEMPORAL_ADDRESS"], os.environ["AGENT_TASK_QUEUE"]
    if peer == "openai_agents":
        from agents import set_default_openai_api, set_tracing_disabled
        from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin

        from bench.peers.openai_agents import AgentsSDKTour, get_weather

        set_default_openai_api("chat_completions")  # the scripted model has no Responses API
        set_tracing_disabled(True)  # its traces would go to OpenAI's servers
        plugin = OpenAIAgentsPlugin(model_params=ModelActivityParameters(
            start_to_close_timeout=timedelta(seconds=60)))
        client = await Client.connect(address, plugins=[plugin])
        return Worker(client, task_queue=queue, workflows=[AgentsSDKTour],
                      activities=[get_weather])
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

    from bench.peers.pydantic_ai import PydanticAITour

    client = await Client.connect(address, plugins=[PydanticAIPlugin()])
    return Worker(client, task_queue=queue, workflows=[PydanticAITour])


async def main(peer: str) -> None:
    worker = await peer_worker(peer)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with worker:
        await stop.wait()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PEER_WORKFLOWS:
        raise SystemExit(f"usage: python -m bench.peers {'|'.join(PEER_WORKFLOWS)}")
    asyncio.run(main(sys.argv[1]))
