"""The conversation workflow: everything here runs inside Temporal's workflow, deterministic.

- `conversation.py`: the workflow, to be read as the story of a conversation: its life, its
  handlers and its queries; with `turn.py` (a turn's loop), `status_view.py` (its status, and
  the reports of its subagents and to its parent) and `signal_guard.py` (what a signal must be
  to reach it).
- Its parts, which call Temporal's workflow API: `model_step` (think), `tool_round` (act, through
  the human gate), `subagents` (a call that runs a child conversation), `reporting` (the live
  stream and the audit trail), `handshake` (the worker's configuration: tools, policies, model
  routes), and `failures` (how a failed activity reads).
- What people send it: `decisions.py` (a decision or an answer, from any channel: one plan for
  an Update's validator and its handler, routed to the subagent that owns the call), over
  `approvals.py` (the calls waiting for approval), `question.py` (the open question) and
  `request_memory.py` (what became of each request id); `inbox.py` (the messages waiting for
  their turn).
- `handover.py`: what continue-as-new hands to the next run; `telemetry.py`: spans and metrics
  from workflow code.
- Below it, and shared with the other processes: `rules/` (pure rules, unit-tested without a
  server) and `contract/` (the data that crosses processes). Only `worker/` and the tests import
  this package (`ARCHITECTURE.md`).

The tests run it in Temporal's sandbox, which imports all of it afresh for each workflow: the
clock, randomness and I/O are refused anywhere here, and no module keeps state of its own
(`tests/workflows/test_determinism_boundary.py`).
"""
