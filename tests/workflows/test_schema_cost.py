"""A schema from outside costs a bounded amount wherever it is applied: one whose `$ref`s fan out
is refused at the door, and any check stops on its budget with a reason, so neither a user's
output schema, an MCP server's input or question schema, nor a case file can wedge a
conversation or freeze a worker. Generated schemas (recursive `$ref`s included) go through every
place one is applied, each held to the time a workflow task may take."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from durable_react_agent.activities.mcp import elicitation, toolbox
from durable_react_agent.activities.mcp.catalog import build_catalog
from durable_react_agent.activities.mcp.config import StdioServerConfig
from durable_react_agent.contract import EndRequest
from durable_react_agent.contract.models import Question, ToolDefinition
from durable_react_agent.rules import output, schemas
from durable_react_agent.rules.gate import Refusal, check_answer
from durable_react_agent.rules.loop import validate_arguments
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import script, settled, start, unique

# What a workflow task may take before Temporal calls it a deadlock, and a check may never near.
TASK_SECONDS = 2.0


def fan_out(levels: int) -> dict[str, Any]:
    """1.7 KB at 16 levels: each of its `$defs` points twice to the next, 2^levels checks."""
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
            for i in range(levels)}
    defs[f"d{levels}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


# Passes the door (each subschema is visited once), yet each level of the value doubles the work:
# the first branch descends all the way down before it fails on `required`.
DOUBLING = {"$defs": {"n": {"anyOf": [
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["missing"]},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}}]}},
    "$ref": "#/$defs/n"}
TREE = {"$defs": {"node": {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
    "$ref": "#/$defs/node"}


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def timed(check, *args):
    """A check's result and its CPU seconds (a loaded machine's other processes not counted)."""
    began = time.process_time()
    result = check(*args)
    return result, time.process_time() - began


def test_a_fan_out_is_refused_at_the_door_in_time():
    schema = fan_out(24)  # hours of checks on today's main for any value
    assert len(json.dumps(schema)) < 3_000
    problem, took = timed(schemas.schema_problem, schema)
    assert "visit more than 5,000 subschemas" in problem and took < TASK_SECONDS
    assert "not usable" in output.output_schema_problem(schema)
    # a small fan-out is a schema like any other
    assert schemas.schema_problem(fan_out(6)) is None


def test_a_schema_that_refers_to_itself_in_place_is_refused():
    loop = {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}},
            "$ref": "#/$defs/a"}
    assert "refers back to itself" in schemas.schema_problem(loop)
    assert "refers back to itself" in schemas.schema_problem({"$ref": "#"})


def test_a_recursive_schema_through_the_value_is_accepted_and_checks():
    assert schemas.schema_problem(TREE) is None
    tree = {"name": "root", "children": [{"name": "a", "children": [{"name": "b"}]}]}
    assert schemas.value_errors(TREE, tree, "the answer", "the output schema") == []
    assert "'name' is a required property" in schemas.described(schemas.value_errors(
        TREE, {"name": "r", "children": [{}]}, "the answer", "the output schema"))


def test_a_check_that_recurses_with_the_value_stops_on_its_budget():
    assert schemas.schema_problem(DOUBLING) is None
    assert schemas.value_errors(DOUBLING, nested(4), "the answer", "s") == []
    found, took = timed(schemas.value_errors, DOUBLING, nested(60), "the answer", "the schema")
    assert found == ("the answer cannot be checked: checking against the schema would take too "
                     "many steps (its $refs fan out, or recurse with the value)")
    assert took < TASK_SECONDS


def test_a_large_value_gets_a_budget_of_its_size():
    # 32 KB of arguments, the most a reply may carry: each part checked, none refused for cost
    ids = {"type": "object", "properties": {"ids": {"type": "array", "items": {
        "type": "integer", "minimum": 0}}}}
    value = {"ids": [1] * 16_000}
    assert schemas.value_errors(ids, value, "the arguments", "the schema") == []


# ----- generated schemas, through every place one from outside is applied -----

names = st.sampled_from(["a", "b", "c"])
leaves = st.sampled_from([{"type": "string"}, {"type": "object"}, {"type": "integer"},
                          {"minLength": 2}, {"required": ["a"]}, {}, True, False])


def subschemas(defs: list[str]):
    refs = st.sampled_from([{"$ref": f"#/$defs/{d}"} for d in defs] or [{}])
    return st.recursive(leaves | refs, lambda kids: st.one_of(
        st.builds(lambda k, xs: {k: xs}, st.sampled_from(["allOf", "anyOf", "oneOf"]),
                  st.lists(kids, min_size=1, max_size=3)),
        st.builds(lambda props: {"type": "object", "properties": props},
                  st.dictionaries(names, kids, max_size=3)),
        st.builds(lambda k: {"type": "array", "items": k}, kids),
        st.builds(lambda k: {"not": k}, kids)), max_leaves=8)


@st.composite
def outside_schemas(draw) -> dict:
    """A schema with `$defs` that may refer to each other, themselves and back to the root."""
    defs = [f"d{i}" for i in range(draw(st.integers(0, 6)))]
    schema = {"$defs": {d: draw(subschemas([*defs, ""])) for d in defs}} if defs else {}
    root = draw(subschemas(defs))
    if isinstance(root, dict):
        schema.update(root)
    # `#/$defs/` is no target: a dangling ref must be refused at the door, not followed
    return json.loads(json.dumps(schema).replace('"#/$defs/"', '"#"'))


values = st.recursive(st.none() | st.integers() | st.text(max_size=4),
                      lambda kids: st.lists(kids, max_size=3) | st.dictionaries(names, kids, max_size=3),
                      max_leaves=20).map(lambda v: {"a": v})


def every_door(schema: dict) -> list[str | None]:
    """Each place that takes a schema from outside before it is used."""
    server = StdioServerConfig(name="outside", command="true")
    tool = type("Tool", (), {"name": "t", "input_schema": schema, "description": "",
                             "annotations": None, "title": None})()
    _, left_out = build_catalog([(server, [tool])])  # an MCP tool's input schema, at discovery
    return [schemas.schema_problem(schema), output.output_schema_problem(schema),
            elicitation._schema_problem(schema), left_out[0] if left_out else None]


def every_check(schema: dict, value: dict) -> None:
    """Each place a value is checked against a schema that passed its door."""
    spec = ToolDefinition(name="t", description="", parameters=schema)
    validate_arguments(spec, value)  # the workflow's check of a model's arguments
    toolbox._argument_problem(schema, value)  # the worker's, before the MCP call
    output.check_output(json.dumps(value), schema)  # a typed result, in the workflow
    question = Question(kind="elicitation", message="?", answer_schema=schema)
    checked = check_answer(question, [json.dumps(value)])  # an answer: workflow, API, AG-UI
    assert isinstance(checked, Refusal) or checked.text


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schema=outside_schemas(), value=values)
def test_generated_schemas_cost_a_bounded_time_everywhere(schema: dict, value: dict):
    doors, took = timed(every_door, schema)
    assert took < TASK_SECONDS, f"{took:.2f} s at the doors for {schema}"
    if any(d is not None for d in doors[:3]):
        return
    _, took = timed(every_check, schema, value)
    assert took < TASK_SECONDS, f"{took:.2f} s checking {value} against {schema}"


@pytest.mark.parametrize("schema", [fan_out(16), fan_out(24)])
def test_every_door_refuses_a_fan_out(schema: dict):
    assert all(problem and "5,000 subschemas" in problem for problem in every_door(schema))


def test_every_check_of_a_value_that_recurses_is_bounded():
    _, took = timed(every_check, DOUBLING, nested(60))
    assert took < 4 * TASK_SECONDS  # four checks, each within one task's time


# ----- a conversation given such a schema past the door ends readably, never wedged -----

async def test_a_fan_out_output_schema_ends_the_turn_instead_of_wedging(
        client, task_queue, model: ScriptedModelServer):
    trigger = script(model, unique("fan-out"), ScriptedReply(content='{"a": 1}'))
    # started straight on Temporal, as any client of the namespace may, past the CLI's and
    # the API's own refusal of the schema
    handle = await start(client, task_queue, trigger, output_schema=fan_out(24))
    status = await settled(handle)
    assert status.stop_reason == "invalid_output"
    assert "5,000 subschemas" in status.error
    await handle.signal(ConversationWorkflow.end, EndRequest())
    assert (await handle.result()).status == "completed"


async def test_an_answer_that_recurses_past_the_budget_is_asked_again_then_refused(
        client, task_queue, model: ScriptedModelServer):
    deep = json.dumps(nested(60))
    trigger = script(model, unique("doubling"), ScriptedReply(content=deep),
                     ScriptedReply(content=deep))
    handle = await start(client, task_queue, trigger, output_schema=DOUBLING)
    status = await settled(handle)
    assert status.stop_reason == "invalid_output" and "too many steps" in status.error
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()


keywords = st.sampled_from(["type", "properties", "items", "prefixItems", "allOf", "anyOf",
                            "not", "required", "enum", "minLength", "pattern", "$defs", "$id",
                            "$anchor", "$dynamicRef", "$vocabulary", "format", "dependencies",
                            "dependentRequired", "unevaluatedProperties", "const", "$comment"])
schema_like = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.sampled_from(["string", "x", "(", "#"]),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(keywords | names, kids, max_size=3),
    max_leaves=10)


@settings(max_examples=150, deadline=None, database=None)
@given(schema=st.dictionaries(keywords, schema_like, max_size=4))
def test_the_static_metaschema_says_what_jsonschemas_own_says(schema: dict):
    try:
        Draft202012Validator.check_schema(schema)
        valid = True
    except SchemaError:
        valid = False
    assert (schemas.best_match(schemas._META_VALIDATOR.iter_errors(schema)) is None) == valid
