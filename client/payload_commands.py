"""`agent result` (a tool call's whole result, read by reference from the history) and
`agent payloads prune` (the stored payloads of conversations past the namespace's retention)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .cases import full_result
from .checks import CliError, UsageError
from .payload_store import gone_from, listing, prune
from .session import Session

DEFAULT_GRACE_H = 24.0


async def cmd_result(s: Session, a: argparse.Namespace) -> int:
    found = await full_result(s, a.id, a.call_id)
    if a.json:
        print(json.dumps({"call_id": found.call_id, "conversation_id": found.conversation_id,
                          "whole": found.whole, "bytes": len(found.text.encode()),
                          "text": found.text}, ensure_ascii=False))
    elif a.out:
        try:
            Path(a.out).write_text(found.text)
        except OSError as err:
            raise CliError(f"cannot write {a.out}: {err.strerror or err}") from None
        print(f"wrote {len(found.text.encode()):,} bytes of {found.call_id}'s result "
              f"({'whole' if found.whole else 'as the model saw it'}) to {a.out}")
    else:
        sys.stdout.write(found.text + ("" if found.text.endswith("\n") else "\n"))
    return 0


async def cmd_prune(s: Session, a: argparse.Namespace) -> int:
    if a.grace_h < 0:
        raise UsageError("--grace-h must be 0 or more")
    settings = s.settings.payloads
    storage = s.client.data_converter.external_storage
    assert storage is not None  # `connect` sets it

    report = await prune(listing(storage.drivers[0]), s.client.namespace,
                         gone_from(s.client),
                         a.grace_h * 3600, dry_run=a.dry_run)
    out: dict[str, Any] = {"store": settings.describe(), "dry_run": a.dry_run,
                           **report.as_json()}
    if a.json:
        print(json.dumps(out))
        return 0
    verb = "would remove" if a.dry_run else "removed"
    print(f"{out['store']}: {verb} {out['removed_objects']} object(s), "
          f"{out['removed_bytes']:,} bytes, of {out['removed_runs']} run(s) Temporal no longer "
          f"holds; kept {out['kept_runs']} run(s) it holds (or stored in the last "
          f"{a.grace_h:g} h) and {out['kept_other_objects']} object(s) of no conversation")
    for conversation in out["conversations"]:
        print(f"  {conversation}")
    return 0


def add_payload_commands(command: Any) -> None:
    p = command("result", cmd_result, "a tool call's result, whole where the model was shown "
                "it cut (read by reference from the history; a fork's prefix from its origin)",
                as_json=True)
    p.add_argument("call_id", help="the call's id, as `history` and `export` show it")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of stdout")
    p = command("payloads", cmd_prune, "remove the stored payloads (AGENT_PAYLOAD_STORE) of "
                "conversations past the namespace's retention", conversation=False, as_json=True)
    p.add_argument("action", choices=["prune"], help="prune: remove what Temporal no longer "
                   "holds")
    p.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    p.add_argument("--grace-h", type=float, default=DEFAULT_GRACE_H, metavar="H",
                   help=f"keep what was stored in the last H hours whatever Temporal says "
                        f"(a start's input is stored before its run exists; default "
                        f"{DEFAULT_GRACE_H:g})")
