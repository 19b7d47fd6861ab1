"""The verifier ensemble as Ray Serve deployments (``topology: deployments``): one per member, and one that asks
them all at once and combines their assessments; the ingress reaches it through ``DeployedVerifier``."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from far.rollout.scenario import Scenario
from far.rollout.trajectory import Trajectory
from far.serve.schemas import ServeConfig
from far.serve.scoring import INPUT_ERRORS
from far.verifiers.verdict import Verdict
from ray import serve


@dataclass(frozen=True)
class InputProblem:
    """A member's verdict that the input does not fit (a 422), passed back as a value across deployments."""

    message: str


def build_member(name: str, config: ServeConfig) -> Any:
    from far.models.backends import build_lm
    from far.verifiers.ensemble import MEMBERS
    from far.verifiers.members import MemberContext
    from far.verifiers.taxonomy import parse_reward_table

    def judge_lm(judge):
        # in a Serve replica the judge's engine runs in the replica itself: the deployment is its host
        return build_lm(judge.lm_options().model_copy(update={"actor": False}), cache=config.models.cache)

    return MEMBERS[name](MemberContext(parse_reward_table(config.rewards), config.verifier.llm_judge, judge_lm))


@serve.deployment(name="verifier", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
class VerifierDeployment:
    """One ensemble member; requests are batched (an LLM judge answers a batch in one generate call)."""

    def __init__(self, name: str, config_json: str) -> None:
        self.member = build_member(name, ServeConfig.model_validate_json(config_json))

    async def assess(self, items: list[tuple[Scenario, Trajectory]]) -> list[Any] | InputProblem:
        try:
            return self.member.assess([s for s, _ in items], [t for _, t in items])
        except INPUT_ERRORS as error:  # returned, not raised: a raise would log a trace and wrap it in Ray's
            return InputProblem(str(error))


@serve.deployment(name="ensemble", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
class EnsembleDeployment:
    """Asks every member at once and combines their assessments (``EnsembleVerifier.combine``)."""

    def __init__(self, config_json: str, *members: Any) -> None:
        from far.verifiers.ensemble import EnsembleVerifier
        from far.verifiers.rules import RuleVerifier
        from far.verifiers.taxonomy import parse_reward_table

        config = ServeConfig.model_validate_json(config_json)
        self.members = members
        verifier = config.verifier
        self.combiner = EnsembleVerifier(RuleVerifier(parse_reward_table(config.rewards)), [],
                                         verifier.aggregation, verifier.weights, verifier.review_threshold)

    async def score(self, items: list[tuple[Scenario, Trajectory]]) -> list[Verdict] | InputProblem:
        by_member = await asyncio.gather(*(m.assess.remote(items) for m in self.members))
        problems = [answer for answer in by_member if isinstance(answer, InputProblem)]
        if problems:
            return problems[0]
        verdicts = []
        for (_, trajectory), assessments in zip(items, zip(*by_member, strict=True), strict=True):
            verdict = self.combiner.combine(trajectory, assessments)
            breakdown = {k: v for k, v in verdict.breakdown.items() if k != "assessments"}
            verdicts.append(replace(verdict, breakdown=breakdown))
        return verdicts


class DeployedVerifier:
    """The ensemble deployment as the ingress sees it, through its handle."""

    def __init__(self, ensemble: Any) -> None:
        self.ensemble = ensemble

    async def score(self, items: list[tuple[Scenario, Trajectory]]) -> list[Verdict]:
        answer = await self.ensemble.score.remote(items)  # a batch travels as one call to each member
        if isinstance(answer, InputProblem):
            raise ValueError(answer.message)  # here, in the ingress: the route makes it a 422
        return answer
