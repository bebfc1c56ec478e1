"""Owner grants: a person's approval remembered for a tool in every conversation of its owner,
kept where the workers share it (the memory store's database), so that it is revoked
everywhere at once. Every write is keyed: a grant by its id (the conversation's and its number
there), a use by the call's key, so a crash mid-write never grants or uses twice.
Calls block: callers run them in a thread (`asyncio.to_thread`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from ...contract.policy import Grant
from ...rules.grants import live

SCHEMA = """
CREATE TABLE IF NOT EXISTS owner_grants (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    tool TEXT NOT NULL,
    by_whom TEXT NOT NULL,
    roles TEXT NOT NULL,
    at TEXT NOT NULL,
    expires_at TEXT,
    uses_left INTEGER,
    used INTEGER NOT NULL DEFAULT 0,
    conversation_id TEXT,
    revoked_at TEXT,
    revoked_by TEXT
);
CREATE INDEX IF NOT EXISTS owner_grants_by_owner ON owner_grants (owner, tool);
CREATE TABLE IF NOT EXISTS owner_grant_uses (
    grant_id TEXT NOT NULL,
    key TEXT NOT NULL,
    at TEXT NOT NULL,
    PRIMARY KEY (grant_id, key)
);
"""
COLUMNS = "id, tool, by_whom, roles, at, expires_at, uses_left, used"
MAX_OWNER_GRANTS = 200  # listed per owner


def _grant(row: Any) -> Grant:
    return Grant(id=row[0], tool=row[1], scope="owner", by=row[2], roles=json.loads(row[3]),
                 at=datetime.fromisoformat(row[4]),
                 expires_at=datetime.fromisoformat(row[5]) if row[5] else None,
                 uses_left=row[6], used=row[7])


class OwnerGrants:
    """The grants part of the memory store (`MemoryStore` holds it)."""

    _transaction: Callable[[], AbstractContextManager[Any]]
    _sql: Callable[[str], str]

    def keep_grants(self, owner: str, grants: list[Grant], uses: list[tuple[str, str]],
                    conversation_id: str, at: str) -> None:
        """Store grants, with the uses their conversation made of them already (`used` and
        `uses_left` count those); one stored under its id already stays as it is."""
        with self._transaction() as conn:
            for grant in grants:
                conn.execute(self._sql(
                    f"INSERT INTO owner_grants ({COLUMNS}, owner, conversation_id) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"),
                    [grant.id, grant.tool, grant.by, json.dumps(sorted(grant.roles)),
                     grant.at.isoformat(),
                     grant.expires_at.isoformat() if grant.expires_at else None,
                     grant.uses_left, grant.used, owner, conversation_id])
            for grant_id, key in uses:
                conn.execute(self._sql(
                    "INSERT INTO owner_grant_uses (grant_id, key, at) VALUES (?, ?, ?) "
                    "ON CONFLICT (grant_id, key) DO NOTHING"), [grant_id, key, at])

    def _of(self, conn: Any, owner: str, tool: str | None = None) -> list[Grant]:
        where, params = ("AND tool = ?", [owner, tool]) if tool is not None else ("", [owner])
        rows = conn.execute(self._sql(
            f"SELECT {COLUMNS} FROM owner_grants WHERE owner = ? AND revoked_at IS NULL {where} "
            "ORDER BY at DESC LIMIT ?"), [*params, MAX_OWNER_GRANTS]).fetchall()
        return [_grant(r) for r in rows]

    def owner_grants(self, owner: str, now: datetime) -> list[Grant]:
        """The owner's grants in force now, newest first."""
        with self._transaction() as conn:
            return live(self._of(conn, owner), now)

    def use_owner_grant(self, owner: str, tool: str, now: datetime, key: str,
                        fits: Callable[[Grant], bool]) -> Grant | None:
        """Use one of the owner's grants of `tool` that `fits` for the call keyed `key`: the
        grant a retry of the call used already, else the oldest in force (one use counted)."""
        with self._transaction() as conn:
            grants = [g for g in self._of(conn, owner, tool) if fits(g)]
            for grant in grants:
                done = conn.execute(self._sql(
                    "SELECT 1 FROM owner_grant_uses WHERE grant_id = ? AND key = ?"),
                    [grant.id, key]).fetchone()
                if done:
                    return grant
            in_force = sorted(live(grants, now), key=lambda g: g.at)
            if not in_force:
                return None
            grant = in_force[0]
            conn.execute(self._sql(
                "INSERT INTO owner_grant_uses (grant_id, key, at) VALUES (?, ?, ?)"),
                [grant.id, key, now.isoformat()])
            conn.execute(self._sql(
                "UPDATE owner_grants SET used = used + 1, uses_left = CASE WHEN uses_left IS "
                "NULL THEN NULL ELSE uses_left - 1 END WHERE id = ?"), [grant.id])
            return grant

    def revoke_owner_grant(self, grant_id: str, owner: str | None, by: str, at: str
                           ) -> Grant | None:
        """Revoke an owner grant (of `owner`; None: anyone's, for an admin); None if there is
        none in force such. Revoked, it lets no call of any conversation run."""
        with self._transaction() as conn:
            row = conn.execute(self._sql(
                f"SELECT {COLUMNS}, owner FROM owner_grants WHERE id = ? AND revoked_at IS NULL"),
                [grant_id]).fetchone()
            if row is None or (owner is not None and row[8] != owner):
                return None
            conn.execute(self._sql(
                "UPDATE owner_grants SET revoked_at = ?, revoked_by = ? WHERE id = ?"),
                [at, by, grant_id])
            return _grant(row)

