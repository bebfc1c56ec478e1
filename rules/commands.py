"""The `agent` commands a person is shown to paste (the CLI, `watch`, the Temporal UI's
current details): every argument quoted for a POSIX shell, so that a line runs as the one command
it shows, whatever a model named its call or a person named a conversation."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ..contract import ChildReport, PendingConfirmation, PendingQuestion, Status
from ..contract.bounds import canonical_json

CLIENT = ("agent",)
REASON, TEXT = '--reason "..."', '"..."'  # placeholders a person fills in


def client_command(*args: str, then: str = "") -> str:
    """`agent ARGS...`, each argument quoted; `then`, a fixed placeholder of ours
    (`--reason "..."`), is appended as it is."""
    line = " ".join(shlex.quote(a) for a in (*CLIENT, *args))
    return f"{line} {then}" if then else line


def code_span(text: str) -> str:
    """`text` as one Markdown code span whatever it holds (the Temporal UI renders the details
    as Markdown: a model's text shown bare could be a link, or close our spans early): fenced
    by more backticks than its longest run of them, as CommonMark reads it."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    # padded by a space at each end (which CommonMark takes off again) where it would touch the
    # fence or begin and end with spaces of its own; an empty text is a space (no span is empty)
    touches = text.startswith("`") or text.endswith("`")
    spaced = text.startswith(" ") and text.endswith(" ") and text.strip(" ") != ""
    pad = " " if touches or spaced else ""
    fence = "`" * (longest + 1)
    return f"{fence}{pad}{text}{pad}{fence}" if text else "` `"


def details_markdown(
    wid: str, status: Status, turn: int, stop_reason: str | None, error: str | None,
    confirmations: Sequence[PendingConfirmation], question: PendingQuestion | None,
    owner: str | None, children: Sequence[ChildReport] = (),
) -> str:
    """The Temporal UI's current details: what the conversation waits for, with the commands
    that give it, and how to go on once it is idle."""
    lines = [f"**Status:** {status} (turn {turn})"]
    if stop_reason:
        lines.append(f"**Stop reason:** {stop_reason}")
    if error:
        lines.append(f"**Error:** {code_span(error)}")
    for p in confirmations:
        lines.append(
            f"**Waiting for approval:** {code_span(p.tool)} ({p.risk}) call `{p.call_id}` "
            f"with {code_span(canonical_json(p.args))}"
            + (f" (four eyes: someone other than {owner} decides)" if p.four_eyes else "")
            + "\n\n"
            f"Approve: `{client_command('confirm', wid, p.call_id)}` · "
            f"Reject: `{client_command('reject', wid, p.call_id, then=REASON)}`"
        )
    if question is not None:
        options = (f" Options: {', '.join(map(code_span, question.options))}."
                   if question.options else "")
        lines.append(
            f"**Question ({question.kind}):** {code_span(question.message)}{options}\n\n"
            f"Answer: `{answer_command(wid, question)}`"
        )
    for child in children:
        for p in child.pending_confirmations:
            lines.append(f"**Subagent `{child.profile}` waits for approval:** {code_span(p.tool)} "
                         f"call `{p.call_id}` in `{p.conversation_id or child.workflow_id}`"
                         f"\n\nApprove: `{client_command('confirm', wid, p.ref or p.call_id)}`")
        if (q := child.pending_question) is not None:
            lines.append(f"**Subagent `{child.profile}` asks:** {code_span(q.message)}\n\n"
                         f"Answer: `{answer_command(wid, q)}`")
    if status == "idle":
        lines.append(f"Reply: `{client_command('say', wid, then=TEXT)}` · "
                     f"Finish: `{client_command('end', wid)}`")
    return "\n\n".join(lines)


def answer_command(wid: str, question: PendingQuestion) -> str:
    """The command that answers exactly this question (a later one refuses it)."""
    return client_command("answer", wid, "--call-id", question.ref or question.call_id, then=TEXT)
