"""The bearer token: taken out of the environment before Ray starts, held by the replicas only as its SHA-256,
and required on every path but the open ones (401 without it)."""
from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from pathlib import Path

from far.rollout.errors import FarInputError
from far.serve.middleware import HttpLayer, header, reply
from far.serve.schemas import MAKE_TOKEN, MIN_TOKEN_LENGTH, ServeConfig
from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = frozenset({"/v1/healthz"})  # answered without a token: liveness


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def take_token(config: ServeConfig, source: str | Path) -> str | None:
    """The token the service requires, taken out of the environment (``auth.token_env``) so that no Ray process
    started after this inherits it; None where none is required. One missing where it is required, or one too
    short, is a ``FarInputError`` on ``source``'s ``auth.token_env``."""
    token = os.environ.pop(config.auth.token_env, None) or None
    if config.token_required() and not token:
        raise FarInputError(f"binding {config.host} (not loopback) needs a bearer token: set "
                            f"${config.auth.token_env} ({MAKE_TOKEN})", file=source, field="auth.token_env")
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise FarInputError(f"the token in ${config.auth.token_env} has {len(token)} characters; use at least "
                            f"{MIN_TOKEN_LENGTH} ({MAKE_TOKEN})", file=source, field="auth.token_env")
    return token if config.token_required() else None


class BearerToken(HttpLayer):
    """401 for a request without ``Authorization: Bearer <token>`` while the service has a token, except on the
    open paths."""

    def __init__(self, app: ASGIApp, digest_of: Callable[[], str | None]) -> None:
        super().__init__(app)
        self.digest_of = digest_of  # read per request (None: no token required): one app serves any config

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        digest = self.digest_of()
        if digest is None or scope["path"] in OPEN_PATHS or presents_token(scope, digest):
            await self.app(scope, receive, send)
        else:
            await reply(send, 401, {"detail": "missing or invalid bearer token"}, [(b"www-authenticate", b"Bearer")])


def presents_token(scope: Scope, digest: str) -> bool:
    """The request's ``Authorization`` is ``Bearer`` (any case) and a token whose SHA-256 is ``digest``,
    compared in constant time."""
    scheme, _, presented = (header(scope, b"authorization") or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token_digest(presented.strip()), digest)
