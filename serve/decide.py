"""The runtime guard over REST: ``POST /v1/decide`` answers each proposed tool call with the serve config's policy
file's decision (``far.rollout.guard``); 404 where the config names no policy file."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError
from far.serve.schemas import DecideRequest, DecideResponse, ServeConfig
from fastapi import APIRouter, HTTPException


def check_policy_file(config: ServeConfig, base_dir: Path | None, source: str | Path) -> None:
    """At start-up, before Ray: the guard's policy file, where one is configured, parses and names its models'
    states (loaded on first use)."""
    if config.guard is None:
        return
    from far.search.jobs.policy_file import read_policy_file

    try:
        read_policy_file((base_dir or Path(".")) / config.guard.policy_file)
    except FarInputError as error:
        raise FarInputError(error.message, file=error.file or source,
                            field=f"guard.policy_file: {error.field}" if error.field else "guard.policy_file",
                            row=error.row) from None


class Decider:
    """The runtime guard of the serve config's policy file, loaded on first use (one per replica)."""

    def __init__(self, config: ServeConfig, base_dir: Path | None) -> None:
        self.config = config.guard
        self.base_dir = base_dir or Path(".")
        self._guard: Any = None
        self._lock = threading.Lock()

    def guard(self) -> Any:
        with self._lock:
            if self._guard is None:
                from far.search.jobs.policy_file import load_guard

                log = self.config.audit_log
                self._guard = load_guard(self.base_dir / self.config.policy_file, shadow=self.config.shadow,
                                         audit_log=self.base_dir / log if log else None)
            return self._guard

    def decide(self, items: list[Any]) -> list[Any]:
        return self.guard().decide_batch([item.model_dump() for item in items])


def decide_routes(decider_of: Callable[[], Decider]) -> APIRouter:
    """``POST /v1/decide`` over ``decider_of()`` (read per request)."""
    router = APIRouter()

    @router.post("/v1/decide", response_model=DecideResponse,
                 responses={404: {"description": "no policy file configured"}, 422: {"description": "invalid call"}})
    async def decide(body: DecideRequest) -> DecideResponse:
        """The configured policy file's runtime guard on each proposed call (``far.rollout.guard``)."""
        decider = decider_of()
        if decider.config is None:
            raise HTTPException(404, "no policy file configured (the serve config's guard.policy_file)")
        try:
            return DecideResponse(decisions=await asyncio.to_thread(decider.decide, body.items))
        except FarInputError as error:
            raise HTTPException(422, str(error)[:300]) from None

    return router
