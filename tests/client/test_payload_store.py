"""The payload layer on its own (`client.payloads`, `client.payload_store`): the settings'
refusals, the AES-GCM codec and its key rotation, the file store's keys and what it refuses to
read, and `prune`. The conversations that go through them are in tests/e2e/test_payloads.py."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverActivityInfo,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from durable_react_agent.client.payload_store import (
    FileListing,
    FileStorageDriver,
    object_key,
    prune,
)
from durable_react_agent.client.payloads import (
    AesGcmCodec,
    ClearCodec,
    PayloadConfigError,
    PayloadKeyMissing,
    PayloadSettings,
    PayloadUnreadable,
    data_converter,
)

K1, K2 = base64.b64encode(b"1" * 32).decode(), base64.b64encode(b"2" * 32).decode()
RUN = StorageDriverWorkflowInfo(namespace="default", id="conv/child:1", run_id="r1",
                                type="Conversation")


def env(**values: str) -> dict[str, str]:
    return {"AGENT_DATA_DIR": "/data", **values}


def test_settings_default_to_files_in_the_data_dir_and_refuse_what_cannot_be_used():
    default = PayloadSettings.from_env(env())
    assert (default.store, default.path, default.threshold_bytes, default.keys) == (
        "file", Path("/data/payloads"), 256 * 1024, {})
    s3 = PayloadSettings.from_env(env(AGENT_PAYLOAD_STORE="s3://bucket/a/b/",
                                      AGENT_PAYLOAD_THRESHOLD_BYTES="1000",
                                      AGENT_PAYLOAD_KEYS=f'{{"new": "{K2}", "old": "{K1}"}}'))
    assert (s3.store, s3.bucket, s3.prefix, s3.threshold_bytes) == ("s3", "bucket", "a/b", 1000)
    assert list(s3.keys) == ["new", "old"] and "keys" not in repr(s3)
    assert PayloadSettings.from_env(env(AGENT_PAYLOAD_STORE="file:///srv/p")).path == Path("/srv/p")
    for variable, value, says in [
        ("AGENT_PAYLOAD_STORE", "ftp://x", "file:///path or s3://bucket/prefix"),
        ("AGENT_PAYLOAD_STORE", "s3://", "file:///path or s3://bucket/prefix"),
        ("AGENT_PAYLOAD_THRESHOLD_BYTES", "lots", "a number of bytes"),
        ("AGENT_PAYLOAD_THRESHOLD_BYTES", str(4 * 1024 * 1024), "from 0 to"),
        ("AGENT_PAYLOAD_KEYS", "{", "not JSON"),
        ("AGENT_PAYLOAD_KEYS", "[]", "a JSON object"),
        ("AGENT_PAYLOAD_KEYS", '{"k": "c2hvcnQ="}', "32 bytes"),
        ("AGENT_PAYLOAD_KEYS", '{"k": 7}', "32 bytes"),
        ("AGENT_PAYLOAD_KEYS", f'{{"": "{K1}"}}', "key id"),
    ]:
        with pytest.raises(PayloadConfigError, match=says):
            PayloadSettings.from_env(env(**{variable: value}))


async def test_the_codec_seals_everything_and_keys_rotate():
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'"the secret plan"')
    old = AesGcmCodec({"old": base64.b64decode(K1)})
    [sealed_old] = await old.encode([plain])
    assert b"secret" not in sealed_old.SerializeToString()
    assert sealed_old.metadata["encryption-key-id"] == b"old"
    rotated = AesGcmCodec({"new": base64.b64decode(K2), "old": base64.b64decode(K1)})
    [sealed_new] = await rotated.encode([plain])
    assert sealed_new.metadata["encryption-key-id"] == b"new"  # the first key seals
    # a history sealed under the retired key still reads while the key is listed
    assert await rotated.decode([sealed_old, sealed_new, plain]) == [plain, plain, plain]
    with pytest.raises(PayloadKeyMissing, match="'new'.*does not list"):
        await old.decode([sealed_new])
    with pytest.raises(PayloadKeyMissing, match="not set here"):
        await ClearCodec().decode([sealed_old])
    tampered = Payload()
    tampered.CopyFrom(sealed_old)
    tampered.data = sealed_old.data[:-1] + bytes([sealed_old.data[-1] ^ 1])
    with pytest.raises(PayloadKeyMissing, match="altered"):
        await old.decode([tampered])


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=2000), st.dictionaries(st.text(min_size=1, max_size=8),
                                                  st.binary(max_size=20), max_size=3))
def test_any_payload_comes_back_as_it_went(data: bytes, metadata: dict[str, bytes]):
    codec = AesGcmCodec({"k": base64.b64decode(K1)})
    payload = Payload(metadata=metadata, data=data)
    assert codec.open(codec.seal(payload)) == payload


@settings(max_examples=80, deadline=None)
@given(st.text(min_size=1, max_size=300))
def test_any_workflow_id_keys_an_object_inside_the_store(workflow_id: str):
    key = object_key(StorageDriverWorkflowInfo(namespace="ns", id=workflow_id, run_id="r",
                                               type="T"), "a" * 64)
    parts = key.split("/")
    assert ".." not in parts and "." not in parts and "" not in parts
    assert all(len(p.encode()) <= 200 for p in parts)


async def test_the_file_store_keeps_whole_objects_by_run_and_refuses_odd_claims(tmp_path: Path):
    store = FileStorageDriver(tmp_path)
    payload = Payload(metadata={"encoding": b"binary/plain"}, data=os.urandom(300_000))
    [claim] = await store.store(StorageDriverStoreContext(target=RUN), [payload])
    key = claim.claim_data["key"]
    assert key.startswith("v0/ns/default/wt/Conversation/wi/conv%2Fchild%3A1/ri/r1/d/sha256/")
    [again] = await store.store(StorageDriverStoreContext(target=RUN), [payload])
    assert again == claim and len(list(tmp_path.rglob("*.part"))) == 0  # once per content
    assert await store.retrieve(StorageDriverRetrieveContext(), [claim]) == [payload]
    activity = StorageDriverActivityInfo(namespace="default", id="7", type="get_weather")
    [other] = await store.store(StorageDriverStoreContext(target=activity), [payload])
    assert "/at/get_weather/ai/7/ri/null/" in other.claim_data["key"]
    for forged in ["../../etc/passwd", "/etc/passwd", "v0/../../x/" + "a" * 64, "v0/d/x", ""]:
        with pytest.raises(PayloadUnreadable, match="names no object"):
            await store.retrieve(StorageDriverRetrieveContext(),
                                 [StorageDriverClaim(claim_data={"key": forged})])
    (tmp_path / key).write_bytes(b"altered")
    with pytest.raises(PayloadUnreadable, match="does not hash"):
        await store.retrieve(StorageDriverRetrieveContext(), [claim])
    (tmp_path / key).unlink()
    with pytest.raises(PayloadUnreadable, match="AGENT_PAYLOAD_STORE"):
        await store.retrieve(StorageDriverRetrieveContext(), [claim])


async def test_a_converter_keeps_large_payloads_by_reference_sealed(tmp_path: Path):
    converter = data_converter(PayloadSettings(path=tmp_path, threshold_bytes=1000,
                                               keys={"k": base64.b64decode(K1)}))
    big, small = "the secret plan " * 1000, "a small secret"
    encoded = await converter.encode([big, small])
    assert encoded[0].metadata["encoding"] == b"json/protobuf"  # a reference
    assert encoded[1].metadata["encoding"] == b"binary/encrypted"
    stored = list(tmp_path.rglob("*"))
    assert all(b"secret" not in p.read_bytes() for p in stored if p.is_file())
    assert await converter.decode(encoded, [str, str]) == [big, small]


async def test_prune_removes_what_temporal_no_longer_holds_after_the_grace(tmp_path: Path):
    store = FileStorageDriver(tmp_path)

    async def put(workflow_id: str, run_id: str | None, data: bytes) -> str:
        target = StorageDriverWorkflowInfo(namespace="default", id=workflow_id, run_id=run_id,
                                           type="Conversation")
        [claim] = await store.store(StorageDriverStoreContext(target=target),
                                    [Payload(data=data)])
        return claim.claim_data["key"]

    gone_key = await put("gone", "r1", b"1")
    start_key = await put("gone", None, b"2")  # the client's, before the run
    kept_key = await put("kept", "r2", b"3")
    fresh_key = await put("fresh", "r3", b"4")
    [other] = await store.store(StorageDriverStoreContext(target=None), [Payload(data=b"5")])
    (tmp_path / "v0" / "x.1.2.part").write_bytes(b"half")  # a killed writer's
    old = time.time() - 7200
    for key in (gone_key, start_key, kept_key, "v0/x.1.2.part"):
        os.utime(tmp_path / key, (old, old))
    asked: list[tuple[str, str | None]] = []

    async def gone(workflow_id: str, run_id: str | None) -> bool:
        asked.append((workflow_id, run_id))
        return workflow_id != "kept"

    listing = FileListing(tmp_path)
    dry = await prune(listing, "default", gone, grace_s=3600, dry_run=True)
    assert dry.as_json()["removed_objects"] == 2 and (tmp_path / gone_key).exists()
    report = await prune(listing, "default", gone, grace_s=3600)
    assert report.as_json() == {
        "removed_runs": 2, "removed_objects": 2, "removed_bytes": 6, "kept_runs": 2,
        "kept_other_objects": 1, "removed_partial_files": 1, "conversations": ["gone"]}
    assert not (tmp_path / gone_key).exists() and not (tmp_path / start_key).exists()
    assert all((tmp_path / k).exists() for k in (kept_key, fresh_key, other.claim_data["key"]))
    assert ("fresh", "r3") not in asked  # within the grace: not even asked
