"""The weather tour on Pydantic AI with its Temporal capability: the model request and each tool
call are the capability's activities."""

from __future__ import annotations

from temporalio import workflow

from bench.peers import PEER_WORKFLOWS

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalDurability
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.usage import UsageLimits

    from bench.peers.tool import weather_of
    from durable_react_agent.rules.prompts import DEFAULT_SYSTEM_PROMPT

tour_agent = Agent(OpenAIChatModel("scripted"), name="tour", instructions=DEFAULT_SYSTEM_PROMPT,
                   capabilities=[TemporalDurability()])


@tour_agent.tool_plain(name="get_weather")
async def weather_tool(location: str) -> str:
    """Get the current weather for a city.

    Args:
        location: the city
    """
    return await weather_of(location)


@workflow.defn(name=PEER_WORKFLOWS["pydantic_ai"])
class PydanticAITour(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [tour_agent]

    @workflow.run
    async def run(self, prompt: str, max_turns: int) -> int:
        result = await tour_agent.run(prompt, usage_limits=UsageLimits(request_limit=max_turns))
        return result.usage.requests
