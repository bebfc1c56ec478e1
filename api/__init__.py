"""The HTTP API and web console (`agent-api`)."""
