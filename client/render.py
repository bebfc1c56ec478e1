"""Human-readable renderings of a conversation's status."""

from __future__ import annotations

from workflows.models import ConversationStatus


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
    if s.stop_reason:
        lines.append(f"stop reason: {s.stop_reason}")
    if s.error:
        lines.append(f"error: {s.error}")
    if s.queued_messages:
        lines.append(f"queued messages: {s.queued_messages}")
    u = s.usage
    lines.append(
        f"usage: {u.total_tokens} tokens ({u.prompt_tokens} prompt + {u.completion_tokens} completion)"
    )
    if s.status == "idle":
        lines.append(f'next: python -m client say {wid} "..."   or   python -m client end {wid}')
    return "\n".join(lines)
