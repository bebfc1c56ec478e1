"""Where a worker's CPU goes, by py-spy: the samples of a worker process while it runs tours,
sorted into the parts of a step, so that ours and the floor's show side by side what ours spends
that the floor does not. Samples where the event loop sleeps in `select` are left out: py-spy
counts some of that wait as running."""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.stack import Child

# The part a sample belongs to: the first of these its stack holds, root to leaf in this order.
PARTS = (
    ("model call (LLM activity)", ("LLMActivities.",)),
    ("tool (get_weather)", ("ToolActivities.", "get_weather (")),
    ("workflow code (one activation)", ("_RunningWorkflow.activate",)),
    ("Temporal SDK (polls, payloads, completions)", ("temporalio/",)),
)
OTHER = "event loop and the rest"
IDLE = "EpollSelector.select"
OURS = ("workflows/", "rules/", "contract/", "activities/", "worker/")


@dataclass
class Profile:
    samples: int = 0
    parts: collections.Counter[str] = field(default_factory=collections.Counter)
    ours: int = 0  # samples whose running function is our code
    functions: collections.Counter[str] = field(default_factory=collections.Counter)


def read(path: Path) -> Profile:
    """py-spy's raw output (a stack and its count a line) as parts and running functions."""
    profile = Profile()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not frames or IDLE in frames[-1]:
            continue
        n = int(count)
        profile.samples += n
        part = next((name for name, marks in PARTS
                     if any(mark in frame for frame in frames for mark in marks)), OTHER)
        profile.parts[part] += n
        leaf = frames[-1]
        profile.functions[leaf] += n
        if any(f"({where}" in leaf for where in OURS):
            profile.ours += n
    return profile


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


async def sampled(worker: Child, out: Path, run: Callable[[], Awaitable[int]]
                  ) -> tuple[Profile, float] | str:
    """`run` (which returns its steps) under py-spy on `worker`: the profile and the worker's CPU
    per step (ms), or why it could not be sampled."""
    spy = py_spy()
    if spy is None:
        return "py-spy is not installed (the bench extra has it)"
    recorder = subprocess.Popen([spy, "record", "--pid", str(worker.proc.pid), "--rate", "200",
                                 "--format", "raw", "--nonblocking", "--output", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cpu0 = worker.cpu_s()
    steps = await run()
    cpu = (worker.cpu_s() - cpu0) / steps * 1000
    recorder.send_signal(signal.SIGINT)
    _, err = recorder.communicate(timeout=60)
    if not out.exists():
        return f"py-spy could not sample the worker: {err.decode(errors='replace').strip()[-200:]}"
    return read(out), cpu


def part_rows(label: str, ours: tuple[Profile, float] | str,
              floor: tuple[Profile, float] | str) -> list[tuple[str, str]]:
    """Each part's CPU per step, ours beside the floor's, and our profile's top functions."""
    if isinstance(ours, str) or isinstance(floor, str):
        return [(f"{label}: profile", ours if isinstance(ours, str) else str(floor))]
    (mine, my_cpu), (theirs, their_cpu) = ours, floor

    def ms(profile: Profile, cpu: float, part: str) -> float:
        return cpu * profile.parts[part] / max(profile.samples, 1)

    names = [name for name, _ in PARTS] + [OTHER]
    out = [(f"{label}: worker CPU per step by part, ours | floor",
            "; ".join(f"{name} {ms(mine, my_cpu, name):.1f} | {ms(theirs, their_cpu, name):.1f}"
                      for name in names) + f" ms (in all {my_cpu:.1f} | {their_cpu:.1f})")]
    out.append((f"{label}: our own code, of our worker's CPU",
                f"{mine.ours / max(mine.samples, 1):.1%}"))
    top = ", ".join(f"{function_name(f)} {n / mine.samples:.1%}"
                    for f, n in mine.functions.most_common(8))
    out.append((f"{label}: our worker's top functions (self time)", top))
    return out


def function_name(frame: str) -> str:
    """`Class.method (path/to/file.py:12)` as `Class.method (file.py)`."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})"
