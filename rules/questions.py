"""The ask_* tools: their execution is a question to the human, answered by the `answer` signal."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..contract import ChatMessage, Question, QuestionKind, ToolDefinition

# What the asking tool (and so the model) gets when the human declines to answer (AG-UI's
# `cancelled` resume of a question).
DECLINED = "no answer: the user declined to answer"
# Questions a turn may ask in a row before a tool runs: a small model echoed the user's small
# talk back as a question, and each answer again, five times over.
MAX_QUESTIONS_IN_A_ROW = 5
ECHO_SHARE = 0.8  # of the longer text the shorter must be, inside it, to be an echo


class AskInput(BaseModel):
    message: str = Field(min_length=1, description="The question to ask the user")
    placeholder: str = Field(default="", description="An example of the expected answer")


class AskChoice(BaseModel):
    message: str = Field(min_length=1, description="The question to ask the user")
    options: list[str] = Field(min_length=2, description="The options; the user picks one")


class AskMultiChoice(BaseModel):
    message: str = Field(min_length=1, description="The question to ask the user")
    options: list[str] = Field(min_length=1, description="The options; the user picks any of them")


class AskConfirm(BaseModel):
    message: str = Field(min_length=1, description="A yes/no question to ask the user")


def _ask_tool(name: str, kind: QuestionKind, model: type[BaseModel], description: str) -> ToolDefinition:
    return ToolDefinition(
        name=name, description=description, parameters=model.model_json_schema(), risk="safe",
        asks=kind,
    )


ASK_TOOLS: tuple[ToolDefinition, ...] = (
    _ask_tool("ask_input", "input", AskInput,
              "Ask the user for a free-text answer when information you need is missing."),
    _ask_tool("ask_choice", "choice", AskChoice,
              "Ask the user to pick exactly one of several options."),
    _ask_tool("ask_multi_choice", "multi_choice", AskMultiChoice,
              "Ask the user to pick any number of several options."),
    _ask_tool("ask_confirm", "confirm", AskConfirm, "Ask the user a yes/no question."),
)


ASK_NAMES = frozenset(t.name for t in ASK_TOOLS)


def question_from_args(tool: ToolDefinition, args: dict[str, Any]) -> Question:
    assert tool.asks is not None
    message = args["message"]
    if args.get("placeholder"):
        message = f"{message} (e.g. {args['placeholder']})"
    return Question(kind=tool.asks, message=message, options=list(args.get("options", [])))


def not_asked(message: str, in_a_row: int, said: list[str]) -> str | None:
    """Why a question the model asks is not put to the user (the model reads it instead), or
    None: it is one too many in a row, or it repeats what the user just `said` (their message,
    and their answers since)."""
    if in_a_row >= MAX_QUESTIONS_IN_A_ROW:
        return (f"Not asked: you asked {in_a_row} questions in a row this turn and no tool ran. "
                "Answer the user now with what you have.")
    if any(echoes(message, words) for words in said):
        return ("Not asked: the question repeats what the user just said. Do not ask it back: "
                "answer the user, in words if no tool is needed.")
    return None


def heard(messages: list[ChatMessage]) -> list[str]:
    """What the user said last: their latest message, and their answers to questions since."""
    asked = {call.id for m in messages if m.role == "assistant" for call in m.tool_calls or ()
             if call.function.name in ASK_NAMES}
    words = []
    for m in reversed(messages):
        if m.role == "tool" and m.tool_call_id in asked and isinstance(m.content, str):
            words.append(m.content)
        elif m.role == "user":
            if isinstance(m.content, str):
                words.append(m.content)
            break
    return words


def echoes(question: str, said: str) -> bool:
    """Whether a question is the user's own words back (case, punctuation and spacing aside)."""
    q, s = _plain(question), _plain(said)
    if not q or not s:
        return False
    shorter, longer = sorted((q, s), key=len)
    return shorter in longer and len(shorter) >= ECHO_SHARE * len(longer)


def _plain(text: str) -> str:
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text.casefold()).split())
