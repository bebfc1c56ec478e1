"""The Temporal UI reads a sealed history through `agent-api`'s codec endpoint, in a real browser:
a dev server whose UI names the endpoint (`--ui-codec-endpoint`, as `make demo`'s does), and
a conversation sealed with the key; the page shows the first message, which Temporal holds only
sealed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import expect
from temporalio.client import Client

from durable_react_agent.client.payloads import PayloadSettings, data_converter
from durable_react_agent.contract import ConversationInput
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiServer
from tests.devserver import dev_server_command, free_port, wait_serving
from tests.helpers import TEST_PAYLOAD_KEYS, TEST_PAYLOAD_KEYS_ENV, unique


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory) -> Iterator[tuple[str, str, int]]:
    """A dev server with its UI, whose codec endpoint is the API's (on a port chosen here)."""
    port, ui_port, api_port = free_port(), free_port(), free_port()
    command = [c for c in dev_server_command(tmp_path_factory.mktemp("ui") / "dev.db", port)
               if c != "--headless"]
    log = tmp_path_factory.mktemp("ui-log") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*command, "--ui-port", str(ui_port), "--ip", "127.0.0.1",
             "--ui-codec-endpoint", f"http://127.0.0.1:{api_port}/codec"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    ui = f"http://127.0.0.1:{ui_port}"
    try:
        wait_serving(ui, proc, log)
        yield f"127.0.0.1:{port}", ui, api_port
    finally:
        proc.terminate()
        proc.wait(timeout=15)


async def test_the_temporal_ui_shows_a_sealed_input_through_the_codec_endpoint(
        ui_server: tuple[str, str, int], console):
    address, ui, api_port = ui_server
    api = ApiServer(address, "no-worker", AGENT_PAYLOAD_KEYS=TEST_PAYLOAD_KEYS_ENV, AGENT_TEMPORAL_UI_URL=ui)
    api.port, api.url = api_port, f"http://127.0.0.1:{api_port}"
    api.env["AGENT_API_ADDRESS"] = f"127.0.0.1:{api_port}"
    api.start()
    try:
        sealed = await Client.connect(address, data_converter=data_converter(PayloadSettings(
            path=Path(api.env["AGENT_DATA_DIR"]) / "payloads", keys=TEST_PAYLOAD_KEYS)))
        secret = f"the launch codes are {unique('code')}"
        handle = await sealed.start_workflow(  # no worker needed: the UI reads the start
            ConversationWorkflow.run, ConversationInput(prompt=secret), id=unique("ui-sealed"),
            task_queue="no-worker")
        raw = await (await Client.connect(address)).get_workflow_handle(handle.id).fetch_history()
        assert secret not in raw.to_json()  # Temporal holds it sealed
        page = console.page
        await page.goto(f"{ui}/namespaces/default/workflows/{handle.id}/{handle.result_run_id}"
                        "/history")
        await expect(page.get_by_text(secret).first).to_be_visible(timeout=30_000)
        await handle.terminate()
    finally:
        api.stop()
