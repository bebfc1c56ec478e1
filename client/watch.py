"""`watch`: the conversation's live stream, rendered as it happens, resumable by offset."""

from __future__ import annotations

import sys
from contextlib import aclosing
from typing import TextIO

from temporalio.client import Client
from temporalio.service import RPCError

from ..contract import StreamEvent
from ..contract.names import relative_id
from ..rules.commands import REASON, TEXT, client_command
from ..rules.stopping import dollars
from .render import shown
from .tree import follow_tree


class Renderer:
    """Turns stream events into terminal lines. Token deltas print inline as they arrive."""

    def __init__(self, workflow_id: str, out: TextIO | None = None):
        """`out`: where lines go; standard output as it is when the renderer is made."""
        self._wid = workflow_id
        self._out = sys.stdout if out is None else out
        self._streaming = False  # a line of tokens is open
        self._agent: str | None = None  # whose tokens it holds

    def render(self, e: StreamEvent, agent: str | None = None, owner: str | None = None) -> None:
        """Render an event; a subagent's (`agent`: its profile; `owner`: its conversation) is
        marked with its name, and its calls are named by their ref from the watched one."""
        mark = f"[{agent}] " if agent else ""
        e = e.model_copy(update={  # outside text may not drive the terminal (`shown`)
            "text": None if e.text is None else shown(e.text),
            "tool": None if e.tool is None else shown(e.tool),
            "approver": None if e.approver is None else shown(e.approver),
            "options": [shown(o) for o in e.options]})
        if e.kind == "token":
            if self._streaming and self._agent != agent:
                self._write("")
            self._write(("" if self._streaming else mark) + (e.text or ""), inline=True)
            self._agent = agent
            return
        line = self._line(e, owner)
        if line is not None:
            self._write("\n".join(mark + part for part in line.split("\n")))

    def _line(self, e: StreamEvent, owner: str | None = None) -> str | None:
        wid = self._wid
        ref = (e.call_id if owner in (None, wid)
               else f"{relative_id(owner, wid)}/{e.call_id}") or ""
        match e.kind:
            case "turn_started":
                return f"── turn {e.turn}: {e.text}"
            case "llm_started":
                return f"[step {e.step}] thinking…"
            case "reset" if e.attempt is None:  # another model entry takes the call
                return f"[step {e.step}] {e.text}; discard the text above"
            case "reset":
                return f"[step {e.step}] the model call is retried (attempt {e.attempt}); discard the text above"
            case "tool_started":
                args = ", ".join(f"{k}={v}" for k, v in (e.args or {}).items())
                return f"→ {e.tool}({shown(args)})"
            case "tool_progress":
                return f"  ⋯ {e.tool}: {e.text}"
            case "tool_finished":
                return f"← {e.tool} {e.status} ({e.observation_bytes} bytes, {e.ms} ms)"
            case "approval_requested":
                return (f"⏸ {e.tool}({shown(e.args)}) is {e.risk} and waits for approval, "
                        f"call {ref}\n"
                        f"   approve: {client_command('confirm', wid, ref)}\n"
                        f"   reject:  {client_command('reject', wid, ref, then=REASON)}")
            case "decision_taken":
                why = f": {e.text}" if e.text else ""
                mark = "✗" if e.status == "rejected" else "✓"
                return f"{mark} {e.tool} call {e.call_id} {e.status} by {e.approver}{why}"
            case "decision_refused":
                return f"! refused: {e.text}"
            case "question_asked":
                options = f" [{' | '.join(e.options)}]" if e.options else ""
                return (f"? {e.text}{options}\n"
                        f"   answer: {client_command('answer', wid, '--call-id', ref, then=TEXT)}")
            case "answered":
                return f"✓ answered: {e.text}"
            case "steer_queued":
                return f"↪ steered into turn {e.turn}, for its next step: {shown(e.text)}"
            case "steered":
                return f"[step {e.step}] the model gets the steered message: {shown(e.text)}"
            case "turn_held":
                return f"⏸ turn {e.turn} waits for its owner's share: {shown(e.text)}"
            case "turn_resumed":
                return f"▶ turn {e.turn} goes on: the owner's share allows it"
            case "child_started":
                return f"⇢ {e.tool} agent started: {e.text} (its events follow, marked [{e.tool}])"
            case "summary_started":
                return f"[step {e.step}] the context is full: summarizing {e.text}…"
            case "summary_finished":
                return f"[step {e.step}] {e.text}"
            case "turn_finished":
                answer = f"\nanswer: {e.text}" if e.text else ""
                error = f"\nerror: {shown(e.error)}" if e.error else ""
                cost = f", {dollars(e.cost_usd)}" if e.cost_usd is not None else ""  # `status` says why not
                spent = f" ({e.tokens:,} tokens{cost})" if e.tokens is not None else ""
                return f"── turn {e.turn} finished: {e.stop_reason}{spent}{error}{answer}"
        return None

    def _write(self, text: str, inline: bool = False) -> None:
        if inline:
            self._out.write(text)
            self._streaming = True
        else:
            if self._streaming:
                self._out.write("\n")
                self._streaming = False
            self._out.write(text + "\n")
        self._out.flush()


async def watch(client: Client, workflow_id: str, from_offset: int = 0,
                renderer: Renderer | None = None) -> int:
    """Render the stream until the conversation completes, with each subagent's events inline,
    marked with its profile; reconnect from the last offset on errors. Returns the next offset
    to read of the conversation's own stream."""
    renderer = renderer or Renderer(workflow_id)
    offset = from_offset

    def interrupted(err: RPCError, at: int) -> None:
        print(f"\n[stream interrupted ({err.message}); resuming from offset {at}]",
              file=sys.stderr, flush=True)

    async with aclosing(follow_tree(client, workflow_id, from_offset, interrupted)) as tree:
        async for agent, owner, event, at in tree:
            if at is not None:
                offset = at + 1
            renderer.render(event, agent, owner)
    return offset
