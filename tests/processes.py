"""`agent-worker` as a child process, for the tests that kill it, restart it or give it an
environment of its own (not collected: no `test_` prefix)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The folders that install as durable_react_agent.<layer> (setup.py)
LAYERS = ("api", "client", "worker", "rules", "contract", "workflows", "activities")


class WorkerProcess:
    """`agent-worker` as a child process, configured only by its environment."""

    def __init__(self, env: dict[str, str], log_dir: Path, args: tuple[str, ...] = (),
                 cwd: Path = ROOT, executable: str | None = None):
        self._env = env
        self._log_dir = log_dir
        self._args = args  # `agent-worker`'s own (--role ...)
        self._cwd = cwd  # where its code comes from (another version's copy)
        # `agent-worker` of an installed copy, else this interpreter's `-m durable_react_agent.worker`
        self._command = [executable] if executable else [
            sys.executable, "-m", "durable_react_agent.worker"]
        self._started = 0
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self._started += 1
        log = open(self._log_dir / f"worker-{self._started}.log", "wb")
        self.proc = subprocess.Popen(
            [*self._command, *self._args], cwd=self._cwd, env=self._env,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def kill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, "the worker died early"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, and SIGKILL if it has not stopped in 15 s (a loaded machine: a stop that
        raised then hid the test's own outcome, and left the process running)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def wait_for_log(self, text: str, timeout_s: float = 60) -> str:
        """The current process's log once it holds `text` (AssertionError if the process ends
        or the time runs out first)."""
        deadline = time.monotonic() + timeout_s
        while True:
            log = self.log(self._started)
            if text in log:
                return log
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the worker never logged {text!r}:\n{log[-3000:]}")
            time.sleep(0.1)

    def log(self, n: int) -> str:
        return (self._log_dir / f"worker-{n}.log").read_text()
