"""The tests stand alone: no test module imports another. What two of them share is in
conftest.py (fixtures, which pytest finds by name) or in a helper module without the `test_`
prefix (tests/helpers.py, tests/processes.py, tests/console_support.py, ...), so that a test
module runs, and reads, by itself, and moving a test never breaks another module."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parents[1]
# A module named in a string: importlib.import_module(...), pytest_plugins = [...].
NAMED = re.compile(r"tests(\.\w+)*\.test_\w+(\.\w+)*")


def is_test_module(dotted: str, level: int = 0) -> bool:
    """Whether an imported name is a test module or something in one: `tests.test_x...` and
    `tests.real_model.test_y...`, relative ones, or `test_x...` (with tests/ on the path)."""
    parts = dotted.split(".")
    if parts[0] == "tests" or level:
        return any(part.startswith("test_") for part in parts)
    return parts[0].startswith("test_")


def imported_test_modules(source: str) -> Iterator[str]:
    """The test modules some code imports, however it does: `import tests.test_x`, `from
    tests.test_x import y`, `from tests import test_x`, relative (`from .test_x import y`,
    `from . import test_x`), by name in a string (`importlib.import_module`, `pytest_plugins`),
    or in code held in a string that a test runs in a process of its own (`python -c`)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if is_test_module(alias.name))
        elif isinstance(node, ast.ImportFrom):
            dots, base = "." * node.level, node.module or ""
            if base and is_test_module(base, node.level):
                yield dots + base
                continue
            for alias in node.names:
                name = f"{base}.{alias.name}" if base else alias.name
                if is_test_module(name, node.level):
                    yield dots + name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if NAMED.fullmatch(node.value):
                yield node.value
            elif "import" in node.value:
                try:
                    yield from imported_test_modules(node.value)
                except (SyntaxError, ValueError):
                    pass  # prose, not code


def test_no_test_module_imports_another_test_module():
    """Every Python file under tests/ (the test modules, conftest.py and the helpers, which a
    test module would otherwise import a test module through)."""
    files = sorted(p for p in TESTS.rglob("*.py")
                   if not {"histories", "cassettes", "__pycache__"} & set(p.parts))
    assert any(p.name == "test_api.py" for p in files) and Path(__file__) in files
    imports = {str(p.relative_to(TESTS)): sorted(set(imported_test_modules(p.read_text())))
               for p in files}
    assert {name: found for name, found in imports.items() if found} == {}


# The forms are written with {tests} and {module} so that this file names no test module itself.
@pytest.mark.parametrize("form", [
    "import {tests}.{module}",
    "import {tests}.{module} as other",
    "from {tests}.{module} import helper",
    "from {tests}.{module} import (\n    fixture,\n    helper,\n)",
    "from {tests} import {module}",
    "from {tests}.real_model.{module} import helper",
    "from .{module} import helper",
    "from ..{tests}.{module} import helper",
    "from . import {module}",
    "import {module}",
    "def late():\n    from {tests}.{module} import helper",
    "importlib.import_module('{tests}.{module}')",
    "pytest_plugins = ['{tests}.{module}']",
    "pytest_plugins = ['{tests}.real_model.{module}']",
    'PROBE = """\nimport json\nfrom {tests}.{module} import helper\n"""',
])
def test_the_guard_sees_every_way_of_importing_a_test_module(form: str):
    assert list(imported_test_modules(form.format(tests="tests", module="test_api"))) != []


@pytest.mark.parametrize("source", [
    "from tests.helpers import script, unique",
    "import tests.api_support",
    "from tests import helpers",
    "from tests.fake_tools import registry_with_test_tools",
    "from durable_react_agent.testing import ScriptedModelServer",
    '"""Tests of the API (see tests/api/test_api.py): it imports nothing of theirs."""',
    'CHILD = "import json, sys"',
])
def test_the_guard_lets_helper_modules_and_prose_be(source: str):
    assert list(imported_test_modules(source)) == []


# The folders a test module may sit in: one per layer of the product it tests, and the kinds of
# test that cross layers. tests/README.md says what each holds.
FOLDERS = ("rules", "workflows", "activities", "api", "client", "testing", "replay", "e2e", "tree",
           "real_model")


def test_every_test_module_sits_in_a_folder_that_says_what_it_tests():
    placed = {p.relative_to(TESTS).parts[0] for p in TESTS.rglob("test_*.py")
              if "node_modules" not in p.parts}
    assert not [p.name for p in TESTS.glob("test_*.py")], "a test module at the top of tests/"
    assert placed <= set(FOLDERS), sorted(placed - set(FOLDERS))
    readme = (TESTS / "README.md").read_text()
    assert [f for f in FOLDERS if f"`{f}/`" not in readme] == []
