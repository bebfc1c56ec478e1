"""Run the scripted model server in the foreground: `python -m durable_react_agent.testing`.

Used by the offline demo, where the worker's OPENAI_BASE_URL and Open-Meteo URLs
point here instead of the internet. With no script, every conversation is answered
by the intent reader (the weather for a city, save/list/delete notes); a script's
scenarios take precedence for the conversations they trigger on.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from .script import Script, load_script
from .server import ScriptedModelServer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m durable_react_agent.testing", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--script", type=Path, help="script JSON file (scenarios by trigger)")
    args = parser.parse_args(argv)

    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())

    script = load_script(args.script) if args.script else Script()
    with ScriptedModelServer(script, host=args.host, port=args.port) as server:
        print(f"scripted model listening on {server.base_url}", flush=True)
        # Short waits keep the main thread responsive to signals on every platform.
        while not stopping.wait(0.5):
            pass


if __name__ == "__main__":
    main()
