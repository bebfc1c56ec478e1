#!/usr/bin/env bash
# The sample conversation of `make demo`. Uses a real model when OPENAI_API_KEY, OPENAI_BASE_URL
# or AGENT_MODELS is set, and otherwise the bundled offline scripted model; the weather comes from
# the scripted server's fake Open-Meteo unless OPEN_METEO_*_URL say otherwise (no internet needed).
# `--dry-run` says what it would use, start and join, installing and starting nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python
BIN=${VENV:-.venv}/bin
SCRIPTED_PORT=${SCRIPTED_PORT:-8765}
export TEMPORAL_ADDRESS=${TEMPORAL_ADDRESS:-127.0.0.1:${TEMPORAL_PORT:-7233}}
SCRIPTED_URL="http://127.0.0.1:$SCRIPTED_PORT/v1"

say_model() {  # which model and entry answer (an endpoint without its user, password or query)
  python3 - <<'PYTHON'
import json, os, sys
from urllib.parse import urlsplit

def where(url):
    if not url:
        return "OpenAI's endpoint"
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"

path = os.environ.get("AGENT_MODELS")
if path:
    try:
        with open(path) as f:
            models = json.load(f)
        name = models.get("default") or next(iter(models["models"]))  # as the worker reads it
        entry = models["models"][name]
    except (OSError, ValueError, LookupError, TypeError, AttributeError, StopIteration) as err:
        sys.exit(f"AGENT_MODELS names {path}, which is not a file of model entries: {err!r}")
    print(f"Using the model {entry.get('model')} at {where(entry.get('base_url'))}: "
          f"the default entry {name!r} of AGENT_MODELS ({path}).")
else:
    print(f"Using the model {os.environ.get('OPENAI_MODEL') or 'gpt-4o-mini'} at "
          f"{where(os.environ.get('OPENAI_BASE_URL'))}: the entry 'default' that OPENAI_MODEL "
          "and OPENAI_BASE_URL describe.")
PYTHON
}

if [ -z "${OPENAI_API_KEY:-}" ] && [ -z "${OPENAI_BASE_URL:-}" ] && [ -z "${AGENT_MODELS:-}" ]; then
  echo "No OPENAI_API_KEY, OPENAI_BASE_URL or AGENT_MODELS: using the offline scripted model."
  export OPENAI_BASE_URL="$SCRIPTED_URL"
  export OPENAI_API_KEY=offline-scripted
  export OPENAI_MODEL=scripted
  export AGENT_PRICES="${AGENT_PRICES:-durable_react_agent/testing/prices.json}"  # the offline model costs $0
  SCRIPTED=1
else
  say_model
fi
if [ -z "${OPEN_METEO_GEOCODING_URL:-}" ] || [ -z "${OPEN_METEO_FORECAST_URL:-}" ]; then
  export OPEN_METEO_GEOCODING_URL=${OPEN_METEO_GEOCODING_URL:-$SCRIPTED_URL/search}
  export OPEN_METEO_FORECAST_URL=${OPEN_METEO_FORECAST_URL:-$SCRIPTED_URL/forecast}
  echo "Weather: the fake Open-Meteo of the scripted model server on 127.0.0.1:$SCRIPTED_PORT. With" \
       "internet, the real one: OPEN_METEO_GEOCODING_URL=https://geocoding-api.open-meteo.com/v1/search" \
       "OPEN_METEO_FORECAST_URL=https://api.open-meteo.com/v1/forecast make demo"
  SCRIPTED=1
else
  echo "Weather: Open-Meteo at $OPEN_METEO_GEOCODING_URL and $OPEN_METEO_FORECAST_URL."
fi

if [ "${1:-}" = "--dry-run" ]; then
  exec scripts/stack.sh check ${SCRIPTED:+scripted}
fi
make -s install
scripts/stack.sh check ${SCRIPTED:+scripted} >/dev/null  # refuse before anything starts

if [ -n "${SCRIPTED:-}" ]; then scripts/stack.sh scripted; fi
scripts/stack.sh server
scripts/stack.sh worker
scripts/stack.sh api

ID="demo-$(date +%Y%m%d-%H%M%S)"
PROMPT="Check the weather in Paris and save it as a note titled 'Paris weather'."
echo
echo "Starting conversation $ID: $PROMPT"
"$BIN/agent" start --id "$ID" --wait "$PROMPT" || true

# Each approval goes through the confirm signal, exactly as a person would send it, and names
# the calls the output above showed: never a round it did not show.
for _ in 1 2 3 4 5; do
  shown=$("$BIN/agent" status "$ID" --json | "$PY" -c 'import json,sys
s = json.load(sys.stdin)
print(s["status"], *(p["call_id"] for p in s["pending_confirmations"]))')
  read -r state calls <<<"$shown"
  [ "$state" = "waiting_for_confirmation" ] || break
  echo
  echo "Approving what is shown above: $BIN/agent confirm $ID $calls --as demo --wait"
  # shellcheck disable=SC2086  # one argument per call id
  "$BIN/agent" confirm "$ID" $calls --as demo --wait || true
done
if [ "$state" = "waiting_for_input" ]; then
  echo
  echo "The model asked a question, which waits for you:"
  "$BIN/agent" status "$ID" || true
fi
echo
echo "See it in the Temporal UI: http://localhost:${UI_PORT:-8233}/namespaces/default/workflows/$ID"
echo "Or in the web console: http://${AGENT_API_ADDRESS:-127.0.0.1:8000}/#/c/$ID"
echo "Inspect it:   $BIN/agent status $ID --json"
echo "End it:       $BIN/agent end $ID"
echo "Stop everything: make stop"
