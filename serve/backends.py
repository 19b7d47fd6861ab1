"""What the routes stand on: the config, the token's digest, the verifier ensemble, policy scoring and the
runtime guard -- one ``Backend`` per ingress replica, or one in process (``LocalBackend``)."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from far.rollout.scenario import Scenario
from far.rollout.trajectory import Trajectory
from far.serve.auth import token_digest
from far.serve.decide import Decider
from far.serve.policy_scoring import PolicyScorer
from far.serve.schemas import ServeConfig
from far.serve.scoring import TrajectoryScorer
from far.verifiers.rules import verify_all
from far.verifiers.verdict import Verdict


class Backend:
    """The routes' services for one config: ``verifier`` scores trajectories (in this process, or through the
    ensemble deployment), ``policy_scorer()`` scores policies and runs their jobs, ``decider`` is the runtime
    guard; ``token_sha256`` is the token's digest (None: no token required)."""

    def __init__(self, config: ServeConfig, verifier: TrajectoryScorer, token_sha256: str | None,
                 base_dir: Path | None) -> None:
        self.config = config
        self.verifier = verifier
        self.token_sha256 = token_sha256
        self._scorer = PolicyScorer(config, base_dir)
        self.decider = Decider(config, base_dir)

    async def score(self, items: list[tuple[Scenario, Trajectory]]) -> list[Verdict]:
        return await self.verifier.score(items)

    def policy_scorer(self) -> PolicyScorer:
        return self._scorer


class LocalBackend(Backend):
    """Everything in this process, from the token itself: the same verifier and routes, no Serve (tests,
    fuzzing, small uses)."""

    def __init__(self, config: ServeConfig, token: str | None = None, base_dir: Path | None = None) -> None:
        super().__init__(config, InProcessVerifier(config), token_digest(token) if token else None, base_dir)


class InProcessVerifier:
    """The config's verifier ensemble, run in this process (``topology: ingress``: in each ingress replica)."""

    def __init__(self, config: ServeConfig) -> None:
        from far.search.jobs.assemble import run_verifier
        from far.verifiers.taxonomy import parse_reward_table

        self.verifier: Any = run_verifier(config.verifier, parse_reward_table(config.rewards),
                                          cache=config.models.cache)
        self.slow = "llm_judge" in config.verifier.members

    async def score(self, items: list[tuple[Scenario, Trajectory]]) -> list[Verdict]:
        scenarios, trajectories = [s for s, _ in items], [t for _, t in items]
        if self.slow:  # keep the event loop free
            return await asyncio.to_thread(verify_all, self.verifier, scenarios, trajectories)
        return verify_all(self.verifier, scenarios, trajectories)
