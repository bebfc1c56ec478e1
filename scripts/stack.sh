#!/usr/bin/env bash
# Background services for the demo: the embedded Temporal dev server, the worker, the HTTP API
# with the web console, and the offline scripted model. Each is fully detached (nohup, no
# inherited pipes) with a pid file under .run/.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY="$VENV/bin/python"
RUN=.run
mkdir -p "$RUN" .temporal

TEMPORAL_PORT=${TEMPORAL_PORT:-7233}
UI_PORT=${UI_PORT:-8233}
SCRIPTED_PORT=${SCRIPTED_PORT:-8765}
API_ADDRESS=${AGENT_API_ADDRESS:-127.0.0.1:8000}
API_PORT=${API_ADDRESS##*:}

listening() { "$PY" -c "import socket,sys; s=socket.socket(); s.settimeout(0.5); sys.exit(s.connect_ex(('127.0.0.1', int(sys.argv[1]))))" "$1"; }

wait_port() {  # port, seconds, name
  for _ in $(seq 1 $(( $2 * 4 ))); do listening "$1" && return 0; sleep 0.25; done
  echo "$3 did not start listening on port $1; see $RUN/$3.log" >&2; return 1
}

alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

stop_one() {
  if alive "$1"; then
    kill "$(cat "$RUN/$1.pid")" 2>/dev/null || true
    for _ in $(seq 1 40); do alive "$1" || break; sleep 0.25; done
    alive "$1" && kill -9 "$(cat "$RUN/$1.pid")" 2>/dev/null || true
    echo "stopped $1"
  fi
  rm -f "$RUN/$1.pid"
}

case "${1:-}" in
  server)
    if listening "$TEMPORAL_PORT"; then echo "Temporal already listening on $TEMPORAL_PORT"; exit 0; fi
    # Tuned as measured in shared/NOTES.md: fast transfer-task polling and a WAL-mode SQLite file.
    nohup "$VENV/bin/temporal" server start-dev \
      --db-filename .temporal/dev.db \
      --port "$TEMPORAL_PORT" --ui-port "$UI_PORT" \
      --search-attribute AgentStatus=Keyword --search-attribute AgentOwner=Keyword \
      --dynamic-config-value history.transferProcessorMaxPollRPS=10000 \
      --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal \
      --log-level warn \
      >"$RUN/server.log" 2>&1 </dev/null &
    echo $! >"$RUN/server.pid"
    wait_port "$TEMPORAL_PORT" 60 server
    echo "Temporal dev server on 127.0.0.1:$TEMPORAL_PORT, UI on http://localhost:$UI_PORT"
    ;;
  scripted)
    stop_one scripted
    nohup "$PY" -m scripted_model --port "$SCRIPTED_PORT" >"$RUN/scripted.log" 2>&1 </dev/null &
    echo $! >"$RUN/scripted.pid"
    wait_port "$SCRIPTED_PORT" 30 scripted
    ;;
  worker)
    stop_one worker  # a fresh worker picks up the current environment (model, URLs)
    nohup "$PY" -m worker >"$RUN/worker.log" 2>&1 </dev/null &
    echo $! >"$RUN/worker.pid"
    echo "worker started (pid $(cat "$RUN/worker.pid"), log $RUN/worker.log)"
    ;;
  api)
    stop_one api
    nohup "$PY" -m api >"$RUN/api.log" 2>&1 </dev/null &
    echo $! >"$RUN/api.pid"
    wait_port "$API_PORT" 30 api
    echo "web console and HTTP API on http://$API_ADDRESS/ (docs: http://$API_ADDRESS/docs, log $RUN/api.log)"
    ;;
  stop)
    stop_one api; stop_one worker; stop_one scripted; stop_one server
    ;;
  *)
    echo "usage: $0 server|scripted|worker|api|stop" >&2; exit 2 ;;
esac
