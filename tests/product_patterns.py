"""Every `re` pattern of the product's modules, for the probe that checks each one runs in linear
time on outside text (tests/workflows/test_hostile_model_output.py runs it in a process of its own; not
collected: no `test_` prefix)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

from tests.processes import LAYERS

# Packages whose code runs in the worker (workflow code included) or serves people.
# (Each layer by name: an editable install maps them under the root, where its __path__ does
# not list them.)
PRODUCT = ("durable_react_agent", *(f"durable_react_agent.{layer}" for layer in LAYERS))
# Patterns used on outside text only after it is cut to a bound: checked at that size.
BOUNDED_USE = {"durable_react_agent.activities.llm_errors.CONTEXT_TOO_LONG": 2 * 2048}


def patterns() -> dict[str, re.Pattern[str]]:
    """Every `re` pattern of the product's modules, compiled at module level or written in a
    call of `re.<function>` (by name: module.name)."""
    found: dict[str, re.Pattern[str]] = {}
    for package in PRODUCT:
        root = importlib.import_module(package)
        names = [package, *(m.name for m in pkgutil.walk_packages(root.__path__, f"{package}."))]
        for name in names:
            module = importlib.import_module(name)
            for attr, value in vars(module).items():
                if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                    found[f"{name}.{attr}"] = value
            source = Path(module.__file__ or "").read_text() if module.__file__ else ""
            for n, literal in enumerate(_inline_patterns(source)):
                found[f"{name}:inline{n}"] = re.compile(literal)
    return found


def _inline_patterns(source: str) -> Iterator[str]:
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                and node.func.attr in {"match", "search", "fullmatch", "sub", "split",
                                       "findall", "finditer"}
                and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            yield node.args[0].value
