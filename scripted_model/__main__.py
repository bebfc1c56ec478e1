"""Run the scripted model server in the foreground: `python -m scripted_model`.

Used by the offline demo, where the worker's OPENAI_BASE_URL and Open-Meteo URLs
point here instead of the internet.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from .script import load_script
from .server import ScriptedModelServer

DEMO_SCRIPT = Path(__file__).with_name("demo_script.json")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scripted_model", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--script", type=Path, default=DEMO_SCRIPT, help="script JSON file")
    args = parser.parse_args(argv)

    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())

    with ScriptedModelServer(load_script(args.script), host=args.host, port=args.port) as server:
        print(f"scripted model listening on {server.base_url}", flush=True)
        # Short waits keep the main thread responsive to signals on every platform.
        while not stopping.wait(0.5):
            pass


if __name__ == "__main__":
    main()
