"""The product as a user installs it: the wheel holds one top-level package, durable_react_agent,
and its console scripts (`agent`, `agent-worker`, `agent-api`) run a conversation from a fresh
venv, beside a user's own packages named like our layers (`api`, `client`, `rules`...).

The venv is fresh but offline: our wheel goes in without its dependencies, which it finds in
the test run's own site-packages, listed by a `.pth` file (a listed directory's own `.pth`
files are not run, so the editable install of this checkout plays no part)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from fnmatch import fnmatch
from pathlib import Path

import pytest

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.devserver import worker_env
from tests.generated import printed_commands
from tests.helpers import LAYERS, ROOT, script, tool_call, unique
from tests.processes import WorkerProcess

# What a user may have on the worker's path (where AGENT_TOOLS modules live): each fails
# loudly if anything of ours imports it.
THEIRS = (*LAYERS, "scripted_model", "testing")
# What a build needs, as the Dockerfile copies it
SOURCES = ("pyproject.toml", "setup.py", "README.md", "durable_react_agent", *LAYERS)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from what the Dockerfile copies, in a directory of its own (setuptools keeps its
    build/ between builds, where a module since removed would stay)."""
    out, source = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source")
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, source / name, **(
            {"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir() else {}))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    [found] = out.glob("durable_react_agent-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; returns its bin directory."""
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=False)
    bin_dir = home / "bin"
    site = Path(subprocess.run(
        [str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "-q",
         "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return bin_dir


def test_the_wheel_holds_one_top_level_package_with_every_layer_and_console_file(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"durable_react_agent"}
    for layer in LAYERS:  # every module of every layer, under the root
        for path in (ROOT / layer).rglob("*.py"):
            assert f"durable_react_agent/{path.relative_to(ROOT).as_posix()}" in names, path
    for path in (ROOT / "api" / "static").rglob("*"):  # every file the console serves
        if path.is_file():
            assert f"durable_react_agent/{path.relative_to(ROOT).as_posix()}" in names, path
    assert any(fnmatch(n, "durable_react_agent/testing/*.json") for n in names)
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    for line in ("agent = durable_react_agent.client.__main__:main",
                 "agent-worker = durable_react_agent.worker.__main__:cli",
                 "agent-api = durable_react_agent.api.__main__:main"):
        assert line in scripts


async def test_the_console_scripts_run_a_conversation_beside_packages_named_like_ours(
        installed: Path, tmp_path: Path, temporal_address: str, model: ScriptedModelServer):
    theirs = tmp_path / "theirs"
    for name in THEIRS:
        (theirs / name).mkdir(parents=True)
        (theirs / name / "__init__.py").write_text(
            f"raise ImportError('this is the user\\'s own {name}, not durable_react_agent\\'s')\n")
    # and a tool module of theirs, on that path, written against the root's tool API
    (theirs / "acme_tools.py").write_text(
        "from durable_react_agent import tool\n\n\n@tool\ndef shout(text: str) -> str:\n"
        '    """Say it louder."""\n    return text.upper()\n')
    queue = unique("wheel")
    env = worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                     PYTHONPATH=str(theirs), AGENT_TOOLS="acme_tools",
                     PATH=f"{installed}{os.pathsep}{os.environ.get('PATH', '')}")
    title = unique("wheel-note")
    trigger = script(
        model, unique("wheel"),
        ScriptedReply(tool_calls=[tool_call("shout", {"text": "hi"})]),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "loud"})]),
        ScriptedReply(content="Saved: {last_tool}"),
    )

    def run(line: str) -> subprocess.CompletedProcess:
        """A command line, as a person types it in a shell whose PATH has the venv first."""
        return subprocess.run(["/bin/sh", "-c", line], cwd=theirs, env=env, capture_output=True,
                              text=True, timeout=120)

    worker = WorkerProcess(env, tmp_path, executable=str(installed / "agent-worker"), cwd=theirs)
    try:
        await asyncio.to_thread(worker.start)
        await asyncio.to_thread(worker.wait_for_log, '"event": "worker started"')
        conv = unique("wheel-conv")
        started = await asyncio.to_thread(
            run, f"agent start --id {conv} --wait {shlex.quote(trigger + ': save a note')}")
        assert started.returncode == 0, started.stdout + started.stderr
        [confirm] = [c for c in printed_commands(started.stdout, "")
                     if c.startswith("agent confirm") and "--args" not in c]
        confirmed = await asyncio.to_thread(run, f"{confirm} --as ann --wait")
        assert confirmed.returncode == 0, confirmed.stdout + confirmed.stderr
        status = json.loads((await asyncio.to_thread(
            run, f"python -m durable_react_agent.client status {conv} --json")).stdout)
        assert status["stop_reason"] == "answered", status
        assert status["final_answer"].startswith("Saved: ") and title in status["final_answer"]
        assert status["tools_used"] == ["shout", "create_note"], status
        ended = await asyncio.to_thread(run, f"agent end {conv}")
        assert ended.returncode == 0, ended.stderr
        api = await asyncio.to_thread(run, "echo a-token | agent-api hash-token")
        assert api.returncode == 0 and api.stdout.strip(), api.stderr
        log = worker.log(1)
        assert "Traceback" not in log and "user's own" not in log, log[-3000:]
    finally:
        worker.stop()
