"""The worker's approval policy (`AGENT_POLICY`): ordered rules over a call's tool and arguments,
read once at start, refused whole if one rule is bad, and the judge of each round's calls.

A rule's `when` is CEL (Common Expression Language), the language of Kubernetes' admission
policies and of Google's IAM conditions: made to be evaluated on untrusted input, with no I/O,
no loops of its own and no side effects. We add one bound of our own: an expression holds at
most one list macro (`all`, `exists`, `exists_one`, `map`, `filter`), so the time it takes is
linear in the size of the call's arguments, which the model writes (two nested macros over a
list of 3,000 items took 5 s here)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from ..contract.policy import (
    MAX_QUORUM,
    ROLES,
    Effect,
    PolicyCall,
    PolicyFacts,
    PolicyRequest,
    PolicyVerdicts,
    Verdict,
)

MAX_POLICY_BYTES = 256 * 1024
MAX_RULES = 500
MAX_WHEN_BYTES = 4096
MAX_NAME_BYTES = 200
EFFECTS: tuple[Effect, ...] = ("allow", "review", "ask", "deny")
# deny wins over ask, ask over review (the reviewer never allows what a rule asks a person
# for), review over allow
STRENGTH = {"allow": 0, "review": 1, "ask": 2, "deny": 3}
# What `when` may read: the call, who owns the conversation, and the conversation's facts.
VARIABLES = frozenset({"args", "tool", "risk", "principal", "cost_usd", "tokens", "calls_of_tool",
                       "turn", "now"})
LIST_MACRO = re.compile(r"\.\s*(all|exists|exists_one|map|filter)\s*\(")
RULE_KEYS = frozenset({"name", "tools", "when", "effect", "approvers", "quorum", "grantable",
                       "description"})


class PolicyError(ValueError):
    """A policy file the worker will not start with: which rule, and why."""


@dataclass(frozen=True)
class Rule:
    name: str
    tools: tuple[str, ...]
    effect: Effect
    when: str | None = None
    program: Any = None  # the compiled `when`
    grantable: bool | None = None
    approvers: tuple[str, ...] = ()  # an `ask`'s: the roles that may decide (empty: any)
    quorum: int = 1

    def covers(self, tool: str) -> bool:
        return any(fnmatchcase(tool, pattern) for pattern in self.tools)


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    revision: str  # the digest of the file's rules, as the history and the audit name it

    def judge(self, request: PolicyRequest, auto_approvable: Collection[str] | None
              ) -> PolicyVerdicts:
        """Each call's verdict: the strongest effect among the rules that match it (the first
        such rule names it). An `allow` of a non-safe tool the worker does not let a policy
        approve (`AGENT_AUTO_APPROVE`, when set) is no verdict: its risk decides, and the note
        says why. A `when` that fails on a call (a field it lacks, a type it does not expect)
        fails closed: a failing `when` matches an `ask` or a `deny` (the call waits for a person, or is
        refused, and the verdict says why), never an `allow`."""
        return PolicyVerdicts(revision=self.revision, verdicts=[
            self._judge(call, request.facts, auto_approvable) for call in request.calls])

    def _judge(self, call: PolicyCall, facts: PolicyFacts,
               auto_approvable: Collection[str] | None) -> Verdict:
        chosen: Rule | None = None
        failed: str | None = None
        context = None
        for rule in self.rules:
            if not rule.covers(call.tool):
                continue
            if chosen is not None and STRENGTH[rule.effect] <= STRENGTH[chosen.effect]:
                continue
            if rule.program is not None:
                context = context if context is not None else _context(call, facts)
                try:
                    matched, error = rule.program.execute(context) is True, None
                except Exception as err:  # noqa: BLE001 (KeyError, TypeError, ValueError...)
                    matched, error = rule.effect in ("ask", "deny"), _first_line(err)
                if not matched:
                    continue
                failed = error
            chosen = rule
        if chosen is None:
            return Verdict(call_id=call.call_id)
        named = f"rule '{chosen.name}' of policy {self.revision[:12]}"
        unread = None if failed is None else f"its condition could not be read ({failed})"
        if (chosen.effect in ("allow", "review") and call.risk != "safe"
                and auto_approvable is not None and call.tool not in auto_approvable):
            return Verdict(call_id=call.call_id, rule=named,
                           note=f"{named} {'allows' if chosen.effect == 'allow' else 'reviews'} "
                                f"it, but this worker does not let a policy approve {call.tool} "
                                "(AGENT_AUTO_APPROVE)")
        return Verdict(call_id=call.call_id, effect=chosen.effect, rule=named,
                       grantable=chosen.grantable, note=unread,
                       approvers=list(chosen.approvers), quorum=chosen.quorum)

    def reviewing(self) -> list[str]:
        """The names of the rules that hand calls to the reviewer model."""
        return [r.name for r in self.rules if r.effect == "review"]

    def refusal(self, tool: str, risk: str, args: dict[str, Any], facts: PolicyFacts
                ) -> Verdict | None:
        """The verdict on a call about to run, if the policy denies it (the worker's own check
        at execution, whatever the conversation was told)."""
        verdict = self._judge(PolicyCall(call_id="", tool=tool, risk=risk, args=args), facts, None)
        return verdict if verdict.effect == "deny" else None


def _context(call: PolicyCall, facts: PolicyFacts) -> Any:
    import cel  # noqa: PLC0415 (a worker without a policy never loads it: 0.2-0.6 s at start)

    context = cel.Context()
    for name, value in (("args", call.args), ("tool", call.tool), ("risk", call.risk),
                        ("principal", {"owner": facts.owner or ""}),
                        ("cost_usd", float(facts.cost_usd)), ("tokens", facts.tokens),
                        ("calls_of_tool", dict(facts.calls_of_tool)), ("turn", facts.turn),
                        ("now", facts.at)):
        context.add_variable(name, value)
    return context


def load_policy(path: Path) -> Policy:
    """The policy in `path`, or `PolicyError` naming the rule and what is wrong with it."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise PolicyError(f"AGENT_POLICY: cannot read {path}: {err.strerror or err}") from None
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(f"AGENT_POLICY: {path} is {len(raw):,} bytes, over the limit of "
                          f"{MAX_POLICY_BYTES:,}")
    try:
        data = json.loads(raw)
    except ValueError as err:
        raise PolicyError(f"AGENT_POLICY: {path} is not JSON: {err}") from None
    return parse_policy(data, str(path))


def parse_policy(data: Any, where: str = "the policy") -> Policy:
    if not isinstance(data, dict) or set(data) - {"rules"} or not isinstance(data.get("rules"), list):
        raise PolicyError(f"AGENT_POLICY: {where} must be an object with one key, \"rules\": a "
                          "list of rules")
    items = data["rules"]
    if len(items) > MAX_RULES:
        raise PolicyError(f"AGENT_POLICY: {where} has {len(items)} rules, over the limit of "
                          f"{MAX_RULES}")
    rules = [_rule(item, i) for i, item in enumerate(items)]
    names = [r.name for r in rules]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PolicyError(f"AGENT_POLICY: rule {twice[0]!r} is named twice; each rule's name is "
                          "what the audit shows, so names must differ")
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return Policy(rules=tuple(rules), revision=hashlib.sha256(canonical.encode()).hexdigest())


def _rule(item: Any, index: int) -> Rule:
    where = f"rule {index + 1}"
    if not isinstance(item, dict):
        raise PolicyError(f"AGENT_POLICY: {where} is not an object")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip() or len(name.encode()) > MAX_NAME_BYTES:
        raise PolicyError(f"AGENT_POLICY: {where} needs a name (text of at most "
                          f"{MAX_NAME_BYTES} bytes)")
    where = f"rule {index + 1} ({name!r})"

    def bad(reason: str) -> PolicyError:
        return PolicyError(f"AGENT_POLICY: {where}: {reason}")

    unknown = sorted(set(item) - RULE_KEYS)
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} (a rule has {', '.join(sorted(RULE_KEYS))})")
    tools = item.get("tools")
    if (not isinstance(tools, list) or not tools
            or not all(isinstance(t, str) and t.strip() for t in tools)):
        raise bad("\"tools\" must be a non-empty list of tool names or globs (server__*)")
    effect = item.get("effect")
    if effect not in EFFECTS:
        raise bad(f"\"effect\" must be one of {', '.join(EFFECTS)}, not {effect!r}")
    approvers, quorum = item.get("approvers", []), item.get("quorum", 1)
    if ("approvers" in item or "quorum" in item) and effect != "ask":
        raise bad("\"approvers\" and \"quorum\" belong to an \"ask\" rule")
    if not isinstance(approvers, list) or not all(a in ROLES for a in approvers):
        raise bad(f"\"approvers\" must be a list of roles ({', '.join(ROLES)})")
    if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= MAX_QUORUM:
        raise bad(f"\"quorum\" must be a whole number from 1 to {MAX_QUORUM}")
    grantable = item.get("grantable")
    if grantable is not None and not isinstance(grantable, bool):
        raise bad("\"grantable\" must be true or false")
    when = item.get("when")
    program = None
    if when is not None:
        program = _compiled(when, bad)
    return Rule(name=name, tools=tuple(tools), effect=effect, when=when, program=program,
                grantable=grantable, approvers=tuple(approvers), quorum=quorum)


def _compiled(when: Any, bad: Any) -> Any:
    if not isinstance(when, str) or not when.strip():
        raise bad("\"when\" must be a CEL expression (text)")
    if len(when.encode()) > MAX_WHEN_BYTES:
        raise bad(f"\"when\" is over {MAX_WHEN_BYTES:,} bytes")
    if len(LIST_MACRO.findall(when)) > 1:
        raise bad("\"when\" holds more than one list macro (all, exists, exists_one, map, "
                  "filter); one at most keeps its cost linear in the call's arguments")
    import cel  # noqa: PLC0415 (as in `_context`)

    try:
        program = cel.compile(when)
    except Exception as err:  # noqa: BLE001 (the library's parse error)
        raise bad(f"\"when\" is not CEL: {_first_line(err)}") from None
    macro_vars = 1 if LIST_MACRO.search(when) else 0
    stray = sorted(set(program.variables()) - VARIABLES)
    if len(stray) > macro_vars:
        raise bad(f"\"when\" reads {', '.join(stray)}, which it cannot: it may read "
                  f"{', '.join(sorted(VARIABLES))}")
    return program


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return " ".join(text.splitlines()[:2])[:300]
