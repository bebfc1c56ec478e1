"""The HTTP API and the web console: the client layer (`client.session`) over HTTP.

Every decision goes through the conversation's Update twins, so a refusal is a 409 with the
conversation's reason and the state is untouched. The approver of a decision is the authenticated
principal (the token's name), never a name from the request body. Who may call is decided by
`api.guard`, what a body may hold by `api.bodies`, how a failure is answered by `api.errors`,
what every route depends on by `api.deps`; the routes are in `api.routes`, a module per resource.
"""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles
from temporalio.client import Client

from ..client.connection import TemporalSettings, connect
from ..client.payload_store import close_store
from ..client.session import Session
from .a2a import add_a2a_routes
from .errors import (
    RequestIds,
    add_error_handlers,
    document_discriminators,
    document_errors,
    errors,
)
from .guard import BodyLimit, Gate
from .links import link_routes
from .routes import (
    console,
    conversations,
    grants,
    inputs,
    limits,
    memories,
    payloads,
    streams,
)
from .settings import ApiSettings

log = structlog.get_logger("api")
# The console is ES modules, which a browser runs only when served as JavaScript; some systems'
# MIME tables (a Windows registry) say text/plain for .js.
mimetypes.add_type("text/javascript", ".js")


# ----- the app -----

def create_app(settings: ApiSettings, temporal: TemporalSettings,
               client: Client | None = None) -> FastAPI:
    """The API. Without `client`, it connects to Temporal at start-up."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.client = client or await connect(temporal)
        log.info("api_ready", temporal=temporal.address, task_queue=temporal.task_queue,
                 auth=settings.auth_required, payloads=temporal.payloads.describe(),
                 sealed=bool(temporal.payloads.keys))
        yield
        if client is None:
            await close_store(app.state.client.data_converter)

    app = FastAPI(
        title="Durable ReAct agent",
        description="Conversations are Temporal workflows. Approvals, answers and messages go "
                    "through the workflow's Update twins; a refusal is a 409 and changes nothing. "
                    "Every response carries an X-Request-ID header.",
        lifespan=lifespan,
        responses=errors(401, 403),
        generate_unique_id_function=lambda route: route.name,
        redirect_slashes=False,  # an odd path (`/conversations/%2F`) is a 404, not a redirect
    )
    app.state.settings, app.state.temporal = settings, temporal
    # The last added runs first: request ids around everything, then who may call, the body's
    # size, and CORS.
    # (the Temporal UI's origin too, which `api.guard` lets call the codec endpoints alone)
    app.add_middleware(CORSMiddleware,
                       allow_origins=[*settings.cors_origins, settings.ui_origin],
                       allow_methods=["GET", "POST", "DELETE"],
                       allow_headers=["Authorization", "Content-Type", "Last-Event-ID",
                                      "X-Namespace"],
                       expose_headers=["X-Request-ID"])
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(Gate, settings=settings)
    app.add_middleware(RequestIds)
    add_error_handlers(app)
    document_errors(app)
    document_discriminators(app)

    for routes in (conversations, inputs, grants, limits, streams, memories, payloads,
                   console):
        app.include_router(routes.router)
    app.include_router(link_routes(
        settings.link_secret, settings.tokens,
        lambda: Session(app.state.client, temporal, settings.timeout_s)))

    add_a2a_routes(app, settings.public_url or f"http://{settings.host}:{settings.port}",
                   settings.auth_required, settings.profiles, settings.memory_url is not None)
    app.mount("/static", StaticFiles(directory=console.STATIC), name="static")
    return app
