"""The weather tour of N steps, side by side in one run: ours, Temporal's floor, the same loop
without Temporal (plain, and LangGraph with its SQLite checkpointer), and the two durable peers
(`bench.peers`). Turn about, so that drift hits each the same; medians of the repeats."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bench.baselines import Agent, langgraph_loop, plain_loop
from bench.floor import FloorWorkflow
from bench.peers import PEER_NAMES, PEER_WORKFLOWS
from bench.stack import Child, Stack, history_of
from durable_react_agent.contract import ConversationInput
from durable_react_agent.workflows.conversation import ConversationWorkflow

DURABLE = ("ours", "floor", *PEER_WORKFLOWS)  # each on a worker process of its own
LABELS = {"ours": "ours", "floor": "Temporal floor (2 no-op activities)",
          "floor-local": "Temporal floor, our shape (a no-op activity and a local one)",
          "plain": "plain loop (no Temporal)", "langgraph": "LangGraph + SQLite checkpointer",
          **PEER_NAMES}


@dataclass
class Tour:
    """What one contender's tours of one length cost: per step, the median of the repeats."""

    ms: float  # wall time
    cpu_ms: float  # the worker process's CPU (in-process loops: this process's)
    history_kb: float | None  # the workflow's history (in-process loops have none)


def tour_prompt(steps: int) -> str:
    return f"[tour-{steps}] {uuid.uuid4().hex}"


class Contenders:
    """Each contender's way to run one tour of `steps` steps on the stack."""

    def __init__(self, stack: Stack, peers: bool = True):
        self.stack = stack
        self.workers: dict[str, Child] = {"ours": stack.start_worker("tour-ours"),
                                          "floor": stack.start_worker("tour-floor",
                                                                      module="bench.floor")}
        if peers:
            for peer in PEER_WORKFLOWS:
                self.workers[peer] = stack.start_worker(f"tour-{peer}", module="bench.peers",
                                                        args=(peer,))
        self.agent = Agent(stack.base_url)

    def names(self) -> list[str]:
        return ["ours", "floor", "floor-local",
                *(name for name in self.workers if name not in ("ours", "floor")),
                "plain", "langgraph"]

    async def run(self, name: str, steps: int) -> Tour:
        client = await self.stack.client()
        worker = self.workers.get("floor" if name == "floor-local" else name)
        cpu = worker.cpu_s if worker is not None else time.process_time
        cpu0, started = cpu(), time.monotonic()
        handle = None
        if name == "ours":
            handle = await client.start_workflow(
                ConversationWorkflow.run,
                ConversationInput(prompt=tour_prompt(steps), one_shot=True, max_steps=steps + 1),
                id=f"tour-ours-{uuid.uuid4().hex[:8]}", task_queue="tour-ours")
        elif name in ("floor", "floor-local"):
            handle = await client.start_workflow(FloorWorkflow.run,
                                                 args=[steps, 0.0, name == "floor-local"],
                                                 id=f"tour-{name}-{uuid.uuid4().hex[:8]}",
                                                 task_queue="tour-floor")
        elif name in PEER_WORKFLOWS:
            handle = await client.start_workflow(
                PEER_WORKFLOWS[name], args=[tour_prompt(steps), steps + 5],
                id=f"tour-{name}-{uuid.uuid4().hex[:8]}", task_queue=f"tour-{name}")
        elif name == "plain":
            await plain_loop(self.agent, tour_prompt(steps))
        else:
            await langgraph_loop(self.agent, tour_prompt(steps),
                                 self.stack.work / f"lg-{uuid.uuid4().hex}.db", steps)
        if handle is not None:
            await handle.result()
        wall, used = time.monotonic() - started, cpu() - cpu0
        size = (await history_of(client, handle))[0] if handle is not None else None
        return Tour(wall / steps * 1000, used / steps * 1000,
                    size / steps / 1e3 if size is not None else None)

    async def aclose(self) -> None:
        await self.agent.aclose()
        for worker in self.workers.values():
            worker.stop()


async def side_by_side(contenders: Contenders, lengths: tuple[int, ...], repeats: int,
                       progress: Callable[[str], None] = lambda _: None
                       ) -> dict[int, dict[str, Tour]]:
    """Every contender's tours of each length, `repeats` times turn about, after one warm-up
    tour each; the medians."""
    names = contenders.names()
    for name in names:
        await contenders.run(name, 5)
    results: dict[int, dict[str, Tour]] = {}
    for steps in lengths:
        runs: dict[str, list[Tour]] = {name: [] for name in names}
        for repeat in range(repeats):
            for name in names:
                progress(f"tour of {steps}, {name}, {repeat + 1}/{repeats}")
                runs[name].append(await contenders.run(name, steps))
        results[steps] = {name: median(tours) for name, tours in runs.items()}
    return results


def median(tours: list[Tour]) -> Tour:
    sizes = [t.history_kb for t in tours if t.history_kb is not None]
    return Tour(statistics.median(t.ms for t in tours), statistics.median(t.cpu_ms for t in tours),
                statistics.median(sizes) if sizes else None)


def rows(results: dict[int, dict[str, Tour]]) -> list[tuple[str, str]]:
    """The table: each contender's cost per step, then the ratios the targets are set in."""
    out = []
    for steps, tours in results.items():
        for name, tour in tours.items():
            history = f"; history {tour.history_kb:.1f} KB/step" if tour.history_kb else ""
            out.append((f"N={steps}, {LABELS[name]}: per step, worker CPU per step",
                        f"{tour.ms:.1f} ms, {tour.cpu_ms:.1f} ms{history}"))
        out.extend(ratios(steps, tours))
    return out


def ratios(steps: int, tours: dict[str, Tour]) -> list[tuple[str, str]]:
    ours, floor, plain = tours["ours"], tours["floor"], tours["plain"]
    limit_ms, limit_cpu = floor.ms + plain.ms, floor.cpu_ms + plain.cpu_ms
    shape = tours["floor-local"]
    out = [(f"N={steps}: per step, ours / (floor + plain) (target ≤ 1.15)",
            f"{ours.ms:.1f} / {limit_ms:.1f} = {ours.ms / limit_ms:.2f}"),
           (f"N={steps}: worker CPU per step, ours / (floor + plain) (target ≤ 1.3)",
            f"{ours.cpu_ms:.1f} / {limit_cpu:.1f} = {ours.cpu_ms / limit_cpu:.2f}"),
           (f"N={steps}: per step and CPU, ours / (floor of our shape + plain)",
            f"{ours.ms / (shape.ms + plain.ms):.2f}, "
            f"{ours.cpu_ms / (shape.cpu_ms + plain.cpu_ms):.2f}")]
    peers = [name for name in PEER_WORKFLOWS if name in tours]
    if peers:
        best = min(peers, key=lambda name: tours[name].ms)
        thrift = min(peers, key=lambda name: tours[name].cpu_ms)
        out += [(f"N={steps}: per step, best durable peer / ours (target ≥ 2)",
                 f"{LABELS[best]}: {tours[best].ms:.1f} / {ours.ms:.1f} = "
                 f"{tours[best].ms / ours.ms:.2f}"),
                (f"N={steps}: worker CPU per step, ours / the thriftiest peer's (target ≤ 0.5)",
                 f"{LABELS[thrift]}: {ours.cpu_ms:.1f} / {tours[thrift].cpu_ms:.1f} = "
                 f"{ours.cpu_ms / tours[thrift].cpu_ms:.2f}")]
    return out


async def tours(stack: Stack, lengths: tuple[int, ...], repeats: int,
                progress: Callable[[str], None] = lambda _: None) -> list[tuple[str, str]]:
    contenders = Contenders(stack)
    try:
        return rows(await side_by_side(contenders, lengths, repeats, progress))
    finally:
        await contenders.aclose()
