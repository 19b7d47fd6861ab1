"""The checks in front of every route, each a pure ASGI layer around the next (Starlette's ``BaseHTTPMiddleware``
costs a task and a stream per request). ``create_api`` stacks them, outermost first:

    BearerToken (401, ``far.serve.auth``) -> BodyLimit (413) -> JsonBody (422) -> InternalErrors (500) -> routes

A layer's one required method is ``handle``: an HTTP request, answered there or passed on to ``self.app``.
Nothing a layer answers carries a stack trace or a secret.
"""
from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})  # the methods whose body is read and checked before the routes


class HttpLayer:
    """One check around an ASGI app: HTTP requests go to ``handle``; anything else (lifespan) goes straight on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.handle(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class BodyCheck(HttpLayer):
    """A check on the whole request body, read here (declared or chunked) so that a bad one is answered before
    any route runs; the layers and routes after it read the body back in one message. Subclasses say how much to
    read (``read_limit``) and what to refuse (``refusal``)."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, self.read_limit())
        if body is None:  # the client went away
            return
        refusal = self.refusal(body)
        if refusal is not None:
            await reply(send, *refusal)
        else:
            await self.app(scope, replaying(body, receive), send)

    def read_limit(self) -> int | None:
        """Stop reading once the body is longer than this many bytes (None: read it all)."""
        return None

    def refusal(self, body: bytes) -> tuple[int, dict[str, Any]] | None:
        """(status, JSON body) to answer instead of the app; None: the body passes."""
        raise NotImplementedError


class BodyLimit(BodyCheck):
    """413 for a body over the limit, as declared (content-length, any method) or as received (chunked too)."""

    def __init__(self, app: ASGIApp, limit_of: Callable[[], int]) -> None:
        super().__init__(app)
        self.limit_of = limit_of  # read per request: one module-level app serves any config

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit_of()):
            await reply(send, *self.too_large())
            return
        await super().handle(scope, receive, send)

    def read_limit(self) -> int:
        return self.limit_of()

    def refusal(self, body: bytes) -> tuple[int, dict[str, Any]] | None:
        return self.too_large() if len(body) > self.limit_of() else None

    def too_large(self) -> tuple[int, dict[str, Any]]:
        return 413, {"detail": f"request body over {self.limit_of()} bytes"}


class JsonBody(BodyCheck):
    """422 for a body that is not UTF-8 or not finite JSON, whatever its content-type says: the routes read JSON."""

    def refusal(self, body: bytes) -> tuple[int, dict[str, Any]] | None:
        problem = body_problem(body)
        if problem is None:
            return None
        return 422, {"detail": [{"loc": ["body"], "msg": problem, "type": "invalid_body"}]}


class InternalErrors(HttpLayer):
    """A generic 500 with a request id for anything the app raises, logged by request id, path and exception
    class only (a response already started is left as it is)."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked_send)
        except Exception as error:  # no stack trace leaves the service
            request_id = uuid.uuid4().hex[:12]
            logger.error("request %s %s failed: %s", request_id, scope["path"], type(error).__name__)
            if not started:
                await reply(send, 500, {"detail": "internal error", "request_id": request_id})


def header(scope: Scope, name: bytes) -> str | None:
    """A request header's value (``name`` in lower case; the last one where it repeats), or None."""
    value = None
    for key, raw in scope.get("headers", []):
        if key.lower() == name:
            value = raw.decode("latin-1")
    return value


async def read_body(receive: Receive, limit: int | None = None) -> bytes | None:
    """The request's whole body, over as many messages as it comes in, or None when the client disconnects;
    reading stops once the body is longer than ``limit``."""
    body = b""
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        more = message.get("more_body", False)
        if limit is not None and len(body) > limit:
            break
    return body


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` that first hands out ``body`` (already read) in one message, then goes on as ``receive``."""
    replayed = False

    async def replay_receive() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay_receive


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} overflows a 64-bit float")
    return value


def body_problem(body: bytes) -> str | None:
    """What is wrong with a JSON body before it reaches a route, in one line: not UTF-8 (with the byte), not
    JSON, or a non-finite number (NaN, Infinity, or one too large for a float, e.g. 1e400: Python's parser takes
    them all, and they would reach the scoring as NaN or inf). None: fine."""
    if not body:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"the body is not UTF-8 (byte {error.start})"
    try:
        json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as error:  # json.JSONDecodeError is a ValueError too
        return f"invalid JSON: {str(error).splitlines()[0][:200]}"
    return None


async def reply(send: Send, status: int, body: dict[str, Any], headers: list | None = None) -> None:
    """Answer with ``body`` as JSON (and any extra ``headers``)."""
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": payload})
