"""Remembered approvals from the CLI: what `confirm --remember` sends (with `--for` and
`--uses`), and `agent grants` and `revoke`: a conversation's grants, read by query and taken
back by Update (a grant not in force is refused, and nothing changes)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ..contract.policy import REMEMBER_SCOPES
from .checks import Refused, UsageError, parse_duration
from .render import render_grants
from .session import Session


def add_remember_options(p: argparse.ArgumentParser) -> None:
    """`confirm`'s options that remember the approval."""
    p.add_argument("--remember", choices=REMEMBER_SCOPES,
                   help="remember the approval: for this call only (call, the default), the "
                        "same tool with the same arguments (args), the tool in this "
                        "conversation (conversation), or in every conversation of its owner "
                        "(owner)")
    p.add_argument("--for", dest="for_", metavar="DURATION",
                   help="how long the remembered approval lasts: 90s, 10m, 2h, 1d (default: "
                        "no time limit)")
    p.add_argument("--uses", type=int, metavar="N",
                   help="how many calls the remembered approval lets run")


def remembered(a: argparse.Namespace) -> dict[str, Any]:
    """What a ConfirmRequest takes of `--remember`, `--for` and `--uses`; UsageError for what
    the conversation would refuse whatever its state."""
    if a.remember in (None, "call"):
        if a.for_ is not None or a.uses is not None:
            raise UsageError("--for and --uses apply to a remembered approval: add --remember "
                             "args, conversation or owner")
        return {} if a.remember is None else {"remember": a.remember}
    if a.uses is not None and a.uses < 1:
        raise UsageError("--uses must be at least 1")
    for_s = None if a.for_ is None else parse_duration(a.for_)
    return {"remember": a.remember, "for_s": for_s, "uses": a.uses}


async def cmd_grants(s: Session, a: argparse.Namespace) -> int:
    grants = await s.grants(a.id)
    if a.json:
        print(json.dumps([g.model_dump(mode="json") for g in grants], indent=2,
                         ensure_ascii=False))
    else:
        print(render_grants(grants))
    return 0


async def cmd_revoke(s: Session, a: argparse.Namespace) -> int:
    """Take a grant back: refused (exit 1, the reason printed as any refusal) if no such
    grant is in force."""
    try:
        outcome = await s.revoke(a.id, a.grant_id, a.who)
    except Refused as err:
        refusal = {"request_id": "", "accepted": False, "reason": str(err)}
        print(json.dumps(refusal) if a.json else f"refused: {err}")
        return 1
    print(outcome.model_dump_json() if a.json else f"taken: grant {a.grant_id} is revoked")
    return 0


def add_grant_commands(command: Any, add_as: Callable[[argparse.ArgumentParser, str], None],
                       json_help: str) -> None:
    command("grants", cmd_grants, "the approvals remembered in a conversation (confirm "
            "--remember) that are still in force", as_json=True)
    p = command("revoke", cmd_revoke, "take back an approval remembered in a conversation: "
                "its tool's calls ask again")
    p.add_argument("grant_id", metavar="GRANT_ID", help="the grant's id, as `grants` shows it")
    add_as(p, "who revokes it")
    p.add_argument("--json", action="store_true", help=json_help)
