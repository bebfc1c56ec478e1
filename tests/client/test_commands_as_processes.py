"""Each of `agent`'s commands run once as the process a shell starts (the console script beside
the interpreter), on one conversation: the other CLI tests call its entry in-process
(`tests.cli_support`), and this is what they take on trust, that the installed script parses,
connects, prints and exits as they do."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from durable_react_agent.client.cli import build_parser
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.cli_support import EVALS, eval_env
from tests.helpers import script, tool_call, unique

RAN = {"start", "confirm", "reject", "answer", "say", "status", "history", "watch", "list",
       "export", "fork", "eval", "end", "cancel", "memories", "forget", "grants", "revoke",
       "stop", "limits", "result", "payloads"}


def test_this_module_runs_every_command():
    commands = build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001
    assert set(commands) == RAN, set(commands) ^ RAN


async def test_every_command_as_a_process(cli_process, model: ScriptedModelServer,
                                          tmp_path: Path):
    trigger = script(
        model, unique("processes"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": unique("p"), "body": "b"}),
                                  tool_call("delete_note", {"note_id": 515151})]),
        ScriptedReply(tool_calls=[tool_call("ask_choice", {"message": "Color?",
                                                           "options": ["red", "blue"]})]),
        ScriptedReply(content="You chose {last_tool}."),
        ScriptedReply(content="heard: {last_user}"),
    )
    conv = unique("processes-conv")

    async def ok(*args: str, **options) -> str:
        done = await cli_process(*args, **options)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    started = json.loads(await ok("start", "--id", conv, "--wait", "--json", trigger))
    create, delete = (c["call_id"] for c in started["pending_confirmations"])
    assert (await ok("reject", conv, delete, "--reason", "keep it")).strip() == "taken"
    confirmed = json.loads(await ok("confirm", conv, create, "--remember", "args", "--as", "ann",
                                    "--wait", "--json"))
    assert confirmed["pending_question"]["options"] == ["red", "blue"]
    assert (await ok("grants", conv)).startswith("g1  create_note  with these arguments")
    assert (await ok("revoke", conv, "g1")).strip() == "taken: grant g1 is revoked"
    assert "answer: You chose blue." in await ok("answer", conv, "blue", "--wait")
    assert "answer: heard: again" in await ok("say", conv, "again", "--wait")

    status, history, listed, case = await asyncio.gather(
        ok("status", conv, "--json"), ok("history", conv), ok("list"), ok("export", conv))
    assert json.loads(status)["turn"] == 2
    assert history.index("action:  ask_choice(") < history.index("answer by ")
    assert conv in listed
    assert json.loads(case)["conversation_id"] == conv
    assert "created note" in (await ok("result", conv, create)).lower()
    forked = (await ok("fork", conv, "--at-step", "1")).split()[-1]
    assert forked != conv and "cancelled" in await ok("cancel", forked)
    assert (await ok("stop", conv)).strip() == f"taken: {conv}: no turn was running: nothing to stop"
    owner = unique("nobody")  # this worker has no AGENT_OWNER_LIMITS: nobody has a ledger
    assert (await ok("limits", owner)).strip() == \
        f"{owner} has no ledger: no turn of theirs has run under AGENT_OWNER_LIMITS yet"
    await ok("end", conv)
    assert "── turn 2 finished: answered" in await ok("watch", conv)

    data = {"AGENT_DATA_DIR": str(tmp_path)}
    assert "passed 1/1" in await ok("eval", str(EVALS / "passing" / "weather_paris.json"),
                                    extra_env=eval_env(model, tmp_path), timeout=180)
    assert (await ok("memories", "--as", "ann", extra_env=data)).strip() == "no memories of ann"
    pruned = json.loads(await ok("payloads", "prune", "--json", extra_env=data))
    assert pruned["store"].startswith(f"file://{tmp_path}") and pruned["removed_objects"] == 0
    unknown = await cli_process("forget", "m-none", "--as", "ann", extra_env=data)
    assert unknown.returncode == 1 and "ann has no memory m-none" in unknown.stderr
