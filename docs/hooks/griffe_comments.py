"""griffe extension: a field's comment is its docstring in the API reference.

The contract's models say what a field means in a comment, on its line or on the lines just
above it (`call_id: str | None = None  # the question the human answered`), not in an attribute
docstring. This extension gives an attribute that has no docstring those comments as one, so
docs/reference/ shows them without a second copy in the code. Lint pragmas (`# noqa`,
`# type: ignore`) are left out.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from typing import Any

import griffe

PRAGMA = re.compile(r"^(noqa|type:|pragma|pyright:|mypy:|fmt:|isort:|ruff:)", re.IGNORECASE)


class FieldComments(griffe.Extension):
    def on_attribute_instance(self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute,
                              agent: griffe.Visitor | griffe.Inspector, **kwargs: Any) -> None:
        if attr.docstring is not None or not isinstance(agent, griffe.Visitor):
            return
        if attr.lineno is None or attr.endlineno is None:
            return
        lines = agent.code.splitlines()
        text = " ".join([*_above(lines, attr.lineno - 1),
                         *_trailing(lines[attr.lineno - 1:attr.endlineno])])
        if text:
            attr.docstring = griffe.Docstring(text, lineno=attr.lineno, parent=attr,
                                              parser=agent.docstring_parser,
                                              parser_options=agent.docstring_options)


def _above(lines: list[str], index: int) -> list[str]:
    """The comment lines right above line `index` (0-based), in order."""
    found: list[str] = []
    while index > 0 and lines[index - 1].strip().startswith("#"):
        index -= 1
        found.insert(0, lines[index].strip().lstrip("#").strip())
    return [c for c in found if c and not PRAGMA.match(c)]


def _trailing(statement: list[str]) -> list[str]:
    """The comments at the end of the statement's lines (a `#` inside a string is not one)."""
    comments = []
    source = textwrap.dedent("\n".join(statement)) + "\n"
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments.append(token.string.lstrip("#").strip())
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    return [c for c in comments if c and not PRAGMA.match(c)]
