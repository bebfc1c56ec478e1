"""Tools of a made-up company, written as any user writes them, outside the agent's packages:
a worker gets them with this directory on its PYTHONPATH and `AGENT_TOOLS=acme_tools`
(tests/activities/test_tool_api.py)."""

import json
import os
import time
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from durable_react_agent import ToolContext, ToolError, tool

KM_PER_MILE = 1.609344


@tool
def convert_distance(amount: float, unit: Literal["km", "mi"] = "km") -> dict:
    """Convert a distance between kilometres and miles.

    Args:
        amount: the distance to convert
        unit: the unit `amount` is in
    """
    if amount < 0:
        raise ToolError("a distance cannot be negative")
    if unit == "km":
        return {"mi": round(amount / KM_PER_MILE, 3)}
    return {"km": round(amount * KM_PER_MILE, 3)}


@tool(risk="sensitive", keyed=True, timeout_s=30)
def send_sms(
    to: Annotated[str, Field(pattern=r"^\+\d{6,15}$", description="The number, in E.164 form")],
    text: str,
    ctx: ToolContext,
) -> str:
    """Send one SMS to a phone number.

    It costs money: send it once. (This paragraph is for the reader of the code.)

    Args:
        to: a number (the Field's description wins over this one)
        text: what the SMS says
    """
    outbox = Path(os.environ["ACME_OUTBOX"])
    with (outbox / "attempts.log").open("a") as log:
        log.write(ctx.idempotency_key + "\n")
    sms = outbox / f"{ctx.idempotency_key}.json"
    try:
        with sms.open("x") as out:  # sent under the call's key: a retry finds it sent
            json.dump({"to": to, "text": text}, out)
    except FileExistsError:
        return f"SMS sent to {to}"
    ctx.progress(f"sent to {to}")
    while (outbox / "hold").exists():  # where a test kills the worker: sent, not yet reported
        time.sleep(0.05)
    return f"SMS sent to {to}"
