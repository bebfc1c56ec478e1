"""What every process's payloads go through (DESIGN "Payloads"): the one data converter of the
worker, the CLI, the API and the eval process. Pydantic's JSON, then the AES-GCM codec of
`AGENT_PAYLOAD_KEYS` (every payload private at rest), then Temporal's External Storage for those
over `AGENT_PAYLOAD_THRESHOLD_BYTES`, kept where `AGENT_PAYLOAD_STORE` says
(`client.payload_store`) and referenced from the history."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, ExternalStorage, PayloadCodec, StorageDriver

from .payload_store import FileStorageDriver, PayloadUnreadable, S3Objects

KiB = 1024
DEFAULT_THRESHOLD_BYTES = 256 * KiB  # Temporal's own default
# Temporal refuses a payload over 2 MiB, and a workflow task's completion over 4 MiB: a higher
# threshold would let a payload through that no store keeps and Temporal refuses.
MAX_THRESHOLD_BYTES = 1024 * KiB
ENCRYPTED = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12
MAX_KEYS = 64
MAX_KEY_ID_CHARS = 64


class PayloadConfigError(ValueError):
    """`AGENT_PAYLOAD_*` that cannot be used, with why."""


class PayloadKeyMissing(PayloadUnreadable):
    """A payload encrypted with a key this process is not given, or not by it."""


def payload_failure(err: BaseException) -> str | None:
    """What a failure to read a payload back says, for a person (None: not such a failure).
    Temporal's S3 driver wraps what S3 said in a RuntimeError of its own."""
    if isinstance(err, PayloadUnreadable):
        return str(err)
    if isinstance(err, RuntimeError) and str(err).startswith("S3StorageDriver"):
        return f"{err}: {err.__cause__}" if err.__cause__ else str(err)
    return None


@dataclass(frozen=True)
class PayloadSettings:
    """Where large payloads are kept (`file` with a directory, or `s3` with a bucket and key
    prefix), from what size, and the keys (id to 32 bytes; the first encrypts)."""

    store: str = "file"
    path: Path = Path(".agent-data/payloads")
    bucket: str = ""
    prefix: str = ""
    threshold_bytes: int = DEFAULT_THRESHOLD_BYTES
    keys: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> PayloadSettings:
        data_dir = Path(env.get("AGENT_DATA_DIR") or ".agent-data")
        store = parse_store(env.get("AGENT_PAYLOAD_STORE", "").strip(), data_dir)
        return dataclasses.replace(
            store, threshold_bytes=_threshold(env.get("AGENT_PAYLOAD_THRESHOLD_BYTES", "")),
            keys=parse_keys(env.get("AGENT_PAYLOAD_KEYS", "")))

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}" if self.store == "s3" else f"file://{self.path}"
        return where + f" (over {self.threshold_bytes:,} bytes)"


def parse_store(url: str, data_dir: Path) -> PayloadSettings:
    """`AGENT_PAYLOAD_STORE`: `file:///path` (relative paths are the working directory's), or
    `s3://bucket/prefix`; unset, `payloads/` in the data directory."""
    if not url:
        return PayloadSettings(path=(data_dir / "payloads").absolute())
    parsed = urlparse(url)
    if parsed.scheme == "file" and (parsed.netloc + parsed.path):
        return PayloadSettings(path=Path(parsed.netloc + parsed.path).absolute())
    if parsed.scheme == "s3" and parsed.netloc and not (parsed.query or parsed.fragment):
        return PayloadSettings(store="s3", bucket=parsed.netloc, prefix=parsed.path.strip("/"))
    raise PayloadConfigError(f"AGENT_PAYLOAD_STORE must be file:///path or s3://bucket/prefix, "
                             f"not {url[:200]!r}")


def _threshold(raw: str) -> int:
    if not raw.strip():
        return DEFAULT_THRESHOLD_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise PayloadConfigError(f"AGENT_PAYLOAD_THRESHOLD_BYTES must be a number of bytes, "
                                 f"not {raw[:50]!r}") from None
    if not 0 <= value <= MAX_THRESHOLD_BYTES:
        raise PayloadConfigError(f"AGENT_PAYLOAD_THRESHOLD_BYTES must be from 0 to "
                                 f"{MAX_THRESHOLD_BYTES:,} (Temporal refuses a payload over 2 MiB)")
    return value


def parse_keys(raw: str) -> dict[str, bytes]:
    """`AGENT_PAYLOAD_KEYS`: a JSON object of key id to a base64 32-byte key, in order (the
    first encrypts, every one decrypts); empty: payloads are kept in clear."""
    if not raw.strip():
        return {}
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as err:
        raise PayloadConfigError(f"AGENT_PAYLOAD_KEYS is not JSON ({err.msg})") from None
    if not isinstance(given, dict) or not given:
        raise PayloadConfigError('AGENT_PAYLOAD_KEYS must be a JSON object of key id to a base64 '
                                 '32-byte key, e.g. {"k2": "<base64>", "k1": "<base64>"}')
    if len(given) > MAX_KEYS:
        raise PayloadConfigError(f"AGENT_PAYLOAD_KEYS lists {len(given)} keys, over {MAX_KEYS}")
    keys: dict[str, bytes] = {}
    for key_id, encoded in given.items():
        if not 1 <= len(key_id) <= MAX_KEY_ID_CHARS or not key_id.isprintable():
            raise PayloadConfigError(f"AGENT_PAYLOAD_KEYS: a key id is 1 to {MAX_KEY_ID_CHARS} "
                                     f"printable characters, not {key_id[:80]!r}")
        try:
            key = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != 32:
            raise PayloadConfigError(f"AGENT_PAYLOAD_KEYS: key {key_id!r} must be 32 bytes in "
                                     "base64 (openssl rand -base64 32)")
        keys[key_id] = key
    return keys


class AesGcmCodec(PayloadCodec):
    """Each payload sealed whole (its metadata too) with AES-GCM under the first key, the key's
    id beside it in clear so that any listed key opens it: keys rotate by listing a new one
    first. A payload not sealed (written before keys were set) passes through as it is."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise PayloadConfigError("the codec needs at least one key")
        self._keys = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._key_id = next(iter(keys))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.seal(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.open(p) for p in payloads]

    def seal(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        key_id = self._key_id.encode()
        sealed = self._keys[self._key_id].encrypt(nonce, payload.SerializeToString(), key_id)
        return Payload(metadata={"encoding": ENCRYPTED, KEY_ID: key_id}, data=nonce + sealed)

    def open(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCRYPTED:
            return payload
        key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        aes = self._keys.get(key_id)
        if aes is None:
            raise PayloadKeyMissing(f"a payload is encrypted with key {key_id[:80]!r}, which "
                                    f"AGENT_PAYLOAD_KEYS does not list (it lists "
                                    f"{', '.join(self._keys)})")
        data = payload.data
        try:
            opened = aes.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
        except InvalidTag:
            raise PayloadKeyMissing(f"a payload under key {key_id!r} does not open with that "
                                    "key: it was altered, or the key is not the one it was "
                                    "sealed with") from None
        return Payload.FromString(opened)


class ClearCodec(PayloadCodec):
    """Without keys: payloads in clear, and a sealed one refused with why (not handed on as
    bytes that fail further in)."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        for payload in payloads:
            if payload.metadata.get("encoding") == ENCRYPTED:
                key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
                raise PayloadKeyMissing(f"a payload is encrypted with key {key_id[:80]!r}, and "
                                        "AGENT_PAYLOAD_KEYS is not set here")
        return list(payloads)


def codec(settings: PayloadSettings) -> PayloadCodec:
    return AesGcmCodec(settings.keys) if settings.keys else ClearCodec()


def driver(settings: PayloadSettings) -> StorageDriver:
    """The store `settings` name: Temporal's S3 driver under the prefix, or the file store."""
    if settings.store == "s3":
        return S3StorageDriver(client=S3Objects(settings.prefix), bucket=settings.bucket)
    return FileStorageDriver(settings.path)


def data_converter(settings: PayloadSettings) -> DataConverter:
    """The product's data converter: pydantic, the codec, and External Storage."""
    return dataclasses.replace(
        pydantic_data_converter, payload_codec=codec(settings),
        external_storage=ExternalStorage(drivers=[driver(settings)],
                                         payload_size_threshold=settings.threshold_bytes))
