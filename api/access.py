"""Who may do what (DESIGN "Who may do what"): the roles a token carries, and what each role may do
with a conversation, given who owns it. Pure: the API asks, and answers 403 or 404.

| role       | may |
|------------|-----|
| `viewer`   | read every conversation; write nothing |
| `user`     | start conversations; read, message, decide and end their own; others are hidden |
| `approver` | what `user` may, plus read and decide on every conversation |
| `admin`    | everything |

A principal with several roles may what any of them may. A conversation another user owns is
hidden (404: its existence is not leaked) from whoever may not read it, and forbidden (403) to
whoever may read it but not do this.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Literal

Role = Literal["viewer", "user", "approver", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "user", "approver", "admin")
# What a conversation may be asked: read it (status, history, schemas, events), send it a
# message, decide its calls and answer its questions, or end it.
Action = Literal["read", "message", "decide", "end"]
# A name is an audit field, a search attribute value and a list query's operand: no spaces,
# quotes, backslashes or control characters.
NAME_PATTERN = re.compile(r"""[^\s:,"'\\\x00-\x1f\x7f]{1,64}""")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class Verdict(Enum):
    ALLOWED = "allowed"
    FORBIDDEN = "forbidden"  # 403: the conversation may be seen, not this done to it
    HIDDEN = "hidden"  # 404: not theirs to see


class Forbidden(Exception):
    """What the principal's role may not do (the API answers 403 with the reason)."""


class TokenError(ValueError):
    """Tokens the API cannot start with."""


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[Role]

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles

    @property
    def may_start(self) -> bool:
        return bool(self.roles & {"user", "approver", "admin"})

    def check_start(self) -> None:
        """`Forbidden` unless the principal may start conversations."""
        if not self.may_start:
            raise Forbidden(f"{self.describe()} may not start conversations")

    @property
    def may_write(self) -> bool:
        """Whether any write could be allowed (a viewer's never is: refused before its body)."""
        return self.roles != {"viewer"}

    @property
    def sees_all(self) -> bool:
        """Whether every conversation is listed (else only those the principal owns)."""
        return bool(self.roles & {"viewer", "approver", "admin"})

    def may(self, action: Action, owner: str | None) -> Verdict:
        """What this principal may do to a conversation `owner` started (None: started before
        owners were recorded, which only those who see all may read)."""
        if self.is_admin:
            return Verdict.ALLOWED
        own = owner is not None and owner == self.name
        if own and self.roles & {"user", "approver"}:
            return Verdict.ALLOWED
        if action == "decide" and "approver" in self.roles:
            return Verdict.ALLOWED
        if action == "read" and self.sees_all:
            return Verdict.ALLOWED
        return Verdict.FORBIDDEN if self.sees_all else Verdict.HIDDEN

    def describe(self) -> str:
        return f"{self.name} ({'+'.join(r for r in ROLES if r in self.roles)})"


ADMIN: frozenset[Role] = frozenset({"admin"})


@dataclass(frozen=True)
class TokenEntry:
    principal: Principal
    digest: bytes  # sha256 of the token: the token itself is not kept


class TokenBook:
    """Named tokens, kept as their SHA-256, each with its roles. `find` compares the digest of
    what was given with every entry's in constant time, so how long it takes tells nothing of
    which entry (or how much of one) matched."""

    def __init__(self, entries: list[TokenEntry] | None = None) -> None:
        self.entries = entries or []

    def __bool__(self) -> bool:
        return bool(self.entries)

    def named(self, name: str) -> Principal | None:
        """The principal of that name (a link's addressee), or None."""
        return next((e.principal for e in self.entries if e.principal.name == name), None)

    def find(self, token: str) -> Principal | None:
        given = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = None
        for entry in self.entries:  # no early exit
            if hmac.compare_digest(given, entry.digest):
                found = entry.principal
        return found

    @classmethod
    def load(cls, tokens: str = "", tokens_file: Path | None = None) -> TokenBook:
        """`AGENT_API_TOKENS` (`name:token[:role[+role]]`, comma-separated) and the lines of
        `AGENT_API_TOKENS_FILE` (`name:<sha256 hex of the token>[:role[+role]]`)."""
        entries = [_entry(e, "AGENT_API_TOKENS", hashed=False)
                   for e in (e.strip() for e in tokens.split(",")) if e]
        if tokens_file is not None:
            try:
                lines = tokens_file.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as err:
                raise TokenError(f"AGENT_API_TOKENS_FILE {tokens_file}: {err}") from None
            entries += [_entry(line, f"{tokens_file}:{n}", hashed=True)
                        for n, line in enumerate((x.strip() for x in lines), 1)
                        if line and not line.startswith("#")]
        seen: dict[bytes, str] = {}
        for entry in entries:
            if entry.digest in seen:
                raise TokenError(f"{seen[entry.digest]!r} and {entry.principal.name!r} have the "
                                 "same token")
            seen[entry.digest] = entry.principal.name
        return cls(entries)


def hash_token(token: str) -> str:
    """What `AGENT_API_TOKENS_FILE` holds for a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def parse_roles(text: str) -> frozenset[Role] | None:
    """`user`, `approver+viewer`... as roles; None if it is not such a list."""
    names = text.split("+")
    if not all(n in ROLES for n in names):
        return None
    return frozenset(names)  # type: ignore[arg-type]


def _entry(text: str, where: str, hashed: bool) -> TokenEntry:
    secret = "<sha256 hex>" if hashed else "token"
    name, sep, rest = text.partition(":")
    name, rest = name.strip(), rest.strip()
    if not sep or not rest:
        raise TokenError(f"{where}: an entry is name:{secret}[:role[+role]] (an entry names "
                         f"{name[:40] or 'nobody'!r})")
    if not NAME_PATTERN.fullmatch(name):
        raise TokenError(f"{where}: the name {name[:40]!r} is not 1-64 characters without "
                         "spaces, quotes, backslashes, commas or colons")
    roles: frozenset[Role] = ADMIN  # no role: today's rights, as before roles existed
    secret_text, colon, last = rest.rpartition(":")
    if colon and (parsed := parse_roles(last.strip())) is not None:
        rest, roles = secret_text.strip(), parsed
    elif colon and hashed:
        raise TokenError(f"{where}: {last.strip()[:40]!r} is not a role; roles are "
                         f"{', '.join(ROLES)}, joined with +")
    if hashed:
        digest = rest.lower()
        if not SHA256_HEX.fullmatch(digest):
            raise TokenError(f"{where}: {name}'s token must be given as the 64 hex digits of its "
                             "SHA-256 (agent-api hash-token)")
        return TokenEntry(Principal(name, roles), bytes.fromhex(digest))
    # A token may hold `:` (as before roles): only a last part that is a role list is taken so.
    return TokenEntry(Principal(name, roles), hashlib.sha256(rest.encode()).digest())
