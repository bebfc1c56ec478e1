"""How the API answers what it does not carry out: one error shape, a request id on every response,
and one log line per refused or failed request, never a traceback for a client's mistake. What
Temporal or an unexpected exception said is logged, not sent back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.service import RPCError

from ..client.checks import CliError, NotFound, NoWorker, Refused, Unavailable, UsageError
from ..client.payloads import PayloadUnreadable
from .access import Forbidden
from .routes import every_route

log = structlog.get_logger("api")
REQUEST_ID = "X-Request-ID"
LOGGED_PATH_CHARS = 200  # a path is the client's to choose: a log line stays a line


class Error(BaseModel):
    """Every error but a 422, which lists what is wrong as FastAPI does."""

    detail: str
    request_id: str | None = Field(default=None, description="on a 5xx: the request id the "
                                   "API's log line names (also the X-Request-ID header)")


def request_id(request: Request) -> str:
    """This request's id: in the X-Request-ID header, its log lines, and the conversation's
    record of what the request sent."""
    return request.state.request_id


class RequestIds:
    """Outermost: every request gets an id (the X-Request-ID header, bound to its log lines); a
    request answered with an error is one log line; an unexpected exception is a generic 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        status, finished = 0, False

        async def send_with_id(message: Message) -> None:
            nonlocal status, finished
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)[REQUEST_ID] = rid
            elif message["type"] == "http.response.body":
                finished = not message.get("more_body", False)
            await send(message)

        where = {"method": scope["method"], "path": scope["path"][:LOGGED_PATH_CHARS]}
        with structlog.contextvars.bound_contextvars(request_id=rid):
            try:
                await self.app(scope, receive, send_with_id)
            except Exception:
                log.exception("request_failed", **where)
                if not status:
                    await failed(rid, 500, "the API failed")(scope, receive, send_with_id)
                elif not finished:  # a stream had begun: end it
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            why = {"status": status, **where, **state.get("cause", {})}
            if status >= 500:
                log.warning("request_failed", **why)
            elif status >= 400:
                log.info("request_refused", **why)


def failed(rid: str, status: int, what: str) -> JSONResponse:
    """A 5xx that says nothing of its cause but where the log has it."""
    return JSONResponse(Error(detail=f"{what}; its log names the cause under request id {rid}",
                              request_id=rid).model_dump(), status)


def unprocessable(errors: list[dict[str, Any]]) -> JSONResponse:
    """A 422 in FastAPI's own shape: what is wrong, where."""
    return JSONResponse({"detail": [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
                                    for e in errors]}, 422)


def add_error_handlers(app: FastAPI) -> None:
    for error, code in ((NotFound, 404), (NoWorker, 503), (Unavailable, 503),
                        (Refused, 409), (CliError, 409),
                        (Forbidden, 403), (PayloadUnreadable, 503)):
        app.add_exception_handler(error, _plain(code))

    @app.exception_handler(UsageError)
    async def usage(request: Request, err: UsageError) -> JSONResponse:
        return unprocessable([{"loc": ["body"], "msg": str(err), "type": "value_error"}])

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        errors = err.errors()
        for e in errors:
            if e["type"] == "json_invalid":
                e["msg"] = f"the body is not valid JSON: {(e.get('ctx') or {}).get('error')}"
        return unprocessable(errors)

    @app.exception_handler(RPCError)
    async def temporal_refused(request: Request, err: RPCError) -> JSONResponse:
        request.state.cause = {"temporal_status": err.status.name if err.status else None,
                               "temporal_error": err.message}
        return failed(request_id(request), 502, "Temporal refused the request")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> Response:
        """A 405 names every method served at its path; Starlette's names only those of the
        first route there (POST of `/conversations`, which GET serves too)."""
        if err.status_code == 405 and (methods := served_methods(request)):
            err = HTTPException(405, err.detail, headers={"Allow": ", ".join(methods)})
        return await http_exception_handler(request, err)


def served_methods(request: Request) -> list[str]:
    """The methods the app's routes serve at the request's path, whatever its method."""
    methods: set[str] = set()
    for route in every_route(request.app.router.routes):
        if route.matches(request.scope)[0] is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _plain(code: int) -> Any:
    async def handler(request: Request, err: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=code)
    return handler


def _documented(description: str) -> dict[str, Any]:
    # Always JSON: `"model": Error` would take the route's media type (text/event-stream for
    # the event stream). `document_errors` adds the schema.
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


# What each error means, for the OpenAPI document: every route lists those it can answer.
ERRORS: dict[int, dict[str, Any]] = {
    401: _documented("no valid bearer token (with AGENT_API_TOKENS)"),
    403: _documented("the token's role may not do this (a viewer writes nothing; only its owner, "
                     "an approver or an admin decides a conversation's calls), a cross-site "
                     "browser request (AGENT_API_CORS_ORIGINS), or, without tokens, a Host "
                     "that is not loopback"),
    404: _documented("no such conversation (or no such running one, for input), or one the "
                     "token's role may not see (another user's)"),
    409: _documented("refused by the conversation: the reason; nothing changed"),
    413: _documented("the body is over AGENT_API_MAX_BODY_BYTES"),
    502: _documented("Temporal refused the request: the log has its reason, under request_id"),
    503: _documented("no worker answered in time (AGENT_API_TIMEOUT_S), the memory store "
                     "cannot be reached, or a payload cannot be read back (a key "
                     "AGENT_PAYLOAD_KEYS does not list, an object not in AGENT_PAYLOAD_STORE)"),
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: ERRORS[code] for code in codes}


def document_errors(app: FastAPI) -> None:
    """FastAPI's OpenAPI document, with the Error schema every error answer refers to."""
    default = app.openapi

    def openapi() -> dict[str, Any]:
        doc = default()
        doc["components"]["schemas"].setdefault("Error", Error.model_json_schema())
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def discriminators(node: Any) -> Iterator[dict[str, Any]]:
    """Every `discriminator` (with its mapping) in a part of an OpenAPI document."""
    if isinstance(node, dict):
        if "mapping" in node.get("discriminator", {}):
            yield node["discriminator"]
        for value in node.values():
            yield from discriminators(value)
    elif isinstance(node, list):
        for value in node:
            yield from discriminators(value)


def document_discriminators(app: FastAPI) -> None:
    """The document says what the server checks: a union's discriminating property (AG-UI's
    message `role`, a content part's `type`) is required in each schema it maps to. The models
    give it a default, so pydantic's schema marks it optional, yet a message without one is a
    422."""
    default = app.openapi

    def openapi() -> dict[str, Any]:
        doc = default()
        schemas = doc["components"]["schemas"]
        for union in list(discriminators(doc)):
            for ref in union["mapping"].values():
                required = schemas[ref.rsplit("/", 1)[1]].setdefault("required", [])
                if union["propertyName"] not in required:
                    required.append(union["propertyName"])
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
