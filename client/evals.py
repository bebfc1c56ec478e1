"""`agent eval CASE_OR_DIR...`: run recorded conversations again and score them.

Each case runs as a real conversation on Temporal, on the eval's own task queue (its worker runs
in this process: `worker.evals`), several at once. Tool calls are answered from the case; the
people's decisions and answers are sent as the case recorded them, through the same signals a
person sends, so the gate is the real one. Then the run is exported like any conversation and
scored against the case (`rules.scores`): a table on the terminal with a progress line, JSON
with every difference, JUnit XML for CI, and an exit code for `--min-pass`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from ..contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationInput,
    EndRequest,
    RejectRequest,
    SayRequest,
)
from ..contract.case import MAX_CASE_BYTES, Case, CaseError, load_case
from ..contract.names import END_SIGNAL
from ..rules.cases import ASK_PREFIX, RecordedTools, build_case
from ..rules.scores import ANSWER_MODES, CALLS_MODES, Check, Score, score
from .cases import recording
from .checks import CliError, NotFound, UsageError
from .session import POLL_INTERVAL_S, Session

EVAL_OWNER = "eval"  # who starts, decides and answers in an eval, in its audit trail
NO_DECISION = "the case being evaluated recorded no decision for this call"
CASE_TURN_TIMEOUT_S = 300.0
ENDING_S = 15.0  # what a case's conversation gets to close once asked to end
NOT_ENDED = "the eval that ran it is over, and it did not end when asked"


@dataclass
class Outcome:
    """One case's run: its score, or why it could not run."""

    case: Case
    path: Path
    conversation_id: str
    score: Score | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.error is None and self.score is not None and self.score.passed


@dataclass
class Options:
    model: str | None = None
    system_prompt: str | None = None
    concurrency: int = 4
    calls: str = "order"
    answer: str = "auto"
    live_safe: bool = False
    judge: str | None = None  # the model entry that judges final answers (--answer judge)
    settings: Any = None  # the eval worker's ActivitySettings, for the judge
    turn_timeout_s: float = CASE_TURN_TIMEOUT_S


def load_cases(paths: list[str]) -> list[tuple[Path, Case]]:
    """Every case of the files and folders given (a folder's `*.json`, sorted); `UsageError`
    naming the first file that is not a readable case."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            files += sorted(path.glob("*.json"))
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"no such case file or folder: {given}")
    if not files:
        raise UsageError(f"no cases (*.json) in {', '.join(paths)}")
    return [(path, read_case(path)) for path in files]


def read_case(path: Path) -> Case:
    """The case of a file, read no further than a case may be long (`UsageError` naming it)."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_CASE_BYTES + 1)
    except OSError as err:
        raise UsageError(f"{path} cannot be read: {err.strerror or err}") from None
    if len(data) > MAX_CASE_BYTES:
        raise UsageError(f"{path} is larger than {MAX_CASE_BYTES // 2**20} MiB: not a case")
    try:
        return load_case(data.decode("utf-8-sig"), str(path))
    except UnicodeDecodeError as err:
        raise UsageError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except CaseError as err:
        raise UsageError(str(err)) from None


def missing_tools(cases: list[tuple[Path, Case]], have: set[str]) -> list[str]:
    """`path: tool, ...` for each case that calls a tool the eval's worker does not have."""
    return [f"{path}: {', '.join(sorted(lacking))}" for path, case in cases
            if (lacking := {c.tool for c in case.calls()} - have)]


def conversation_id(run: str, name: str, n: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.:@+=-]+", "-", name).strip("-")[:120] or "case"
    return f"eval-{run}-{n}-{slug}"


class Runner:
    """Runs the cases, at most `concurrency` at once."""

    def __init__(self, session: Session, options: Options, books: dict[str, RecordedTools]):
        self._session = session
        self._options = options
        self._books = books
        self._done = 0

    async def run_all(self, cases: list[tuple[Path, Case]], run: str) -> list[Outcome]:
        gate = asyncio.Semaphore(max(1, self._options.concurrency))
        total = len(cases)

        async def one(n: int, path: Path, case: Case) -> Outcome:
            async with gate:
                outcome = await self.run_case(path, case, conversation_id(run, case.name, n))
            self._done += 1
            progress(self._done, total, outcome)
            return outcome

        progress(0, total, None)
        return list(await asyncio.gather(*(one(n, p, c) for n, (p, c) in enumerate(cases, 1))))

    async def run_case(self, path: Path, case: Case, cid: str) -> Outcome:
        outcome, began = Outcome(case, path, cid), time.monotonic()
        try:
            got = await self._converse(case, cid)
            outcome.score = score(case, got, self._options.calls, self._options.answer)
            if self._options.answer == "judge":
                outcome.score.checks.append(await self._judged(case, got))
        except Exception as err:  # noqa: BLE001 (a case's failure is its result; the others go on)
            outcome.error = failure(err)
        finally:  # a turn failed, a refusal, an error, a timeout, or the eval was interrupted
            left = await self._ended(cid)
        outcome.error = outcome.error or left
        outcome.seconds = time.monotonic() - began
        return outcome

    async def _ended(self, cid: str) -> str | None:
        """Close the case's conversation, whatever became of the case: its worker stops with
        the eval, so one left running would wait forever on a task queue nobody polls. It is
        asked to end, as a person ends one, and terminated if it has not closed within
        `ENDING_S` (one whose workflow tasks fail takes no signal). Why it is still running, or
        None."""
        s = self._session
        try:
            async with asyncio.timeout(ENDING_S):
                asked = False
                while (await s.describe(cid)).status == WorkflowExecutionStatus.RUNNING:
                    if not asked:
                        await s.signal(cid, END_SIGNAL, EndRequest(
                            request_id=uuid.uuid4().hex, sender=EVAL_OWNER))
                        asked = True
                    await asyncio.sleep(POLL_INTERVAL_S)
            return None
        except NotFound:  # never started, or closed meanwhile
            return None
        except (TimeoutError, RPCError):
            pass
        try:
            await s.handle(cid).terminate(reason=NOT_ENDED)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:  # NOT_FOUND: it closed meanwhile
                return f"its conversation could not be ended: {err.message}"
        return None

    async def _judged(self, case: Case, got: Case) -> Check:
        from ..worker.evals import judge  # noqa: PLC0415 (the worker's side: a model call)

        o = self._options
        request = next((t.message for t in case.turns if t.message), "") or ""
        passed, words = await judge(o.settings, o.judge, request,
                                    case.final_answer or "", got.final_answer or "")
        return Check("final answer", passed, words, case.final_answer, got.final_answer)

    async def _converse(self, case: Case, cid: str) -> Case:
        """Run the case's turns as a conversation, deciding and answering as it recorded, and
        the run as a case."""
        turns = [t for t in case.turns if t.message]
        if not turns:
            raise UsageError(f"case {case.name} has no message to start from")
        book = self._books[cid] = RecordedTools(case)
        o, s = self._options, self._session
        inp = ConversationInput(
            prompt=turns[0].message or "", model=o.model or case.model,
            system_prompt=o.system_prompt or case.system_prompt, output_schema=case.output_schema,
            owner=EVAL_OWNER, max_steps=max([10, *(st.step + 5 for st in case.steps)]))
        await s.start(inp, cid, source=f"an eval of {case.name}")
        for n, turn in enumerate(turns):
            if n:
                taken = await s.send(cid, "say", SayRequest(
                    text=turn.message or "", request_id=uuid.uuid4().hex, sender=EVAL_OWNER))
                if not taken.accepted:
                    raise CliError(f"turn {n + 1}'s message was refused: {taken.reason}")
            await self._settle(cid, n + 1, book, case)
        await s.end(cid, uuid.uuid4().hex, sender=EVAL_OWNER)
        return build_case(await recording(s, cid), case.name)

    async def _settle(self, cid: str, turn: int, book: RecordedTools, case: Case) -> None:
        """Wait for the turn, deciding its calls and answering its questions as recorded."""
        s = self._session
        while True:
            status = await s.wait_settled(cid, turn, self._options.turn_timeout_s)
            if status.pending_confirmations:
                for p in status.pending_confirmations:
                    decision = book.decision(p.tool, p.args)
                    if decision is not None and decision.approved:
                        request: Any = ConfirmRequest(
                            request_id=uuid.uuid4().hex, call_ids=[p.ref or p.call_id],
                            args=decision.edited_args, approver=EVAL_OWNER)
                    else:
                        request = RejectRequest(
                            request_id=uuid.uuid4().hex, call_ids=[p.ref or p.call_id],
                            reason=(decision.reason or "") if decision else NO_DECISION,
                            approver=EVAL_OWNER)
                    await _taken(s, cid, request, f"the decision on {p.tool}")
            elif status.pending_question is not None:
                q = status.pending_question
                answer = recorded_answer(case, q.message)
                await _taken(s, cid, AnswerRequest(
                    request_id=uuid.uuid4().hex, values=[answer] if answer else [],
                    declined=answer is None, call_id=q.ref or q.call_id, sender=EVAL_OWNER),
                    "the answer")
            else:
                return


def failure(err: Exception) -> str:
    """Why a case could not run, in words: the CLI's own errors as they say it."""
    if isinstance(err, CliError | UsageError):
        return str(err)
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


async def _taken(s: Session, cid: str, request: Any, what: str) -> None:
    """Send a replayed decision or answer; a refusal ends the case (sending it again would be
    refused again)."""
    outcome = await s.decide(cid, request, by_update=False)
    if not outcome.accepted:
        raise CliError(f"{what} the case recorded was refused: {outcome.reason}")


def recorded_answer(case: Case, message: str) -> str | None:
    """The answer the case recorded to a question with this message (None: it has none)."""
    return next((c.answer for c in case.calls() if c.tool.startswith(ASK_PREFIX)
                 and isinstance(c.args, dict) and c.args.get("message") == message
                 and c.answer is not None), None)


def progress(done: int, total: int, last: Outcome | None) -> None:
    width = 24
    filled = width * done // total
    tail = f"  {last.case.name}: {'pass' if last.passed else 'FAIL'}" if last else ""
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} case(s){tail}\033[K",
          end="" if done < total else "\n", file=sys.stderr, flush=True)


# ----- the reports -----

def table(outcomes: list[Outcome]) -> str:
    rows = [("case", "calls", "answer", "steps now/rec", "tokens now/rec", "$ now/rec",
             "time s", "result")]
    for o in outcomes:
        checks = {c.name: c for c in (o.score.checks if o.score else [])}
        m = o.score.measures if o.score else {}

        def mark(name: str) -> str:
            c = checks.get(name)
            return "-" if c is None else ("ok" if c.passed else "DIFF")

        def pair(key: str, digits: int = 0) -> str:
            if key not in m:
                return "-"
            rec, now = m[key].recorded, m[key].now
            return f"{shown_number(now, digits)}/{shown_number(rec, digits)}"

        rows.append((o.case.name, mark("tool calls"), mark("final answer"), pair("steps"),
                     pair("tokens"), pair("cost_usd", 4),
                     f"{o.seconds:.1f}", "pass" if o.passed else "FAIL"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for o in outcomes:
        for c in (o.score.checks if o.score else []):
            if not c.passed:
                lines.append(f"{o.case.name}: {c.name}: {c.detail}")
        if o.error:
            lines.append(f"{o.case.name}: error: {o.error}")
    return "\n".join(lines)


def report_json(outcomes: list[Outcome], options: Options, min_pass: float) -> dict[str, Any]:
    passed = sum(o.passed for o in outcomes)
    return {
        "model": options.model, "calls": options.calls, "answer": options.answer,
        "cases": len(outcomes), "passed": passed, "failed": len(outcomes) - passed,
        "pass_rate": passed / len(outcomes) if outcomes else 0.0, "min_pass": min_pass,
        "results": [{"case": o.case.name, "file": str(o.path), "conversation_id": o.conversation_id,
                     "passed": o.passed, "error": o.error, "seconds": round(o.seconds, 3),
                     **(o.score.as_json() if o.score else {})} for o in outcomes],
    }


def junit(outcomes: list[Outcome]) -> str:
    suite = ET.Element("testsuite", name="agent-evals", tests=str(len(outcomes)),
                       failures=str(sum(o.error is None and not o.passed for o in outcomes)),
                       errors=str(sum(o.error is not None for o in outcomes)),
                       time=f"{sum(o.seconds for o in outcomes):.3f}")
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname=o.path.stem, name=o.case.name,
                             time=f"{o.seconds:.3f}")
        if o.error is not None:
            ET.SubElement(case, "error", message=o.error).text = o.error
        elif not o.passed and o.score is not None:
            failed = [c for c in o.score.checks if not c.passed]
            first = failed[0]
            failure = ET.SubElement(case, "failure", message=f"{first.name}: {first.detail}")
            failure.text = "\n".join(f"{c.name}: {c.detail}\n  expected: {c.expected}\n  got: "
                                     f"{c.got}" for c in failed)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


# ----- the command -----

async def cmd_eval(s: Session, a: argparse.Namespace) -> int:
    from ..activities.settings import ActivitySettings  # noqa: PLC0415 (the worker's side)
    from ..worker.app import tool_registry  # noqa: PLC0415
    from ..worker.evals import eval_worker  # noqa: PLC0415

    if not 0 <= a.min_pass <= 1:
        raise UsageError("--min-pass must be between 0 and 1")
    if a.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    cases = load_cases(a.cases)
    settings = ActivitySettings.from_env()
    registry = tool_registry(settings)  # what `agent-worker` loads (MCP's tools aside)
    lacking = missing_tools(cases, set(registry.names()))
    if lacking:
        raise UsageError("the worker does not have the tools these cases call (nothing was "
                         "started): " + "; ".join(lacking))
    if a.judge is not None and a.answer != "judge":
        raise UsageError("--judge names the model entry of --answer judge")
    options = Options(model=a.model, system_prompt=a.system_prompt, concurrency=a.concurrency,
                      calls=a.calls, answer=a.answer, live_safe=a.live_safe, judge=a.judge,
                      settings=settings)
    run = uuid.uuid4().hex[:8]
    queue = f"{s.settings.task_queue}-eval-{run}"
    session = Session(s.client, dataclasses.replace(s.settings, task_queue=queue), s.timeout_s,
                      s.max_message_bytes)
    books: dict[str, RecordedTools] = {}
    print(f"eval {run}: {len(cases)} case(s) on task queue {queue}", file=sys.stderr)
    async with eval_worker(s.client, queue, settings, registry, books, live_safe=a.live_safe):
        outcomes = await Runner(session, options, books).run_all(cases, run)
    print(table(outcomes))
    if a.report:
        Path(a.report).write_text(json.dumps(report_json(outcomes, options, a.min_pass),
                                             indent=2, ensure_ascii=False, default=str) + "\n")
    if a.junit:
        Path(a.junit).write_text(junit(outcomes))
    passed = sum(o.passed for o in outcomes)
    rate = passed / len(outcomes)
    print(f"passed {passed}/{len(outcomes)} ({rate:.0%}); --min-pass {a.min_pass:.0%}")
    return 0 if rate >= a.min_pass else 1


def add_eval_command(command: Any) -> None:
    p = command("eval", cmd_eval, "run recorded cases again as conversations, and score them",
                conversation=False)
    p.add_argument("cases", nargs="+", metavar="CASE_OR_DIR",
                   help="case files (from `export`), or folders of them")
    p.add_argument("--model", help="the model to evaluate (default: each case's)")
    p.add_argument("--system-prompt", help="the system prompt to evaluate (default: each case's)")
    p.add_argument("--concurrency", type=int, default=4, metavar="K",
                   help="cases run at once (default 4)")
    p.add_argument("--report", metavar="FILE.json", help="write every score and difference here")
    p.add_argument("--junit", metavar="FILE.xml", help="write a JUnit XML report here")
    p.add_argument("--min-pass", type=float, default=1.0, metavar="R",
                   help="the pass rate (0-1) below which it exits 1 (default 1.0)")
    p.add_argument("--calls", choices=CALLS_MODES, default="order",
                   help="tool calls must match in order (default), as a set, or not at all")
    p.add_argument("--answer", choices=ANSWER_MODES, default="auto",
                   help="the final answer must be the same (exact), contain the recorded one, "
                        "be JSON-equal, say the same by an LLM judge (judge), or not be "
                        "compared; auto: JSON for a typed output, else exact")
    p.add_argument("--judge", metavar="ENTRY",
                   help="the model entry (AGENT_MODELS) that judges with --answer judge "
                        "(default: the default entry)")
    p.add_argument("--live-safe", action="store_true",
                   help="run a safe tool live when the case has no result for the call "
                        "(default: the model is told it was not run)")


def shown_number(value: float | None, digits: int) -> str:
    """A metric in the eval table: "?" when unknown; a number a float cannot hold (a case
    file's) as it is."""
    if value is None:
        return "?"
    try:
        return f"{value:.{digits}f}"
    except OverflowError:
        return str(value)
