#!/usr/bin/env bash
# The sample conversation of `make demo`. Uses a real model when OPENAI_API_KEY or OPENAI_BASE_URL
# is set, and otherwise the bundled offline scripted model (which also fakes Open-Meteo).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python
SCRIPTED_PORT=${SCRIPTED_PORT:-8765}

if [ -z "${OPENAI_API_KEY:-}" ] && [ -z "${OPENAI_BASE_URL:-}" ]; then
  echo "No OPENAI_API_KEY or OPENAI_BASE_URL: using the offline scripted model (and a fake Open-Meteo)."
  OFFLINE=1
  export OPENAI_BASE_URL="http://127.0.0.1:$SCRIPTED_PORT/v1"
  export OPENAI_API_KEY=offline-scripted
  export OPENAI_MODEL=scripted
  export AGENT_PRICES="${AGENT_PRICES:-scripted_model/prices.json}"  # the offline model costs $0
  export OPEN_METEO_GEOCODING_URL="http://127.0.0.1:$SCRIPTED_PORT/v1/search"
  export OPEN_METEO_FORECAST_URL="http://127.0.0.1:$SCRIPTED_PORT/v1/forecast"
else
  echo "Using the model endpoint ${OPENAI_BASE_URL:-of OpenAI} with model ${OPENAI_MODEL:-gpt-4o-mini}."
fi
make -s install

if [ -n "${OFFLINE:-}" ]; then scripts/stack.sh scripted; fi
scripts/stack.sh server
scripts/stack.sh worker
scripts/stack.sh api

ID="demo-$(date +%Y%m%d-%H%M%S)"
PROMPT="Check the weather in Paris and save it as a note titled 'Paris weather'."
echo
echo "Starting conversation $ID: $PROMPT"
"$PY" -m client start --id "$ID" --wait "$PROMPT" || true

# Each approval goes through the confirm signal, exactly as a person would send it.
for _ in 1 2 3 4 5; do
  state=$("$PY" -m client status "$ID" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  [ "$state" = "waiting_for_confirmation" ] || break
  echo
  echo "Approving: $PY -m client confirm $ID --all --as demo --wait"
  "$PY" -m client confirm "$ID" --all --as demo --wait || true
done
if [ "$state" = "waiting_for_input" ]; then
  echo
  echo "The model asked a question; answer it with: $PY -m client answer $ID ..."
fi
echo
echo "See it in the Temporal UI: http://localhost:${UI_PORT:-8233}/namespaces/default/workflows/$ID"
echo "Or in the web console: http://${AGENT_API_ADDRESS:-127.0.0.1:8000}/#/c/$ID"
echo "Inspect it:   $PY -m client status $ID --json"
echo "End it:       $PY -m client end $ID"
echo "Stop everything: make stop"
