"""Pure rules of a conversation: functions of plain data, with no Temporal calls, no I/O, no
clock and no randomness, so the workflow can run them and replay them. Unit-tested without
a server."""
