"""The determinism boundary, checked: `workflows/` runs inside the workflow, `rules/` holds the
pure rules it (and the API and the activities) may call, and `contract/` is the data every
process shares. The sandbox the tests run in imports all of them afresh, so it refuses the
clock, randomness and I/O in any of them; and nothing there keeps state at module level, which
an unsandboxed worker would share between conversations."""

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


def replayed_with(code: Path, tmp_path: Path) -> str:
    script = tmp_path / "replay.py"
    script.write_text(REPLAY)
    history = HISTORIES / "weather_invalid_call_two_turns.json"
    done = subprocess.run([sys.executable, str(script), str(history)], cwd=ROOT,
                          env={"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def test_the_sandbox_refuses_the_clock_and_randomness_in_the_workflows_own_modules(tmp_path):
    code = tmp_path / "probe"
    package = code_copy(code)
    assert "REPLAYED" in replayed_with(code, tmp_path)  # the copy, as it is
    with (package / "rules" / "stopping.py").open("a") as rule:
        rule.write(PROBE)
    out = replayed_with(code, tmp_path)
    assert "FAILED" in out and "datetime.datetime.now" in out, out


@pytest.mark.parametrize("name", RULES)
def test_a_rule_calls_no_temporal_workflow_api(name: str):
    tree = ast.parse(Path(importlib.import_module(name).__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {f"{node.module}.{alias.name}" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    assert not {i for i in imported if i.startswith("temporalio.workflow")}, imported


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
