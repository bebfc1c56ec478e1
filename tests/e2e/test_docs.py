"""The README stays a front page, its links and the docs' links lead somewhere, and the docs site
builds strictly (mkdocs: a broken link, a missing anchor or a page left out of the nav fails), with
the CLI reference made from the real `--help` (docs/hooks/cli_help.py), the HTTP API's from the
app's OpenAPI document (docs/hooks/openapi.py), and the Python API's from the docstrings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from durable_react_agent.api.app import create_app
from durable_react_agent.api.settings import ApiSettings
from durable_react_agent.client.connection import TemporalSettings

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
TARGET = re.compile(r"\]\(([^)\s]+)\)|\b(?:src|href)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def relative_targets(page: Path) -> list[str]:
    """The relative link and image targets of a page, outside code."""
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text()))
    targets = [a or b for a, b in TARGET.findall(text)]
    return [t for t in targets if not SCHEME.match(t) and not t.startswith("#")]


def test_the_readme_is_a_front_page_of_at_most_300_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move the detail to docs/"


def test_every_relative_link_of_the_readme_and_the_docs_points_at_a_file():
    broken = []
    for page in PAGES:
        for target in relative_targets(page):
            path = target.split("#", 1)[0].split("?", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)
    assert "docs/models.md" in relative_targets(ROOT / "README.md")  # the scan sees links


def test_the_docs_site_builds_strictly_with_the_real_cli_help(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, (
        f"mkdocs build --strict failed (pip install -e '.[docs]' if mkdocs is missing):\n"
        f"{done.stdout}\n{done.stderr}")
    cli = (site / "reference" / "cli.html").read_text()
    assert "help: client" not in cli and "help: worker" not in cli  # every marker was filled in
    assert "usage: agent-worker" in cli
    commands = re.search(r"usage: agent \[-h\]\s+\{([\w,-]+)\}", cli)
    assert commands, "the CLI reference lacks the help of agent"
    for command in commands.group(1).split(","):
        assert f"usage: agent {command} " in cli, f"no --help of {command}"
    # The references made from the code: every route of the app's own OpenAPI document, and the
    # docstrings of what users import (mkdocstrings).
    http = (site / "reference" / "http.html").read_text()
    assert "<!-- openapi -->" not in http
    braces = re.compile(r"[{}]")  # a path's parameters, which the page's markup may split
    shown = braces.sub("", re.sub(r"<[^>]+>", "", http))
    routes = create_app(ApiSettings(), TemporalSettings()).openapi()["paths"]
    for path, operations in routes.items():
        for method in operations:
            route = f"{method.upper()} {path}"
            assert braces.sub("", route) in shown, f"{route} is not documented"
    contract = (site / "reference" / "contract.html").read_text()
    tools = (site / "reference" / "tool-api.html").read_text()
    for name in ("ConversationInput", "ConversationStatus", "ConfirmRequest", "DecideRequest"):
        assert re.search(rf'id="durable_react_agent\.contract\.(\w+\.)?{name}"', contract), name
    for name in ("tool", "ToolContext", "ToolError", "NeedsInput"):
        assert f'id="durable_react_agent.{name}"' in tools, name
