"""Human-readable renderings of a conversation's status."""

from __future__ import annotations

import json

from ..contract import AuditRecord, ConversationStatus
from ..contract.policy import Grant
from ..rules.commands import REASON, TEXT, client_command
from ..rules.stopping import dollars

# What a model (or a tool, or anyone who sends a signal) writes may not drive the terminal:
# control characters (an ANSI escape rewrites what is on the screen), line and paragraph
# separators, and bidi overrides (which reorder what is shown) are printed as escapes.
_HIDDEN = [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x200E, 0x200F, 0x2028, 0x2029,
           *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_SHOWN = {c: f"\\u{c:04x}" for c in _HIDDEN if c not in (0x09, 0x0A)}
CONTINUED = "  │ "  # begins every further line of outside text: none looks like one of ours
# What the `answer` command `status` prints holds in place of the answer, by the question's kind:
# a person puts their answer (a value each) there. An MCP server's question takes a JSON object.
ANSWER_PLACEHOLDERS = {"input": ["your answer"], "choice": ["one option"],
                       "multi_choice": ["option", "another option"], "confirm": ["yes|no"],
                       "elicitation": ["{...}"]}


def shown(text: object) -> str:
    """Outside text as it may be printed: escapes for what would drive the terminal, and its
    further lines marked, so it cannot print a line that looks like a command of ours."""
    return str(text).translate(_SHOWN).replace("\n", "\n" + CONTINUED)


def render_status(s: ConversationStatus) -> str:
    wid = s.workflow_id
    lines = [
        f"conversation {wid}: {s.status} (turn {s.turn}, {s.steps} step(s) this turn, "
        f"{s.llm_calls} LLM call(s) in all)"
    ]
    if s.tools_used:
        lines.append(f"tools used: {', '.join(s.tools_used)}")
    if s.final_answer is not None:
        lines.append(f"answer: {shown(s.final_answer)}")
    if s.final_output is not None:
        lines.append(f"output: {shown(json.dumps(s.final_output, ensure_ascii=False))}")
    if s.stop_reason:
        lines.append(f"stop reason: {s.stop_reason}")
    if s.error:
        lines.append(f"error: {shown(s.error)}")
    if s.queued_messages:
        lines.append(f"queued messages: {s.queued_messages}")
    if s.held is not None:
        lines.append(f"waiting for its owner's share ({s.held.limit}): {shown(s.held.message)}")
    if s.version is not None:
        lines.append(f"version: {s.version} (runs so far: {s.runs})")
    u = s.usage
    cached = f", {u.cached_tokens} of them cached" if u.cached_tokens else ""
    failed = (f"; {u.failed_calls} failed model call(s), whose tokens the endpoint did not "
              "report" if u.failed_calls else "")
    lines.append(
        f"usage: {u.total_tokens} tokens ({u.prompt_tokens} prompt{cached} + "
        f"{u.completion_tokens} completion){failed}, cost: {dollars(u.cost_usd, u.cost_note)}"
    )
    c = s.context
    if c is not None and (c.prompt_tokens or c.folded_turns or c.window_tokens):
        folded = f"; turns 1-{c.folded_turns} folded into the summary" if c.folded_turns else ""
        dropped = f" ({c.dropped_turns} dropped without one)" if c.dropped_turns else ""
        window = f" (the model's window: {c.window_tokens:,})" if c.window_tokens else ""
        lines.append(f"context: last prompt {c.prompt_tokens:,} of {c.budget_tokens:,} tokens"
                     f"{window}{folded}{dropped}")
    for c in s.children:
        lines.append(f"subagent {c.profile}: {c.status} ({c.workflow_id})")
    for p in s.pending_confirmations:
        args = json.dumps(p.args, ensure_ascii=False)
        whose = f" in subagent {p.conversation_id}" if p.conversation_id else ""
        ref = p.ref or p.call_id  # a subagent's call by its path: call ids can repeat across them
        lines.append(f"waiting for approval{whose}: {shown(p.tool)}({shown(args)}) [{p.risk}], "
                     f"call {ref}")
        lines.append(f"  approve: {client_command('confirm', wid, ref)}")
        lines.append(f"  edit:    {client_command('confirm', wid, ref, '--args', args)}")
        lines.append(f"  reject:  {client_command('reject', wid, ref, then=REASON)}")
    if len(s.pending_confirmations) > 1:
        lines.append(f"  or all at once: {client_command('confirm', wid, '--all')}")
    q = s.pending_question
    if q is not None:
        whose = f" from subagent {q.conversation_id}" if q.conversation_id else ""
        lines.append(f"question ({q.kind}){whose}: {shown(q.message)}")
        if q.options:
            lines.append("  options: " + " | ".join(map(shown, q.options)))
        if q.answer_schema is not None:
            lines.append(f"  schema: {shown(json.dumps(q.answer_schema, ensure_ascii=False))}")
        hint = ANSWER_PLACEHOLDERS[q.kind]
        lines.append(f"  answer: {client_command('answer', wid, '--call-id', q.ref or q.call_id, *hint)}")
    for d in s.decisions:
        verdict = "approved" if d.approved else f"rejected ({shown(d.reason)})"
        by = f"{shown(d.approver)}'s grant {shown(d.grant)}" if d.grant else shown(d.approver)
        lines.append(f"decision: {d.tool} call {d.call_id} {verdict} by {by} at "
                     f"{d.at.isoformat(timespec='seconds')}")
    if s.status == "idle":
        lines.append(f"next: {client_command('say', wid, then=TEXT)}   or   "
                     f"{client_command('end', wid)}")
    return "\n".join(lines)


# how far a grant reaches
REACH = {"args": "with these arguments", "conversation": "in this conversation",
         "owner": "in every conversation of the owner"}


def render_grant(g: Grant) -> str:
    """One line: id, tool, reach, who granted it and when, and what bounds it."""
    reach = REACH.get(g.scope, g.scope)
    if g.scope == "args" and g.args_hash:
        reach += f" ({g.args_hash[:19]}…)"
    bounds = [f"until {g.expires_at:%Y-%m-%d %H:%M:%S} UTC" if g.expires_at else "no expiry",
              f"{g.uses_left} use(s) left" if g.uses_left is not None else "uses unbounded",
              f"used {g.used} time(s)"]
    return (f"{g.id}  {shown(g.tool)}  {reach}  by {shown(g.by)} at "
            f"{g.at:%Y-%m-%d %H:%M:%S} UTC  ({', '.join(bounds)})")


def render_grants(grants: list[Grant]) -> str:
    return "\n".join(map(render_grant, grants)) if grants else "no grants"


# a person's input records
INPUTS = {"start": "started", "message": "message", "answer": "answer", "end": "ended",
          "stop": "turn stopped",
          "grant": "approval remembered", "revoke": "grant revoked"}


def render_history(records: list[AuditRecord], wid: str | None = None) -> str:
    """The audit trail, a block per step; with the conversation's id, the command that reads a
    result the model was shown cut whole."""
    if not records:
        return "no steps yet"
    lines = []
    for r in records:
        tokens = f"{r.tokens.total_tokens} tokens"
        if r.kind == "summary":
            lines.append(f"{r.at.isoformat(timespec='seconds')}  turn {r.turn} before step {r.step}"
                         f"  context folded ({tokens})")
            lines.append(f"  summary: {shown(r.thought)}")
            continue
        if r.kind == "recall":
            lines.append(f"{r.at.isoformat(timespec='seconds')}  turn {r.turn}  "
                         f"recalled memories: {shown(r.text)}")
            continue
        if r.kind == "sampling":
            entry = f" on {shown(r.entry)}" if r.entry else ""
            lines.append(f"{r.at.isoformat(timespec='seconds')}  turn {r.turn} step {r.step}  "
                         f"MCP server {shown(r.by)} asked the model{entry} ({tokens}): "
                         f"{shown(r.text)}")
            continue
        if r.kind in INPUTS:
            said = f": {shown(r.text)}" if r.text else ""
            lines.append(f"{r.at.isoformat(timespec='seconds')}  turn {r.turn}  "
                         f"{INPUTS[r.kind]} by {r.by}{said}")
            continue
        lines.append(f"{r.at.isoformat(timespec='seconds')}  turn {r.turn} step {r.step}  ({tokens})")
        if r.thought:
            lines.append(f"  thought: {shown(r.thought)}")
        for a in r.actions:
            given = json.dumps(a.input, ensure_ascii=False) if isinstance(a.input, dict) else a.input
            lines.append(f"  action:  {shown(a.tool)}({shown(given)}) call {a.call_id}")
            if a.decision is not None:
                d = a.decision
                verdict = "approved" if d.approved else "rejected"
                verdict += f" ({shown(d.reason)})" if d.reason else ""
                lines.append(f"  decision: {verdict} by {shown(d.approver)} at "
                             f"{d.at.isoformat(timespec='seconds')}, args {d.args_hash[:19]}…")
            size = f"{a.observation_bytes} bytes" + (f" of {a.full_bytes}" if a.full_bytes else "")
            timing = f", {a.ms} ms" if a.ms is not None else ""
            lines.append(f"  observation: {a.status}, {size}{timing}")
            if a.full_bytes and wid is not None:
                lines.append(f"  whole:   {client_command('result', wid, a.call_id)}")
        if r.actions_left_out:
            lines.append(f"  … and {r.actions_left_out} more action(s), left out of the record")
        if r.stop_reason:
            lines.append(f"  stop: {r.stop_reason}")
    return "\n".join(lines)

