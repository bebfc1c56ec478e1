"""The S3 store (`AGENT_PAYLOAD_STORE=s3://bucket/prefix`) against a real S3-compatible server
(moto's, from the registries): a 3 MB result kept there under the prefix, sealed, and read back
whole by export; `agent payloads prune` keeps a conversation Temporal holds and removes the
objects of one it no longer holds (past the namespace's retention)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from temporalio.client import Client

from durable_react_agent.client.cases import export
from durable_react_agent.client.payload_store import close_store, gone_from, listing, prune
from durable_react_agent.client.payloads import PayloadSettings
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.devserver import free_port, wait_serving
from tests.fake_tools import report_text
from tests.helpers import TEST_PAYLOAD_KEYS, script, settled, start, tool_call, unique
from tests.payload_support import sealed_worker

BUCKET, PREFIX = "agent-payloads", "prod/eu"


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory) -> Iterator[str]:
    """moto's S3 server on a free port, with the bucket made, and the AWS variables every
    client here reads (restored after)."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H",
                                 "127.0.0.1", "-p", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL_S3": url, "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        wait_serving(url, proc, log)
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def objects() -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET)
    return [o["Key"] for o in listed.get("Contents", [])]


async def test_a_large_result_kept_in_s3_reads_back_and_is_pruned_past_retention(
        client: Client, s3_server: str, activity_settings, model: ScriptedModelServer):
    payloads = PayloadSettings.from_env({"AGENT_PAYLOAD_STORE": f"s3://{BUCKET}/{PREFIX}"})
    payloads = PayloadSettings(store="s3", bucket=payloads.bucket, prefix=payloads.prefix,
                               keys=TEST_PAYLOAD_KEYS)
    trigger = script(model, unique("s3-report"),
                     ScriptedReply(tool_calls=[tool_call("big_report", {"size": 3_000_000})]),
                     ScriptedReply(content="stored"))
    async with sealed_worker(client.service_client.config.target_host, payloads,
                             activity_settings, "s3") as worker:
        handle = await start(worker.client, worker.queue, trigger, one_shot=True)
        assert (await settled(handle, timeout_s=60)).final_answer == "stored"
        [call] = (await export(worker.session, handle.id)).calls()
    converter = worker.client.data_converter
    assert call.full_result == report_text(3_000_000)
    keys = objects()
    ours = [k for k in keys if f"/wi/{handle.id}/" in k]
    assert ours and all(k.startswith(f"{PREFIX}/v0/ns/default/") for k in keys)
    body = boto3.client("s3").get_object(Bucket=BUCKET, Key=ours[0])["Body"].read()
    assert b"SECRET-LEDGER" not in body  # sealed before it left the worker

    gone = gone_from(worker.client)
    store = listing(converter.external_storage.drivers[0])
    kept = await prune(store, "default", gone, grace_s=0)
    assert kept.removed == [] and set(ours) <= set(objects())
    # a conversation past retention: Temporal holds it no more, and its objects remain
    s3 = boto3.client("s3")
    past = ours[0].replace(f"/wi/{handle.id}/", "/wi/conv-past-retention/")
    s3.copy_object(Bucket=BUCKET, Key=past, CopySource={"Bucket": BUCKET, "Key": ours[0]})
    report = await prune(store, "default", gone, grace_s=0)
    assert report.as_json()["conversations"] == ["conv-past-retention"]
    assert past not in objects() and set(ours) <= set(objects())
    await close_store(converter)
