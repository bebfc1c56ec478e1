"""The conversation workflow: everything here runs inside Temporal's workflow, deterministic.

- `conversation.py`: the workflow, to be read as the story of a conversation.
- Its parts, which call Temporal's workflow API: `model_step` (think), `tool_round` (act, through
  the human gate), `subagents` (a call that runs a child conversation), `human_desk` (what waits
  for a human, and the requests humans send), `reporting` (the live stream and the audit trail),
  `tool_discovery`, and `failures` (how a failed activity reads).
- `rules/`: pure functions of plain data, with no Temporal calls, unit-tested without a server.
- `models.py` and `state.py`: the data that crosses the boundary, which activities, the CLI and
  the API share.

The tests run it in Temporal's sandbox, which imports all of it afresh for each workflow: the
clock, randomness and I/O are refused anywhere here, and no module keeps state of its own
(`tests/test_determinism_boundary.py`).
"""
