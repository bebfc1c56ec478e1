"""The worker's approval policy (AGENT_POLICY) and people's grants, in conversations on a real
server: a rule allows, asks or denies by the call's arguments; a remembered approval lets later
calls of its conversation run, and no other conversation's; four eyes and a deny hold whatever
a grant says (the rules themselves: tests/activities/test_policy_file.py, tests/rules/test_grants.py)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timezone

import httpx
import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from durable_react_agent.activities.memory import open_store
from durable_react_agent.activities.policy import parse_policy
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import ConfirmRequest, EndRequest, SayRequest
from durable_react_agent.contract.policy import PolicyChanged, RevokeRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.worker.policy import announce_policy
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import (
    note_rows,
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
    until,
)

POLICY = {"rules": [
    {"name": "drafts are free", "tools": ["create_note"],
     "when": "args.title.startsWith('draft')", "effect": "allow"},
    {"name": "never delete the index", "tools": ["delete_note"], "when": "args.note_id == 1",
     "effect": "deny"},
]}


def rid() -> str:
    return uuid.uuid4().hex


def note(title: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"})])


@pytest.fixture
def policed(activity_settings: ActivitySettings) -> ActivitySettings:
    return dataclasses.replace(activity_settings, policy=parse_policy(POLICY))


async def confirm(handle, call_id: str, approver: str = "alice", **remember):
    return await handle.execute_update(
        ConversationWorkflow.decide_confirm,
        ConfirmRequest(request_id=rid(), call_ids=[call_id], approver=approver, **remember))


async def refused(handle, call_id: str, approver: str, **remember) -> str:
    """Why the conversation refuses the decision (its Update's validator)."""
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await confirm(handle, call_id, approver, **remember)
    return str(failed.value.cause)


async def test_a_rule_allows_a_draft_asks_for_a_final_note_and_a_grant_covers_its_conversation(
    client: Client, model: ScriptedModelServer, policed: ActivitySettings
):
    queue = unique("policy")
    draft, final, second, third, other = (unique(t) for t in ("draft", "final", "second",
                                                              "third", "other"))
    draft = "draft " + draft
    done = ScriptedReply(content="{last_tool}")
    trigger = script(model, unique("policy"), note(draft), done, note(final), done,
                     note(second), done, note(third), done)
    elsewhere = script(model, unique("elsewhere"), note(other), ScriptedReply(content="{last_tool}"))
    async with httpx.AsyncClient(timeout=10) as http, build_worker(client, queue, policed, http):
        handle = await start(client, queue, trigger)
        status = await settled(handle)
        assert status.final_answer.startswith("Created note #"), status
        [allowed] = status.decisions
        revision = policed.policy.revision[:12]
        assert (allowed.approver, allowed.rule) == ("policy", f"rule 'drafts are free' of policy {revision}")
        assert allowed.reason == f"allowed by rule 'drafts are free' of policy {revision}"
        [step] = [r for r in await handle.query(ConversationWorkflow.history) if r.actions]
        assert step.actions[0].decision.rule == allowed.rule

        await handle.signal(ConversationWorkflow.say, SayRequest(text="a final one"))
        [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
        assert note_rows(policed.data_dir, final) == [] and pending.grantable
        assert "needs a person's name" in await refused(handle, pending.call_id, "policy",
                                                        remember="conversation")
        taken = await confirm(handle, pending.call_id, "alice", remember="conversation",
                              for_s=600)
        assert taken.accepted, taken
        await settled(handle, turn=2)
        [grant] = await handle.query(ConversationWorkflow.grants)
        assert (grant.tool, grant.scope, grant.by, grant.uses_left) == (
            "create_note", "conversation", "alice", None)

        await handle.signal(ConversationWorkflow.say, SayRequest(text="and a second"))
        status = await settled(handle, turn=3)
        assert status.final_answer.startswith("Created note #") and len(note_rows(policed.data_dir, second)) == 1
        used = status.decisions[-1]
        assert (used.approver, used.grant) == ("alice", grant.id)
        assert used.reason.startswith(f"allowed by alice's grant {grant.id} of ")
        history = await handle.query(ConversationWorkflow.history)
        assert [(r.kind, r.by) for r in history if r.kind == "grant"] == [("grant", "alice")]

        # the grant is this conversation's: another one still asks
        apart = await start(client, queue, elsewhere)
        await reaches(apart, "waiting_for_confirmation")

        # revoked, it lets nothing run any more
        assert (await handle.execute_update(ConversationWorkflow.revoke_grant,
                                            RevokeRequest(grant_id=grant.id, by="bob"))).accepted
        assert await handle.query(ConversationWorkflow.grants) == []
        with pytest.raises(WorkflowUpdateFailedError) as again:
            await handle.execute_update(ConversationWorkflow.revoke_grant,
                                        RevokeRequest(grant_id=grant.id, by="bob"))
        assert f"no grant '{grant.id}'" in str(again.value.cause)
        await handle.signal(ConversationWorkflow.say, SayRequest(text="a third"))
        [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
        assert pending.args["title"] == third
        history = await handle.query(ConversationWorkflow.history)
        assert [(r.kind, r.by) for r in history if r.kind == "revoke"] == [("revoke", "bob")]
        await handle.signal(ConversationWorkflow.end, EndRequest())
        await handle.result()
        await replay(handle, record_as="policy_rules_and_grants")


async def test_deleting_the_index_never_runs_and_the_model_reads_the_rule(
    client: Client, model: ScriptedModelServer, policed: ActivitySettings
):
    queue = unique("deny")
    trigger = script(model, unique("deny"),
                     ScriptedReply(tool_calls=[tool_call("delete_note", {"note_id": 1})]),
                     ScriptedReply(content="{last_tool}"))
    async with httpx.AsyncClient(timeout=10) as http, build_worker(client, queue, policed, http):
        handle = await start(client, queue, trigger)
        status = await settled(handle)
        assert status.pending_confirmations == []  # nobody is asked: no admin can confirm it
        assert status.final_answer == (
            "rejected: denied by rule 'never delete the index' of policy "
            f"{policed.policy.revision[:12]}")
        [denied] = status.decisions
        assert (denied.approved, denied.approver) == (False, "policy")


async def test_a_grant_is_no_second_person_and_a_destructive_call_is_not_remembered(
    client: Client, model: ScriptedModelServer, policed: ActivitySettings
):
    queue = unique("four-eyes")
    settings = dataclasses.replace(policed, four_eyes=("sensitive",))
    final = unique("final")
    trigger = script(model, unique("eyes"), note(final), ScriptedReply(content="{last_tool}"),
                     ScriptedReply(tool_calls=[tool_call("delete_note", {"note_id": 7})]),
                     ScriptedReply(content="{last_tool}"))
    async with httpx.AsyncClient(timeout=10) as http, build_worker(client, queue, settings, http):
        handle = await start(client, queue, trigger, owner="olive")
        [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
        assert "four eyes covers" in await refused(handle, pending.call_id, "bob",
                                                   remember="conversation")
        assert (await confirm(handle, pending.call_id, "bob")).accepted
        await settled(handle)
        await handle.signal(ConversationWorkflow.say, SayRequest(text="delete note 7"))
        [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
        assert "may not be remembered: it is destructive" in await refused(
            handle, pending.call_id, "bob", remember="args")


async def test_a_rule_that_asks_two_approvers_takes_two_people_with_the_role(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    two = {"rules": [{"name": "long notes need two", "tools": ["create_note"],
                      "when": "size(args.body) > 10", "effect": "ask",
                      "approvers": ["approver"], "quorum": 2}]}
    settings = dataclasses.replace(activity_settings, policy=parse_policy(two))
    queue, title = unique("quorum"), unique("long")
    trigger = script(model, unique("quorum"),
                     ScriptedReply(tool_calls=[tool_call("create_note",
                                                         {"title": title, "body": "x" * 20})]),
                     ScriptedReply(content="{last_tool}"))
    async with httpx.AsyncClient(timeout=10) as http, build_worker(client, queue, settings, http):
        handle = await start(client, queue, trigger)
        [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
        assert (pending.approvers, pending.quorum, pending.approved_by, pending.grantable) == (
            ["approver"], 2, [], False)
        assert "asks approver to decide it, and carol has user" in await refused(
            handle, pending.call_id, "carol", roles=["user"])
        assert (await confirm(handle, pending.call_id, "alice", roles=["approver"])).accepted
        [pending] = (await handle.query(ConversationWorkflow.status)).pending_confirmations
        assert pending.approved_by == ["alice"] and note_rows(settings.data_dir, title) == []
        assert "alice approved it already" in await refused(handle, pending.call_id, "alice",
                                                            roles=["approver"])
        assert "asks 2 different people to approve each call" in await refused(
            handle, pending.call_id, "bob", roles=["approver"], remember="conversation")
        assert (await confirm(handle, pending.call_id, "bob", roles=["admin"])).accepted
        status = await settled(handle)
        assert len(note_rows(settings.data_dir, title)) == 1
        [decision] = status.decisions
        assert decision.reason == "approved by alice, bob (rule 'long notes need two' of policy " \
            f"{settings.policy.revision[:12]})"
        await handle.signal(ConversationWorkflow.end, EndRequest())
        await handle.result()
        await replay(handle, record_as="policy_quorum")


async def test_an_owner_grant_covers_the_owners_other_conversations_until_revoked_everywhere(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    queue = unique("owner-grant")
    titles = [unique(f"n{i}") for i in range(4)]
    triggers = [script(model, unique(f"owner{i}"), note(t), ScriptedReply(content="{last_tool}"))
                for i, t in enumerate(titles)]
    store = open_store(activity_settings.memory_store_url)
    async with httpx.AsyncClient(timeout=10) as http, \
            build_worker(client, queue, activity_settings, http):
        first = await start(client, queue, triggers[0], owner="olive")
        [pending] = (await reaches(first, "waiting_for_confirmation")).pending_confirmations
        assert (await confirm(first, pending.call_id, "alice", remember="owner", uses=5)).accepted
        await settled(first)
        [kept] = store.owner_grants("olive", datetime.now(timezone.utc))
        assert (kept.tool, kept.by, kept.uses_left, kept.used) == ("create_note", "alice", 5, 0)

        second = await start(client, queue, triggers[1], owner="olive")
        status = await settled(second)
        assert status.final_answer.startswith("Created note #"), status
        assert (status.decisions[-1].grant, status.decisions[-1].approver) == (kept.id, "alice")
        assert "in every conversation of its owner" in status.decisions[-1].reason
        [after] = store.owner_grants("olive", datetime.now(timezone.utc))
        assert (after.uses_left, after.used) == (4, 1)

        elsewhere = await start(client, queue, triggers[2], owner="mallory")
        await reaches(elsewhere, "waiting_for_confirmation")  # another owner's: asks

        assert store.revoke_owner_grant(kept.id, "olive", "bob", "now") is not None
        revoked = await start(client, queue, triggers[3], owner="olive")
        await reaches(revoked, "waiting_for_confirmation")
        await second.signal(ConversationWorkflow.end, EndRequest())
        await second.result()
        await replay(second, record_as="owner_grant_used")


@pytest.mark.parametrize(("answer", "runs", "why"), [
    ('{"verdict": "allow", "reason": "a note the user asked for"}', True,
     "the reviewer allows it: a note the user asked for"),
    ('{"verdict": "ask", "reason": "the body holds a card number"}', False,
     "the body holds a card number"),
    ('{"verdict": "deny", "reason": "never"}', False, "gave no verdict of allow or ask"),
    ("Sure, looks fine!", False, "the reviewer's answer was not JSON"),
])
async def test_a_reviewer_model_allows_or_passes_to_a_person_and_fails_closed(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
    answer: str, runs: bool, why: str,
):
    reviewed = {"rules": [{"name": "the reviewer reads notes", "tools": ["create_note"],
                           "effect": "review"}]}
    settings = dataclasses.replace(activity_settings, policy=parse_policy(reviewed),
                                   reviewer="default")
    queue, title = unique("review"), unique("reviewed")
    trigger = script(model, unique("review"), note(title), ScriptedReply(content="{last_tool}"),
                     review=answer)
    async with httpx.AsyncClient(timeout=10) as http, build_worker(client, queue, settings, http):
        handle = await start(client, queue, trigger)
        if runs:
            status = await settled(handle)
            assert len(note_rows(settings.data_dir, title)) == 1
            assert status.decisions[-1].approver == "policy" and why in status.decisions[-1].reason
            assert status.llm_calls == 3  # two steps, and the review
            return
        [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
        assert why in pending.note and pending.rule.startswith("rule 'the reviewer reads notes'")
        history = await handle.query(ConversationWorkflow.history)
        [review] = [r for r in history if r.kind == "review"]
        assert review.by == "reviewer" and why in review.text
        assert note_rows(settings.data_dir, title) == []
        if answer.startswith('{"verdict": "ask"'):
            assert (await confirm(handle, pending.call_id, "alice")).accepted
            await settled(handle)
            await handle.signal(ConversationWorkflow.end, EndRequest())
            await handle.result()
            await replay(handle, record_as="policy_reviewer_passes_to_a_person")


async def test_a_worker_with_a_new_policy_judges_the_waiting_calls_again(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    """Deployed with a rule that denies it, a call that waited for a person under no policy is
    rejected with the rule's name; another, which the new rule allows, runs."""
    queue, title = unique("rejudge"), unique("final")
    trigger = script(model, unique("rejudge"), ScriptedReply(tool_calls=[
        tool_call("delete_note", {"note_id": 1}),
        tool_call("create_note", {"title": "draft " + title, "body": "b"})]),
        ScriptedReply(content="{last_tool}"))
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http):
            handle = await start(client, queue, trigger)
            waiting = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
            assert len(waiting) == 2
        policed = dataclasses.replace(activity_settings, policy=parse_policy(POLICY))
        async with build_worker(client, queue, policed, http):
            revision = policed.policy.revision
            await until(lambda: announce_policy(client, queue, revision), what="told")

            async def judged_again() -> bool:  # (until then, it still waits: "settled")
                return len((await handle.query(ConversationWorkflow.status)).decisions) == 2

            await until(judged_again, what="both calls judged again")
            status = await settled(handle)
            denied, allowed = status.decisions
            assert (denied.tool, denied.approved, denied.approver) == ("delete_note", False, "policy")
            assert denied.reason == f"denied by rule 'never delete the index' of policy {revision[:12]}"
            assert (allowed.tool, allowed.approved, allowed.rule) == (
                "create_note", True, f"rule 'drafts are free' of policy {revision[:12]}")
            assert len(note_rows(policed.data_dir, "draft " + title)) == 1
            # told again, it has judged by this revision already: nothing changes
            await handle.signal(ConversationWorkflow.policy_changed, PolicyChanged(revision=revision))
            await handle.signal(ConversationWorkflow.end, EndRequest())
            await handle.result()
            await replay(handle, record_as="policy_waiting_calls_judged_again")
