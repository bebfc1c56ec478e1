"""Your own tools: `@tool` turns a function into a tool (schema from its hints, descriptions from
its docstring, observation from its result), `AGENT_TOOLS` and entry points bring tools modules to
the worker, and a user's tool goes through the gate, approval and crashes as a built-in does."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import pytest
from pydantic import BaseModel, Field
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durable_react_agent import NeedsInput, ToolContext, ToolError, tool
from durable_react_agent.activities.profiles import AgentProfile, Profiles
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tool_runner import ToolActivities
from durable_react_agent.activities.tools import BUILTIN_TOOLS, ToolRegistry, ToolSpec
from durable_react_agent.activities.tools.function_tool import ToolDefinitionError
from durable_react_agent.activities.tools.loader import ToolLoadError, load_tools
from durable_react_agent.activities.tools.memory import MEMORY_TOOLS
from durable_react_agent.client.session import follow
from durable_react_agent.contract import (
    ConfirmRequest,
    ToolInvocation,
    ToolListRequest,
    ToolOutcome,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker, tool_registry
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.devserver import free_port, worker_env
from tests.fake_tools import NO_HTTP
from tests.helpers import USER_TOOLS, reaches, script, settled, start, tool_call, unique, until
from tests.processes import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]
# what `agent-worker` has before any module's: the built-in tools, then memory's
BUILTIN_NAMES = [spec.name for spec in (*BUILTIN_TOOLS, *MEMORY_TOOLS)]


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Point(BaseModel):
    x: float
    y: float


@tool
def paint(ctx: ToolContext, color: Color, at: list[Point], mode: Literal["fill", "stroke"] = "fill",
          width: Annotated[int, Field(ge=1, description="Pen width in pixels")] = 2,
          label: str | None = None) -> dict:
    """Paint points on the canvas,
    in one colour.

    This paragraph is for the code's reader, not the model.

    Args:
        color: the paint's colour
        at: where to paint, a description that
            wraps over two lines
        mode: fill or stroke
        width: the docstring's, which the Field's description overrides
        label: a label to write beside the points
    """
    return {"color": color, "at": at, "mode": mode, "width": width, "label": label,
            "call": ctx.call_id}


@tool
def scale(factor: float, clamp: bool = False) -> float:
    """Scale the canvas.

    Parameters
    ----------
    factor : float
        how much to scale by
    clamp : bool
        whether to keep the canvas within the screen
    """
    return factor


@tool
async def rotate(degrees: int) -> int:
    """Rotate the canvas.

    :param degrees: clockwise, in degrees
    :returns: the new angle
    """
    return degrees % 360


@tool
def move(to: Point) -> Point:
    """Move the pen."""
    return to


def schema_of(spec: ToolSpec) -> dict:
    return spec.definition().parameters


def test_the_schema_comes_from_the_hints_and_the_google_docstring():
    schema = schema_of(paint)
    props = schema["properties"]
    assert paint.description == "Paint points on the canvas, in one colour."
    assert list(props) == ["color", "at", "mode", "width", "label"]  # no ctx
    assert schema["required"] == ["color", "at"]
    assert props["color"]["description"] == "the paint's colour"
    assert schema["$defs"]["Color"]["enum"] == ["red", "green"]
    assert props["at"]["type"] == "array"
    assert props["at"]["description"] == "where to paint, a description that wraps over two lines"
    assert schema["$defs"]["Point"]["required"] == ["x", "y"]
    assert (props["mode"]["enum"], props["mode"]["default"]) == (["fill", "stroke"], "fill")
    assert props["width"] == {"default": 2, "description": "Pen width in pixels", "minimum": 1,
                              "title": "Width", "type": "integer"}
    assert props["label"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert props["label"]["default"] is None


async def test_the_handler_gets_typed_arguments_and_the_context():
    args = paint.args_model.model_validate({"color": "red", "at": [{"x": 1, "y": 2}]})
    ctx = ToolContext(settings=ActivitySettings(), http=NO_HTTP, call_id="c7",
                      idempotency_key="k")
    seen = json.loads(await paint.handler(args, ctx))
    assert seen == {"color": "red", "at": [{"x": 1.0, "y": 2.0}], "mode": "fill", "width": 2,
                    "label": None, "call": "c7"}
    assert paint(ctx, Color.GREEN, [Point(x=0, y=0)])["color"] is Color.GREEN  # still a function


def test_numpy_and_sphinx_docstrings_describe_the_arguments_too():
    assert scale.description == "Scale the canvas."
    props = schema_of(scale)["properties"]
    assert props["factor"]["description"] == "how much to scale by"
    assert props["clamp"]["description"] == "whether to keep the canvas within the screen"
    assert rotate.description == "Rotate the canvas."
    assert schema_of(rotate)["properties"]["degrees"]["description"] == "clockwise, in degrees"


def test_a_lone_model_argument_is_the_schema():
    assert schema_of(move)["properties"].keys() == {"x", "y"}
    assert (move.name, move.risk, move.idempotent, move.keyed, move.timeout_s) == (
        "move", "safe", True, False, 30.0)


def test_what_cannot_become_a_tool_is_refused_where_it_is_decorated():
    def refused(make, fn) -> str:
        with pytest.raises(ToolDefinitionError) as err:
            make(fn)
        return str(err.value)

    def total(*amounts: float) -> float:
        """Add up."""

    def options(**named: str) -> str:
        """Take anything."""

    def untyped(a, b: int) -> int:
        """Add."""

    def plug(sock: socket.socket) -> str:
        """Use a socket."""

    def silent(a: int) -> int:
        return a

    assert "takes *amounts" in refused(tool, total)
    assert "takes **named" in refused(tool, options)
    assert "parameter 'a' has no type annotation" in refused(tool, untyped)
    assert "parameter 'sock'" in refused(tool, plug) and "has no JSON schema" in refused(tool, plug)
    assert "it has no description: its docstring's first paragraph" in refused(tool, silent)
    assert refused(tool(name="list_tools"), total).endswith("tool name 'list_tools' is reserved")
    assert "'__' is kept for MCP tools" in refused(tool(name="acme__add"), untyped)
    assert "risk must be one of safe, sensitive, destructive" in refused(tool(risk="scary"), silent)
    assert refused(tool, untyped).startswith(f"tool 'untyped' ({__name__}.test_what_cannot")


class Item(BaseModel):
    name: str


@tool
def give(kind: Literal["str", "int", "dict", "model", "models", "none", "huge", "object"]) -> Any:
    """Return a value of the kind asked for."""
    return {"str": "plain text, é", "int": 42, "dict": {"name": "Zoë", "n": [1, 2]},
            "model": Item(name="a"), "models": [Item(name="a"), Item(name="b")], "none": None,
            "huge": "x" * 5000, "object": object()}[kind]


@tool
def pick(account: str, ctx: ToolContext) -> str:
    """Pick an account and report on it.

    Args:
        account: which account; "?" asks the user
    """
    if account == "?" and ctx.answer is None:
        raise NeedsInput("Which account?", options=["savings", "checking"])
    if account == "closed":
        raise ToolError("that account is closed; pick another")
    return f"{ctx.answer or account} is fine (resumed from {ctx.heartbeat_details})"


@tool
def nap(seconds: float, ctx: ToolContext) -> str:
    """Sleep, the way a blocking client would."""
    ctx.heartbeat({"napping": seconds})
    time.sleep(seconds)
    return threading.current_thread().name


class Runner:
    """The tool activity, called as a worker would: validation, the gate, truncation."""

    def __init__(self, *specs: ToolSpec, heartbeat_details: list | None = None):
        self.tools = ToolActivities(ToolRegistry(specs), ActivitySettings(), NO_HTTP)
        self.env = ActivityEnvironment()
        self.env.payload_converter = pydantic_data_converter.payload_converter
        self.env.info = dataclasses.replace(self.env.info, heartbeat_timeout=timedelta(seconds=0.4),
                                            heartbeat_details=heartbeat_details or [])
        self.beats: list[tuple] = []
        self.env.on_heartbeat = lambda *details: self.beats.append(details)

    async def run(self, name: str, args: dict, answer: str | None = None,
                  max_bytes: int = 16_384) -> ToolOutcome:
        self.env.info = dataclasses.replace(self.env.info, activity_type=name)
        inv = ToolInvocation(call_id="call_0", arguments=args, idempotency_key="key-0",
                             answer=answer, max_observation_bytes=max_bytes)
        payload = self.env.payload_converter.to_payloads([inv])[0]
        return await self.env.run(self.tools.run_tool, [RawValue(payload)])


@pytest.mark.parametrize(("kind", "observation"), [
    ("str", "plain text, é"),
    ("int", "42"),
    ("dict", '{"name":"Zoë","n":[1,2]}'),
    ("model", '{"name":"a"}'),
    ("models", '[{"name":"a"},{"name":"b"}]'),
    ("none", "null"),
])
async def test_what_a_tool_returns_is_what_the_model_reads(kind: str, observation: str):
    outcome = await Runner(give).run("give", {"kind": kind})
    assert (outcome.status, outcome.observation) == ("ok", observation)


async def test_a_long_result_is_cut_and_a_result_that_is_no_json_fails_for_good():
    runner = Runner(give)
    cut = await runner.run("give", {"kind": "huge"}, max_bytes=200)
    assert cut.full_bytes == 5000 and cut.observation.endswith("[truncated: 5000 bytes, showing "
                                                              "the first 200]")
    with pytest.raises(ApplicationError) as failed:
        await runner.run("give", {"kind": "object"})
    assert failed.value.non_retryable and failed.value.type == "ToolResultNotJson"
    invalid = await runner.run("give", {"kind": "float"})
    assert invalid.status == "error"
    assert invalid.observation.startswith("Error: invalid arguments for give: 1 validation error")


async def test_tool_error_is_an_observation_and_needs_input_asks_the_human():
    runner = Runner(pick, heartbeat_details=[{"page": 3}])
    closed = await runner.run("pick", {"account": "closed"})
    assert (closed.status, closed.observation) == ("error",
                                                   "Error: that account is closed; pick another")
    asked = await runner.run("pick", {"account": "?"})
    assert asked.status == "needs_input"
    assert (asked.question.kind, asked.question.message, asked.question.options) == (
        "choice", "Which account?", ["savings", "checking"])
    answered = await runner.run("pick", {"account": "?"}, answer="savings")
    assert answered.observation == "savings is fine (resumed from {'page': 3})"


async def test_a_sync_tool_runs_in_a_thread_and_the_worker_heartbeats_with_its_details():
    runner = Runner(nap)
    outcome = await runner.run("nap", {"seconds": 0.6})
    assert outcome.status == "ok" and outcome.observation != threading.main_thread().name
    # Heartbeats went on while the tool slept (the loop was free), repeating its details.
    details = ({"napping": 0.6},)
    since = runner.beats[runner.beats.index(details):]
    assert len(since) >= 3 and all(beat == details for beat in since)


def write_module(directory: Path, source: str) -> str:
    """A tools module of a unique name in `directory` (on sys.path): imports are cached."""
    name = unique("tools").replace("-", "_")
    (directory / f"{name}.py").write_text(source)
    return name


TOOL = '''
@tool
def {name}(a: int) -> int:
    """Do it."""
    return a
'''


def tools_source(*names: str) -> str:
    return "from durable_react_agent import tool\n" + "".join(TOOL.format(name=n) for n in names)


def test_agent_tools_modules_give_the_worker_their_tools(monkeypatch, tmp_path: Path):
    monkeypatch.syspath_prepend(str(USER_TOOLS))
    monkeypatch.setenv("AGENT_TOOLS", " acme_tools, ")
    settings = ActivitySettings.from_env()
    assert (settings.tool_modules, settings.builtin_tools) == (("acme_tools",), True)
    names = [*BUILTIN_NAMES, "convert_distance", "send_sms"]
    assert tool_registry(settings).names() == names
    assert tool_registry(settings).names() == names  # loaded again: the same, nothing leaks
    monkeypatch.setenv("AGENT_BUILTIN_TOOLS", "off")  # memory's stay: AGENT_MEMORY says
    assert tool_registry(ActivitySettings.from_env()).names() == [
        "remember", "recall", "forget", "convert_distance", "send_sms"]
    monkeypatch.setenv("AGENT_MEMORY", "off")
    assert tool_registry(ActivitySettings.from_env()).names() == ["convert_distance", "send_sms"]
    monkeypatch.setenv("AGENT_BUILTIN_TOOLS", "maybe")
    with pytest.raises(ValueError, match="AGENT_BUILTIN_TOOLS must be on or off, not 'maybe'"):
        ActivitySettings.from_env()


async def test_an_agent_profile_names_a_user_tool_as_it_names_a_built_in(monkeypatch):
    monkeypatch.syspath_prepend(str(USER_TOOLS))
    profiles = Profiles({"texter": AgentProfile(description="Texts", system_prompt="You text.",
                                                tools=["send_sms", "get_weather"])})
    settings = ActivitySettings(tool_modules=("acme_tools",), profiles=profiles)
    tools = ToolActivities(tool_registry(settings), settings, NO_HTTP)
    catalog = await ActivityEnvironment().run(tools.list_tools, ToolListRequest(profile="texter"))
    assert [(t.name, t.risk, t.keyed) for t in catalog.tools] == [
        ("get_weather", "safe", False), ("send_sms", "sensitive", True)]


def test_clashing_names_and_empty_modules_are_refused(monkeypatch, tmp_path: Path):
    monkeypatch.syspath_prepend(str(tmp_path))
    first = write_module(tmp_path, tools_source("shared"))
    second = write_module(tmp_path, tools_source("shared"))
    again = write_module(tmp_path, f"from {first} import shared\n")
    mine = write_module(tmp_path, tools_source("get_weather"))
    empty = write_module(tmp_path, "X = 1\n")
    reserved = write_module(tmp_path, "from durable_react_agent.activities.tools.weather "
                                      "import get_weather\nimport dataclasses\n"
                                      "mine = dataclasses.replace(get_weather, name='summarize')\n")

    def refusal(*modules: str) -> str:
        with pytest.raises(ToolLoadError) as err:
            load_tools(modules, BUILTIN_TOOLS)
        return str(err.value)

    assert [s.name for s in load_tools([first, again], BUILTIN_TOOLS)][-1] == "shared"
    assert refusal(first, second) == (f"module {second}: tool 'shared' is already defined by "
                                      f"module {first}")
    assert refusal(mine) == (f"module {mine}: tool 'get_weather' is already defined by the "
                             "built-in tools")
    assert [s.name for s in load_tools([mine])] == ["get_weather"]  # the built-ins turned off
    assert refusal(empty) == f"module {empty}: it defines no tools (functions decorated with @tool)"
    assert refusal("acme_no_such_tools") == ("module acme_no_such_tools: ModuleNotFoundError: No "
                                             "module named 'acme_no_such_tools'")
    assert refusal(reserved).endswith("tool name 'summarize' is reserved")


def test_installed_packages_bring_their_tools_through_entry_points(monkeypatch, tmp_path: Path):
    """An installed distribution, as pip leaves it: its metadata names the group's entry points,
    one a module and one a list of tools."""
    package = tmp_path / "acme_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "geo.py").write_text(tools_source("geocode"))
    (package / "units.py").write_text(tools_source("to_inches", "to_feet")
                                      + "TOOLS = [to_inches, to_feet]\n")
    dist = tmp_path / "acme_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[durable_react_agent.tools]\ngeo = acme_plugin.geo\n"
                                           "units = acme_plugin.units:TOOLS\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = [*BUILTIN_NAMES, "geocode", "to_inches", "to_feet"]
    assert tool_registry(ActivitySettings()).names() == names
    # Named in AGENT_TOOLS as well, a module's tools are still loaded once.
    assert tool_registry(ActivitySettings(tool_modules=("acme_plugin.geo",))).names() == names


BROKEN_MODULES = {
    "a missing dependency": ("import acme_dependency_that_is_not_installed\n",
                             ("ModuleNotFoundError: No module named "
                              "'acme_dependency_that_is_not_installed'")),
    "a bad signature": (('from durable_react_agent import tool\n\n@tool\n'
                         'def total(*amounts: float) -> float:\n    """Add up."""\n'),
                        "ToolDefinitionError: tool 'total' ({module}.total): it takes *amounts"),
    "a clash with a built-in": (tools_source("get_weather"),
                                "tool 'get_weather' is already defined by the built-in tools"),
}


async def test_a_tools_module_that_cannot_load_stops_the_worker_naming_it(tmp_path: Path):
    cases = {what: (write_module(tmp_path, source), reason)
             for what, (source, reason) in BROKEN_MODULES.items()}

    def worker(module: str) -> subprocess.CompletedProcess:
        # Refused before connecting: the address has no server behind it.
        env = {**os.environ, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
               "PYTHONPATH": str(tmp_path), "AGENT_TOOLS": module}
        return subprocess.run([sys.executable, "-m", "durable_react_agent.worker"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    runs = await asyncio.gather(*(asyncio.to_thread(worker, m) for m, _ in cases.values()))
    for (what, (module, reason)), done in zip(cases.items(), runs):
        assert done.returncode == 2, (what, done.stderr)
        [line] = [json.loads(line) for line in done.stderr.splitlines()
                  if "cannot load tools" in line]
        assert line["source"] == f"module {module}", what
        assert reason.format(module=module) in line["error"], (what, line)
        assert "Traceback" not in done.stderr, what


@tool
async def count_up(to: int, ctx: ToolContext) -> str:
    """Count, showing each number."""
    for i in range(1, to + 1):
        ctx.progress(f"{i} of {to}")
    return "counted"


@tool
def count_up_in_a_thread(to: int, ctx: ToolContext) -> str:
    """Count, showing each number, from a blocking function."""
    for i in range(1, to + 1):
        ctx.progress(f"{i} of {to}")
    return "counted"


async def test_a_tools_progress_reaches_the_conversations_live_stream(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    queue = unique("progress")
    trigger = script(model, unique("progress"),
                     ScriptedReply(tool_calls=[tool_call("count_up", {"to": 3}),
                                               tool_call("count_up_in_a_thread", {"to": 2})]),
                     ScriptedReply(content="counted"))
    registry = ToolRegistry([count_up, count_up_in_a_thread])
    async with httpx.AsyncClient() as http, build_worker(client, queue, activity_settings, http,
                                                         registry):
        handle = await start(client, queue, trigger, one_shot=True)
        events = [item.data async for item in follow(client, handle.id)]
    started = {e.tool: e.call_id for e in events if e.kind == "tool_started"}
    progress = [e for e in events if e.kind == "tool_progress"]
    for name, texts in (("count_up", ["1 of 3", "2 of 3", "3 of 3"]),
                        ("count_up_in_a_thread", ["1 of 2", "2 of 2"])):
        mine = [e for e in progress if e.tool == name]
        assert [e.text for e in mine] == texts
        assert {(e.call_id, e.turn, e.step) for e in mine} == {(started[name], 1, 1)}


async def test_a_users_tools_module_works_end_to_end_across_a_worker_crash(
    client: Client, temporal_address: str, model: ScriptedModelServer, tmp_path: Path
):
    """The issue's "done when": a tools module outside the repository gives the model its tools,
    described by their hints and docstrings; a sensitive keyed one waits for approval, and runs
    exactly once, under its key, although the worker is SIGKILLed after it sent and before it
    reported."""
    outbox = tmp_path / "outbox"
    outbox.mkdir()
    (outbox / "hold").touch()
    queue = unique("user-tools")
    env = worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                     AGENT_TOOLS="acme_tools", ACME_OUTBOX=str(outbox),
                     PYTHONPATH=os.pathsep.join([str(USER_TOOLS),
                                                 os.environ.get("PYTHONPATH", "")]))
    worker = WorkerProcess(env, tmp_path)
    args = {"to": "+4915112345678", "text": "see you at 8"}
    trigger = script(model, unique("sms"), ScriptedReply(tool_calls=[tool_call("send_sms", args)]),
                     ScriptedReply(content="{last_tool}"))
    worker.start()
    try:
        handle = await start(client, queue, trigger)
        [pending] = (await reaches(handle, "waiting_for_confirmation", timeout_s=60)
                     ).pending_confirmations
        assert (pending.tool, pending.risk, pending.args) == ("send_sms", "sensitive", args)
        assert not (outbox / "attempts.log").exists(), "it ran before anyone approved it"

        offered = {t["function"]["name"]: t["function"] for t in next(
            r.body["tools"] for r in model.requests if r.trigger == trigger)}
        sms = offered["send_sms"]
        assert sms["description"] == "Send one SMS to a phone number."
        assert sms["parameters"]["required"] == ["to", "text"]
        assert sms["parameters"]["properties"]["to"]["description"] == "The number, in E.164 form"
        assert sms["parameters"]["properties"]["text"]["description"] == "what the SMS says"
        unit = offered["convert_distance"]["parameters"]["properties"]["unit"]
        assert (unit["enum"], unit["default"]) == (["km", "mi"], "km")
        assert {"get_weather", "create_note"} <= offered.keys()

        await handle.signal(ConversationWorkflow.confirm,
                            ConfirmRequest(call_ids=[pending.call_id], approver="ann"))
        # sent; the call holds before it reports
        await until(lambda: any(outbox.glob("*.json")), 60,
                    lambda: f"the SMS sent: {worker.log(1)}")
        worker.kill()
        (outbox / "hold").unlink()
        worker.start()
        status = await settled(handle, timeout_s=90)
        audit = await handle.query(ConversationWorkflow.history)
    finally:
        worker.stop()

    assert status.final_answer == "SMS sent to +4915112345678"
    [sent] = outbox.glob("*.json")
    attempts = (outbox / "attempts.log").read_text().split()
    assert len(attempts) == 2 and set(attempts) == {sent.stem}, "one key, two attempts, one SMS"
    assert json.loads(sent.read_text()) == args
    [record] = [r for r in audit if r.actions]
    [action] = record.actions
    assert (action.tool, action.status, action.decision.approver) == ("send_sms", "ok", "ann")
    history = await handle.fetch_history()
    sms_events = [e for e in history.events
                  if e.HasField("activity_task_scheduled_event_attributes")
                  and e.activity_task_scheduled_event_attributes.activity_type.name == "send_sms"]
    assert len(sms_events) == 1  # one activity, retried by Temporal: not a second call
    assert "send_sms(to=+4915112345678" in sms_events[0].user_metadata.summary.data.decode()
    assert '"source": "module acme_tools"' in worker.log(1)
