"""The weather tour on the OpenAI Agents SDK with Temporal's plugin: the model call is the
plugin's activity, `get_weather` an activity made a tool (`activity_as_tool`)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

from bench.peers import PEER_WORKFLOWS

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from temporalio.openai_agents.workflow import activity_as_tool

    from bench.peers.tool import weather_of
    from durable_react_agent.rules.prompts import DEFAULT_SYSTEM_PROMPT


@activity.defn(name="get_weather")
async def get_weather(location: str) -> str:
    """Get the current weather for a city.

    Args:
        location: the city
    """
    return await weather_of(location)


@workflow.defn(name=PEER_WORKFLOWS["openai_agents"])
class AgentsSDKTour:
    @workflow.run
    async def run(self, prompt: str, max_turns: int) -> int:
        agent = Agent(name="assistant", instructions=DEFAULT_SYSTEM_PROMPT, model="scripted",
                      tools=[activity_as_tool(get_weather,
                                              start_to_close_timeout=timedelta(seconds=30))])
        result = await Runner.run(agent, prompt, max_turns=max_turns)
        return len(result.raw_responses)
