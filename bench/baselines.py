"""The same agent without Temporal: a plain in-process loop, and LangGraph with its SQLite
checkpointer. Both make the same openai calls (streamed, like our LLM activity) and run the same
tool function."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import openai

from durable_react_agent.activities.llm_stream import stream_completion
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolContext, default_registry
from durable_react_agent.contract import LLMReply
from durable_react_agent.rules.prompts import DEFAULT_SYSTEM_PROMPT
from durable_react_agent.rules.questions import ASK_TOOLS


class Agent:
    """One model call and one tool call, as our activities make them."""

    def __init__(self, base_url: str):
        self.llm = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        self.registry = default_registry()
        self.tools = [t.openai_schema() for t in [*ASK_TOOLS, *self.registry.definitions()]]
        self.settings = ActivitySettings(geocoding_url=f"{base_url}/search",
                                         forecast_url=f"{base_url}/forecast")
        self.http = httpx.AsyncClient(timeout=15)

    async def think(self, messages: list[dict[str, Any]]) -> LLMReply:
        return await stream_completion(self.llm, "scripted", messages, self.tools, "auto",
                                       lambda _text: None)

    async def act(self, name: str, arguments: str, call_id: str) -> str:
        spec = self.registry.get(name)
        args = spec.args_model.model_validate(json.loads(arguments))
        ctx = ToolContext(settings=self.settings, http=self.http, call_id=call_id,
                          idempotency_key=call_id)
        return await spec.handler(args, ctx)

    def start(self, prompt: str) -> list[dict[str, Any]]:
        return [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                {"role": "user", "content": prompt}]

    async def aclose(self) -> None:
        await self.http.aclose()
        await self.llm.close()


async def plain_loop(agent: Agent, prompt: str) -> int:
    messages = agent.start(prompt)
    steps = 0
    while True:
        reply = await agent.think(messages)
        steps += 1
        messages.append(reply.message.to_openai())
        if not reply.message.tool_calls:
            return steps
        for call in reply.message.tool_calls:
            observation = await agent.act(call.function.name, call.function.arguments, call.id)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": observation})


class GraphState(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


async def langgraph_loop(agent: Agent, prompt: str, db: Path, steps_hint: int) -> int:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, START, StateGraph

    async def think(state: GraphState) -> dict:
        reply = await agent.think(state["messages"])
        return {"messages": [reply.message.to_openai()]}

    async def act(state: GraphState) -> dict:
        last = state["messages"][-1]
        out = []
        for call in last["tool_calls"]:
            fn = call["function"]
            observation = await agent.act(fn["name"], fn["arguments"], call["id"])
            out.append({"role": "tool", "tool_call_id": call["id"], "content": observation})
        return {"messages": out}

    def route(state: GraphState) -> str:
        return "act" if state["messages"][-1].get("tool_calls") else END

    graph = StateGraph(GraphState)
    graph.add_node("think", think)
    graph.add_node("act", act)
    graph.add_edge(START, "think")
    graph.add_conditional_edges("think", route, ["act", END])
    graph.add_edge("act", "think")
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        app = graph.compile(checkpointer=saver)
        final = await app.ainvoke(
            {"messages": agent.start(prompt)},
            {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * steps_hint + 10},
        )
    return sum(1 for m in final["messages"] if m["role"] == "assistant")
