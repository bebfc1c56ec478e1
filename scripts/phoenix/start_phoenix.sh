#!/bin/sh
# Start Arize Phoenix locally, offline, as an OTLP trace viewer.
# Usage: scripts/phoenix/start_phoenix.sh   (foreground; background it with: nohup ... &)
# Override any of these via the environment.
: "${PHOENIX_VENV:=/tmp/phoenix-venv}"
export PHOENIX_WORKING_DIR="${PHOENIX_WORKING_DIR:-/tmp/phoenix-data}"   # sqlite db lives here
export PHOENIX_HOST="${PHOENIX_HOST:-127.0.0.1}"
export PHOENIX_PORT="${PHOENIX_PORT:-6006}"            # UI + REST + GraphQL + OTLP/HTTP (/v1/traces)
export PHOENIX_GRPC_PORT="${PHOENIX_GRPC_PORT:-4317}"  # OTLP/gRPC; always binds [::], cannot be disabled
export PHOENIX_TELEMETRY_ENABLED="${PHOENIX_TELEMETRY_ENABLED:-false}"
export PHOENIX_ALLOW_EXTERNAL_RESOURCES="${PHOENIX_ALLOW_EXTERNAL_RESOURCES:-false}"  # no web fonts/pixels/wasm download
export PHOENIX_DISABLE_AGENT_ASSISTANT="${PHOENIX_DISABLE_AGENT_ASSISTANT:-true}"
mkdir -p "$PHOENIX_WORKING_DIR"
exec "$PHOENIX_VENV/bin/phoenix" serve
