"""Remembered approvals from the CLI: `confirm --remember` (with `--for` and `--uses`), `grants`
and `revoke`, on a real conversation: what the grant lets run, how it is listed, what is refused
before anything is sent (exit 2) and by the conversation (exit 1)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from durable_react_agent.client.checks import UsageError, parse_duration
from durable_react_agent.client.cli import build_parser
from durable_react_agent.contract import ConfirmRequest, SignalOutcome
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.helpers import note_rows, script, tool_call, unique


def note(title: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"})])


async def test_a_remembered_approval_lets_the_next_call_run_until_it_is_revoked(
        cli, model: ScriptedModelServer, activity_settings):
    first, second, third = (unique(t) for t in ("first", "second", "third"))
    trigger = script(model, unique("cli-grant"), note(first), note(second),
                     ScriptedReply(content="two notes"), note(third),
                     ScriptedReply(content="{last_tool}"))
    conv = unique("cli-grant-conv")
    started = await cli("start", "--id", conv, "--as", "olive", "--wait", "--json", trigger)
    assert started.returncode == 0, started.stderr
    [call] = json.loads(started.stdout)["pending_confirmations"]
    ref = call["call_id"]

    # What cannot be sent as it is: exit 2, nothing sent.
    for extra, why in (
        (["--for", "10m"], "--for and --uses apply to a remembered approval"),
        (["--uses", "3"], "--for and --uses apply to a remembered approval"),
        (["--remember", "call", "--uses", "2"], "--for and --uses apply"),
        (["--remember", "conversation", "--for", "ten minutes"], "a duration is a number and"),
        (["--remember", "conversation", "--for", "0s"], "more than 0 s"),
        (["--remember", "conversation", "--uses", "0"], "--uses must be at least 1"),
        (["--remember", "forever"], "invalid choice: 'forever'"),
    ):
        done = await cli("confirm", conv, ref, *extra)
        assert done.returncode == 2 and why in done.stderr, (extra, done.stderr)
    assert (await cli("grants", conv)).stdout.strip() == "no grants"
    assert json.loads((await cli("grants", conv, "--json")).stdout) == []

    # What the conversation refuses (exit 1, as any refusal): the call still waits.
    nameless = await cli("confirm", conv, ref, "--remember", "conversation", "--as", "unknown")
    assert nameless.returncode == 1
    assert nameless.stdout.startswith("refused: a remembered approval needs a person's name")
    assert json.loads((await cli("status", conv, "--json")).stdout)["pending_confirmations"] \
        == [call]

    confirmed = await cli("confirm", conv, ref, "--remember", "conversation", "--for", "1h",
                          "--uses", "5", "--as", "carol", "--wait", "--json")
    assert confirmed.returncode == 0, confirmed.stderr
    after = json.loads(confirmed.stdout)
    # the second note ran without asking, approved by carol's grant
    assert (after["status"], after["final_answer"]) == ("idle", "two notes"), after
    assert [(d["tool"], d["approver"], d["grant"]) for d in after["decisions"]] == [
        ("create_note", "carol", None), ("create_note", "carol", "g1")]
    assert len(note_rows(activity_settings.data_dir, second)) == 1

    [grant] = json.loads((await cli("grants", conv, "--json")).stdout)
    assert (grant["id"], grant["tool"], grant["scope"], grant["by"], grant["uses_left"],
            grant["used"]) == ("g1", "create_note", "conversation", "carol", 4, 1)
    lasts = (datetime.fromisoformat(grant["expires_at"])
             - datetime.fromisoformat(grant["at"])).total_seconds()
    assert lasts == 3600
    shown = (await cli("grants", conv)).stdout.strip()
    assert shown.startswith("g1  create_note  in this conversation  by carol at "), shown
    assert "until " in shown and "4 use(s) left" in shown and "used 1 time(s)" in shown
    status = (await cli("status", conv)).stdout
    assert "approved by carol's grant g1 at" in status

    unknown = await cli("revoke", conv, "g9")
    assert unknown.returncode == 1
    assert unknown.stdout.strip() == ("refused: no grant 'g9' in this conversation (grants "
                                      "lists those in force)")
    revoked = await cli("revoke", conv, "g1", "--as", "dora")
    assert revoked.returncode == 0 and revoked.stdout.strip() == "taken: grant g1 is revoked"
    assert (await cli("grants", conv)).stdout.strip() == "no grants"
    again = await cli("revoke", conv, "g1", "--json")
    assert again.returncode == 1 and json.loads(again.stdout)["accepted"] is False

    # revoked, it lets nothing run: the next note waits for a person again
    asked = json.loads((await cli("say", conv, "one more", "--wait", "--json")).stdout)
    assert asked["status"] == "waiting_for_confirmation"
    assert [p["args"]["title"] for p in asked["pending_confirmations"]] == [third]
    assert note_rows(activity_settings.data_dir, third) == []
    history = json.loads((await cli("history", conv, "--json")).stdout)
    assert [(r["kind"], r["by"]) for r in history if r["kind"] in ("grant", "revoke")] == [
        ("grant", "carol"), ("revoke", "dora")]
    await cli("end", conv)


async def test_confirm_sends_what_to_remember_with_the_cli_roles():
    """The request as `confirm` builds it: the operator's tool decides as an admin."""
    sent: list[ConfirmRequest] = []

    class Recording:
        async def decide(self, cid, request, by_update):
            sent.append(request)
            return SignalOutcome(request_id=request.request_id, accepted=True)

    parse = build_parser().parse_args
    for argv in (["confirm", "c", "call_0", "--as", "ann"],
                 ["confirm", "c", "call_0", "--as", "ann", "--remember", "args", "--for", "1h30m",
                  "--uses", "3"],
                 ["confirm", "c", "--all", "--as", "ann", "--remember", "owner"]):
        a = parse(argv)
        assert await a.func(Recording(), a) == 0
    plain, bounded, owner = sent
    assert (plain.remember, plain.for_s, plain.uses, plain.roles) == (None, None, None, ["admin"])
    assert (bounded.remember, bounded.for_s, bounded.uses) == ("args", 5400.0, 3)
    assert (owner.remember, owner.all, owner.roles) == ("owner", True, ["admin"])


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("10m", 600), ("2h", 7200),
                                           ("1d", 86400), ("1h30m", 5400), ("1.5h", 5400)])
def test_a_duration_reads_as_seconds(text: str, seconds: float):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "m", "10x", "1m 2s", "0m", "-5m", "1w"])
def test_a_bad_duration_is_a_usage_error(text: str):
    with pytest.raises(UsageError, match="duration"):
        parse_duration(text)



async def test_an_owner_grant_is_listed_with_the_conversations_and_revoked_everywhere(
        cli, model: ScriptedModelServer, activity_settings):
    """`--remember owner`: kept in the store the workers share, which `grants` reads and
    `revoke` writes (the CLI names the store as the workers do: AGENT_DATA_DIR here)."""
    titles = [unique(t) for t in ("first", "second", "third")]
    triggers = [script(model, unique("owner-cli"), note(t), ScriptedReply(content="{last_tool}"))
                for t in titles]
    store = {"AGENT_DATA_DIR": str(activity_settings.data_dir)}
    convs = [unique("owner-cli-conv") for _ in titles]
    started = await cli("start", "--id", convs[0], "--as", "olive", "--wait", "--json",
                        triggers[0], extra_env=store)
    [call] = json.loads(started.stdout)["pending_confirmations"]
    confirmed = await cli("confirm", convs[0], call["call_id"], "--remember", "owner", "--as",
                          "carol", "--wait", extra_env=store)
    assert confirmed.returncode == 0, confirmed.stderr
    second = await cli("start", "--id", convs[1], "--as", "olive", "--wait", "--json",
                       triggers[1], extra_env=store)
    assert json.loads(second.stdout)["final_answer"].startswith("Created note #")
    [grant] = json.loads((await cli("grants", convs[1], "--json", extra_env=store)).stdout)
    assert (grant["scope"], grant["by"], grant["used"]) == ("owner", "carol", 1)
    assert grant["id"].startswith("o-")

    revoked = await cli("revoke", convs[1], grant["id"], "--as", "bob", extra_env=store)
    assert revoked.returncode == 0, revoked.stdout
    again = await cli("revoke", convs[1], grant["id"], extra_env=store)
    assert again.returncode == 1 and "no owner grant" in again.stdout
    third = await cli("start", "--id", convs[2], "--as", "olive", "--wait", "--json",
                      triggers[2], extra_env=store)
    assert json.loads(third.stdout)["status"] == "waiting_for_confirmation"
    assert json.loads((await cli("grants", convs[2], "--json", extra_env=store)).stdout) == []
