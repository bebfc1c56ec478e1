"""Where External Storage keeps payloads over the threshold (`AGENT_PAYLOAD_STORE`): files
under a directory, or objects in S3 (Temporal's S3 driver) under a key prefix. Both key an object
by its conversation and run and by the SHA-256 of its bytes, as Temporal's S3 driver does:

    v0/ns/{namespace}/wt/{workflow type}/wi/{workflow id}/ri/{run id}/d/sha256/{hex}

so an object's owner is in its key, and `prune` removes those of conversations Temporal no
longer holds (past the namespace's retention). What a claim names comes from a history, which is
outside input: a file claim is a path inside the store, read within a size bound, and its bytes
must hash to the digest it names."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, unquote

import structlog
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import (
    DataConverter,
    StorageDriver,
    StorageDriverActivityInfo,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)
from temporalio.service import RPCError, RPCStatusCode

log = structlog.get_logger()

MiB = 1024 * 1024
MAX_STORED_BYTES = 64 * MiB  # an object read back: a history naming a larger file is refused
MAX_SEGMENT_BYTES = 200  # a key's segment, as a file name (most file systems allow 255)
FILE_DRIVER = "agent.file"
# A run's objects: namespace, workflow type, workflow id, run id ("null": stored by a client
# before the run began, a start's input or a signal's)
RUN_KEY = re.compile(r"v0/ns/([^/]+)/wt/([^/]+)/wi/([^/]+)/ri/([^/]+)/d/sha256/[0-9a-f]{64}")
TEMP_SUFFIX = ".part"


class PayloadUnreadable(ValueError):
    """A payload this process cannot read back: sealed under a key it is not given, or kept
    in a store where it is not (pruned, or another store), or altered there."""


async def close_store(converter: DataConverter) -> None:
    """Close what a converter's store opened (the S3 client's connections), at a process's end."""
    storage = converter.external_storage
    for each in storage.drivers if storage is not None else ():
        if isinstance(each, S3StorageDriver) and isinstance(each._client, S3Objects):  # noqa: SLF001
            await each._client.aclose()  # noqa: SLF001


def _segment(value: str | None) -> str:
    """A key's segment: percent-encoded outside S3's safe characters, dots too (no `..`)."""
    if not value:
        return "null"
    return quote(value, safe="!-_*'()").replace(".", "%2E")


def object_key(target: StorageDriverWorkflowInfo | StorageDriverActivityInfo | None,
               digest: str) -> str:
    """Where a payload of `digest` is kept for `target` (a conversation's run, else the
    namespace, else nowhere in particular)."""
    tail = f"d/sha256/{digest}"
    if target is None:
        return f"v0/{tail}"
    ns = f"v0/ns/{_segment(target.namespace)}"
    if isinstance(target, StorageDriverWorkflowInfo):
        segments = ["wt", _segment(target.type), "wi", _segment(target.id), "ri",
                    _segment(target.run_id)]
    else:
        segments = ["at", _segment(target.type), "ai", _segment(target.id), "ri",
                    _segment(target.run_id)]
    if any(len(s) > MAX_SEGMENT_BYTES for s in segments):
        return f"{ns}/{tail}"
    return "/".join([ns, *segments, tail])


class FileStorageDriver(StorageDriver):
    """Payloads as files under `root` (`AGENT_PAYLOAD_STORE=file:///path`): written whole
    (to a temporary name, then renamed), once per content."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def name(self) -> str:
        return FILE_DRIVER

    def type(self) -> str:
        return FILE_DRIVER

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
                    ) -> list[StorageDriverClaim]:
        return [await asyncio.to_thread(self._put, context.target, p) for p in payloads]

    async def retrieve(self, context: StorageDriverRetrieveContext,
                       claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        return [await asyncio.to_thread(self._get, c) for c in claims]

    def _put(self, target: Any, payload: Payload) -> StorageDriverClaim:
        data = payload.SerializeToString()
        digest = hashlib.sha256(data).hexdigest()
        key = object_key(target, digest)
        path = self.root / key
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            part = path.with_name(f"{path.name}.{os.getpid()}.{time.monotonic_ns()}{TEMP_SUFFIX}")
            self._write(part, data)
            os.replace(part, path)  # whole, or not there: a kill mid-write leaves only the part
        return StorageDriverClaim(claim_data={"key": key})

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        with open(path, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())

    def _get(self, claim: StorageDriverClaim) -> Payload:
        key = claim.claim_data.get("key", "")
        parts = PurePosixPath(key).parts
        if (not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts)
                or not re.fullmatch(r"[0-9a-f]{64}", parts[-1])):
            raise PayloadUnreadable(f"a stored payload's claim names no object of this store: "
                                    f"{key[:200]!r}")
        path = self.root / key
        try:
            size = path.stat().st_size
            if size > MAX_STORED_BYTES:
                raise PayloadUnreadable(f"the stored payload {key} is {size:,} bytes, over "
                                        f"{MAX_STORED_BYTES:,}")
            data = path.read_bytes()
        except FileNotFoundError:
            raise PayloadUnreadable(
                f"the stored payload {key} is not in {self.root}: is AGENT_PAYLOAD_STORE (or "
                "AGENT_DATA_DIR) the worker's, or was it pruned?") from None
        if hashlib.sha256(data).hexdigest() != parts[-1]:
            raise PayloadUnreadable(f"the stored payload {key} does not hash to its name: "
                                    "altered")
        return Payload.FromString(data)


class S3Objects(S3StorageDriverClient):
    """Temporal's aioboto3 client for its S3 driver, opened on first use in the running event
    loop (credentials, region and endpoint from the AWS variables: `AWS_ENDPOINT_URL_S3` for an
    S3-compatible server), its keys under the store's prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = f"{prefix}/" if prefix else ""
        self._opened: tuple[asyncio.AbstractEventLoop, Any, Any] | None = None
        self._stack = AsyncExitStack()

    async def _open(self) -> tuple[Any, S3StorageDriverClient]:
        """This event loop's aioboto3 S3 client, and Temporal's driver client over it."""
        loop = asyncio.get_running_loop()
        if self._opened is None or self._opened[0] is not loop:
            import aioboto3  # noqa: PLC0415 (boto's imports take a second: only for S3)
            from temporalio.contrib.aws.s3driver.aioboto3 import (  # noqa: PLC0415
                new_aioboto3_client,
            )

            s3 = await self._stack.enter_async_context(aioboto3.Session().client("s3"))
            self._opened = (loop, s3, new_aioboto3_client(s3))
        return self._opened[1], self._opened[2]

    async def raw(self) -> Any:
        """The aioboto3 S3 client of this event loop (for what the driver does not do: list,
        delete)."""
        return (await self._open())[0]

    async def _client(self) -> S3StorageDriverClient:
        return (await self._open())[1]

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await (await self._client()).put_object(bucket=bucket, key=self.prefix + key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        return await (await self._client()).object_exists(bucket=bucket, key=self.prefix + key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        return await (await self._client()).get_object(bucket=bucket, key=self.prefix + key)

    async def aclose(self) -> None:
        await self._stack.aclose()
        self._opened = None


# ----- prune: the objects of conversations past retention -----

@dataclass
class StoredRun:
    """The objects of one run of a conversation (run "null": stored before it began)."""

    namespace: str
    workflow_id: str
    run_id: str | None
    keys: list[str] = field(default_factory=list)
    bytes: int = 0
    newest: float = 0.0  # the newest object's time (seconds since the epoch)


@dataclass
class PruneReport:
    removed: list[StoredRun] = field(default_factory=list)
    kept_runs: int = 0
    kept_other: int = 0  # objects not keyed by a conversation's run (kept: no owner to ask)
    partial: int = 0  # files a killed writer left (removed once old)

    def as_json(self) -> dict[str, Any]:
        return {"removed_runs": len(self.removed),
                "removed_objects": sum(len(r.keys) for r in self.removed),
                "removed_bytes": sum(r.bytes for r in self.removed),
                "kept_runs": self.kept_runs, "kept_other_objects": self.kept_other,
                "removed_partial_files": self.partial,
                "conversations": sorted({r.workflow_id for r in self.removed})}


def _run_of(key: str) -> tuple[str, str, str | None] | None:
    found = RUN_KEY.fullmatch(key)
    if found is None:
        return None
    ns, _, wid, rid = (unquote(s) for s in found.groups())
    return ns, wid, None if rid == "null" else rid


class Listing:
    """A store's objects by run, and how to remove them."""

    async def objects(self) -> AsyncIterator[tuple[str, int, float]]:  # key, size, time
        raise NotImplementedError
        yield  # pragma: no cover

    async def remove(self, keys: list[str]) -> None:
        raise NotImplementedError

    async def partial_files(self, before: float) -> int:
        return 0


class FileListing(Listing):
    def __init__(self, root: Path) -> None:
        self.root = root

    async def objects(self) -> AsyncIterator[tuple[str, int, float]]:
        for path in await asyncio.to_thread(lambda: sorted((self.root / "v0").rglob("*"))):
            if path.is_file() and not path.name.endswith(TEMP_SUFFIX):
                stat = path.stat()
                yield path.relative_to(self.root).as_posix(), stat.st_size, stat.st_mtime

    async def remove(self, keys: list[str]) -> None:
        for key in keys:
            (self.root / key).unlink(missing_ok=True)

    async def partial_files(self, before: float) -> int:
        old = [p for p in (self.root / "v0").rglob(f"*{TEMP_SUFFIX}")
               if p.stat().st_mtime < before]
        for path in old:
            path.unlink(missing_ok=True)
        return len(old)


class S3Listing(Listing):
    def __init__(self, objects: S3Objects, bucket: str) -> None:
        self.s3, self.bucket = objects, bucket

    async def objects(self) -> AsyncIterator[tuple[str, int, float]]:
        raw = await self.s3.raw()
        pages = raw.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.s3.prefix + "v0/")
        async for page in pages:
            for item in page.get("Contents", []):
                yield (item["Key"][len(self.s3.prefix):], item["Size"],
                       item["LastModified"].timestamp())

    async def remove(self, keys: list[str]) -> None:
        raw = await self.s3.raw()
        for start in range(0, len(keys), 1000):  # S3's limit per request
            await raw.delete_objects(Bucket=self.bucket, Delete={"Objects": [
                {"Key": self.s3.prefix + k} for k in keys[start:start + 1000]]})


def listing(storage: StorageDriver) -> Listing:
    """The objects of a store `client.payloads.driver` made."""
    if isinstance(storage, S3StorageDriver):
        client, bucket = storage._client, storage._bucket  # noqa: SLF001 (ours: we made it)
        assert isinstance(client, S3Objects) and isinstance(bucket, str)
        return S3Listing(client, bucket)
    assert isinstance(storage, FileStorageDriver)
    return FileListing(storage.root)


def gone_from(client: Client) -> Callable[[str, str | None], Awaitable[bool]]:
    """Whether Temporal no longer holds a run (or, run None, any run of the id): NOT_FOUND."""

    async def gone(workflow_id: str, run_id: str | None) -> bool:
        try:
            await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return True
            raise
        return False

    return gone


async def prune(store: Listing, namespace: str,
                gone: Callable[[str, str | None], Awaitable[bool]],
                grace_s: float, dry_run: bool = False, now: float | None = None) -> PruneReport:
    """Remove the objects of runs Temporal no longer holds (`gone(workflow_id, run_id)`: past
    the namespace's retention, or deleted), when their newest object is older than `grace_s`
    (a client stores a start's input before the run exists)."""
    now = time.time() if now is None else now
    runs: dict[tuple[str, str | None], StoredRun] = {}
    report = PruneReport()
    async for key, size, at in store.objects():
        owner = _run_of(key)
        if owner is None or owner[0] != namespace:
            report.kept_other += owner is None
            continue
        run = runs.setdefault(owner[1:], StoredRun(*owner))
        run.keys.append(key)
        run.bytes += size
        run.newest = max(run.newest, at)
    for run in runs.values():
        if run.newest < now - grace_s and await gone(run.workflow_id, run.run_id):
            report.removed.append(run)
            if not dry_run:
                await store.remove(run.keys)
                log.info("payloads pruned", workflow_id=run.workflow_id, run_id=run.run_id,
                         objects=len(run.keys), bytes=run.bytes)
        else:
            report.kept_runs += 1
    if not dry_run:
        report.partial = await store.partial_files(now - grace_s)
    return report
