"""A2A, served (`api.a2a`), driven by the official `a2a-sdk` client as another agent would: it
reads the card, gets a weather answer, sees a write as `input-required` that a person then
approves on the API, sends a message again without a second turn, and cancels a turn."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio
from a2a.client import ClientConfig, create_client
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from google.protobuf import json_format
from temporalio.client import Client

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import EndRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiServer, tokens_env
from tests.helpers import replay, script, tool_call, unique
from tests.subagent_support import PROFILES
from tests.webhook_support import Receiver

TOKENS = {"ann": ("tok-ann", "user"), "root": ("tok-root", "admin"), "bob": ("tok-bob", "user")}


@pytest.fixture(scope="module")
def api(temporal_address: str, agents_queue: str, activity_settings: ActivitySettings,
        tmp_path_factory) -> Iterator[ApiServer]:
    """The API of the worker with agent profiles (`tests.subagent_support.PROFILES`), which it
    reads as the worker does, and the worker's memory store (where push configs are kept)."""
    profiles = tmp_path_factory.mktemp("a2a") / "profiles.json"
    profiles.write_text(json.dumps({"agents": {n: p.model_dump() for n, p in PROFILES.items()}}))
    with ApiServer(temporal_address, agents_queue, AGENT_PROFILES=str(profiles),
                   AGENT_API_TOKENS=tokens_env(TOKENS),
                   AGENT_DATA_DIR=str(activity_settings.data_dir)) as server:
        yield server


@pytest_asyncio.fixture
async def agent(api: ApiServer) -> AsyncIterator:
    """Ann's A2A client, made from the card as any A2A client is."""
    http = httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {TOKENS['ann'][0]}"})
    client = await create_client(api.url, client_config=ClientConfig(streaming=False,
                                                                     httpx_client=http))
    try:
        yield client
    finally:
        await client.close()
        await http.aclose()


def said(text: str, context_id: str = "", message_id: str | None = None) -> Message:
    return Message(message_id=message_id or uuid.uuid4().hex, role=Role.ROLE_USER,
                   context_id=context_id, parts=[Part(text=text)])


async def send(agent, message: Message, immediately: bool = False) -> Task:
    request = SendMessageRequest(message=message, configuration=SendMessageConfiguration(
        return_immediately=immediately))
    [response] = [r async for r in agent.send_message(request)]
    assert response.HasField("task"), response
    return response.task


def answer_of(task: Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


async def test_the_card_names_the_binding_and_the_tokens(api: ApiServer):
    async with httpx.AsyncClient() as http:  # no token: the card is public
        card = (await http.get(f"{api.url}/.well-known/agent-card.json")).json()
    assert card["supportedInterfaces"] == [
        {"url": f"{api.url}/a2a", "protocolBinding": binding, "protocolVersion": "1.0"}
        for binding in ("JSONRPC", "HTTP+JSON")]
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
    assert card["capabilities"]["streaming"] is True and card["skills"]
    assert card["capabilities"]["pushNotifications"] is True  # the API has the workers' store


async def test_a_weather_answer_and_a_message_sent_again_is_the_same_turn(
        agent, model: ScriptedModelServer, api: ApiServer):
    trigger = script(model, unique("a2a-weather"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
                     ScriptedReply(content="Paris: {last_tool}"))
    first = said(f"{trigger}: weather in Paris?")
    task = await send(agent, first)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert answer_of(task).startswith("Paris: ") and task.id == f"{task.context_id}~1"
    again = await send(agent, first)  # the same message id: the same turn, not a second one
    assert (again.id, answer_of(again)) == (task.id, answer_of(task))
    assert model.count(trigger, step=0) == 1
    fetched = await agent.get_task(GetTaskRequest(id=task.id))
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
    before = await agent.get_task(GetTaskRequest(id=f"{task.context_id}#1"))  # ids had "#"
    assert before.id == task.id


async def test_the_http_json_binding_runs_a_turn_and_lists_a_context_s_tasks(
        api: ApiServer, model: ScriptedModelServer):
    """The official client, told to prefer HTTP+JSON, sends, reads and lists over REST: a task
    id travels whole in a URL path."""
    trigger = script(model, unique("a2a-rest"), ScriptedReply(content="over REST"),
                     ScriptedReply(content="again over REST"))
    http = httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {TOKENS['ann'][0]}"})
    client = await create_client(api.url, client_config=ClientConfig(
        streaming=False, httpx_client=http, supported_protocol_bindings=["HTTP+JSON"]))
    calls: list[str] = []
    async def seen(request: httpx.Request) -> None:
        calls.append(request.url.path)

    http.event_hooks["request"].append(seen)
    try:
        task = await send(client, said(f"{trigger}: hi"))
        assert answer_of(task) == "over REST" and calls[-1] == "/a2a/message:send"
        second = await send(client, said(f"{trigger}: again", context_id=task.context_id))
        fetched = await client.get_task(GetTaskRequest(id=second.id))
        assert calls[-1] == f"/a2a/tasks/{second.id}" and answer_of(fetched) == "again over REST"
        listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
        assert [t.id for t in listed.tasks] == [second.id, task.id]
        mine = await client.list_tasks(ListTasksRequest(page_size=5))
        assert second.id in [t.id for t in mine.tasks]
    finally:
        await client.close()
        await http.aclose()


async def test_a_write_is_input_required_until_a_person_approves_it(
        agent, model: ScriptedModelServer, api: ApiServer):
    title = unique("a2a-note")
    trigger = script(model, unique("a2a-write"),
                     ScriptedReply(tool_calls=[tool_call("create_note",
                                                         {"title": title, "body": "b"})]),
                     ScriptedReply(content="Saved: {last_tool}"))
    task = await send(agent, said(f"{trigger}: save a note"))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    waiting = "".join(p.text for p in task.status.message.parts)
    assert "waiting for approval: create_note(" in waiting and title in waiting
    with pytest.raises(Exception, match="waits for a person to approve create_note"):
        await send(agent, said("just do it", context_id=task.context_id))  # not over A2A
    async with httpx.AsyncClient(base_url=api.url, timeout=60, headers={
            "Authorization": f"Bearer {TOKENS['root'][0]}"}) as root:  # a person, elsewhere
        confirmed = await root.post(f"/conversations/{task.context_id}/confirm",
                                    json={"all": True})
        assert confirmed.status_code == 200, confirmed.text
    for _ in range(200):
        done = await agent.get_task(GetTaskRequest(id=task.id))
        if done.status.state == TaskState.TASK_STATE_COMPLETED:
            break
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer_of(done).startswith("Saved: Created note")


async def test_a_turn_is_cancelled_and_another_owner_s_task_is_not_found(
        agent, model: ScriptedModelServer, api: ApiServer):
    trigger = script(model, unique("a2a-slow"), ScriptedReply(content="late", hold=True))
    try:
        task = await send(agent, said(f"{trigger}: think long"), immediately=True)
        assert task.status.state in (TaskState.TASK_STATE_WORKING,
                                     TaskState.TASK_STATE_SUBMITTED), task
        cancelled = await agent.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    finally:
        model.release()
    http = httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {TOKENS['bob'][0]}"})
    bob = await create_client(api.url, client_config=ClientConfig(streaming=False,
                                                                  httpx_client=http))
    try:
        with pytest.raises(Exception, match="no such conversation"):
            await bob.get_task(GetTaskRequest(id=task.id))
    finally:
        await bob.close()
        await http.aclose()


async def test_a_turn_streams_its_tools_then_its_answer(
        api: ApiServer, model: ScriptedModelServer):
    trigger = script(model, unique("a2a-stream"),  # (slow enough to be followed as it goes)
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Oslo"})],
                                   delay_s=1.0),
                     ScriptedReply(content="Oslo: {last_tool}"))
    http = httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {TOKENS['ann'][0]}"})
    client = await create_client(api.url, client_config=ClientConfig(streaming=True,
                                                                     httpx_client=http))
    try:
        events = [e async for e in client.send_message(SendMessageRequest(
            message=said(f"{trigger}: weather in Oslo?")))]
    finally:
        await client.close()
        await http.aclose()
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and kinds[-1] == "status_update", kinds
    running = [e.status_update.status.message.parts[0].text for e in events
               if e.HasField("status_update") and e.status_update.status.message.parts]
    assert "running get_weather" in running
    [answer] = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert answer.parts[0].text.startswith("Oslo: ")
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_each_profile_is_an_agent_of_its_own(api: ApiServer, model: ScriptedModelServer):
    """`/agents/researcher`: its card's skills are its tools, and its conversations run as the
    profile (its system prompt, its tools)."""
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{api.url}/agents/researcher/.well-known/agent-card.json")).json()
    assert card["description"] == PROFILES["researcher"].description
    assert [s["id"] for s in card["skills"]] == ["get_weather"]
    assert card["supportedInterfaces"][0]["url"] == f"{api.url}/agents/researcher/a2a"
    trigger = script(model, unique("a2a-profile"), ScriptedReply(content="researched"))
    http = httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {TOKENS['ann'][0]}"})
    client = await create_client(f"{api.url}/agents/researcher",
                                 client_config=ClientConfig(streaming=False, httpx_client=http))
    try:
        task = await send(client, said(f"{trigger}: look it up"))
    finally:
        await client.close()
        await http.aclose()
    assert answer_of(task) == "researched"
    [body] = [r.body for r in model.requests if r.trigger == trigger and r.kind == "chat"]
    assert body["messages"][0]["content"].startswith("You research.")
    offered = {t["function"]["name"] for t in body.get("tools", [])}
    assert "get_weather" in offered and "create_note" not in offered  # the profile's tools


async def test_a_question_is_answered_by_the_next_message(agent, model: ScriptedModelServer):
    trigger = script(model, unique("a2a-question"),
                     ScriptedReply(tool_calls=[tool_call("ask_input",
                                                         {"message": "Which city?"})]),
                     ScriptedReply(content="Noted: {last_tool}"))
    task = await send(agent, said(f"{trigger}: a forecast, please"))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "question: Which city?" in task.status.message.parts[0].text
    reply = said("Lisbon", context_id=task.context_id)
    reply.task_id = task.id
    answered = await send(agent, reply)
    assert (answered.id, answered.status.state) == (task.id, TaskState.TASK_STATE_COMPLETED)
    assert answer_of(answered) == "Noted: Lisbon"


async def test_what_another_agent_sends_is_checked_before_anything_starts(
        agent, api: ApiServer):
    with pytest.raises(Exception, match="the context id"):
        await send(agent, said("hello", context_id="../../etc"))
    with pytest.raises(Exception, match="no text part"):
        await send(agent, Message(message_id="m-empty", role=Role.ROLE_USER, parts=[]))
    with pytest.raises(Exception, match="no such task"):
        await agent.get_task(GetTaskRequest(id="no-turn-mark"))
    async with httpx.AsyncClient() as http:  # no token: refused before the body is read
        refused = await http.post(f"{api.url}/a2a", json={"jsonrpc": "2.0", "id": 1,
                                                          "method": "GetTask", "params": {}})
    assert refused.status_code == 401


async def test_push_notifications_tell_a_client_each_turn_with_no_secret_in_the_history(
        agent, model: ScriptedModelServer, api: ApiServer, receiver: Receiver, client: Client):
    """A config set on a waiting task: the turn's answer is pushed (A2A's `StreamResponse`,
    with the client's token and credentials), and so is the next turn's write waiting; the
    conversation holds the config's id and host, never its path, token or credentials."""
    first, second = unique("a2a-push-note"), unique("a2a-push-note")
    trigger = script(model, unique("a2a-push"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": first,
                                                                         "body": "b"})]),
                     ScriptedReply(content="Saved: {last_tool}"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": second,
                                                                         "body": "b"})]))
    task = await send(agent, said(f"{trigger}: save a note"))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    config = await agent.create_task_push_notification_config(TaskPushNotificationConfig(
        task_id=task.id, url=receiver.url, token="push-token-1",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="push-cred-2")))
    for url in ("ftp://127.0.0.1/x", "http:///nohost", "http://h/" + "x" * 3000):
        with pytest.raises(Exception, match="a push URL is"):
            await agent.create_task_push_notification_config(TaskPushNotificationConfig(
                task_id=task.id, url=url))
    with pytest.raises(Exception, match="id is at most 128"):
        await agent.create_task_push_notification_config(TaskPushNotificationConfig(
            task_id=task.id, url=receiver.url, id="p" * 129))
    listed = await agent.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id))
    assert [(c.id, c.url, c.authentication.credentials) for c in listed.configs] == [
        (config.id, receiver.url, "")]  # its credentials are not said again
    async with httpx.AsyncClient(base_url=api.url, timeout=60, headers={
            "Authorization": f"Bearer {TOKENS['root'][0]}"}) as root:
        assert (await root.post(f"/conversations/{task.context_id}/confirm",
                                json={"all": True})).status_code == 200
    [finished] = await receiver.until("turn_finished")
    assert finished["headers"]["X-A2A-Notification-Token"] == "push-token-1"
    assert finished["headers"]["Authorization"] == "Bearer push-cred-2"
    pushed = json_format.ParseDict(finished["json"], StreamResponse()).task
    assert (pushed.id, pushed.status.state) == (task.id, TaskState.TASK_STATE_COMPLETED)
    assert answer_of(pushed).startswith("Saved: Created note")

    later = await send(agent, said("and another", context_id=task.context_id))
    [waits] = await receiver.until("approval_requested")
    pushed = json_format.ParseDict(waits["json"], StreamResponse()).task
    assert pushed.id == later.id == f"{task.context_id}~2"
    assert pushed.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "waiting for approval: create_note(" in pushed.status.message.parts[0].text
    await agent.delete_task_push_notification_config(DeleteTaskPushNotificationConfigRequest(
        task_id=later.id, id=config.id))
    with pytest.raises(Exception, match="no push config"):
        await agent.get_task_push_notification_config(GetTaskPushNotificationConfigRequest(
            task_id=later.id, id=config.id))

    handle = client.get_workflow_handle(task.context_id)
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    history = (await handle.fetch_history()).to_json()
    decoded = " ".join(base64.b64decode(d).decode(errors="replace")
                       for d in re.findall(r'"data": ?"([A-Za-z0-9+/=]+)"', history))
    assert config.id in decoded and "127.0.0.1" in decoded  # what the conversation holds
    for secret in ("push-token-1", "push-cred-2", "/hook"):
        assert secret not in decoded + history, secret
    await replay(handle, record_as="a2a_push_notifications")
