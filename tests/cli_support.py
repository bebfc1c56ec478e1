"""`agent` in the test's process: its entry (`client.cli.run`) awaited in the test's event loop,
in the environment a shell would give it, with what it prints captured as a process's output.
A cold `python -m durable_react_agent.client` costs a second of CPU before it parses an
argument; the tests that hold what only a process shows (exit codes on a closed pipe, Ctrl-C,
standard input, one run of each command) start it as one (`client/test_cli.py`)."""

from __future__ import annotations

import asyncio
import contextvars
import io
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from durable_react_agent.client import cli
from durable_react_agent.testing import ScriptedModelServer
from tests.api_support import ROOT

EVALS = ROOT / "evals"  # the example cases
UNREACHABLE = "http://127.0.0.1:9/unreachable"  # Open-Meteo, for an eval that must not reach it

# The output of the command running in this context: (stdout, stderr); None outside a command.
_OUTPUT: contextvars.ContextVar[tuple[io.StringIO, io.StringIO] | None] = contextvars.ContextVar(
    "cli_output", default=None)


class _Routed(io.TextIOBase):
    """`sys.stdout` or `sys.stderr` while a command runs: a command's writes go to its own
    buffer, anything else's (the tests' workers, their logs) where they went before."""

    def __init__(self, index: int, before) -> None:
        self.index, self.before = index, before

    def _target(self):
        output = _OUTPUT.get()
        return self.before if output is None else output[self.index]

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return False


class _Shell:
    """What the commands in flight share in one process: `os.environ` and `sys.stdout`. Calls
    with the same environment run together; one with another waits for them to end."""

    def __init__(self) -> None:
        self.env: dict[str, str] | None = None
        self.saved: tuple[dict[str, str | None], object, object] | None = None
        self.running = 0
        self.changed = asyncio.Condition()

    async def enter(self, env: dict[str, str]) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.running == 0 or self.env == env)
            if self.running == 0:
                # Only the variables that differ change, one at a time: the tests' workers read
                # the environment from other threads meanwhile, and must never see it half-made.
                before = {k: os.environ.get(k) for k, v in env.items() if os.environ.get(k) != v}
                self.saved = (before, sys.stdout, sys.stderr)
                os.environ.update({k: env[k] for k in before})
                sys.stdout, sys.stderr = _Routed(0, sys.stdout), _Routed(1, sys.stderr)
                self.env = env
            self.running += 1

    async def leave(self) -> None:
        async with self.changed:
            self.running -= 1
            if self.running == 0:
                before, sys.stdout, sys.stderr = self.saved  # type: ignore[misc]
                for name, value in before.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
                self.env = self.saved = None
                self.changed.notify_all()


_SHELL = _Shell()


async def run_cli(args: list[str], env: Mapping[str, str], timeout: float = 60
                  ) -> subprocess.CompletedProcess:
    """`agent *args` as a process given `env` would run it: its exit code and its output."""
    shell, output = _SHELL, (io.StringIO(), io.StringIO())
    await shell.enter(dict(env))
    try:
        context = contextvars.copy_context()
        context.run(_OUTPUT.set, output)
        code = await asyncio.wait_for(asyncio.create_task(_exit_code(args), context=context),
                                      timeout)
    finally:
        await shell.leave()
    return subprocess.CompletedProcess(["agent", *args], code, output[0].getvalue(),
                                       output[1].getvalue())


async def _exit_code(args: list[str]) -> int:
    try:
        return await cli.run(args)
    except SystemExit as done:  # argparse: --help, or bad usage
        return done.code if isinstance(done.code, int) else 2


def eval_env(model: ScriptedModelServer, data_dir: Path) -> dict[str, str]:
    """What `agent eval`'s worker is given: the scripted model, and no Open-Meteo to reach."""
    return {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "sk-eval",
            "OPENAI_MODEL": "scripted", "OPEN_METEO_GEOCODING_URL": UNREACHABLE,
            "OPEN_METEO_FORECAST_URL": UNREACHABLE, "AGENT_DATA_DIR": str(data_dir),
            "AGENT_MEMORY": "off"}
