"""The durable peers, running the same weather tour as ours: Pydantic AI's Temporal integration
(its `TemporalDurability` capability, which 2.x recommends over the deprecated `TemporalAgent`)
and the OpenAI Agents SDK's Temporal plugin (`temporalio-openai-agents`). Each runs on its
documented defaults, with only what a long offline tour needs: the scripted model's endpoint,
chat completions (the scripted model has no Responses API), a turn limit above the tour's length
and (the Agents SDK) its trace export to OpenAI's servers off. Their tool is ours: the same
`get_weather` handler against the same fake Open-Meteo, run as an activity per call, as each
documents.

`python -m bench.peers pydantic_ai|openai_agents` serves one on AGENT_TASK_QUEUE, as
`agent-worker` serves ours. Each peer's workflow is a module of its own, so that Temporal's
sandbox, which imports a workflow's module afresh, imports only that peer.
"""

from __future__ import annotations

PEER_WORKFLOWS = {"pydantic_ai": "PydanticAITour", "openai_agents": "AgentsSDKTour"}
PEER_NAMES = {"pydantic_ai": "Pydantic AI + Temporal", "openai_agents": "OpenAI Agents SDK + Temporal"}
