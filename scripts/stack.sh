#!/usr/bin/env bash
# Background services for the demo: the embedded Temporal dev server, the worker, the HTTP API
# with the web console, and the offline scripted model. Each is fully detached (nohup, no
# inherited pipes) with a pid file under .run/. A process is this checkout's when it runs in it
# (its working directory): nothing else is joined on the demo's ports, or stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
HERE=$(pwd -P)

VENV=${VENV:-.venv}
PY="$VENV/bin/python"
BIN="$VENV/bin"
RUN=.run
mkdir -p "$RUN" .temporal

TEMPORAL_PORT=${TEMPORAL_PORT:-7233}
UI_PORT=${UI_PORT:-8233}
SCRIPTED_PORT=${SCRIPTED_PORT:-8765}
API_ADDRESS=${AGENT_API_ADDRESS:-127.0.0.1:8000}
API_PORT=${API_ADDRESS##*:}
export TEMPORAL_ADDRESS=${TEMPORAL_ADDRESS:-127.0.0.1:$TEMPORAL_PORT}  # the worker's and the API's
TASK_QUEUE=${AGENT_TASK_QUEUE:-react-agent}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

listener() {  # the pid listening on a port, where this user may see it
  if command -v lsof >/dev/null; then lsof -nP -t -iTCP:"$1" -sTCP:LISTEN 2>/dev/null | head -n 1
  elif command -v ss >/dev/null; then ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2
  fi
  return 0
}

cwd_of() { readlink "/proc/$1/cwd" 2>/dev/null || lsof -a -p "$1" -d cwd -Fn 2>/dev/null | sed -n 's/^n//p'; }

running() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null && ! ps -o stat= -p "$1" | grep -q '^Z'; }

ours() { running "$1" && [ "$(cwd_of "$1")" = "$HERE" ]; }

described() {  # what a pid is, for a person deciding what to stop
  if running "$1"; then
    echo "pid $1: $(ps -o args= -p "$1" | cut -c1-160), in $(cwd_of "$1" || echo 'a directory this user cannot see')"
  else echo "a process this user cannot see"; fi
}

foreign() {  # port, name: true (and says what) if something other than our tracked NAME listens
  listening "$1" || return 1
  local pid; pid=$(listener "$1")
  if alive "$2" && { [ -z "$pid" ] || [ "$pid" = "$(cat "$RUN/$2.pid")" ]; }; then return 1; fi
  echo "Port $1 is taken by something this checkout did not start ($(described "$pid"))."
}

refuse() {  # what to do, on stderr, and stop
  echo "Not joining it: $1" >&2; exit 1
}

free_port() {  # port, name, the variable that moves it
  if foreign "$1" "$2" >&2; then
    refuse "stop it (\`make stop\` in its checkout, if it is another checkout's demo), or free the port, or run this one elsewhere: $3 make demo"
  fi
}

# The workers that polled the task queue in the last minute (a stopped one is listed for five).
pollers() {
  "$PY" - <<'PYTHON'
import asyncio, os, sys, time
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from durable_react_agent.client.connection import TemporalSettings, connect

async def main() -> None:
    settings = TemporalSettings.from_env()
    client = await connect(settings)
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        described = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=settings.task_queue),
            task_queue_type=kind))
        for poller in described.pollers:
            if time.time() - poller.last_access_time.seconds < 70:
                print(poller.identity)

asyncio.run(main())
sys.stdout.flush()
os._exit(0)  # not through finalization, where Temporal's runtime can abort (shared/NOTES.md)
PYTHON
}

# Another checkout's worker on the same server and task queue would answer this demo's
# conversations with its own model and tools: refuse unless every recent poller is ours (a
# worker's identity is pid@host) or gone.
only_our_workers() {
  local identities identity pid host
  [ "$TEMPORAL_ADDRESS" != "127.0.0.1:$TEMPORAL_PORT" ] || listening "$TEMPORAL_PORT" || return 0
  [ -x "$PY" ] || { echo "(Once $VENV is installed, the workers of task queue $TASK_QUEUE are checked.)"; return 0; }
  if ! identities=$(pollers 2>"$RUN/pollers.log"); then
    echo "What listens on $TEMPORAL_ADDRESS does not answer as Temporal ($(described "$(listener "$TEMPORAL_PORT")"); see $RUN/pollers.log)." >&2
    refuse "stop it, or free the port, or run this one elsewhere: TEMPORAL_PORT=$((TEMPORAL_PORT + 1)) UI_PORT=$((UI_PORT + 1)) make demo"
  fi
  while read -r identity; do
    [ -n "$identity" ] || continue
    pid=${identity%%@*} host=${identity#*@}
    if [ "$host" = "$(uname -n)" ] && { ! running "$pid" || ours "$pid"; }; then continue; fi
    echo "Another worker serves task queue $TASK_QUEUE on $TEMPORAL_ADDRESS: $identity ($( [ "$host" = "$(uname -n)" ] && described "$pid" || echo "on $host")); it would answer this demo's conversations with its own model." >&2
    refuse "stop it (\`make stop\` in its checkout), or give this checkout a task queue of its own: export AGENT_TASK_QUEUE=react-agent-$(basename "$HERE") before \`make demo\` and the client's commands"
  done < <(printf '%s\n' "$identities" | sort -u)
}

wait_port() {  # port, seconds, name
  for _ in $(seq 1 $(( $2 * 4 ))); do listening "$1" && return 0; sleep 0.25; done
  echo "$3 did not start listening on port $1; see $RUN/$3.log" >&2; return 1
}

alive() { [ -f "$RUN/$1.pid" ] && ours "$(cat "$RUN/$1.pid")"; }  # a reused pid is not ours

wait_worker() {  # seconds: until the worker says it started; if it stops first, why, and fail
  for _ in $(seq 1 $(( $1 * 4 ))); do
    grep -q '"event": "worker started"' "$RUN/worker.log" 2>/dev/null && return 0
    if ! running "$(cat "$RUN/worker.pid")"; then
      echo "The worker did not start (see $RUN/worker.log):" >&2
      grep -m1 '"cannot start' "$RUN/worker.log" >&2 || tail -n 5 "$RUN/worker.log" >&2
      rm -f "$RUN/worker.pid"; return 1
    fi
    sleep 0.25
  done
  echo "The worker has not said it started after $1 s; see $RUN/worker.log" >&2; return 1
}

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
    if listening "$TEMPORAL_PORT"; then
      if alive server; then echo "Temporal already listening on $TEMPORAL_PORT (this checkout's)"; exit 0; fi
      echo "Joining the Temporal that listens on $TEMPORAL_PORT, not this checkout's ($(described "$(listener "$TEMPORAL_PORT")")): the worker serves it only if no other worker polls task queue $TASK_QUEUE."
      exit 0
    fi
    # Tuned as measured in shared/NOTES.md: fast transfer-task polling and a WAL-mode SQLite file.
    # The UI reads payloads sealed with AGENT_PAYLOAD_KEYS through the API's codec endpoint.
    nohup "$VENV/bin/temporal" server start-dev \
      --db-filename .temporal/dev.db \
      --port "$TEMPORAL_PORT" --ui-port "$UI_PORT" \
      --ui-codec-endpoint "http://127.0.0.1:$API_PORT/codec" \
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
    free_port "$SCRIPTED_PORT" scripted "SCRIPTED_PORT=$((SCRIPTED_PORT + 1))"
    stop_one scripted
    nohup "$PY" -m durable_react_agent.testing --port "$SCRIPTED_PORT" >"$RUN/scripted.log" 2>&1 </dev/null &
    echo $! >"$RUN/scripted.pid"
    wait_port "$SCRIPTED_PORT" 30 scripted
    ;;
  worker)
    stop_one worker  # a fresh worker picks up the current environment (model, URLs)
    only_our_workers
    nohup "$BIN/agent-worker" >"$RUN/worker.log" 2>&1 </dev/null &
    echo $! >"$RUN/worker.pid"
    wait_worker 60
    echo "worker started (pid $(cat "$RUN/worker.pid"), log $RUN/worker.log)"
    ;;
  api)
    free_port "$API_PORT" api "AGENT_API_ADDRESS=127.0.0.1:$((API_PORT + 1))"
    stop_one api
    # its console links to this UI, whose pages call its codec endpoint
    AGENT_TEMPORAL_UI_URL=${AGENT_TEMPORAL_UI_URL:-http://localhost:$UI_PORT} \
      nohup "$BIN/agent-api" >"$RUN/api.log" 2>&1 </dev/null &
    echo $! >"$RUN/api.pid"
    wait_port "$API_PORT" 30 api
    echo "web console and HTTP API on http://$API_ADDRESS/ (docs: http://$API_ADDRESS/docs, log $RUN/api.log)"
    ;;
  stop)
    stop_one api; stop_one worker; stop_one scripted; stop_one server
    ;;
  check)  # what `server`, `worker`, `api` (and with `scripted`, `scripted`) would do: start nothing
    [ "${2:-}" != scripted ] || free_port "$SCRIPTED_PORT" scripted "SCRIPTED_PORT=$((SCRIPTED_PORT + 1))"
    free_port "$API_PORT" api "AGENT_API_ADDRESS=127.0.0.1:$((API_PORT + 1))"
    if ! listening "$TEMPORAL_PORT"; then echo "Would start Temporal on $TEMPORAL_PORT."
    elif alive server; then echo "Would use this checkout's Temporal on $TEMPORAL_PORT."
    else echo "Would join the Temporal on $TEMPORAL_PORT ($(described "$(listener "$TEMPORAL_PORT")"))."
    fi
    only_our_workers
    echo "Would start the worker on task queue $TASK_QUEUE${2:+, the scripted model server on $SCRIPTED_PORT,} and the API on $API_ADDRESS."
    ;;
  *)
    echo "usage: $0 server|scripted|worker|api|stop|check [scripted]" >&2; exit 2 ;;
esac
