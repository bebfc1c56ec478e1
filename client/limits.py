"""Limits from the CLI. A conversation's own, per step (`start --max-parallel-tools`,
`--max-calls-per-step`, `--max-parallel-subagents`). An owner's (`AGENT_OWNER_LIMITS`):
`agent limits OWNER` shows them, with today's spending, the running turns and who waits for
what, read from the owner's ledger (`workflows.owner_ledger`); with `--turns`, `--tokens` or
`--usd` an admin raises (or lowers) them, and the turns that waited go on at once; `--reset`
goes back to the worker's."""

from __future__ import annotations

import argparse
from typing import Any

from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from ..contract.owner import (
    LEDGER_QUERY,
    SET_LIMITS_UPDATE,
    LedgerView,
    OwnerLimits,
    SetLimits,
    ledger_id,
)
from .checks import CliError, NotFound, UsageError
from .session import Session

STEP_LIMITS = ("max_parallel_tools", "max_calls_per_step", "max_parallel_subagents")


def add_step_limits(p: argparse.ArgumentParser) -> None:
    """`start`'s limits of a step (each from 1 to 64, as many calls as a reply holds)."""
    p.add_argument("--max-parallel-tools", type=int, default=8, metavar="N",
                   help="a step's tool calls running at once (default 8); the rest wait")
    p.add_argument("--max-calls-per-step", type=int, default=None, metavar="N",
                   help="the tool calls a step may make; the rest are not run, the model reads why")
    p.add_argument("--max-parallel-subagents", type=int, default=4, metavar="N",
                   help="subagents running at once (default 4); the rest wait")


def step_limits(a: argparse.Namespace) -> dict[str, Any]:
    return {limit: getattr(a, limit) for limit in STEP_LIMITS}


def no_ledger(owner: str) -> str:
    """What is said of an owner without a ledger (and, by the API, of another's ledger)."""
    return f"{owner} has no ledger: no turn of theirs has run under AGENT_OWNER_LIMITS yet"


async def ledger_of(client: Client, owner: str) -> LedgerView | None:
    """The owner's ledger as it stands; None: the owner has run no turn under limits yet."""
    try:
        return await client.get_workflow_handle(ledger_id(owner)).query(
            LEDGER_QUERY, result_type=LedgerView)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    except WorkflowQueryFailedError as err:
        raise CliError(f"the ledger of {owner!r} did not answer: {err}") from None


async def set_owner_limits(client: Client, owner: str, change: SetLimits) -> LedgerView:
    """An admin's limits for `owner`, by Update to its ledger (which must exist: it begins
    with the owner's first turn under limits)."""
    try:
        return await client.get_workflow_handle(ledger_id(owner)).execute_update(
            SET_LIMITS_UPDATE, change, result_type=LedgerView)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(no_ledger(owner)) from None
        raise


def render_ledger(view: LedgerView) -> str:
    said = ", ".join(f"{name.replace('_', ' ')} {value:,}" for name, value in
                     view.limits.model_dump().items() if value is not None)
    lines = [f"owner {view.owner}: limits {said or 'none'}",
             f"today ({view.day}): {view.used_tokens:,} tokens and ${view.used_usd:.4f} spent, "
             f"{view.held_tokens:,} tokens and ${view.held_usd:.4f} set aside for running turns"]
    if view.override.any():
        lines.append("set by an admin: " + ", ".join(
            f"{k} {v}" for k, v in view.override.model_dump().items() if v is not None))
    lines += [f"running: {cid}" for cid in view.running]
    lines += [f"waiting: {w.conversation_id}: {w.message}" for w in view.waiting]
    return "\n".join(lines)


async def cmd_limits(s: Session, a: argparse.Namespace) -> int:
    asked = {"running_turns": a.turns, "daily_tokens": a.tokens, "daily_usd": a.usd}
    if a.turns is not None and a.turns < 1 or a.tokens is not None and a.tokens < 1 or \
            a.usd is not None and a.usd <= 0:
        raise UsageError("--turns and --tokens must be at least 1, --usd more than 0")
    if any(v is not None for v in asked.values()) or a.reset:
        view = await set_owner_limits(s.client, a.owner, SetLimits(
            limits=OwnerLimits(**asked), reset=a.reset, by=a.who))
    else:
        found = await ledger_of(s.client, a.owner)
        if found is None:
            print("null" if a.json else no_ledger(a.owner))
            return 0
        view = found
    print(view.model_dump_json(indent=2) if a.json else render_ledger(view))
    return 0


def add_limits_command(command: Any, add_as: Any) -> None:
    p = command("limits", cmd_limits, "an owner's limits (AGENT_OWNER_LIMITS), today's "
                "spending and who waits; --turns, --tokens, --usd set them (an admin's)",
                conversation=False, as_json=True)
    p.add_argument("owner", help="the owner, as conversations record it (`start --as`)")
    p.add_argument("--turns", type=int, metavar="N", help="turns running at once")
    p.add_argument("--tokens", type=int, metavar="N", help="tokens a day")
    p.add_argument("--usd", type=float, metavar="D", help="dollars a day")
    p.add_argument("--reset", action="store_true",
                   help="drop the limits an admin set: the worker's hold again")
    add_as(p, "who sets them (the audit's name)")
