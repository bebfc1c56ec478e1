"""How `watch` renders the stream: a unit test of its Renderer, no server."""

from __future__ import annotations

import io

from durable_react_agent.client.watch import Renderer
from durable_react_agent.contract import StreamEvent


def test_a_running_tools_progress_shows_under_it_a_subagents_marked():
    out = io.StringIO()
    renderer = Renderer("conv-1", out)
    shown = [
        (StreamEvent(kind="tool_started", turn=1, step=1, call_id="c1", tool="send_sms",
                     args={"to": "+49"}), None),
        (StreamEvent(kind="token", turn=1, step=2, text="Sending"), "researcher"),
        (StreamEvent(kind="tool_progress", turn=1, step=1, call_id="c1", tool="send_sms",
                     text="1 of 2 sent"), None),
        (StreamEvent(kind="tool_progress", turn=1, step=1, call_id="call_0", tool="fetch",
                     text="page 3"), "researcher"),
        (StreamEvent(kind="tool_finished", turn=1, step=1, call_id="c1", tool="send_sms",
                     status="ok", observation_bytes=4, ms=12), None),
    ]
    for event, agent in shown:
        renderer.render(event, agent, f"conv-1/{agent}" if agent else None)
    assert out.getvalue().splitlines() == [
        "→ send_sms(to=+49)",
        "[researcher] Sending",  # the open line of tokens is closed before the next line
        "  ⋯ send_sms: 1 of 2 sent",
        "[researcher]   ⋯ fetch: page 3",
        "← send_sms ok (4 bytes, 12 ms)",
    ]


def test_a_rejection_is_marked_as_one_and_an_approval_as_taken():
    out = io.StringIO()
    renderer = Renderer("conv-1", out)
    for status, reason in (("approved", None), ("rejected", "keep it")):
        renderer.render(StreamEvent(kind="decision_taken", turn=1, step=1, call_id="call_0",
                                    tool="delete_note", approver="dora", status=status,
                                    text=reason))
    assert out.getvalue().splitlines() == [
        "✓ delete_note call call_0 approved by dora",
        "✗ delete_note call call_0 rejected by dora: keep it",
    ]


def test_a_steered_message_shows_when_taken_and_when_the_model_got_it():
    out = io.StringIO()
    renderer = Renderer("conv-1", out)
    for kind, step in (("steer_queued", 1), ("steered", 2)):
        renderer.render(StreamEvent(kind=kind, turn=3, step=step, text="in Celsius"), None, None)
    assert out.getvalue().splitlines() == [
        "↪ steered into turn 3, for its next step: in Celsius",
        "[step 2] the model gets the steered message: in Celsius",
    ]


def test_a_turn_held_by_its_owner_s_limits_says_why_and_when_it_goes_on():
    out = io.StringIO()
    renderer = Renderer("conv-1", out)
    why = "queued behind 2 running turn(s) of alice (at most 2 at once)"
    renderer.render(StreamEvent(kind="turn_held", turn=2, text=why), None, None)
    renderer.render(StreamEvent(kind="turn_resumed", turn=2, text="going on"), None, None)
    assert out.getvalue().splitlines() == [
        f"⏸ turn 2 waits for its owner's share: {why}",
        "▶ turn 2 goes on: the owner's share allows it",
    ]
