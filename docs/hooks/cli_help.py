"""mkdocs hook: the CLI reference shows the real `--help`, run at build time, so it cannot drift.

A line `<!-- help: client -->` in docs/reference/cli.md becomes the `--help` of `agent`
and of each subcommand its help lists; `<!-- help: worker -->`, that of `agent-worker`. They
all run in one child process (this file run as a script), which imports the CLI once: a dozen
`agent ... --help` processes would take most of ten seconds on two cores.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

PAGE = "reference/cli.md"
MARKER = re.compile(r"^<!-- help: (\w+) -->$", re.MULTILINE)
# The subcommands, as argparse lists them: "positional arguments:\n  {start,say,...}".
SUBCOMMANDS = re.compile(r"^positional arguments:\n\s+\{([\w,-]+)\}", re.MULTILINE)
# argparse wraps to the terminal's width: the same on every machine, and no colour (3.14+).
ENV = {"COLUMNS": "80", "NO_COLOR": "1"}
# A marker's name: the command people type, and the module it runs.
COMMANDS = {"client": ("agent", "durable_react_agent.client"),
            "worker": ("agent-worker", "durable_react_agent.worker"),
            "api": ("agent-api", "durable_react_agent.api")}


def on_page_markdown(markdown: str, page, config, **kwargs) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    modules = MARKER.findall(markdown)
    helps = _run(modules, Path(config.config_file_path).parent) if modules else {}
    return MARKER.sub(lambda m: _section(m.group(1), helps[m.group(1)]), markdown)


def _run(modules: list[str], root: Path) -> dict[str, list]:
    from mkdocs.exceptions import PluginError

    done = subprocess.run([sys.executable, __file__, *modules], cwd=root, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **ENV})
    if done.returncode != 0:
        raise PluginError(f"{PAGE}: a `--help` of {', '.join(modules)} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def _section(name: str, helps: list) -> str:
    blocks = [f"```text\n{helps[0][1].rstrip()}\n```"]
    for args, text in helps[1:]:
        command = " ".join([COMMANDS[name][0], *args])
        blocks.append(f"### `{command}`\n\n```text\n{text.rstrip()}\n```")
    return "\n\n".join(blocks)


def _help(name: str, args: list[str]) -> str:
    """What `COMMAND ARGS --help` prints, run in this process."""
    command, module = COMMANDS[name]
    sys.argv = [command, *args, "--help"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exit:
            if exit.code not in (0, None):
                raise
    if not out.getvalue().startswith("usage:"):
        raise SystemExit(f"`{' '.join([command, *args])} --help` printed no usage")
    return out.getvalue()


if __name__ == "__main__":
    helps = {}
    for name in sys.argv[1:]:
        top = _help(name, [])
        found = SUBCOMMANDS.search(top)
        helps[name] = [([], top)] + [([sub], _help(name, [sub]))
                                     for sub in (found.group(1).split(",") if found else [])]
    print(json.dumps(helps))
