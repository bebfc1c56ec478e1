"""mkdocs hook: the HTTP API reference is the real app's OpenAPI document, rendered at build time.

A line `<!-- openapi -->` in docs/reference/http.md becomes every route (its parameters, body
and answers, grouped by tag) and every schema they name, as markdown tables. The document comes
from `create_app(...).openapi()`, run in a child process (this file run as a script) so that the
build imports nothing of the product and no stale module outlives an edit under `mkdocs serve`.
Nothing is fetched and no script runs in the reader's browser.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from markdown.extensions.toc import slugify

PAGE = "reference/http.md"
MARKER = "<!-- openapi -->"
METHODS = ("get", "post", "put", "patch", "delete")


def on_page_markdown(markdown: str, page, config, **kwargs) -> str:
    if page.file.src_uri != PAGE or MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render(_document(Path(config.config_file_path).parent)))


def _document(root: Path) -> dict[str, Any]:
    from mkdocs.exceptions import PluginError

    done = subprocess.run([sys.executable, __file__], cwd=root, capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise PluginError(f"{PAGE}: the API's OpenAPI document could not be made:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])  # one line of JSON, whatever was printed before


def render(doc: dict[str, Any]) -> str:
    """The answers most routes share, once; the routes, grouped by their first tag in the order
    they appear; then the schemas."""
    schemes = doc.get("components", {}).get("securitySchemes", {})
    out = [f"OpenAPI {doc['openapi']}, *{doc['info']['title']}* {doc['info']['version']}: "
           f"{doc['info'].get('description', '')}"]
    for name, scheme in schemes.items():
        out.append(f"Authentication (`{name}`): {scheme.get('type')} `{scheme.get('scheme')}`, "
                   f"{scheme.get('description', '')}.")
    operations = [(method, path, op) for path, item in doc["paths"].items()
                  for method, op in item.items() if method in METHODS]
    common = _common_answers([op for _, _, op in operations])
    out.append("## Common answers")
    out.append("Most routes may also give these answers; each route below names the ones it "
               "gives.")
    out.append(_table(["answer", "meaning", "body"],
                      [[f"`{status}`", _text(answer.get("description", "")), _bodies(answer)]
                       for status, answer in sorted(common.items())]))
    groups: dict[str, list[str]] = {}
    for method, path, op in operations:
        groups.setdefault((op.get("tags") or ["other"])[0], []).append(
            _operation(method, path, op, common))
    for tag, rendered in groups.items():
        out.append(f"## {tag.capitalize()}")
        out.extend(rendered)
    out.append("## Schemas")
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out.append(_schema(name, schema))
    return "\n\n".join(out)


def _common_answers(operations: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The error answers (4xx, 5xx) that at least half the routes give, word for word."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for op in operations:
        for status, answer in op.get("responses", {}).items():
            if status[0] in "45":
                seen.setdefault(json.dumps([status, answer], sort_keys=True), []).append(answer)
    return {json.loads(key)[0]: answers[0] for key, answers in seen.items()
            if 2 * len(answers) >= len(operations)}


def _operation(method: str, path: str, op: dict[str, Any],
               common: dict[str, dict[str, Any]]) -> str:
    out = [f"### `{method.upper()} {path}`"]
    summary = op.get("summary", "")
    description = op.get("description", "")
    out.append(f"**{summary}.** {_text(description)}" if description else f"**{summary}.**")
    params = op.get("parameters", [])
    if params:
        rows = [[f"`{p['name']}`", p["in"], _type(p.get("schema", {})),
                 "yes" if p.get("required") else "no",
                 _text(p.get("description") or p.get("schema", {}).get("description", ""))]
                for p in params]
        out.append(_table(["parameter", "in", "type", "required", "description"], rows))
    body = op.get("requestBody")
    if body:
        required = "required" if body.get("required") else "optional"
        out.append(f"Body ({required}): {_bodies(body)}.")
    answers = op.get("responses", {})
    shared = sorted(s for s, a in answers.items() if common.get(s) == a)
    rows = [[f"`{status}`", _text(answer.get("description", "")), _bodies(answer)]
            for status, answer in sorted(answers.items()) if status not in shared]
    out.append(_table(["answer", "meaning", "body"], rows))
    if shared:
        codes = ", ".join(f"`{s}`" for s in shared)
        out.append(f"Also the [common answers](#common-answers) {codes}.")
    return "\n\n".join(out)


def _bodies(part: dict[str, Any]) -> str:
    """What a request body or an answer carries, by media type (JSON unless it says)."""
    kinds = []
    for media, content in part.get("content", {}).items():
        kind = _type(content["schema"]) if "schema" in content else ""
        kinds.append(kind if media == "application/json" else f"{kind} ({media})".strip())
    return ", ".join(kinds)


def _schema(name: str, schema: dict[str, Any]) -> str:
    out = [f"### `{name}`"]
    if schema.get("description"):
        out.append(_text(schema["description"]))
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    if properties:
        rows = [[f"`{field}`", _type(spec), "yes" if field in required else "no",
                 f"`{json.dumps(spec['default'])}`" if "default" in spec else "",
                 _text(spec.get("description", ""))] for field, spec in properties.items()]
        out.append(_table(["field", "type", "required", "default", "description"], rows))
    elif "properties" not in schema:
        out.append(f"Type: {_type(schema)}.")
    for key, word in (("oneOf", "exactly one"), ("anyOf", "at least one")):
        if properties and key in schema:
            shapes = "; ".join(f"`{json.dumps(shape, separators=(',', ':'))}`"
                               for shape in schema[key])
            out.append(f"It fits {word} of these shapes: {shapes}.")
    if schema.get("additionalProperties") is False:
        out.append("No other field is accepted.")
    return "\n\n".join(out)


def _type(schema: dict[str, Any]) -> str:
    """A schema as a short type: a `$ref` links to its schema below."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{slugify(name, '-')})"  # the id the toc gives its heading
    for key in ("anyOf", "oneOf"):
        if key in schema and "properties" not in schema:
            return " or ".join(dict.fromkeys(_type(s) for s in schema[key]))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _type(schema["allOf"][0])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " or ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict) \
            and schema["additionalProperties"]:
        return f"object of {_type(schema['additionalProperties'])}"
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "string" and "format" in schema:
        return f"string ({schema['format']})"
    return kind or "any"


def _text(text: str) -> str:
    """On one line (a table cell's)."""
    return " ".join(str(text).split())


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    from durable_react_agent.api.app import create_app
    from durable_react_agent.api.settings import ApiSettings
    from durable_react_agent.client.connection import TemporalSettings

    # Default settings: no tokens, no Temporal connection (the app connects only when served).
    print(json.dumps(create_app(ApiSettings(), TemporalSettings()).openapi()))
