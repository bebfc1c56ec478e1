"""`make bench`: the cost of durability, measured side by side in one run on one machine.

Writes a markdown table to stdout and to bench/results.md. `--quick` runs small sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from bench import profile
from bench.floor import FloorWorkflow
from bench.payloads import large_results, large_scenarios
from bench.stack import Stack, answered_again, history_of, wait_until
from bench.stopping import STOP_SCENARIO, stopping
from bench.tours import tours
from durable_react_agent.contract import ConfirmRequest, ConversationInput
from durable_react_agent.testing import Scenario, Script, ScriptedReply, ScriptedToolCall
from durable_react_agent.workflows.conversation import ConversationWorkflow

RESULTS = Path(__file__).parent / "results.md"
CITIES = ["Paris", "Tokyo"]  # alternating, so loop detection never fires


@dataclass
class Sizes:
    steps: int = 200
    levels: tuple[int, ...] = (10, 100, 500)
    conc_steps: int = 4
    latency_s: float = 0.2
    processes: tuple[int, ...] = (1, 2)
    parked: int = 1000
    park_s: float = 60
    recovery: int = 50
    chat_turns: int = 300
    tours: tuple[int, ...] = (25, 50, 100, 200, 1000)
    tours_before: int = 200  # the longest tour the version before runs (its cost grows as steps²)
    role_levels: tuple[int, ...] = (100, 500)
    tour_lengths: tuple[int, ...] = (25, 100)  # the side-by-side tours (and the profiled ones)
    tour_repeats: int = 3
    profile_level: int = 100
    stops: int = 20


QUICK = Sizes(steps=40, levels=(10, 50), parked=100, park_s=10, recovery=10, chat_turns=50,
              tours=(25, 50), tours_before=50, role_levels=(20, 50), tour_lengths=(10,),
              tour_repeats=1, profile_level=20, stops=5)


def weather(i: int, delay: float = 0.0) -> ScriptedReply:
    city = CITIES[i % 2]
    return ScriptedReply(tool_calls=[ScriptedToolCall(name="get_weather", arguments={"location": city})],
                         delay_s=delay)


def build_script(z: Sizes) -> Script:
    return Script(scenarios=[
        *(Scenario(trigger=f"[tour-{n}]", replies=[*(weather(i) for i in range(n - 1)),
                                                  ScriptedReply(content="done")])
          for n in sorted({5, *z.tours, *z.tour_lengths})),
        Scenario(trigger="[steps]", replies=[*(weather(i) for i in range(z.steps - 1)),
                                             ScriptedReply(content="done")]),
        Scenario(trigger="[conc]", replies=[*(weather(i, z.latency_s) for i in range(z.conc_steps - 1)),
                                            ScriptedReply(content="done", delay_s=z.latency_s)]),
        Scenario(trigger="[park]", replies=[
            ScriptedReply(tool_calls=[ScriptedToolCall(name="create_note",
                                                       arguments={"title": "parked", "body": "b"})]),
            ScriptedReply(content="done")]),
        STOP_SCENARIO, *large_scenarios(),
        Scenario(trigger="[recover]", replies=[
            ScriptedReply(tool_calls=[ScriptedToolCall(name="get_weather", arguments={"location": "Paris"})],
                          hold=True),
            ScriptedReply(content="done")]),
    ])


def conversation(prompt: str, max_steps: int = 10) -> ConversationInput:
    return ConversationInput(prompt=prompt, one_shot=True, max_steps=max_steps)


async def start_many(client, label: str, n: int, queue: str) -> list:
    """Start `n` one-shot conversations of the `[label]` scenario at once."""
    return await asyncio.gather(*(client.start_workflow(
        ConversationWorkflow.run, conversation(f"[{label}] {i}"),
        id=f"{label}-{i}-{uuid.uuid4().hex[:6]}", task_queue=queue) for i in range(n)))


async def side_by_side(stack: Stack, z: Sizes) -> list[tuple[str, str]]:
    """The weather tour of N steps: ours, the floor, the loop without Temporal and the durable
    peers, turn about (`bench.tours`)."""
    return await tours(stack, z.tour_lengths, z.tour_repeats, progress)


async def where_cpu_goes(stack: Stack, z: Sizes) -> list[tuple[str, str]]:
    """py-spy on our worker and on the floor's while they run the same tours, and C=100
    conversations of the 200 ms model (`bench.profile`)."""
    client = await stack.client()
    ours, floor = stack.start_worker("prof-ours"), stack.start_worker("prof-floor", module="bench.floor")

    async def tour(queue: str, steps: int) -> int:
        if queue == "prof-ours":
            await client.execute_workflow(ConversationWorkflow.run, conversation(
                f"[tour-{steps}] {uuid.uuid4().hex}", steps + 1),
                id=f"prof-{uuid.uuid4().hex[:8]}", task_queue=queue)
        else:
            await client.execute_workflow(FloorWorkflow.run, steps,
                                          id=f"prof-{uuid.uuid4().hex[:8]}", task_queue=queue)
        return steps

    async def many(queue: str, level: int) -> int:
        if queue == "prof-ours":
            handles = await start_many(client, "conc", level, queue)
            await asyncio.gather(*(h.result() for h in handles))
        else:
            await asyncio.gather(*(client.execute_workflow(
                FloorWorkflow.run, args=[z.conc_steps, z.latency_s],
                id=f"prof-{uuid.uuid4().hex[:8]}", task_queue=queue) for _ in range(level)))
        return level * z.conc_steps

    await tour("prof-ours", 5), await tour("prof-floor", 5)  # warm up
    rows = []
    for label, run in [*((f"N={n} tour", lambda q, n=n: tour(q, n)) for n in z.tour_lengths),
                       (f"C={z.profile_level}, 200 ms model", lambda q: many(q, z.profile_level))]:
        progress(f"profiling: {label}")
        sampled_ours = await profile.sampled(ours, stack.work / f"ours-{len(rows)}.txt",
                                             lambda: run("prof-ours"))
        sampled_floor = await profile.sampled(floor, stack.work / f"floor-{len(rows)}.txt",
                                              lambda: run("prof-floor"))
        rows += profile.part_rows(label, sampled_ours, sampled_floor)
    ours.stop(), floor.stop()
    return rows


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


class _Discard(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that takes every export and keeps nothing."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def tracing_cost(stack: Stack, z: Sizes) -> list[tuple[str, str]]:
    """Per step with tracing off and on (OTLP/HTTP to a local endpoint that discards), side by
    side on one server, turn about; with BENCH_BEFORE=<a checkout of an earlier commit>, that
    version too (it has no tracing): what tracing costs, and what having it costs when off."""
    client = await stack.client()
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Discard)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    stack.start_worker("trace-off")
    stack.start_worker("trace-on", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink.server_port}")
    queues = {"off": "trace-off", "on": "trace-on"}
    if before := os.environ.get("BENCH_BEFORE"):
        stack.start_worker("trace-before", code=Path(before))
        queues["before"] = "trace-before"

    async def tour(queue: str) -> float:
        started = time.monotonic()
        await client.execute_workflow(ConversationWorkflow.run,
                                      conversation(f"[steps] {uuid.uuid4().hex}", z.steps + 1),
                                      id=f"trace-{uuid.uuid4().hex[:8]}", task_queue=queue)
        return (time.monotonic() - started) / z.steps * 1000

    for queue in queues.values():
        await tour(queue)  # warm up
    ms: dict[str, list[float]] = {name: [] for name in queues}
    for _ in range(3):  # turn about, so drift hits each the same
        for name, queue in queues.items():
            ms[name].append(await tour(queue))
    sink.shutdown()
    median = {name: sorted(values)[1] for name, values in ms.items()}
    rows = [(f"per step, tracing {name}" if name != "before" else
             f"per step, before ({Path(before).name}, no tracing)", f"{value:.1f} ms")
            for name, value in median.items()]
    rows.append(("tracing on / off", f"{median['on'] / median['off']:.2f}"))
    if "before" in median:
        rows.append(("tracing off / before (target 1.00 within noise)",
                     f"{median['off'] / median['before']:.2f}"))
    return rows


async def concurrency(stack: Stack, z: Sizes) -> list[tuple[str, str]]:
    """C conversations of `conc_steps` steps against a 200 ms model, side by side with Temporal's
    floor of the same shape (a 200 ms activity, then a no-op one, per step) on the same server,
    with one and with two worker processes of each; CPU per step is all worker processes'."""
    client = await stack.client()
    rows = []
    for processes in z.processes:
        ours = stack.start_worker(f"conc-{processes}", args=("--processes", str(processes)))
        floors = [stack.start_worker(f"floor-{processes}", module="bench.floor")
                  for _ in range(processes)]

        async def run_ours(level: int) -> None:
            handles = await start_many(client, "conc", level, f"conc-{processes}")
            await asyncio.gather(*(h.result() for h in handles))

        async def run_floor(level: int) -> None:
            await asyncio.gather(*(client.execute_workflow(
                FloorWorkflow.run, args=[z.conc_steps, z.latency_s],
                id=f"floor-{uuid.uuid4().hex[:8]}", task_queue=f"floor-{processes}")
                for _ in range(level)))

        await run_ours(2), await run_floor(2)  # warm up
        for level in z.levels:
            measured = {}
            for name, run, workers in (("ours", run_ours, [ours]), ("floor", run_floor, floors)):
                cpu0, started = sum(w.cpu_s() for w in workers), time.monotonic()
                await run(level)
                wall = time.monotonic() - started
                steps = level * z.conc_steps
                measured[name] = (steps / wall, (sum(w.cpu_s() for w in workers) - cpu0) / steps)
            (rate, cpu), (floor_rate, floor_cpu) = measured["ours"], measured["floor"]
            rows.append((f"{processes} worker process{'es' * (processes > 1)}, C={level}: "
                         "steps/s ours / floor (target ≥ 0.8)",
                         f"{rate:.1f} / {floor_rate:.1f} = {rate / floor_rate:.2f}; CPU per step "
                         f"{cpu * 1000:.1f} / {floor_cpu * 1000:.1f} ms; RSS {ours.rss_mb():.0f} MB"))
        for worker in (ours, *floors):
            worker.stop()
    return rows


async def roles(stack: Stack, z: Sizes) -> list[tuple[str, str]]:
    """C conversations of `conc_steps` steps against a 200 ms model: one worker process doing
    everything, against three processes that split the roles (`--role workflows`, `models`,
    `tools`), on queues of their own, turn about on one server; CPU per step is the processes'."""
    client = await stack.client()
    setups = {"1 process (all roles)": [stack.start_worker("roles-one")],
              "3 processes (workflows, models, tools)": [
                  stack.start_worker("roles-split", args=("--role", role))
                  for role in ("workflows", "models", "tools")]}
    queues = {"1 process (all roles)": "roles-one",
              "3 processes (workflows, models, tools)": "roles-split"}

    async def run(queue: str, level: int) -> None:
        handles = await start_many(client, "conc", level, queue)
        await asyncio.gather(*(h.result() for h in handles))

    for queue in queues.values():
        await run(queue, 2)  # warm up
    rows = []
    for level in z.role_levels:
        for name, workers in setups.items():
            cpu0, started = sum(w.cpu_s() for w in workers), time.monotonic()
            await run(queues[name], level)
            wall, steps = time.monotonic() - started, level * z.conc_steps
            cpu = (sum(w.cpu_s() for w in workers) - cpu0) / steps
            rows.append((f"C={level}, {name}: steps/s, CPU per step, RSS",
                         f"{steps / wall:.1f}; {cpu * 1000:.1f} ms; "
                         f"{sum(w.rss_mb() for w in workers):.0f} MB"))
    for workers in setups.values():
        for worker in workers:
            worker.stop()
    return rows


async def parked(stack: Stack, z: Sizes) -> list[tuple[str, str]]:
    client = await stack.client()
    worker = stack.start_worker("park")
    before = await stack.chat_requests()
    handles = await start_many(client, "park", z.parked, "park")

    async def all_waiting() -> bool:
        if await stack.chat_requests() - before < z.parked:
            return False
        count = await client.count_workflows('AgentStatus = "waiting_for_confirmation" AND TaskQueue = "park"')
        return count.count >= z.parked

    await wait_until(all_waiting, timeout_s=600, interval_s=1)
    cpu0 = worker.cpu_s()
    await asyncio.sleep(z.park_s)
    idle_cpu = (worker.cpu_s() - cpu0) / z.park_s
    rss = worker.rss_mb()
    started = time.monotonic()
    await asyncio.gather(*(h.signal(ConversationWorkflow.confirm, ConfirmRequest(all=True, approver="bench"))
                           for h in handles))
    await asyncio.gather(*(h.result() for h in handles))
    return [
        (f"{z.parked} parked: worker CPU over {z.park_s:.0f} s", f"{idle_cpu:.1%} of a core"),
        (f"{z.parked} parked: worker RSS", f"{rss:.0f} MB"),
        (f"{z.parked} approved: time until all complete", f"{time.monotonic() - started:.1f} s"),
    ]


async def recovery(stack: Stack, z: Sizes) -> list[tuple[str, str]]:
    """Conversations mid-model-call when their worker is SIGKILLed, a new worker started at once:
    when each lost call was answered again (read from the histories), and when all completed
    (each still has a tool and a model step to run then)."""
    client = await stack.client()
    worker = stack.start_worker("recover")
    before = await stack.chat_requests()
    handles = await start_many(client, "recover", z.recovery, "recover")

    async def all_in_flight() -> bool:
        return await stack.chat_requests() - before >= z.recovery

    await wait_until(all_in_flight, timeout_s=120)
    worker.stop(signal.SIGKILL)
    killed, killed_at = time.monotonic(), time.time()
    stack.start_worker("recover")
    async with httpx.AsyncClient() as http:
        await http.get(f"{stack.base_url.removesuffix('/v1')}/_release")
    await asyncio.gather(*(h.result() for h in handles))
    took = time.monotonic() - killed
    answered = sorted([await answered_again(h, killed_at) for h in handles])
    heartbeat = ConversationInput(prompt="").llm.heartbeat_timeout_s
    target = f"heartbeat timeout {heartbeat:g} s; target ≤ {heartbeat + 2:g} s"
    return [
        (f"{z.recovery} in flight, worker SIGKILLed mid-LLM-call: lost calls answered again after",
         f"median {answered[len(answered) // 2]:.1f} s, last {answered[-1]:.1f} s ({target})"),
        (f"{z.recovery} in flight: all complete after", f"{took:.1f} s"),
    ]


async def history_per_step(stack: Stack, z: Sizes) -> list[tuple[str, str]]:
    """One-shot weather tours of N steps: history bytes per step, runs, and the last model call's
    input. With BENCH_BEFORE=<a checkout of an earlier commit>, the same tours on a worker running
    that code, side by side on the same server."""
    client = await stack.client()
    versions = [("this version", "hist-new", z.tours[-1])]
    stack.start_worker("hist-new")
    before = os.environ.get("BENCH_BEFORE")
    if before:
        stack.start_worker("hist-old", code=Path(before))
        versions.append((f"before ({Path(before).name})", "hist-old", z.tours_before))
    for _, queue, _ in versions:  # warm up each worker, so the first tour's time is its own
        await client.execute_workflow(ConversationWorkflow.run, conversation("[conc] warm-up"),
                                      id=f"warm-{uuid.uuid4().hex[:6]}", task_queue=queue)
    rows = []
    for steps in z.tours:
        for label, queue, longest in versions:
            if steps > longest:
                continue
            handle = await client.start_workflow(
                ConversationWorkflow.run, conversation(f"[tour-{steps}] {uuid.uuid4().hex}", steps + 1),
                id=f"tour-{steps}-{uuid.uuid4().hex[:6]}", task_queue=queue)
            started = time.monotonic()
            await handle.result()
            took = time.monotonic() - started
            size, events, runs, last_input = await history_of(client, handle)
            rows.append((f"{steps} steps, {label}: history, runs, per step, last model input",
                         f"{size / 1e3:,.0f} KB in {events:,} events, {runs} run{'s' * (runs > 1)}, "
                         f"{size / steps / 1e3:.1f} KB/step, {last_input / 1e3:.1f} KB; "
                         f"{took / steps * 1000:.0f} ms/step"))
    return rows


async def tokens(stack: Stack) -> list[tuple[str, str]]:
    """Prompt tokens per step over 30 steps, with and without compaction (in-process worker with
    a 4 KB-per-step tool, the same as tests/workflows/test_robustness.py)."""
    import httpx as _httpx

    from durable_react_agent.activities.settings import ActivitySettings
    from durable_react_agent.testing import ScriptedModelServer
    from durable_react_agent.worker.app import build_worker
    from tests.fake_tools import registry_with_test_tools
    from tests.workflows.test_robustness import prompt_tokens

    client = await stack.client()
    model = ScriptedModelServer().start()
    settings = ActivitySettings(openai_base_url=model.base_url, openai_model="scripted",
                                data_dir=stack.work / "tokens")
    steps = [ScriptedReply(tool_calls=[ScriptedToolCall(name="big_output", arguments={"size": 4000 + i})])
             for i in range(29)]
    rows = []
    async with _httpx.AsyncClient() as http, build_worker(client, "tokens", settings, http,
                                                           registry_with_test_tools()):
        for label, budget in (("without compaction", None), ("with compaction (1,200-token budget)", 1200)):
            trigger = f"[tokens-{uuid.uuid4().hex[:6]}]"
            model.set_script(Script(scenarios=[Scenario(trigger=trigger, replies=[*steps, ScriptedReply(content="done")])]))
            await client.execute_workflow(
                ConversationWorkflow.run,
                ConversationInput(prompt=trigger, one_shot=True, max_steps=30, context_budget_tokens=budget),
                id=f"tokens-{uuid.uuid4().hex[:8]}", task_queue="tokens")
            counts = [prompt_tokens(r) for r in model.requests if r.trigger == trigger]
            rows.append((f"prompt tokens, step 1 → 30, {label}",
                         f"{counts[0]} → {counts[-1]} (max {max(counts) / counts[0]:.2f}× step 1)"))
    model.stop()
    return rows


async def long_chat(stack: Stack, z: Sizes) -> list[tuple[str, str]]:
    """A chat of `z.chat_turns` turns of 2 KB messages against a 24,000-token context budget
    (in-process worker, as the test `test_a_300_turn_chat...`): prompt tokens per turn, as the
    endpoint counts them, with the turns before which older turns folded into the summary."""
    import httpx as _httpx

    from durable_react_agent.activities.settings import ActivitySettings
    from durable_react_agent.testing import ScriptedModelServer
    from durable_react_agent.worker.app import build_worker
    from tests.fake_tools import registry_with_test_tools
    from tests.long_chat import run_long_chat

    client = await stack.client()
    model = ScriptedModelServer().start()
    settings = ActivitySettings(openai_base_url=model.base_url, openai_model="scripted",
                                data_dir=stack.work / "chat")
    budget = 24_000
    async with _httpx.AsyncClient() as http, build_worker(client, "chat", settings, http,
                                                           registry_with_test_tools()):
        chat = await run_long_chat(client, "chat", model, turns=z.chat_turns, size=2048,
                                   budget=budget)
    model.stop()
    rows, folds, turn = [], [], 0
    tokens: dict[int, int] = {}
    for r in chat.requests:  # a summary comes just before the step of the turn it made room for
        if r.kind == "summary":
            folds.append(turn + 1)
        else:
            turn = r.turn
            tokens[turn] = r.prompt_tokens
    span = 25
    for first in range(1, z.chat_turns + 1, span):
        last = min(first + span - 1, z.chat_turns)
        counts = [tokens[t] for t in range(first, last + 1)]
        marked = [t for t in folds if first <= t <= last]
        rows.append((f"turns {first}-{last}: prompt tokens min / max",
                     f"{min(counts):,} / {max(counts):,}"
                     + (f"; folded before turn {', '.join(map(str, marked))}" if marked else "")))
    return [
        (f"{z.chat_turns} turns answered, runs (continue-as-new)",
         f"{chat.status.turn}, {chat.status.runs}"),
        ("summaries written (`summarize` activity)", f"{len(folds)}"),
        (f"largest prompt (budget {budget:,})", f"{max(tokens.values()):,} tokens"),
        *rows,
    ]


async def main(z: Sizes, only: str | None = None) -> str:
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    stack = Stack(work, build_script(z))
    sections = []
    try:
        for title, run in (("History per step", lambda: history_per_step(stack, z)),
                           ("Weather tour, side by side, zero-latency model",
                            lambda: side_by_side(stack, z)),
                           ("Where the CPU goes (py-spy)", lambda: where_cpu_goes(stack, z)),
                           ("Tracing, zero-latency model", lambda: tracing_cost(stack, z)),
                           ("Concurrency, 200 ms model, one and two worker processes", lambda: concurrency(stack, z)),
                           ("Worker roles, 200 ms model", lambda: roles(stack, z)),
                           ("Parked conversations", lambda: parked(stack, z)),
                           ("Recovery", lambda: recovery(stack, z)), ("Stop", lambda: stopping(stack, z.stops)),
                           ("Large results, by reference", lambda: large_results(stack)),
                           ("Tokens", lambda: tokens(stack)),
                           ("Long chat, bounded context", lambda: long_chat(stack, z))):
            if only and title != only:
                continue
            started = time.monotonic()
            print(f"running: {title} ...", file=sys.stderr, flush=True)
            rows = await run()
            sections.append((title, rows, time.monotonic() - started))
    finally:
        stack.stop()
    return render(sections, z)


def render(sections, z: Sizes) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    lines = [f"# Benchmarks ({date.today().isoformat()}, {machine})", "",
             f"Sizes: {z.steps} steps; C in {list(z.levels)}; {z.parked} parked; "
             f"{z.recovery} in recovery.", "", "| measure | result |", "|---|---|"]
    for title, rows, seconds in sections:
        lines.append(f"| **{title}** ({seconds:.0f} s) | |")
        lines.extend(f"| {name} | {value} |" for name, value in rows)
    return "\n".join(lines) + "\n"


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--only", metavar="SECTION", help="run one section, by its title")
    args = parser.parse_args()
    table = asyncio.run(main(QUICK if args.quick else Sizes(), args.only))
    print(table)
    if not args.only:
        RESULTS.write_text(table)


if __name__ == "__main__":
    cli()
