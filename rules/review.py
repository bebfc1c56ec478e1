"""Pure rules of the reviewer model (`AGENT_REVIEWER`, a policy rule's `"effect": "review"`):
what it is asked, and what its answer means. It may allow a call or pass it to a person with
its reason; anything else it says (no JSON, another verdict, a deny) passes the call to a
person: it fails closed."""

from __future__ import annotations

import json

from ..contract.bounds import canonical_json, clip_bytes
from ..contract.policy import ReviewRequest

REVIEWER_PROMPT = (
    "You review one tool call an AI assistant wants to make, before it runs. Allow it only if "
    "it plainly does what the user asked and nothing more; otherwise pass it to a person. "
    "Answer with one JSON object and nothing else: {\"verdict\": \"allow\", \"reason\": "
    "\"...\"} or {\"verdict\": \"ask\", \"reason\": \"...\"}. The reason is one sentence a "
    "person will read."
)
REVIEWER_MARK = REVIEWER_PROMPT[:40]
MAX_ASKED_BYTES = 4096
MAX_REASON_BYTES = 500


def review_messages(request: ReviewRequest) -> list[dict[str, str]]:
    call = request.call
    shown = {"user_request": clip_bytes(request.asked, MAX_ASKED_BYTES, "request"),
             "tool": call.tool, "risk": call.risk, "arguments": call.args}
    return [{"role": "system", "content": REVIEWER_PROMPT},
            {"role": "user", "content": canonical_json(shown)}]


def read_verdict(text: str) -> tuple[bool, str]:
    """(allow, reason) of the reviewer's answer; what is not a well-formed allow asks a person."""
    try:
        answer = json.loads(text.strip().removeprefix("```json").removesuffix("```").strip())
    except ValueError:
        return False, "the reviewer's answer was not JSON: a person decides"
    if not isinstance(answer, dict) or answer.get("verdict") not in ("allow", "ask"):
        return False, "the reviewer gave no verdict of allow or ask: a person decides"
    reason = answer.get("reason")
    reason = clip_bytes(reason, MAX_REASON_BYTES, "reason") if isinstance(reason, str) and \
        reason.strip() else "no reason given"
    return answer["verdict"] == "allow", reason
