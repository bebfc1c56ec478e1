"""The ask_* tools: their execution is a question to the human, answered by the `answer` signal."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from contract import Question, QuestionKind, ToolDefinition

# What the asking tool (and so the model) gets when the human declines to answer (AG-UI's
# `cancelled` resume of a question).
DECLINED = "no answer: the user declined to answer"


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


def question_from_args(tool: ToolDefinition, args: dict[str, Any]) -> Question:
    assert tool.asks is not None
    message = args["message"]
    if args.get("placeholder"):
        message = f"{message} (e.g. {args['placeholder']})"
    return Question(kind=tool.asks, message=message, options=list(args.get("options", [])))
