"""The determinism boundary, checked: `workflows/` runs inside the workflow, `rules/` holds the
pure rules it (and the API and the activities) may call, and `contract/` is the data every
process shares. The tests' workers import the workflow's own modules afresh in the sandbox, and
the replays of finished conversations the rules too (`workflow_runner(check_rules=True)`), so
the sandbox refuses the clock, randomness and I/O there at run time; a rule that reads the clock,
randomness, the environment or a file is refused here, before it runs anywhere; and nothing
keeps state at module level, which a worker shares between conversations."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from collections import Counter, OrderedDict, defaultdict, deque
from pathlib import Path

import pytest

from durable_react_agent import contract, rules, workflows
from tests.helpers import HISTORIES, REPLAY, code_copy

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (workflows, rules, contract)  # what runs inside the workflow
MODULES = sorted(m.name for package in PACKAGES
                 for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}."))
RULES = [m for m in MODULES if not m.startswith(f"{workflows.__name__}.")]
MUTABLE = (list, dict, set, bytearray, Counter, OrderedDict, defaultdict, deque)


# What a careless change might add to a pure rule: the clock and randomness.
PROBE = """
import datetime as _datetime
import random as _random

_checked = over_budget


def over_budget(*args, **kwargs):
    _datetime.datetime.now(), _random.random()
    return _checked(*args, **kwargs)
"""


# Replays a recorded history with the copy as it is, then once more after adding the probe to a
# rule (the sandbox imports the workflow's modules afresh for each run): one process, not two.
PROBED_REPLAY = REPLAY + """
with open(sys.argv[2], "a") as rule:
    rule.write(sys.argv[3])
result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
print("REPLAYED" if result.replay_failure is None else f"FAILED {result.replay_failure}")
"""


def test_the_sandbox_refuses_the_clock_and_randomness_in_the_workflows_own_modules(tmp_path):
    code = tmp_path / "probe"
    rule = code_copy(code) / "rules" / "stopping.py"
    script = tmp_path / "replay.py"
    script.write_text(PROBED_REPLAY)
    history = HISTORIES / "weather_invalid_call_two_turns.json"
    done = subprocess.run([sys.executable, str(script), str(history), str(rule), PROBE], cwd=ROOT,
                          env={"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    as_it_is, probed = [line for line in done.stdout.splitlines()
                        if line.startswith(("REPLAYED", "FAILED"))]
    assert as_it_is == "REPLAYED", out  # the copy, as it is
    assert probed.startswith("FAILED") and "datetime.datetime.now" in probed, out


@pytest.mark.parametrize("name", RULES)
def test_a_rule_calls_no_temporal_workflow_api(name: str):
    tree = ast.parse(Path(importlib.import_module(name).__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {f"{node.module}.{alias.name}" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    assert not {i for i in imported if i.startswith("temporalio.workflow")}, imported


# What a pure rule may not reach, which a worker that shares the rules between workflows would
# not refuse at run time: modules of the clock, randomness, the environment and I/O, and calls
# of the clock and of files. A `random.Random` handed in (seeded by the workflow) is allowed.
IMPURE_MODULES = frozenset({"os", "sys", "time", "uuid", "secrets", "socket", "subprocess",
                            "threading", "asyncio", "urllib", "http", "pathlib", "shutil",
                            "tempfile", "logging", "random"})
IMPURE_CALLS = frozenset({"now", "utcnow", "today", "open", "getenv", "urandom"})


def impure(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in IMPURE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            top = node.module.split(".")[0]
            found += [f"{node.module}.{a.name}" for a in node.names
                      if top in IMPURE_MODULES and (node.module, a.name) != ("random", "Random")]
        elif isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
                node.func, "id", None)
            found += [f"{called}() at line {node.lineno}"] if called in IMPURE_CALLS else []
    return found


@pytest.mark.parametrize("source", [
    "import time", "from os import environ", "import random", "from random import random",
    "from datetime import datetime\nx = datetime.now()", "open('f')", "import urllib.request",
])
def test_the_purity_check_sees_what_a_careless_rule_would_add(source: str):
    assert impure(source)


@pytest.mark.parametrize("name", RULES)
def test_a_rule_reads_no_clock_randomness_environment_or_file(name: str):
    """The workers share `rules/` and `contract/` between workflows (worker.app.PURE_LAYERS),
    so this is where what the sandbox would refuse in them at run time is refused."""
    assert impure(Path(importlib.import_module(name).__file__).read_text()) == []


@pytest.mark.parametrize("name", MODULES)
def test_no_module_keeps_mutable_state(name: str):
    module = importlib.import_module(name)
    kept = [key for key, value in vars(module).items()
            if not key.startswith("__") and isinstance(value, MUTABLE)]
    assert kept == [], f"{name} keeps {kept} at module level: use a tuple, a frozenset or a " \
                       "MappingProxyType, or keep it in the conversation's state"


# Calls a `finally` of workflow code may make: pure bookkeeping of the conversation's own.
PURE_IN_FINALLY = frozenset({"minus", "discard"})  # a share given back, a wait forgotten


@pytest.mark.parametrize("name", MODULES)
def test_a_finally_of_workflow_code_calls_no_workflow_api(name: str):
    """A cache eviction tears a conversation's coroutines down, running their `finally`s where
    no workflow API may be called (the clock, a span, a command: `_NotInWorkflowEventLoopError`).
    So a `finally` only keeps books; what must happen on the way out happens on the paths out."""
    tree = ast.parse(Path(importlib.import_module(name).__file__).read_text())
    for node in ast.walk(tree):
        for statement in getattr(node, "finalbody", []):
            for call in (n for n in ast.walk(statement) if isinstance(n, ast.Call)):
                called = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(
                    call.func, "id", "?")
                assert called in PURE_IN_FINALLY, (
                    f"{name}:{call.lineno}: a finally calls {called}()")
