"""The HTTP API and web console (`python -m api`)."""
