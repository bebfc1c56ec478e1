"""A real browser for the pages a person uses: Debian's chromium, driven by Playwright (which
downloads no browser here). The fixtures are in conftest.py."""

from __future__ import annotations

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
    """Debian's chromium, which `make system-deps` installs (`make test` and .ci/run call it);
    no test installs a system package."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make system-deps` (or apt-get install chromium)")
    return CHROMIUM
