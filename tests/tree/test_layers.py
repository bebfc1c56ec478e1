"""The tree's layers, held: `contract/` is data every process imports (pydantic and the standard
library only), `rules/` are pure rules anyone may call (the contract, and no I/O), `workflows/`
is orchestration that only the worker (and the tests and benchmarks) import, and no modules
import each other in a circle. The names clients call the conversation by are the ones it
registers."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from temporalio.workflow import _Definition

from durable_react_agent.contract import names
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.processes import LAYERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "durable_react_agent"  # the one import root; the layers install under it (setup.py)
PRODUCT = (*LAYERS, PACKAGE)  # the folders of the product's code
STDLIB = sys.stdlib_module_names
# Pure libraries a rule may use: data, schemas, and patterns that cannot backtrack; and
# temporalio.common (search attribute keys), which is plain data too.
PURE = {"pydantic", "jsonschema", "jsonschema_specifications", "referencing", "re2", "regex", "temporalio.common"}


def modules(folder: str) -> dict[str, Path]:
    """A folder's modules by the names they install as (`rules/x.py`: `durable_react_agent.rules.x`)."""
    return {".".join([PACKAGE, *p.relative_to(ROOT / folder).with_suffix("").parts]
                     if folder == PACKAGE else [PACKAGE, *p.relative_to(ROOT).with_suffix("").parts]
                     ).removesuffix(".__init__"): p
            for p in sorted((ROOT / folder).rglob("*.py"))}


def imported(path: Path, name: str, relative: bool = True) -> set[str]:
    """The modules a file imports (relative imports made absolute, or left out), at any depth
    of the file."""
    found, package = set(), name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and not relative:
                continue
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


ALL = {name: path for package in PRODUCT for name, path in modules(package).items()}


def top(module: str) -> str:
    """A module's layer (`rules` for durable_react_agent.rules.x), or its top package."""
    parts = module.split(".")
    return parts[1] if parts[0] == PACKAGE and len(parts) > 1 else parts[0]


def test_every_import_of_ours_is_relative():
    """Inside the product, an import of ours is relative: the code runs under whatever root it
    is installed as, and a user's own `api` or `rules` is never taken for ours (nor ours for
    theirs)."""
    absolute = {name: sorted(i for i in imported(path, name, relative=False)
                             if top(i) in PRODUCT or i.split(".")[0] in (*LAYERS, PACKAGE))
                for name, path in ALL.items()}
    assert {n: i for n, i in absolute.items() if i} == {}


@pytest.mark.parametrize("package", ["api", "client", "activities", "contract", "rules"])
def test_only_the_worker_imports_the_workflows(package: str):
    offenders = {name: sorted(i for i in imported(path, name) if top(i) == "workflows")
                 for name, path in modules(package).items()}
    assert {n: i for n, i in offenders.items() if i} == {}


def test_the_contract_imports_only_pydantic_and_the_standard_library():
    for name, path in modules("contract").items():
        outside = {i for i in imported(path, name)
                   if top(i) not in STDLIB and top(i) not in ("pydantic", "contract")}
        assert outside == set(), f"{name} imports {sorted(outside)}"


def test_a_rule_imports_the_contract_and_pure_libraries_only():
    for name, path in modules("rules").items():
        outside = {i for i in imported(path, name)
                   if top(i) not in STDLIB and top(i) not in ("contract", "rules")
                   and not any(i == p or i.startswith(f"{p}.") for p in PURE)}
        assert outside == set(), f"{name} imports {sorted(outside)}"


def test_no_modules_import_each_other_in_a_circle():
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in ALL.items():
        for module in imported(path, name):
            target = next((m for m in (module, module.rpartition(".")[0]) if m in ALL), None)
            if target and target != name and not ALL[target].name == "__init__.py":
                graph[name].add(target)
    # Tarjan's strongly connected components: a component of more than one module is a circle
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in list(ALL):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_names_clients_call_are_the_ones_the_conversation_registers():
    definition = _Definition.from_class(ConversationWorkflow)
    assert definition.name == names.WORKFLOW_TYPE
    signals = {v for k, v in vars(names).items() if k.endswith("_SIGNAL")}
    asked = [v for v in vars(names).values() if isinstance(v, names.Asked)]
    assert signals <= set(definition.signals)
    assert {a.name for a in asked if a.answers is names.SignalOutcome} <= set(definition.updates)
    assert {a.name for a in asked if a.answers is not names.SignalOutcome} <= set(
        definition.queries)


def test_every_unit_is_one_a_reader_can_hold():
    """No product Python file over 500 lines, the conversation's story at most 400, and no
    console module over 700 (vendored code aside)."""
    python = {p: len(p.read_text().splitlines()) for package in (*PRODUCT, "bench", "scripts")
              for p in (ROOT / package).rglob("*.py")}
    assert {str(p.relative_to(ROOT)): n for p, n in python.items() if n > 500} == {}
    assert python[ROOT / "workflows" / "conversation.py"] <= 400
    console = {p: len(p.read_text().splitlines())
               for p in (ROOT / "api" / "static").rglob("*.js") if "vendor" not in p.parts}
    assert console and {str(p.relative_to(ROOT)): n for p, n in console.items() if n > 700} == {}
