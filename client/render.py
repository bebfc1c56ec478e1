"""Human-readable renderings of a conversation's status."""

from __future__ import annotations

import json
import shlex

from workflows.models import AuditRecord, ConversationStatus
from workflows.rules.stopping import dollars


def render_status(s: ConversationStatus) -> str:
    wid = s.workflow_id
    lines = [
        f"conversation {wid}: {s.status} (turn {s.turn}, {s.steps} step(s) this turn, "
        f"{s.llm_calls} LLM call(s) in all)"
    ]
    if s.tools_used:
        lines.append(f"tools used: {', '.join(s.tools_used)}")
    if s.final_answer is not None:
        lines.append(f"answer: {s.final_answer}")
    if s.final_output is not None:
        lines.append(f"output: {json.dumps(s.final_output, ensure_ascii=False)}")
    if s.stop_reason:
        lines.append(f"stop reason: {s.stop_reason}")
    if s.error:
        lines.append(f"error: {s.error}")
    if s.queued_messages:
        lines.append(f"queued messages: {s.queued_messages}")
    u = s.usage
    cached = f", {u.cached_tokens} of them cached" if u.cached_tokens else ""
    lines.append(
        f"usage: {u.total_tokens} tokens ({u.prompt_tokens} prompt{cached} + "
        f"{u.completion_tokens} completion), cost: {dollars(u.cost_usd, u.cost_note)}"
    )
    c = s.context
    if c is not None and (c.prompt_tokens or c.folded_turns):
        folded = f"; turns 1-{c.folded_turns} folded into the summary" if c.folded_turns else ""
        dropped = f" ({c.dropped_turns} dropped without one)" if c.dropped_turns else ""
        lines.append(f"context: last prompt {c.prompt_tokens:,} of {c.budget_tokens:,} tokens"
                     f"{folded}{dropped}")
    for c in s.children:
        lines.append(f"subagent {c.profile}: {c.status} ({c.workflow_id})")
    for p in s.pending_confirmations:
        args = json.dumps(p.args, ensure_ascii=False)
        whose = f" in subagent {p.conversation_id}" if p.conversation_id else ""
        ref = p.ref or p.call_id  # a subagent's call by its path: call ids can repeat across them
        lines.append(f"waiting for approval{whose}: {p.tool}({args}) [{p.risk}], call {ref}")
        lines.append(f"  approve: python -m client confirm {wid} {ref}")
        lines.append(f"  edit:    python -m client confirm {wid} {ref} --args {shlex.quote(args)}")
        lines.append(f'  reject:  python -m client reject {wid} {ref} --reason "..."')
    if len(s.pending_confirmations) > 1:
        lines.append(f"  or all at once: python -m client confirm {wid} --all")
    q = s.pending_question
    if q is not None:
        whose = f" from subagent {q.conversation_id}" if q.conversation_id else ""
        lines.append(f"question ({q.kind}){whose}: {q.message}")
        if q.options:
            lines.append("  options: " + " | ".join(q.options))
        hint = {"input": '"your answer"', "choice": '"one option"',
                "multi_choice": '"option" "another option"', "confirm": "yes|no"}[q.kind]
        lines.append(f"  answer: python -m client answer {wid} {hint}")
    for d in s.decisions:
        verdict = "approved" if d.approved else f"rejected ({d.reason})"
        lines.append(f"decision: {d.tool} call {d.call_id} {verdict} by {d.approver} at "
                     f"{d.at.isoformat(timespec='seconds')}")
    if s.status == "idle":
        lines.append(f'next: python -m client say {wid} "..."   or   python -m client end {wid}')
    return "\n".join(lines)


# a person's input records
INPUTS = {"start": "started", "message": "message", "answer": "answer", "end": "ended"}


def render_history(records: list[AuditRecord]) -> str:
    if not records:
        return "no steps yet"
    lines = []
    for r in records:
        tokens = f"{r.tokens.total_tokens} tokens"
        if r.kind == "summary":
            lines.append(f"{r.at.isoformat(timespec='seconds')}  turn {r.turn} before step {r.step}"
                         f"  context folded ({tokens})")
            lines.append(f"  summary: {r.thought}")
            continue
        if r.kind in INPUTS:
            said = f": {r.text}" if r.text else ""
            lines.append(f"{r.at.isoformat(timespec='seconds')}  turn {r.turn}  "
                         f"{INPUTS[r.kind]} by {r.by}{said}")
            continue
        lines.append(f"{r.at.isoformat(timespec='seconds')}  turn {r.turn} step {r.step}  ({tokens})")
        if r.thought:
            lines.append(f"  thought: {r.thought}")
        for a in r.actions:
            shown = json.dumps(a.input, ensure_ascii=False) if isinstance(a.input, dict) else a.input
            lines.append(f"  action:  {a.tool}({shown}) call {a.call_id}")
            if a.decision is not None:
                d = a.decision
                verdict = "approved" if d.approved else f"rejected ({d.reason})"
                lines.append(f"  decision: {verdict} by {d.approver} at "
                             f"{d.at.isoformat(timespec='seconds')}, args {d.args_hash[:19]}…")
            size = f"{a.observation_bytes} bytes" + (f" of {a.full_bytes}" if a.full_bytes else "")
            timing = f", {a.ms} ms" if a.ms is not None else ""
            lines.append(f"  observation: {a.status}, {size}{timing}")
        if r.actions_left_out:
            lines.append(f"  … and {r.actions_left_out} more action(s), left out of the record")
        if r.stop_reason:
            lines.append(f"  stop: {r.stop_reason}")
    return "\n".join(lines)

