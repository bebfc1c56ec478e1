"""The offline model's default: what the latest user message asks, read with a few fixed patterns.

When no scripted scenario matches, `make demo`, the CLI and the console still get a model that
does what the message says, as far as an offline demo can: the weather for a city, then save,
list or delete notes; remember what "remember that ..." says, and answer from the memories a
turn recalled. Anything else gets a plain "I can't do that offline". No randomness and no
I/O: the plan is read again from the message on every request, and the number of assistant
replies since that message says which of its steps comes next.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from .open_meteo import CITY_NAMES
from .replies import ScriptedReply, ScriptedToolCall, message_text

HELP = (
    "I'm the offline demo model, so I only understand a few requests: the weather in a city, "
    "saving, listing or deleting notes, and \"remember that ...\". For example: \"Check the "
    "weather in Tokyo and save it as a note titled 'Tokyo'.\" Set OPENAI_API_KEY (and "
    "OPENAI_BASE_URL and OPENAI_MODEL for another endpoint) to use a real model."
)
ASK_CITY = "Which city? (I'm the offline demo model: name it, as in \"the weather in Tokyo\".)"
ASK_BODY = ("What should the note say? (I'm the offline demo model: write, for example, "
            "\"save a note titled 'Groceries' saying milk and eggs\".)")
ASK_TARGET = ("Which note should I delete? (I'm the offline demo model: name its title or number, "
              "as in \"delete the note titled 'Tokyo'\" or \"delete note #3\".)")
NO_TOOLS = "I'd need my tools for that, and none are offered at this step (offline demo model)."
FAILED = ("Error", "rejected")  # how the agent words a tool call that failed or was refused
MAX_READ = 2000  # only the start of a long message is read, which bounds the regex work

# A title, body or search text: quoted (any kind of quotes), or bare up to the end of the clause.
_QUOTED = r"""['"“‘](?P<quoted>.+?)['"”’](?!\w)"""
_BARE = r"(?P<bare>[^\s'\"“‘.,;!?][^.,;!?\n]*?)(?=\s+(?:and|then|with|saying)\b|[.,;!?\n]|$)"
_PHRASE = rf"(?:{_QUOTED}|{_BARE})"
TITLE = re.compile(rf"\b(?:titled|called|named)\s+{_PHRASE}", re.IGNORECASE)
QUOTED_NOTE = re.compile(rf"\bnote\s+{_QUOTED}", re.IGNORECASE)  # "a note 'Tokyo'"
BODY = re.compile(rf"\b(?:saying|that says|with (?:the )?(?:text|body))\s*:?\s*"
                  rf"(?:{_QUOTED}|(?P<bare>[^\s.!?\n][^.!?\n]*))", re.IGNORECASE)
QUERY = re.compile(rf"\b(?:about|for|matching|containing|mentioning)\s+{_PHRASE}", re.IGNORECASE)
NOTE_NUMBER = re.compile(r"(?:#|\bnote\s+(?:number\s+)?)(?P<id>\d+)\b", re.IGNORECASE)

WEATHER = re.compile(r"\b(?:weather|forecast|temperature|rain(?:ing|y)?)\b", re.IGNORECASE)
DELETE = re.compile(r"\b(?:delete|remove|erase)\b", re.IGNORECASE)
LIST = re.compile(r"\b(?:list|show|search|find|read|what|which)\b(?:\s+\S+){0,2}?\s+notes?\b",
                  re.IGNORECASE)
NOTE = re.compile(r"\bnotes?\b", re.IGNORECASE)
# "Remember that ...", "please remember: ...", at the start of a sentence ("do you remember" asks)
# One run of blanks between the parts, so that no two quantifiers share a character to backtrack on
REMEMBER = re.compile(r"(?:^|[.!?][ \t]+)(?:please[ \t]+)?remember\b(?:[ \t]+that\b|[ \t]*:)?"
                      r"[ \t]*(?P<fact>\S[^\n]*)", re.IGNORECASE)
RECALL_CALL_PREFIX = "recall-turn-"  # the runtime's own recall before a turn (`rules.memory`)

KNOWN_CITY = re.compile(r"\b(?:" + "|".join(map(re.escape, CITY_NAMES)) + r")\b", re.IGNORECASE)
CANONICAL = {name.lower(): name for name in CITY_NAMES}
# "in San Francisco": capitalised words after a preposition, as the user wrote them.
NAMED_PLACE = re.compile(r"\b(?i:in|for|at|of)\s+(?P<city>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)")
# "weather in springfield": any one word right after "weather in".
AFTER_WEATHER = re.compile(r"\bweather\s+(?:in|for|at)\s+(?P<city>[^\W\d_][\w'-]*)",
                           re.IGNORECASE)


class Step(NamedTuple):
    """One tool call of a plan, what the model says with it, and how the answer reports its result."""

    say: str
    call: ScriptedToolCall
    report: str


Plan = list[Step] | str  # a str is the whole answer (a question, or HELP), with no tool call


def read_intent(messages: list[dict[str, Any]], tools_offered: bool = True) -> ScriptedReply:
    """The reply to a conversation, read from its latest user message and what followed it."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        return ScriptedReply(content=HELP)
    # The memories the runtime recalled for this turn are data for the answer, not a step
    recalled = [message_text(m) for m in messages[users[-1] + 1:] if is_runtime_recall(m)]
    since = [m for m in messages[users[-1] + 1:] if not is_runtime_recall(m)]
    results = [message_text(m) for m in messages
               if m.get("role") == "tool" and not is_runtime_recall(m)]
    plan = plan_for(message_text(messages[users[-1]]), results[-1] if results else None)
    if plan == HELP and recalled:
        return ScriptedReply(content=from_memories(recalled[-1]))
    if isinstance(plan, str):
        return ScriptedReply(content=plan)
    done = sum(1 for m in since if m.get("role") == "assistant")
    turn_results = [message_text(m) for m in since if m.get("role") == "tool"]
    if turn_results and turn_results[-1].startswith(FAILED):  # e.g. an unknown city: stop there
        return ScriptedReply(content=f"I couldn't finish that (offline demo model): "
                                     f"{turn_results[-1]}")
    if done < len(plan) and tools_offered:
        step = plan[done]
        return ScriptedReply(content=step.say, tool_calls=[step.call])
    if not turn_results:
        return ScriptedReply(content=NO_TOOLS)
    return ScriptedReply(content=plan[min(done, len(plan)) - 1].report + turn_results[-1])


class Reading(NamedTuple):
    """A request's quoted-or-named parts, and the rest of its text with them taken out."""

    title: str | None
    body: str | None
    query: str | None
    listing: bool
    rest: str


def read_request(request: str) -> Reading:
    """Title, body and search text are taken out first, so "titled 'Paris weather'" names no
    city and "notes about the weather" asks for no weather."""
    text = request[:MAX_READ]
    title, text = _take(TITLE, text)
    if title is None:
        title, text = _take(QUOTED_NOTE, text)
    body, text = _take(BODY, text)
    listing = LIST.search(text)
    # Only after "list my notes": in "the weather for Paris and list my notes", Paris is no query.
    query, text = _take(QUERY, text, listing.end()) if listing else (None, text)
    return Reading(title, body, query, listing is not None, text)


def is_runtime_recall(message: dict[str, Any]) -> bool:
    """The runtime's recall before a turn: its call, or its result."""
    if message.get("role") == "tool":
        return str(message.get("tool_call_id") or "").startswith(RECALL_CALL_PREFIX)
    calls = message.get("tool_calls") or []
    return bool(calls) and all(isinstance(c, dict) and str(c.get("id") or "").startswith(
        RECALL_CALL_PREFIX) for c in calls)


def from_memories(recalled: str) -> str:
    """An answer from recalled memories: the lines that hold them (after the runtime's header)."""
    lines = [line for line in recalled.splitlines() if line.startswith("- [")]
    return ("From what you asked me to remember (offline demo model):\n"
            + "\n".join(lines)) if lines else HELP


def plan_for(request: str, last_result: str | None) -> Plan:
    """The steps a request asks for: the weather first if asked, then one notes action.

    `last_result` (the latest tool result of the conversation) is the body of a note that has
    none of its own: after a weather step, that is the weather the step observed.
    """
    remember = REMEMBER.search(request[:MAX_READ])
    if remember is not None:
        fact = remember["fact"].strip()
        return [Step("I'll remember that.", ScriptedToolCall(name="remember",
                                                              arguments={"text": fact}),
                     "Noted (offline demo model): ")]
    reading = read_request(request)
    steps: list[Step] = []
    city = None
    if WEATHER.search(reading.rest):
        city = _city(reading.rest)
        if city is None:
            return ASK_CITY
        steps.append(Step(f"I'll check the weather in {city}.",
                          ScriptedToolCall(name="get_weather", arguments={"location": city}),
                          "Here is what I found (offline demo model): "))
    if NOTE.search(reading.rest):
        notes = _notes_step(reading, last_result, city)
        if isinstance(notes, str):
            return notes
        steps.append(notes)
    return steps or HELP


def _notes_step(reading: Reading, last_result: str | None, city: str | None) -> Step | str:
    """Delete, list, or else create a note; a str asks for what the request left out.
    `city` is set when a weather step comes first."""
    if DELETE.search(reading.rest):
        number = NOTE_NUMBER.search(reading.rest)
        if number is not None:
            target: dict[str, Any] = {"note_id": int(number["id"])}
            named = f"#{number['id']}"
        elif reading.title is not None:
            target, named = {"title": reading.title}, repr(reading.title)
        else:
            return ASK_TARGET
        return Step(f"I'll delete the note {named}.",
                    ScriptedToolCall(name="delete_note", arguments=target),
                    "Done (offline demo model): ")
    if reading.listing:
        return Step("I'll look through your notes.",
                    ScriptedToolCall(name="list_notes", arguments={"query": reading.query or ""}),
                    "Your notes (offline demo model):\n")
    body = reading.body if reading.body is not None else last_result
    if body is None and city is None:
        return ASK_BODY
    title = reading.title or (f"{city} weather" if city else "Note")
    # Keys in this order, so the demo sends the very arguments its old script did.
    arguments = {"title": title, "body": body or ""}
    say = (f"Now I'll save it as a note titled {title!r}." if city
           else f"I'll save a note titled {title!r}.")
    return Step(say, ScriptedToolCall(name="create_note", arguments=arguments),
                "Saved (offline demo model): ")


def _take(pattern: re.Pattern[str], text: str, pos: int = 0) -> tuple[str | None, str]:
    """The phrase `pattern` finds (from `pos`), and the text with that clause taken out."""
    found = pattern.search(text, pos)
    if found is None:
        return None, text
    groups = found.groupdict()
    phrase = (groups.get("quoted") or groups.get("bare") or "").strip()
    return phrase, text[:found.start()] + " " + text[found.end():]


def _city(text: str) -> str | None:
    """A city the fake Open-Meteo knows, else the place as written (the tool judges it)."""
    known = KNOWN_CITY.search(text)
    if known is not None:
        return CANONICAL[known.group(0).lower()]
    found = NAMED_PLACE.search(text) or AFTER_WEATHER.search(text)
    return found["city"] if found is not None else None
