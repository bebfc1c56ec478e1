"""The patches of the conversation's history: each marks where runs begun after it issue other
commands than runs begun before it (`workflow.patched`), so that a deploy leaves running
conversations as they were. Never renamed, never removed while a run may hold one.

A run begun with the latest patch has every patch before it, so it asks that one alone
(`Patches`, `STANDS_FOR`): its history holds one marker, where runs begun before held one for
each patch, each with a search attribute update of its own. Runs begun before ask theirs in the
order they always have.
"""

from types import MappingProxyType

from temporalio import workflow

# Runs with this marker bound their inputs and fold their context; runs begun before it don't.
BOUNDED_CONTEXT_PATCH = "bounded-context"
MESSAGE_BEATS_IDLE_TIMEOUT_PATCH = "message-beats-idle-timeout"
END_INTERRUPTS_PATCH = "end-interrupts-the-turn"
# Runs with this marker send model calls as deltas (`rules.delta`) and, as a step then
# adds little history, hand over to a fresh run for the history's size only well past the
# server's suggestion; runs begun before it don't.
DELTA_CONTEXT_PATCH = "delta-context"
# Runs with this marker take a request id once, and hold the gate at the seams between
# conversations (subagents' budgets and ids); runs begun before it don't.
GATE_SEAMS_PATCH = "gate-at-every-seam"
# Runs with this marker keep who started them, sent a message or ended them in the audit trail.
AUDIT_INPUTS_PATCH = "audit-inputs"
# Runs with this marker meet real models: they read tool calls a model wrote in its text
# (`rules.text_calls`) and remind it once a turn of one written in a shape that could
# not be read; keep prompts within the model's window (its entry's, its server's, or what a
# refusal said), leave out a message too long for it and refuse the next such one; use the
# entry's deadline and heartbeat; and count failed model calls.
REAL_MODELS_PATCH = "real-models"
# Runs with this marker hold the gate at the new seams: calls get ids of a safe alphabet, four
# eyes wants a decision that names a person, and a request that waited for a result is answered
# as soon as nothing more is on its way.
TRUSTED_SEAMS_PATCH = "trust-at-the-seams"
# Runs with this marker list their tools (the handshake) as a local activity, and run a tool its
# worker marks local (a quick safe read) as one too, inside the workflow task: a step costs one
# workflow task and one activity. Runs begun before it run each as an activity of its own.
LOCAL_READS_PATCH = "local-reads"
# Runs with this marker recall the owner's memories before each turn (a local activity, and the
# recalled memories in the context as the result of a `recall` call); runs begun before it don't.
MEMORY_PATCH = "memory"
# Runs with this marker meet the shapes a real small model writes: a call restated in its text
# runs once (identical calls of one reply are one call, and a text call that repeats one that
# ran this turn is answered with that call's result), a call announced in prose is reminded,
# questions in a row are bounded, a step's stream is bounded in events, and a message's
# tokens are counted as the model's server counts them. Runs begun before it don't.
REAL_MODEL_SHAPES_PATCH = "real-model-shapes"
# Also asked by `workflows.model_step` (a forced answer that calls tools is asked again).
FORCED_ANSWER_RETRY_PATCH = "forced-answer-retry-without-tools"

# Patches that stand for every patch before them, oldest first, with what each stands for: a
# run begun with one asks it at its start and no patch it stands for. A new patch that changes
# commands goes here, standing for every patch above it.
_BEFORE_LOCAL_READS = frozenset({
    BOUNDED_CONTEXT_PATCH, MESSAGE_BEATS_IDLE_TIMEOUT_PATCH, END_INTERRUPTS_PATCH,
    DELTA_CONTEXT_PATCH, GATE_SEAMS_PATCH, AUDIT_INPUTS_PATCH, REAL_MODELS_PATCH,
    TRUSTED_SEAMS_PATCH, FORCED_ANSWER_RETRY_PATCH})
STANDS_FOR = MappingProxyType({
    LOCAL_READS_PATCH: _BEFORE_LOCAL_READS,
    MEMORY_PATCH: _BEFORE_LOCAL_READS | {LOCAL_READS_PATCH},
    REAL_MODEL_SHAPES_PATCH: _BEFORE_LOCAL_READS | {LOCAL_READS_PATCH, MEMORY_PATCH},
})
LATEST_PATCH = list(STANDS_FOR)[-1]  # the one patch a run begun now records


class Patches:
    """What a run's history says it does. Asked at the start of the run: the newest patch that
    stands for others first, then the one before it, and so on, until one is there."""

    def __init__(self) -> None:
        self._held: frozenset[str] = frozenset()
        for patch, older in reversed(STANDS_FOR.items()):
            if workflow.patched(patch):
                self._held = older | {patch}
                break

    def has(self, patch: str) -> bool:
        """Whether the run does what `patch` marks. A patch that stands for others was asked at
        the start of the run, and is never asked again: a run begun before it keeps to what it
        did until it continues as new (asked mid-run, after a local activity of the same
        workflow task, a new patch's marker would not replay)."""
        if patch in self._held or patch in STANDS_FOR:
            return patch in self._held
        return workflow.patched(patch)
