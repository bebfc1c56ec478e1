"""`agent`: start conversations, talk to them, and see their state.

Every signal-sending command waits until the workflow shows the signal was taken or refused, so a
script can trust the exit code: 0 success, 1 refused or failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from temporalio.service import RPCError, RPCStatusCode

from ..contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationInput,
    ConversationStatus,
    RejectRequest,
    SayRequest,
    SignalOutcome,
    names,
)
from ..contract.bounds import MAX_CALLS_PER_REPLY, check_message
from ..rules.output import output_schema_problem
from .cases import export, fork
from .checks import (
    CliError,
    Refused,
    UsageError,
    budget_of,
    max_message_bytes_of,
    new_conversation_id,
    targets,
)
from .connection import TemporalSettings, connect
from .evals import add_eval_command
from .grants import add_grant_commands, add_remember_options, remembered
from .limits import STEP_LIMITS, add_limits_command, add_step_limits, step_limits
from .memories import cmd_forget, cmd_memories
from .payload_commands import add_payload_commands
from .payload_store import close_store
from .payloads import PayloadUnreadable, payload_failure
from .render import render_history, render_status
from .session import STATUSES, Session
from .watch import watch


def print_status(status: ConversationStatus, as_json: bool) -> int:
    if as_json:
        print(status.model_dump_json(indent=2))
    else:
        print(render_status(status))
    failed = status.status == "failed" or status.stop_reason == "llm_error"
    return 1 if failed else 0


def message_text(given: str, limit: int) -> str:
    """The message as given (`-`: read from stdin), or a refusal when the conversation would
    refuse it: empty, or over the size limit."""
    text = sys.stdin.read() if given == "-" else given
    reason = check_message(text, limit)
    if reason is not None:
        raise Refused(reason)
    return text


def read_output_schema(given: str) -> dict[str, Any]:
    """`--output-schema`: a JSON Schema inline (it starts with `{`) or in a file, checked before
    anything is sent (argparse exits 2 with the reason)."""
    try:
        text = given if given.lstrip().startswith("{") else Path(given).read_text()
    except OSError as err:
        raise argparse.ArgumentTypeError(f"cannot read {given}: {err.strerror or err}") from None
    try:
        schema = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from None
    problem = output_schema_problem(schema)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return schema


async def cmd_start(s: Session, a: argparse.Namespace) -> int:
    workflow_id = a.id or new_conversation_id()
    inp = ConversationInput(
        prompt=a.prompt,
        system_prompt=a.system,
        model=a.model,
        max_steps=a.max_steps,
        **step_limits(a),
        one_shot=a.one_shot,
        max_message_bytes=s.max_message_bytes,
        max_cost_usd=a.max_cost_usd,
        output_schema=a.output_schema,
        owner=a.who,
        **budget_of(a.context_tokens),
    )
    await s.start(inp, workflow_id)
    if not a.wait:
        print(json.dumps({"workflow_id": workflow_id}) if a.json else workflow_id)
        return 0
    return print_status(await s.wait_settled(workflow_id, 1, a.wait_timeout), a.json)


async def cmd_say(s: Session, a: argparse.Namespace) -> int:
    outcome = await s.send(a.id, names.SAY_SIGNAL, SayRequest(
        text=a.message, request_id=uuid.uuid4().hex, sender=a.who, steer=a.steer))
    if not outcome.accepted:
        return _refused(outcome, a.json)
    if not a.wait:
        if a.json:
            print(outcome.model_dump_json())
        else:  # (steered: said; a steer with no turn running is a message as any other)
            print(f"taken: {outcome.reason or f'the message will be turn {outcome.turn}'}")
        return 0
    return print_status(await s.wait_settled(a.id, outcome.turn or 0, a.wait_timeout), a.json)


async def send_and_report(s: Session, a: argparse.Namespace, request: Any) -> int:
    """Send a decision or answer (the conversation hands a subagent's to it), then report
    whether it was taken; --wait for the turn."""
    before = await s.status(a.id) if a.wait else None
    outcome = await s.decide(a.id, request, by_update=False)
    if not outcome.accepted:
        return _refused(outcome, a.json)
    if before is None:
        print(outcome.model_dump_json() if a.json else "taken")
        return 0
    return print_status(await s.wait_settled(a.id, before.turn, a.wait_timeout), a.json)


def _targets(a: argparse.Namespace) -> tuple[list[str], bool]:
    return targets(a.call_ids, a.all, "--all")


async def cmd_confirm(s: Session, a: argparse.Namespace) -> int:
    call_ids, all_ = _targets(a)
    args = None
    if a.args is not None:
        try:
            args = json.loads(a.args)
        except json.JSONDecodeError as err:
            raise UsageError(f"--args is not valid JSON: {err}") from None
        if not isinstance(args, dict):
            raise UsageError("--args must be a JSON object")
    request = ConfirmRequest(request_id=uuid.uuid4().hex, call_ids=call_ids, all=all_, args=args,
                             approver=a.who, roles=list(CLI_ROLES), **remembered(a))
    return await send_and_report(s, a, request)


async def cmd_reject(s: Session, a: argparse.Namespace) -> int:
    call_ids, all_ = _targets(a)
    request = RejectRequest(request_id=uuid.uuid4().hex, call_ids=call_ids, all=all_,
                            reason=a.reason, approver=a.who)
    return await send_and_report(s, a, request)


async def cmd_answer(s: Session, a: argparse.Namespace) -> int:
    said_no = a.decline or a.cancel
    if bool(a.values) == said_no:
        raise UsageError("give an answer, or --decline or --cancel (not both)")
    request = AnswerRequest(request_id=uuid.uuid4().hex, values=a.values, call_id=a.call_id,
                            sender=a.who, declined=said_no, cancelled=a.cancel)
    return await send_and_report(s, a, request)


async def cmd_end(s: Session, a: argparse.Namespace) -> int:
    outcome = await s.end(a.id, uuid.uuid4().hex, sender=a.who)
    if outcome is None:
        status = await s.status(a.id)
        print(f"{a.id} finished before it took the end (stop reason: {status.stop_reason})")
        return 0
    if not outcome.accepted:
        return _refused(outcome, False)
    print(f"taken: {a.id} is ending; work in flight is cancelled")
    return 0


async def cmd_stop(s: Session, a: argparse.Namespace) -> int:
    outcome = await s.stop(a.id, uuid.uuid4().hex, sender=a.who)
    if outcome is None:
        print(f"{a.id} finished before it took the stop")
        return 0
    print(f"taken: {a.id}: {outcome.reason}")  # what it did: a turn stopped, or nothing to stop
    return 0


async def cmd_cancel(s: Session, a: argparse.Namespace) -> int:
    """Cancel the conversation's workflow: what is in flight stops, stop_reason=cancelled."""
    try:
        await s.handle(a.id).cancel()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"no such running conversation: {a.id}") from None
        raise
    print(f"cancelling {a.id}: work in flight stops and it completes with stop_reason=cancelled")
    return 0


async def cmd_status(s: Session, a: argparse.Namespace) -> int:
    return print_status(await s.status(a.id), a.json)


async def cmd_watch(s: Session, a: argparse.Namespace) -> int:
    await s.status(a.id)  # a clear error for an unknown conversation, and a worker to answer
    await watch(s.client, a.id, from_offset=a.from_offset)
    return 0


async def cmd_history(s: Session, a: argparse.Namespace) -> int:
    records = await s.history(a.id)
    if a.json:
        print(json.dumps([r.model_dump(mode="json") for r in records], indent=2, ensure_ascii=False))
    else:
        print(render_history(records, a.id))
    return 0


async def cmd_export(s: Session, a: argparse.Namespace) -> int:
    text = (await export(s, a.id)).dump()
    if a.out is None:
        print(text, end="")
    else:
        Path(a.out).write_text(text)
        print(f"wrote the case of {a.id} to {a.out}")
    return 0


async def cmd_fork(s: Session, a: argparse.Namespace) -> int:
    new_id = a.new_id or new_conversation_id()
    await fork(s, a.id, a.at_step, new_id, a.who, model=a.model, system_prompt=a.system_prompt)
    if a.json:
        return print_status(await s.status(new_id), True)
    print(new_id)
    return 0


async def cmd_list(s: Session, a: argparse.Namespace) -> int:
    if a.version is not None and a.version.count(":") != 1:
        raise UsageError(f"--version is NAME:ID, as status shows it (not {a.version!r})")
    rows = [row.model_dump() for row in await s.conversations(a.status, a.limit,
                                                             version=a.version)]
    if a.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no conversations" + (f" with status {a.status}" if a.status else "")
              + (f" on version {a.version}" if a.version else ""))
    else:
        for row in rows:
            version = f"{row['version']}  " if row["version"] else ""
            print(f"{row['workflow_id']:<40} {row['status'] or '-':<26} {row['started']}  "
                  f"{version}{row['prompt'] or ''}")
    return 0


def _refused(outcome: SignalOutcome, as_json: bool) -> int:
    if as_json:
        print(outcome.model_dump_json())
    else:
        print(f"refused: {outcome.reason}")
    return 1


ID_HELP = "the conversation's id (its workflow id)"
# The CLI talks to Temporal with its own access, as an operator: a policy rule's `approvers`
# (roles) are met by what it decides.
CLI_ROLES = ("admin",)
JSON_HELP = "print JSON instead of text"


class CommandParser(argparse.ArgumentParser):
    """A command's parser that takes its options before, between or after its positionals, as
    the commands we print place them (`answer ID --call-id REF "..."`): plain argparse binds an
    empty list to `VALUE ...` before the option and refuses the text after it."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        if self._intermixing:  # the intermixed parse's own passes
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for a worker to answer (default 60)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)

    def command(name: str, func: Any, help_text: str, conversation: bool = True,
                as_json: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        if conversation:
            p.add_argument("id", help=ID_HELP)
        if as_json:
            p.add_argument("--json", action="store_true", help=JSON_HELP)
        p.set_defaults(func=func)
        return p

    p = command("start", cmd_start, "start a conversation", conversation=False)
    p.add_argument("prompt", help="the first message; - reads it from stdin")
    p.add_argument("--id", help="conversation (workflow) id; default: a fresh one")
    p.add_argument("--one-shot", action="store_true", help="complete after the first answer")
    p.add_argument("--model", help="model name; default: the worker's OPENAI_MODEL")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--max-steps", type=int, default=10, help="LLM rounds per turn (default 10)")
    add_step_limits(p)
    p.add_argument("--context-tokens", type=int, default=None, metavar="N",
                   help="tokens a prompt may take before older turns fold into a summary "
                        "(default 24000; less where the model's window is known to be smaller)")
    p.add_argument("--max-cost-usd", type=float, default=None,
                   help="stop a turn once the conversation has cost this many dollars")
    p.add_argument("--output-schema", metavar="FILE_OR_JSON", type=read_output_schema,
                   help="a JSON Schema the final answer must fit; status shows it parsed as "
                        "final_output")
    _add_as(p, "who starts it, its owner")
    _add_wait(p)

    p = command("say", cmd_say, "send the next user message")
    p.add_argument("message", help="the message; - reads it from stdin")
    p.add_argument("--steer", action="store_true",
                   help="mid-turn: the model gets it at the turn's next step, not the next turn")
    _add_as(p, "who sends it")
    _add_wait(p)

    for name, func, help_text in (
        ("confirm", cmd_confirm, "approve pending tool call(s)"),
        ("reject", cmd_reject, "reject pending tool call(s)"),
    ):
        p = command(name, func, help_text)
        p.add_argument("call_ids", nargs="*", metavar="CALL_ID",
                       help="the pending calls to decide (see `status`)")
        p.add_argument("--all", action="store_true", help="every call waiting for a decision")
        _add_as(p, "who decides")
        if name == "confirm":
            p.add_argument("--args", help="edited arguments (JSON object) for a single call")
            add_remember_options(p)
        else:
            p.add_argument("--reason", default="", help="why; the model reads it")
        _add_wait(p)

    p = command("answer", cmd_answer, "answer the pending question")
    p.add_argument("values", nargs="*", metavar="VALUE",
                   help="the answer: text, one option, several options, yes/no, or (an MCP "
                        "server's question) a JSON object that fits its schema")
    no = p.add_mutually_exclusive_group()
    no.add_argument("--decline", action="store_true",
                    help="say no instead of answering (the tool reads that it was declined)")
    no.add_argument("--cancel", action="store_true",
                    help="withdraw the question (an MCP server is told cancel)")
    p.add_argument("--call-id", metavar="REF",
                   help="the question answered (its ref, as `status` shows it): refused if "
                        "another question is open by then")
    _add_as(p, "who answers")
    _add_wait(p)

    add_grant_commands(command, _add_as, JSON_HELP)
    add_limits_command(command, _add_as)
    add_payload_commands(command)

    p = command("watch", cmd_watch, "follow a conversation live")
    p.add_argument("--from-offset", type=int, default=0, help="resume from this stream offset")

    command("history", cmd_history, "the audit trail, a record per step", as_json=True)
    command("status", cmd_status, "the current state of a conversation (exit 1 if it failed)",
            as_json=True)

    p = command("export", cmd_export, "write a conversation as a case (JSON): its messages, "
                "tool calls and results, decisions and answers")
    p.add_argument("--out", metavar="FILE", help="write it here (default: standard output)")
    p = command("fork", cmd_fork, "start a new conversation from a conversation's messages "
                "before one of its steps", as_json=True)
    p.add_argument("--at-step", type=int, required=True, metavar="N",
                   help="the step to go on from (1 for the first, as `export` numbers them)")
    p.add_argument("--id", dest="new_id", help="the fork's id; default: a fresh one")
    p.add_argument("--model", help="the fork's model (default: the original's)")
    p.add_argument("--system-prompt", help="the fork's system prompt (default: the original's)")
    _add_as(p, "who starts the fork, its owner")
    add_eval_command(command)

    p = command("list", cmd_list, "conversations, optionally by status", conversation=False,
                as_json=True)
    p.add_argument("--status", choices=STATUSES, help="only conversations in this status")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p.add_argument("--version", metavar="NAME:ID",
                   help="only conversations running on this Worker Deployment Version, as "
                        "`status` shows it (`agent-worker --deployment NAME --build-id ID`)")

    p = command("end", cmd_end, "end a conversation: work in flight is cancelled, "
                                "stop_reason=ended")
    _add_as(p, "who ends it")
    p = command("stop", cmd_stop, "stop the turn in flight now (its model call and tools are "
                                  "cancelled, stop_reason=stopped); the conversation goes on")
    _add_as(p, "who stops it")
    command("cancel", cmd_cancel, "cancel the conversation's workflow: stop_reason=cancelled")

    # What the agent remembers of a person: the workers' store, no Temporal needed
    p = command("memories", cmd_memories, "what the agent remembers of you (or of --as NAME)",
                conversation=False, as_json=True)
    p.add_argument("--query", help="words to look for: best match first (default: newest first)")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    _add_as(p, "whose memories")
    p.set_defaults(offline=True)
    p = command("forget", cmd_forget, "forget one of your memories (or of --as NAME)",
                conversation=False, as_json=True)
    p.add_argument("memory_id", metavar="MEMORY_ID", help="the memory's id, as `memories` shows it")
    _add_as(p, "whose memory")
    p.set_defaults(offline=True)
    return parser


def _add_as(p: argparse.ArgumentParser, who: str) -> None:
    """The CLI talks to Temporal directly (the operator's tool, with no roles): the audit
    trail names the OS user, or whom `--as` names."""
    p.add_argument("--as", dest="who", default=_os_user(),
                   help=f"{who}, in the audit trail (default: the OS user)")


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _say_waiting() -> None:
    print("waiting for a worker to answer...", file=sys.stderr, flush=True)


def _add_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true",
                   help="return when the turn needs a human or is done, printing the status")
    p.add_argument("--wait-timeout", type=float, default=600.0,
                   help="seconds --wait waits for the turn (default 600)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)


async def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "max_steps", 1) < 1:
            raise UsageError("--max-steps must be at least 1")
        if (getattr(args, "max_cost_usd", None) or 1) <= 0:
            raise UsageError("--max-cost-usd must be more than 0")
        for limit in STEP_LIMITS:
            if getattr(args, limit, None) not in (None, *range(1, MAX_CALLS_PER_REPLY + 1)):
                raise UsageError(f"--{limit.replace('_', '-')} must be from 1 to "
                                 f"{MAX_CALLS_PER_REPLY}")
        max_message_bytes = max_message_bytes_of(os.environ)
        for field in ("prompt", "message"):  # checked before anything is sent
            if hasattr(args, field):
                setattr(args, field, message_text(getattr(args, field), max_message_bytes))
        if getattr(args, "offline", False):
            return args.func(args)
        try:
            settings = TemporalSettings.from_env()
        except ValueError as err:  # AGENT_PAYLOAD_* that cannot be used
            raise CliError(str(err)) from None
        try:
            client = await connect(settings)
        except RuntimeError as err:
            raise CliError(f"cannot reach Temporal at {settings.address}: {err}") from None
        session = Session(client, settings, args.timeout, max_message_bytes, on_waiting=_say_waiting)
        try:
            return await args.func(session, args)
        finally:
            await close_store(client.data_converter)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Refused as err:
        print(f"refused: {err}", file=sys.stderr)
        return 1
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except RPCError as err:
        print(f"error: Temporal refused the request: {err.message}", file=sys.stderr)
        return 1
    except (PayloadUnreadable, RuntimeError) as err:  # a payload this process cannot read back
        if (why := payload_failure(err)) is None:
            raise
        print(f"error: {why}", file=sys.stderr)
        return 1
