"""`agent-api`: the HTTP API and web console on AGENT_API_ADDRESS (default 127.0.0.1:8000).

`agent-api hash-token` reads a token on stdin and prints what AGENT_API_TOKENS_FILE holds for
it (its SHA-256), so the token itself need not be stored where the API runs."""

from __future__ import annotations

import sys

import uvicorn

from ..client.connection import TemporalSettings
from ..client.payloads import PayloadConfigError
from ..worker.logging import configure_logging
from .access import hash_token
from .app import create_app
from .settings import ApiSettings, SettingsError

# An idle connection is kept this long (uvicorn's default, 5 s, closed it under a client that had
# just picked it to send its next request: "Server disconnected without sending a response");
# longer than a load balancer's usual 60 s, so the balancer closes first.
KEEP_ALIVE_S = 75


def main() -> int:
    if sys.argv[1:] == ["hash-token"]:
        token = sys.stdin.read().strip()
        if not token:
            print("error: give the token on stdin", file=sys.stderr)
            return 2
        print(hash_token(token))
        return 0
    if sys.argv[1:]:
        print("usage: agent-api [hash-token]", file=sys.stderr)
        return 2
    try:
        settings = ApiSettings.from_env()
        temporal = TemporalSettings.from_env()
    except (SettingsError, PayloadConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    configure_logging()
    app = create_app(settings, temporal)
    print(f"console and API on http://{settings.host}:{settings.port}/ "
          f"(OpenAPI docs at /docs){' with bearer tokens' if settings.auth_required else ''}",
          flush=True)
    # log_config=None: uvicorn's own records go through the JSON handler above, one line each
    # (a traceback inside its line), instead of uvicorn's multi-line text.
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning",
                log_config=None, timeout_graceful_shutdown=2, timeout_keep_alive=KEEP_ALIVE_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
