"""Pure rules, which the workflow, the activities, the API and the CLI may all call: functions of
the contract's data, with no Temporal workflow calls, no I/O, no clock and no randomness, so the
workflow can run them and replay them. Unit-tested without a server."""
