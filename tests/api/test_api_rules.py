"""The API's pure rules, without a server: settings, who may call which route and with what body
(the app in-process, every route enumerated), what the OpenAPI document promises, how a failure is
answered, AG-UI resume entries and the translation of stream events into AG-UI events."""

from __future__ import annotations

import re
from typing import Any, get_args

import httpx
import pytest
from ag_ui.core import EventType, ResumeEntry
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel

from durable_react_agent.api import errors
from durable_react_agent.api.agui import Translator
from durable_react_agent.api.app import create_app
from durable_react_agent.api.bodies import NOT_BLANK, MessageBody
from durable_react_agent.api.interrupts import question_schema, resume_request
from durable_react_agent.api.routes import every_route
from durable_react_agent.api.settings import (
    ApiSettings,
    SettingsError,
    is_loopback,
    is_loopback_host,
    parse_address,
    token_book,
)
from durable_react_agent.client.checks import UsageError
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationStatus,
    PendingConfirmation,
    PendingQuestion,
    RejectRequest,
    StreamEvent,
    Usage,
)
from durable_react_agent.contract.bounds import check_message
from tests.api_support import concrete, routes_by_access


def status(**fields) -> ConversationStatus:
    base = dict(workflow_id="w", status="waiting_for_confirmation", turn=1, steps=1, llm_calls=1,
                tools_used=[], stop_reason=None, final_answer=None, usage=Usage(), error=None)
    return ConversationStatus(**{**base, **fields})


WAITING = status(pending_confirmations=[PendingConfirmation(call_id="c1", tool="create_note",
                                                            args={}, risk="sensitive")])
ASKING = status(status="waiting_for_input",
                pending_question=PendingQuestion(call_id="q1", kind="multi_choice", message="?",
                                                 options=["a", "b"]))


def entry(interrupt_id: str, payload=None, state: str = "resolved") -> ResumeEntry:
    return ResumeEntry(interrupt_id=interrupt_id, status=state, payload=payload)


def test_settings_parse_and_refuse_what_they_cannot_use():
    assert parse_address("127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    book = token_book({"AGENT_API_TOKENS": " alice:a1 , bob:b:2 "})
    assert book.find("a1").name == "alice" and book.find("b:2").name == "bob"
    for bad in ["alice", ":t", "alice:", "alice:t,bob:t"]:
        with pytest.raises(SettingsError):
            token_book({"AGENT_API_TOKENS": bad})
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
    for host in ["localhost", "LOCALHOST:8000", "127.0.0.1", "127.9.9.9:80", "[::1]", "[::1]:80"]:
        assert is_loopback_host(host), host
    for host in ["evil.example:8000", "::1", "localhost:", "localhost:x", "[::1]x", "",
                 "127.0.0.1.evil.example", "localhost.", "0.0.0.0:8000"]:
        assert not is_loopback_host(host), host
    with pytest.raises(SettingsError, match="without AGENT_API_TOKENS"):
        ApiSettings.from_env({"AGENT_API_ADDRESS": "0.0.0.0:8000"})
    with pytest.raises(SettingsError, match="AGENT_API_MAX_BODY_BYTES"):
        ApiSettings.from_env({"AGENT_API_MAX_BODY_BYTES": "lots"})
    s = ApiSettings.from_env({"AGENT_API_CORS_ORIGINS": "https://a.example/, https://b.example"})
    assert s.cors_origins == ("https://a.example", "https://b.example") and not s.auth_required


TOKEN = "tok-alice-123"
# A valid body for each route that takes one (AG-UI's input is the protocol's own model).
VALID_BODIES = {
    "/conversations": {"prompt": "hello"},
    "/conversations/{cid}/messages": {"text": "hello"},
    "/conversations/{cid}/confirm": {"call_ids": ["call_1"]},
    "/conversations/{cid}/reject": {"call_ids": ["call_1"], "reason": "no"},
    "/conversations/{cid}/answer": {"values": ["yes"]},
    "/conversations/{cid}/decline": {},
    "/conversations/{cid}/end": {},
    "/conversations/{cid}/stop": {},
    "/conversations/{cid}/fork": {"at_step": 1},
    "/owners/{owner}/limits": {"running_turns": 2},  # (PUT)
    "/codec/encode": {"payloads": [{"metadata": {"encoding": "YmluYXJ5L3BsYWlu"}, "data": ""}]},
    "/codec/decode": {"payloads": []},
}


def guarded_app() -> FastAPI:
    """The API with tokens and no Temporal: a route that reached Temporal would fail (500)."""
    app = create_app(ApiSettings.from_env({"AGENT_API_TOKENS": f"alice:{TOKEN}"}),
                     TemporalSettings())
    app.state.client = None  # the lifespan, which would connect, does not run in-process
    return app


def caller(app: FastAPI, **headers: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://api.test", headers=headers)


def body_model(route: APIRoute) -> type[BaseModel] | None:
    for param in route.dependant.body_params:
        annotation = param.field_info.annotation
        for kind in get_args(annotation) or (annotation,):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                return kind
    return None


async def test_every_data_route_needs_a_token_and_only_the_console_and_docs_do_not():
    app = guarded_app()
    guarded, public = routes_by_access(app)
    assert len(guarded) >= 13, guarded  # the enumeration found the data routes
    async with caller(app) as anonymous, caller(app, Authorization="Bearer wrong") as stranger:
        for method, path in guarded:
            for who in (anonymous, stranger):
                r = await who.request(method, path, json={})
                assert r.status_code == 401, (method, path, r.status_code, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
        for method, path in public:
            r = await anonymous.request(method, path)
            # a one-time link is its own credential: without AGENT_LINK_SECRET, none is valid
            assert r.status_code == (404 if path.startswith("/links/") else 200), (
                method, path, r.status_code)


@pytest.mark.parametrize("field", ["approver", "colour"])
async def test_every_body_refuses_an_unknown_field_such_as_an_approver(field: str):
    """The approver is the token's name: a body that names one (or anything unknown) is a 422,
    before anything reaches Temporal."""
    app = guarded_app()
    bodies = {route.path: route for route in every_route(app.routes)
              if isinstance(route, APIRoute) and body_model(route) is not None}
    assert set(bodies) - {"/agui"} == set(VALID_BODIES), "a body route without a valid body here"
    async with caller(app, Authorization=f"Bearer {TOKEN}") as alice:
        for path, valid in VALID_BODIES.items():
            body_model(bodies[path]).model_validate(valid)  # valid but for the extra field
            method = next(iter(bodies[path].methods))
            r = await alice.request(method, concrete(path), json={**valid, field: "mallory"})
            assert r.status_code == 422, (path, r.status_code, r.text)
            [error] = r.json()["detail"]
            assert (error["loc"], error["type"]) == (["body", field], "extra_forbidden"), path


async def test_a_stranger_is_refused_before_the_body_is_read():
    """Authentication comes first: without a valid token, a malformed, oversized or hostile body
    is a 401, never a 422 or a 413 that would tell a stranger what the route expects."""
    app = guarded_app()
    bodies = [b'{"prompt": ', b"\xff\xfe", b'{"prompt": "x", "approver": "mallory"}',
              b"[" * 5000, b"x" * (2 << 20)]
    async with caller(app) as anonymous, caller(app, Authorization="Bearer wrong") as stranger:
        for who in (anonymous, stranger):
            for path in ["/conversations", "/conversations/x/confirm", "/agui"]:
                for body in bodies:
                    r = await who.post(path, content=body,
                                       headers={"content-type": "application/json"})
                    assert r.status_code == 401, (path, body[:20], r.status_code, r.text)
                    assert r.headers["www-authenticate"] == "Bearer"


async def test_the_api_own_422s_have_fastapi_shape():
    app = guarded_app()
    async with caller(app, Authorization=f"Bearer {TOKEN}") as alice:
        answers = [
            await alice.post("/conversations", content=b'{"prompt": ',
                             headers={"content-type": "application/json"}),
            await alice.post("/conversations", content=b'{"prompt": "\xff"}',
                             headers={"content-type": "application/json"}),
            await alice.post("/conversations/x/confirm", json={"call_ids": ["a"], "all": True}),
            await alice.post("/conversations/x/messages", content=b'{"text": "\\ud800"}',
                             headers={"content-type": "application/json"}),
            await alice.get("/conversations/x/events", headers={"Last-Event-ID": "seven"}),
            await alice.get("/conversations/x/events", params={"from_offset": -1}),
        ]
    for r in answers:
        assert r.status_code == 422, r.text
        [error] = r.json()["detail"]
        assert set(error) == {"loc", "msg", "type"}, error
    assert answers[0].json()["detail"][0]["msg"].startswith("the body is not valid JSON")
    assert "UTF-8" in answers[1].json()["detail"][0]["msg"]
    assert answers[4].json()["detail"][0]["loc"] == ["header", "last-event-id"]


class Recorded:
    """A stand-in for the API's logger: what was logged, and how."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.calls.append((level, event, fields))


async def test_an_unexpected_failure_is_a_generic_500_with_a_request_id(monkeypatch):
    """The backstop: what failed is logged once, with its traceback; the client gets the request
    id, never the exception's text."""
    recorded = Recorded()
    monkeypatch.setattr(errors, "log", recorded)
    app = guarded_app()  # no Temporal client: the route fails with an AttributeError
    async with caller(app, Authorization=f"Bearer {TOKEN}") as alice:
        r = await alice.get("/conversations")
    assert r.status_code == 500
    assert r.json()["request_id"] == r.headers["x-request-id"]
    assert r.json()["request_id"] in r.json()["detail"]
    assert "NoneType" not in r.text and "Traceback" not in r.text
    assert recorded.calls == [("exception", "request_failed",
                               {"method": "GET", "path": "/conversations"})]


def test_the_openapi_document_lists_every_answer_and_links_a_conversation_to_its_routes():
    doc = create_app(ApiSettings(), TemporalSettings()).openapi()
    operations = {op["operationId"]: (path, op) for path, item in doc["paths"].items()
                  for op in item.values()}
    for name, (path, op) in operations.items():
        codes = set(op["responses"])
        assert {"401", "403"} <= codes, name
        assert "{cid}" not in path or {"404", "422"} <= codes, name
        assert "requestBody" not in op or {"413", "422"} <= codes, name
        assert "input" not in op["tags"] or "409" in codes, name
        # every route that asks Temporal may meet its refusal (the memories are the store's, the
        # codec the keys')
        assert name in ("config", "agui", "memories", "forget", "codec_encode", "codec_decode") \
            or "502" in codes, name
        for code, answer in op["responses"].items():
            if code >= "400":
                ref = answer["content"]["application/json"]["schema"]["$ref"]
                assert ref.rsplit("/", 1)[1] == ("HTTPValidationError" if code == "422"
                                                 else "Error"), (name, code)
    started = doc["paths"]["/conversations"]["post"]["responses"]
    for code in ("200", "201"):
        links = started[code]["links"]
        assert {link["operationId"] for link in links.values()} == {
            name for name, (path, _) in operations.items() if "{cid}" in path}
        assert all(link["parameters"] == {"cid": "$response.body#/workflow_id"}
                   for link in links.values())


def test_blank_means_the_same_to_python_json_schema_and_the_conversation():
    """A message the schema takes is never refused as empty by the conversation (which strips
    Python's whitespace), and what ECMAScript calls space is blank too."""
    ecma_space = "\t\n\v\f\r \xa0\u1680\u2000\u2001\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
    blank = {c for c in map(chr, range(0x110000)) if c.isspace()} | set(ecma_space)
    not_blank = re.compile(NOT_BLANK)
    assert all(not not_blank.search(c) for c in blank)
    assert all(c.strip() for c in map(chr, range(0x110000)) if not_blank.search(c))
    for c in blank:
        with pytest.raises(ValueError):
            MessageBody(text=c * 3)
        assert c not in ecma_space[:-1] or check_message(c * 3, None) == "the message is empty"
    MessageBody(text=" \ufeffa ")


def test_resume_entries_become_the_decision_they_stand_for():
    approve = resume_request(entry("c1", {"approved": True, "args": {"title": "t"}}), WAITING,
                             "alice", "r")
    assert isinstance(approve, ConfirmRequest)
    assert (approve.call_ids, approve.args, approve.approver) == (["c1"], {"title": "t"}, "alice")
    no = resume_request(entry("c1", {"approved": False, "reason": "why"}), WAITING, "bob", "r")
    assert isinstance(no, RejectRequest) and (no.reason, no.approver) == ("why", "bob")
    cancelled = resume_request(entry("c1", state="cancelled"), WAITING, "bob", "r")
    assert isinstance(cancelled, RejectRequest) and cancelled.reason == "cancelled"
    for payload in [None, {"approved": "yes"}, {"approved": True, "args": [1]}]:
        with pytest.raises(UsageError):
            resume_request(entry("c1", payload), WAITING, "alice", "r")

    answer = resume_request(entry("q1", {"answer": ["a", "b"]}), ASKING, "alice", "r")
    assert isinstance(answer, AnswerRequest) and answer.values == ["a", "b"]
    with pytest.raises(UsageError, match="not one of the options"):  # checked before sending
        resume_request(entry("q1", True), ASKING, "x", "r")
    assert resume_request(entry("q1", {"answer": "a"}), ASKING, "x", "r").values == ["a"]
    declined = resume_request(entry("q1", state="cancelled"), ASKING, "x", "r")
    assert isinstance(declined, AnswerRequest) and declined.declined
    with pytest.raises(UsageError):
        resume_request(entry("q1", {"answer": 3}), ASKING, "x", "r")


def test_question_schemas_follow_the_kind():
    def q(kind, options=()):
        return question_schema(PendingQuestion(call_id="q", kind=kind, message="?",
                                               options=list(options)))
    assert q("input")["properties"]["answer"] == {"type": "string", "minLength": 1}
    assert q("choice", "ab")["properties"]["answer"]["enum"] == ["a", "b"]
    assert q("multi_choice", "ab")["properties"]["answer"]["items"]["enum"] == ["a", "b"]
    assert q("confirm")["properties"]["answer"] == {"type": "boolean"}


def test_translation_opens_and_closes_messages_and_announces_calls_once():
    t = Translator(announced={"old"})

    def kinds(offset, **fields):
        return [e.type for e in t.translate(offset, StreamEvent(**fields))]

    assert kinds(1, kind="token", text="Hel") == [EventType.TEXT_MESSAGE_START,
                                                 EventType.TEXT_MESSAGE_CONTENT]
    assert kinds(2, kind="token", text="lo") == [EventType.TEXT_MESSAGE_CONTENT]
    assert kinds(3, kind="token", text="") == []
    assert kinds(4, kind="tool_started", call_id="c", tool="get_weather", args={"a": 1}) == [
        EventType.TEXT_MESSAGE_END, EventType.TOOL_CALL_START, EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END]
    assert kinds(5, kind="approval_requested", call_id="c", tool="get_weather") == []
    assert kinds(6, kind="tool_started", call_id="old", tool="x") == []
    assert kinds(7, kind="tool_finished", call_id="c", status="ok", text="obs") == [
        EventType.TOOL_CALL_RESULT]
    assert kinds(8, kind="decision_taken", call_id="d", status="approved") == []
    assert kinds(9, kind="decision_taken", call_id="d", status="rejected", text="no") == [
        EventType.TOOL_CALL_RESULT]
    assert kinds(10, kind="token", text="x") == [EventType.TEXT_MESSAGE_START,
                                                EventType.TEXT_MESSAGE_CONTENT]
    assert kinds(11, kind="reset", attempt=2) == [EventType.TEXT_MESSAGE_END]
