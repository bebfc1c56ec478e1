"""Schemathesis against a live API process (with tokens, on the dev server, a worker and the
scripted model): the OpenAPI document is the contract, so every answer must be one it documents,
in the shape it documents, and a schema-valid request must not be refused by a rule it hides.

Stateless, every operation gets schema-valid and schema-invalid input; stateful, chains start a
conversation and follow the document's links to its routes. Both run schemathesis' default checks,
bounded (few examples, a fixed seed, no deadline). What is left out is written down below with why:
one operation from the chains (EXCLUDED), two checks from some operations (NOT_CHECKED), and the
schema-valid cases that break a rule a field's description states (`keeps_the_described_rules`).

The stateless part gives each operation's strategy to Hypothesis itself: `schema.parametrize()`,
schemathesis' pytest integration, fails on pytest 9.2 (it sets `request.node._nodeid`, which pytest
9.2 renamed).
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable, Iterator

import hypothesis
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.schemas import OpenApiSchema

from durable_react_agent.rules.output import output_schema_problem
from tests.api_support import ApiServer
from tests.helpers import unique

TOKEN = "tok-schemathesis-123"
SEED = 20
BOUNDED = hypothesis.settings(max_examples=8, deadline=None, derandomize=True,
                              suppress_health_check=list(hypothesis.HealthCheck))
# The event stream of a live conversation stays open until the conversation completes, so a
# request/response checker would wait on it for as long as the conversation lives. The chains
# start live conversations; the stream is checked stateless here (unknown ids, odd offsets), and
# live by tests/api/test_api.py and tests/api/test_api_edges.py, which read it with a deadline.
EXCLUDED = r"^/conversations/\{cid\}/events$"
NOT_CHECKED = [
    # POST /agui takes the AG-UI protocol's own model (ag_ui.core.RunAgentInput). Its JSON Schema
    # makes a message's `role` optional (the field has a default), while the model requires it to
    # pick the message's kind (a discriminated union): a message without `role` is schema-valid
    # and refused. That schema is the protocol package's; tests/api/test_agui*.py check the route with
    # the official client.
    {"include-path": "/agui", "checks": {"positive_data_acceptance": {"enabled": False}}},
    # A one-shot conversation (`one_shot: true`) completes after its first answer, and input to a
    # completed conversation is a documented 404 (no such running conversation): one created a
    # moment ago may rightly take no more input. Reading it (status, history) stays checked.
    {"include-tag": "input", "checks": {"ensure_resource_availability": {"enabled": False}}},
    # Revoking a grant is input too (an Update): to a completed conversation, the same 404.
    {"include-operation-id": "revoke",
     "checks": {"ensure_resource_availability": {"enabled": False}}},
]


@pytest.fixture(scope="module")
def contract_api(temporal_address: str, task_queue: str) -> Iterator[ApiServer]:
    api = ApiServer(temporal_address, task_queue, AGENT_API_TOKENS=f"schemathesis:{TOKEN}",
                     AGENT_API_TIMEOUT_S="5").start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="module")
def contract(contract_api: ApiServer) -> OpenApiSchema:
    config = SchemathesisConfig.from_dict({
        "seed": SEED,
        # as the document's security scheme: schemathesis then sends it as the API's own auth,
        # and checks that a request without it, or with another token, is refused
        "auth": {"openapi": {"HTTPBearer": {"bearer": TOKEN}}},
        "generation": {"mode": "all", "max-examples": BOUNDED.max_examples},
        "operations": NOT_CHECKED,
    })
    return schemathesis.openapi.from_url(f"{contract_api.url}/openapi.json", config=config)


# Schemathesis calls the API synchronously: in a thread, so that the event loop stays free for
# the tests' worker, which runs on it.

# CPython 3.11's AST constructor keeps its recursion depth per interpreter, not per thread: under
# load, Hypothesis describing a strategy in this thread while another thread builds an AST can
# raise this (then reported as a flaky strategy). It is no finding about the API: run it again.
CPYTHON_AST_RACE = "AST constructor recursion depth mismatch"


async def in_thread(run: Callable[[], None], attempts: int = 2) -> None:
    for attempt in range(attempts):
        try:
            await asyncio.to_thread(run)
            return
        except BaseException as err:  # noqa: BLE001 - an exception group from Hypothesis, too
            if CPYTHON_AST_RACE not in "".join(traceback.format_exception(err)) \
                    or attempt == attempts - 1:
                raise


def keeps_the_described_rules(case: schemathesis.Case) -> bool:
    """A schema-valid body that keeps what its fields' descriptions say and JSON Schema cannot
    (docs/api.md: those answer a 422): an `output_schema` is a usable JSON Schema."""
    schema = case.body.get("output_schema") if isinstance(case.body, dict) else None
    return schema is None or output_schema_problem(schema) is None


# HTTP's own framing, which the server reads before the app (a generated `Transfer-Encoding: iY`
# is uvicorn's 400 "Invalid HTTP request received."): no input of the API's
FRAMING = frozenset({"transfer-encoding", "content-length", "connection", "host", "te",
                     "upgrade", "expect", "keep-alive", "trailer"})


def frames_as_http(case: schemathesis.Case) -> bool:
    return not FRAMING & {name.lower() for name in (case.headers or {})}


async def test_every_operation_answers_as_documented(contract: OpenApiSchema):
    def run() -> None:
        for found in contract.get_all_operations():
            operation = found.ok()
            for mode in GenerationMode:
                cases = operation.as_strategy(mode).filter(frames_as_http)
                if mode is GenerationMode.POSITIVE:
                    cases = cases.filter(keeps_the_described_rules)

                @hypothesis.given(case=cases)
                @BOUNDED
                def answers_as_documented(case: schemathesis.Case) -> None:
                    case.call_and_validate()

                try:
                    answers_as_documented()
                except hypothesis.errors.Unsatisfiable:
                    # nothing to make invalid (GET /config takes no input): no negative case
                    assert mode is GenerationMode.NEGATIVE, operation.label

    await in_thread(run)


async def test_chains_from_a_started_conversation_answer_as_documented(contract: OpenApiSchema):
    class Chains(contract.exclude(path_regex=EXCLUDED).as_state_machine()):  # type: ignore[misc]
        def before_call(self, case: schemathesis.Case) -> None:
            # A start is idempotent by id: replayed by Hypothesis, a chain would find the
            # conversation its first run started (200, not 201), and could not replay.
            if case.operation.label == "POST /conversations" and isinstance(case.body, dict) \
                    and isinstance(case.body.get("id"), str):
                case.body = {**case.body, "id": unique("chain")}

    await in_thread(lambda: Chains.run(settings=hypothesis.settings(
        BOUNDED, stateful_step_count=6)))
