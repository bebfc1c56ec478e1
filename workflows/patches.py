"""The patches of the conversation's history: each marks where runs begun after it issue other
commands than runs begun before it (`workflow.patched`), so that a deploy leaves running
conversations as they were. Never renamed, never removed while a run may hold one."""

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
