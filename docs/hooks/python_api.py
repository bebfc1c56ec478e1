"""mkdocs hook: the Python API reference (mkdocstrings, griffe) finds `durable_react_agent.<layer>`.

The layers are folders at the top of the repository that install under one import root
(setup.py's `package_dir`), so no folder on disk is `durable_react_agent/contract`, and griffe,
which reads the source without importing it, cannot find them. This hook lays out the package
as it installs, in a temporary directory of symlinks (the root package's files, and a link per
layer named in setup.py's `LAYERS`), and gives that directory to the python handler as its
`paths`. The pages then read the real source, statically, under the names users import.
"""

from __future__ import annotations

import ast
import shutil
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = "durable_react_agent"
_made: list[Path] = []


@event_priority(100)  # before mkdocstrings reads its handlers' options
def on_config(config, **kwargs):
    repo = Path(config.config_file_path).parent
    tree = Path(tempfile.mkdtemp(prefix="docs-python-api-"))
    _made.append(tree)
    package = tree / ROOT
    package.mkdir()
    for entry in (repo / ROOT).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for layer in _layers(repo / "setup.py"):
        (package / layer).symlink_to(repo / layer)
    handlers = config.plugins["mkdocstrings"].config.handlers
    handlers.setdefault("python", {})["paths"] = [str(tree)]
    return config


def on_post_build(config, **kwargs) -> None:
    _remove()


def on_build_error(error, **kwargs) -> None:
    _remove()


def _remove() -> None:
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)


def _layers(setup: Path) -> tuple[str, ...]:
    """setup.py's `LAYERS`: the folders that install as `durable_react_agent.<layer>`."""
    for node in ast.parse(setup.read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "LAYERS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit(f"{setup}: no LAYERS, which this hook needs to lay out {ROOT}")
