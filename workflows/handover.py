"""Continue-as-new: what a long conversation hands to its next run, within a fixed byte budget.

A run hands over only where nothing is pending (idle, or between two steps of a turn), after every
signal handler has finished. It carries its `ConversationState` whole: the sections that grow
(audit, decisions, outcomes, queued messages...) are bounded as they grow, and here the context
and the live stream are fitted to their carry budgets, so the next run's input stays under
`CARRY_BUDGET_BYTES` whatever the conversation did.
"""

from __future__ import annotations

from ..contract import ConversationInput
from ..contract.bounds import (
    AUDIT_BYTES,
    CONTEXT_CARRY_BYTES,
    MAX_AUDIT_RECORDS,
    Tail,
)
from ..contract.state import ConversationState, StreamSnapshot
from ..rules.context import fit_bytes

CARRY_DROP_REASON = "the context carried to a new run passed its size bound"


def carried(state: ConversationState, stream: StreamSnapshot) -> ConversationState:
    """The state the next run starts from."""
    audit = Tail([], MAX_AUDIT_RECORDS, AUDIT_BYTES)  # a run that began unbounded ends bounded
    dropped = sum(len(audit.append(record)) for record in state.audit)
    return state.model_copy(update={
        "context": fit_bytes(state.context, CONTEXT_CARRY_BYTES, CARRY_DROP_REASON),
        "audit": audit.items,
        "audit_dropped": state.audit_dropped + dropped,
        "stream": stream,
        "runs": state.runs + 1,
    })


def next_input(inp: ConversationInput, state: ConversationState) -> ConversationInput:
    """The next run's input: the same settings and the carried state, without what the first run
    alone needed (its prompt, which the state holds as a message, and the system prompt)."""
    return inp.model_copy(update={"prompt": "", "system_prompt": None, "state": state,
                                  "carry": None})
