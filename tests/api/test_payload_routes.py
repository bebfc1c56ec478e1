"""Payloads over HTTP: a tool call's whole result as a download, and Temporal's codec endpoints,
which open sealed payloads for the Temporal UI's origin and for whoever may read every
conversation, and for nobody else."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from google.protobuf import json_format
from playwright.async_api import expect
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client

from durable_react_agent.client.payloads import ENCRYPTED
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.api_support import ApiServer, bearers, tokens_env
from tests.console_support import sign_in
from tests.fake_tools import report_text
from tests.helpers import TEST_PAYLOAD_KEYS_ENV, script, settled, start, tool_call, unique
from tests.payload_support import Sealed

TOKENS = {"root": ("tok-root", "admin"), "vic": ("tok-vic", "viewer"),
          "alice": ("tok-alice", "user")}
UI = "http://localhost:8233"  # the Temporal UI's default address


@pytest.fixture(scope="module")
def api(temporal_address: str, sealed: Sealed) -> Iterator[ApiServer]:
    with ApiServer(temporal_address, sealed.queue, AGENT_PAYLOAD_KEYS=TEST_PAYLOAD_KEYS_ENV,
                   AGENT_PAYLOAD_STORE=sealed.store.as_uri(),
                   AGENT_API_TOKENS=tokens_env(TOKENS)) as server:
        yield server


@pytest_asyncio.fixture
async def as_(api: ApiServer) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    async with bearers({n: t for n, (t, _) in TOKENS.items()}, base_url=api.url) as clients:
        yield clients


def as_json(payloads: list[Payload]) -> dict:
    return {"payloads": [json_format.MessageToDict(p) for p in payloads]}


async def test_the_whole_result_downloads_for_whoever_may_read_the_conversation(
        sealed: Sealed, model: ScriptedModelServer, as_: dict[str, httpx.AsyncClient]):
    trigger = script(model, unique("download"),
                     ScriptedReply(tool_calls=[tool_call("big_report", {"size": 600_000})]),
                     ScriptedReply(content="ok"))
    handle = await start(sealed.client, sealed.queue, trigger, one_shot=True, owner="root")
    await settled(handle, timeout_s=60)
    history = (await as_["root"].get(f"/conversations/{handle.id}/history")).json()
    call_id = next(a["call_id"] for record in history for a in record["actions"])
    got = await as_["vic"].get(f"/conversations/{handle.id}/results/{call_id}")
    assert got.status_code == 200, got.text
    assert got.text == report_text(600_000) and got.headers["x-result-whole"] == "true"
    assert got.headers["content-disposition"] == f"attachment; filename*=UTF-8''{call_id}.txt"
    assert (await as_["alice"].get(f"/conversations/{handle.id}/results/{call_id}")
            ).status_code == 404  # another owner's: hidden
    missing = await as_["root"].get(f"/conversations/{handle.id}/results/call_nope")
    assert missing.status_code == 404 and "call_nope" in missing.json()["detail"]


async def test_the_codec_opens_sealed_payloads_for_readers_of_everything_and_the_ui(
        client: Client, sealed: Sealed, model: ScriptedModelServer, api: ApiServer,
        as_: dict[str, httpx.AsyncClient]):
    trigger = script(model, unique("codec"), ScriptedReply(content="opened"))
    handle = await start(sealed.client, sealed.queue, f"{trigger}: the launch codes", one_shot=True)
    await settled(handle, timeout_s=60)
    raw = await client.get_workflow_handle(handle.id).fetch_history()
    sealed_input = raw.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert sealed_input.metadata["encoding"] == ENCRYPTED and b"launch" not in sealed_input.data

    decoded = await as_["vic"].post("/codec/decode", json=as_json([sealed_input]),
                                    headers={"Origin": UI, "X-Namespace": "default"})
    assert decoded.status_code == 200, decoded.text
    assert decoded.headers["access-control-allow-origin"] == UI
    [opened] = json_format.ParseDict(decoded.json(), Payloads()).payloads
    assert b"the launch codes" in opened.data and opened.metadata["encoding"] == b"json/plain"

    encoded = await as_["root"].post("/codec/encode", json=as_json([opened]))
    [again] = json_format.ParseDict(encoded.json(), Payloads()).payloads
    assert again.metadata["encoding"] == ENCRYPTED and again.data != sealed_input.data

    preflight = await as_["vic"].options("/codec/decode", headers={
        "Origin": UI, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-namespace"})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == UI
    async with httpx.AsyncClient(base_url=api.url) as nobody:
        assert (await nobody.post("/codec/decode", json=as_json([sealed_input]))
                ).status_code == 401
    refused = await as_["alice"].post("/codec/decode", json=as_json([sealed_input]))
    assert refused.status_code == 403 and "every conversation" in refused.json()["detail"]
    elsewhere = await as_["vic"].post("/codec/decode", json=as_json([sealed_input]),
                                      headers={"Origin": "https://evil.example"})
    assert elsewhere.status_code == 403
    ui_elsewhere = await as_["vic"].get("/conversations", headers={"Origin": UI})
    assert ui_elsewhere.status_code == 403  # the UI's origin may call the codec, nothing else
    bad = await as_["vic"].post("/codec/decode", json={"payloads": [{"data": "not base64!"}]})
    assert bad.status_code == 422
    foreign = Payload(metadata={"encoding": ENCRYPTED, "encryption-key-id": b"gone"}, data=b"x")
    unknown = await as_["vic"].post("/codec/decode", json=as_json([foreign]))
    assert unknown.status_code == 503 and "'gone'" in unknown.json()["detail"]


async def test_the_console_offers_a_cut_result_whole_as_a_download(
        sealed: Sealed, model: ScriptedModelServer, api: ApiServer, console):
    """In a real browser: the audit trail's call whose result the model saw cut offers the
    whole one, and the download is every byte of it."""
    trigger = script(model, unique("console-download"),
                     ScriptedReply(tool_calls=[tool_call("big_report", {"size": 400_000})]),
                     ScriptedReply(content="ok"))
    handle = await start(sealed.client, sealed.queue, trigger, one_shot=True, owner="root")
    await settled(handle, timeout_s=60)
    page = console.page
    await sign_in(page, api.url, TOKENS["root"][0])
    await page.goto(f"{api.url}/#/c/{handle.id}")
    await page.get_by_test_id("tab-audit").click()
    button = page.get_by_test_id("audit").get_by_test_id("download-result")
    await expect(button).to_have_count(1)
    async with page.expect_download() as download:
        await button.click()
    got = await download.value
    assert got.suggested_filename.endswith(".txt")
    assert Path(await got.path()).read_text() == report_text(400_000)
    assert console.errors == []
