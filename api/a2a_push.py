"""A2A push notification configs (`api.a2a`): a client names where a conversation's turns'
changes go (`CreateTaskPushNotificationConfig`, or `SendMessage`'s configuration). A config set
on a task hears every turn of its conversation: the next message's task too.

The config is kept whole in the store the API and the workers share (the memory store's
database: `activities.memory.pushes`), and the conversation is told only each config's id and
host (`PushTargets`), so its URL's path, its token and its credentials never enter a history.
The worker's `notify` activity delivers, as it delivers to webhooks (`activities.a2a_push`).
Whoever may read the conversation may set, read and remove its configs."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import datetime, timezone
from urllib.parse import urlsplit

from a2a.types import AuthenticationInfo, TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError

from ..activities.a2a_push import PUSH_EVENTS
from ..activities.memory import MemoryUnavailable, open_store
from ..activities.memory.pushes import PushConfig
from ..client.session import Session
from ..contract import PushTargets, WebhookRef
from ..contract.models import MAX_PUSH_TARGETS
from ..contract.names import PUSH_TARGETS_SIGNAL

MAX_URL_CHARS, MAX_SECRET_CHARS, MAX_ID_CHARS = 2048, 4096, 128


def _config(pushed: PushConfig) -> TaskPushNotificationConfig:
    """A config as a client reads it back: its credentials are not said again."""
    return TaskPushNotificationConfig(
        id=pushed.id, task_id=pushed.task_id, url=pushed.url,
        authentication=AuthenticationInfo(scheme=pushed.scheme) if pushed.scheme else None)


class PushConfigs:
    """One conversation's configs, in the store at `url` (None: memory is off here)."""

    def __init__(self, url: str | None, s: Session, conversation: str) -> None:
        if url is None:
            raise UnsupportedOperationError("push notifications need the store the workers "
                                            "share (AGENT_MEMORY is off)")
        self._store, self._s, self._cid = open_store(url), s, conversation

    async def _in_store(self, method: str, *args):
        try:
            return await asyncio.to_thread(getattr(self._store, method), *args)
        except MemoryUnavailable as err:
            raise UnsupportedOperationError(f"the store of push configs: {err}") from None

    async def set(self, config: TaskPushNotificationConfig, task_id: str, by: str
                  ) -> TaskPushNotificationConfig:
        url = config.url
        split = urlsplit(url)
        if split.scheme not in ("http", "https") or not split.hostname or len(url) > MAX_URL_CHARS:
            raise InvalidParamsError(f"a push URL is http(s)://host/..., at most {MAX_URL_CHARS} "
                                     f"characters, not {url[:80]!r}")
        auth = config.authentication
        if max(len(config.token), len(auth.scheme), len(auth.credentials)) > MAX_SECRET_CHARS:
            raise InvalidParamsError(f"a push token or credential is at most {MAX_SECRET_CHARS} "
                                     "characters")
        if len(config.id) > MAX_ID_CHARS:
            raise InvalidParamsError(f"a push config's id is at most {MAX_ID_CHARS} characters")
        kept = await self.all()
        config_id = config.id or "push-" + hashlib.sha256(url.encode()).hexdigest()[:12]
        if config_id not in {k.id for k in kept} and len(kept) >= MAX_PUSH_TARGETS:
            raise InvalidParamsError(f"a conversation has at most {MAX_PUSH_TARGETS} push configs")
        pushed = PushConfig(self._cid, config_id, task_id, url, config.token or None,
                            auth.scheme or None, auth.credentials or None, by,
                            datetime.now(timezone.utc).isoformat())
        await self._in_store("keep_push", pushed)
        await self._tell()
        return _config(pushed)

    async def all(self) -> list[PushConfig]:
        return await self._in_store("pushes", self._cid)

    async def get(self, config_id: str) -> TaskPushNotificationConfig:
        found = next((c for c in await self.all() if c.id == config_id), None)
        if found is None:
            raise TaskNotFoundError(f"{self._cid} has no push config {config_id[:100]!r}")
        return _config(found)

    async def listed(self) -> list[TaskPushNotificationConfig]:
        return [_config(c) for c in await self.all()]

    async def drop(self, config_id: str) -> None:
        if not await self._in_store("drop_push", self._cid, config_id):
            raise TaskNotFoundError(f"{self._cid} has no push config {config_id[:100]!r}")
        await self._tell()

    async def _tell(self) -> None:
        """The conversation's targets, whole: each config's id and host, nothing more."""
        targets = [WebhookRef(index=-1, host=(urlsplit(c.url).hostname or "?")[:253], push=c.id,
                              events=PUSH_EVENTS) for c in await self.all()]
        await self._s.signal(self._cid, PUSH_TARGETS_SIGNAL, PushTargets(targets=targets))
