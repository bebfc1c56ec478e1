"""The offline model follows the prompt: the intent reader that answers unscripted requests."""

from __future__ import annotations

import json
import uuid

import openai
import pytest
from temporalio.client import Client

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import ConfirmRequest
from durable_react_agent.testing import (
    Scenario,
    Script,
    ScriptedModelServer,
    ScriptedReply,
    read_intent,
    select_reply,
)
from durable_react_agent.testing.intents import ASK_BODY, ASK_CITY, ASK_TARGET, HELP
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import note_rows, reaches, settled, start, unique

TOKYO = "Check the weather in Tokyo and save it as a note titled 'Tokyo'"
PARIS_DEMO = "Check the weather in Paris and save it as a note titled 'Paris weather'."  # demo.sh
OBSERVED = "Tokyo, Japan: 9.3°C, clear sky, humidity 52%, wind 5.7 km/h"


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def called(step: int, name: str) -> dict:
    call = {"id": f"call_{step}_0", "type": "function", "function": {"name": name, "arguments": "{}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def result(step: int, text: str) -> dict:
    return {"role": "tool", "tool_call_id": f"call_{step}_0", "content": text}


def calls(reply: ScriptedReply) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in reply.tool_calls]


def test_weather_then_a_note_with_the_city_and_title_of_the_message():
    system = {"role": "system", "content": "You are an agent."}
    first = select_reply(Script(), [system, user(TOKYO)])
    assert first.trigger is None and first.step == 0
    assert calls(first.reply) == [("get_weather", {"location": "Tokyo"})]

    after_weather = [system, user(TOKYO), called(0, "get_weather"), result(0, OBSERVED)]
    second = select_reply(Script(), after_weather).reply
    assert calls(second) == [("create_note", {"title": "Tokyo", "body": OBSERVED})]

    done = [*after_weather, called(1, "create_note"), result(1, "Created note #7 'Tokyo'.")]
    final = select_reply(Script(), done).reply
    assert final.tool_calls == [] and final.effective_finish_reason() == "stop"
    assert final.content.endswith("Created note #7 'Tokyo'.")


def test_the_demo_prompt_sends_what_the_old_demo_script_sent():
    assert calls(read_intent([user(PARIS_DEMO)])) == [("get_weather", {"location": "Paris"})]
    (note,) = read_intent([user(PARIS_DEMO), called(0, "get_weather"), result(0, "Paris, France: 8°C")]
                          ).tool_calls
    assert note.arguments_text() == '{"title": "Paris weather", "body": "Paris, France: 8\\u00b0C"}'


@pytest.mark.parametrize("prompt", [
    "Check the weather in Tokyo and save it as a note titled Tokyo",
    'check the weather in tokyo, then save a note called "Tokyo".',
    "Weather for Tokyo and note it, titled ‘Tokyo’",
])
def test_titles_quoted_or_not(prompt: str):
    assert calls(read_intent([user(prompt)])) == [("get_weather", {"location": "Tokyo"})]
    reply = read_intent([user(prompt), called(0, "get_weather"), result(0, OBSERVED)])
    assert calls(reply) == [("create_note", {"title": "Tokyo", "body": OBSERVED})]


@pytest.mark.parametrize(("prompt", "city"), [
    ("what's the weather in london?", "London"),  # known to the fake Open-Meteo: its spelling
    ("Weather in New York please", "New York"),
    ("What is the weather like in Reykjavik today?", "Reykjavik"),  # unknown: as written
    ("forecast for springfield", None),
    ("weather in springfield", "springfield"),
    ("Is it raining in Berlin?", "Berlin"),
])
def test_the_city_is_the_one_the_message_names(prompt: str, city: str | None):
    reply = read_intent([user(prompt)])
    if city is None:
        assert reply.content == ASK_CITY and reply.tool_calls == []
    else:
        assert calls(reply) == [("get_weather", {"location": city})]


def test_a_failed_step_ends_the_plan_with_what_went_wrong():
    failed = "Error: no place named 'Atlantis' was found; check the spelling"
    prompt = "Check the weather in Atlantis and save it as a note titled 'Atlantis'"
    reply = read_intent([user(prompt), called(0, "get_weather"), result(0, failed)])
    assert reply.tool_calls == [] and reply.content.endswith(failed)


@pytest.mark.parametrize(("prompt", "expected"), [
    ("List my notes", ("list_notes", {"query": ""})),
    ("search my notes for 'Paris weather'", ("list_notes", {"query": "Paris weather"})),
    ("Delete the note titled Tokyo.", ("delete_note", {"title": "Tokyo"})),
    ("please delete note #12", ("delete_note", {"note_id": 12})),
    ("Save a note titled Groceries saying milk, eggs and bread.",
     ("create_note", {"title": "Groceries", "body": "milk, eggs and bread"})),
])
def test_notes_requests(prompt: str, expected: tuple[str, dict]):
    assert calls(read_intent([user(prompt)])) == [expected]


@pytest.mark.parametrize(("prompt", "answer"), [
    ("Tell me a joke", HELP),
    ("Book me a flight to Tokyo", HELP),
    ("write a note", ASK_BODY),
    ("delete a note", ASK_TARGET),
])
def test_what_the_offline_model_cannot_do_it_says_plainly(prompt: str, answer: str):
    reply = read_intent([user(prompt)])
    assert (reply.content, reply.tool_calls) == (answer, [])
    assert "OPENAI_API_KEY" in HELP


def test_a_later_turn_is_read_from_its_own_message():
    earlier = [user("weather in Berlin"), called(0, "get_weather"), result(0, "Berlin: 3°C"),
               {"role": "assistant", "content": "Here it is."}]
    reply = read_intent([*earlier, user("Save it as a note titled Berlin")])
    assert calls(reply) == [("create_note", {"title": "Berlin", "body": "Berlin: 3°C"})]


def test_without_tools_it_answers_with_what_it_has():
    reply = read_intent([user(TOKYO), called(0, "get_weather"), result(0, OBSERVED)],
                        tools_offered=False)
    assert reply.tool_calls == [] and reply.content.endswith(OBSERVED)


def test_a_scripted_scenario_wins_over_the_reader():
    scripted = Script(scenarios=[Scenario(trigger="Tokyo", replies=[ScriptedReply(content="scripted")])])
    selection = select_reply(scripted, [user(TOKYO)])
    assert (selection.trigger, selection.reply.content) == ("Tokyo", "scripted")


def test_over_http_the_ids_and_finish_reasons_are_the_servers():
    with ScriptedModelServer() as server, openai.OpenAI(base_url=server.base_url, api_key="x",
                                                        max_retries=0) as client:
        def ask(messages: list[dict]):
            return client.chat.completions.create(model="scripted", messages=messages,
                                                  tools=[{"type": "function", "function": {
                                                      "name": "get_weather", "parameters": {}}}])
        first = ask([user(TOKYO)]).choices[0]
        assert first.finish_reason == "tool_calls" and first.message.tool_calls[0].id == "call_0_0"
        second = ask([user(TOKYO), called(0, "get_weather"), result(0, OBSERVED)]).choices[0]
        (note,) = second.message.tool_calls
        assert (note.id, note.function.name) == ("call_1_0", "create_note")
        assert json.loads(note.function.arguments) == {"title": "Tokyo", "body": OBSERVED}
        assert [r.step for r in server.requests] == [0, 1]


async def test_the_agent_checks_tokyo_and_files_the_note_it_was_asked_for(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    title = unique("Tokyo")
    handle = await start(client, task_queue,
                         f"Check the weather in Tokyo and save it as a note titled '{title}'.")
    waiting = await reaches(handle, "waiting_for_confirmation")
    [pending] = waiting.pending_confirmations
    assert (pending.tool, pending.args["title"]) == ("create_note", title)
    assert pending.args["body"].startswith("Tokyo, Japan: ")
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id=uuid.uuid4().hex, call_ids=[pending.call_id], approver="demo"))
    status = await settled(handle)
    assert status.tools_used == ["get_weather", "create_note"]
    [(_, _, body)] = note_rows(activity_settings.data_dir, title)
    assert body == pending.args["body"] and status.final_answer.endswith(f"{title!r}.")
