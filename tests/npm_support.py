"""Node packages the tests run (the AG-UI client, an MCP reference server), each installed from
its own lock file into its own directory under tests/ (not collected: no `test_` prefix)."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def installed_matches_lock(directory: Path) -> bool:
    """Whether node_modules holds exactly what package-lock.json pins (npm keeps a copy of
    what it installed in node_modules/.package-lock.json)."""
    hidden = directory / "node_modules" / ".package-lock.json"
    if not hidden.exists():
        return False

    def pinned(path: Path) -> dict[str, str | None]:
        packages = json.loads(path.read_text())["packages"]
        return {name: p.get("integrity") or p.get("version")
                for name, p in packages.items() if name.startswith("node_modules/")}

    return pinned(hidden) == pinned(directory / "package-lock.json")


def npm_installed(directory: Path, what: str) -> str:
    """Node's path, with `npm ci` run in `directory` first when its node_modules is missing or
    stale. One xdist worker installs; another waits on the lock, then finds it installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(f"the tests of {what} need Node.js 20+ and npm on PATH "
                    "(Debian: sudo apt-get install -y nodejs npm)")
    lock = Path(tempfile.gettempdir()) / f"react-agent-npm-{directory.name}.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not installed_matches_lock(directory):
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=directory,
                                  capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                pytest.fail(f"`npm ci` in {directory} failed ({done.returncode}): "
                            f"{(done.stderr or done.stdout)[-2000:]}")
            if not installed_matches_lock(directory):
                pytest.fail(f"`npm ci` in {directory} did not install what package-lock.json "
                            "pins")
    return node
