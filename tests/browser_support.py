"""A real browser for the pages a person uses: Debian's chromium, driven by Playwright (which
downloads no browser here). The fixtures are in conftest.py."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags, chromium's connections are refused by this machine's
# closed network, many at a time.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2,
         "is_mobile": True, "has_touch": True}


def installed_chromium() -> Path:
    """Debian's chromium, installed with apt-get when it is missing. One xdist worker installs
    it; the other waits on the lock, then finds it."""
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None:
        pytest.fail(f"{CHROMIUM} is missing and there is no apt-get to install chromium with")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=300"]  # apt run by something else on the machine
    with open(Path(tempfile.gettempdir()) / "react-agent-chromium.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        for command in ([apt, *lock, "update"], [apt, *lock, "install", "-y", "chromium"]):
            if CHROMIUM.exists():
                break
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0 and not CHROMIUM.exists():
                pytest.fail(f"{CHROMIUM} is missing and `{' '.join(command)}` failed "
                            f"({done.returncode}): {(done.stderr or done.stdout)[-2000:]}\n"
                            "install it by hand: sudo apt-get install -y chromium")
    if not CHROMIUM.exists():
        pytest.fail(f"apt-get installed chromium, but {CHROMIUM} is still missing")
    return CHROMIUM
