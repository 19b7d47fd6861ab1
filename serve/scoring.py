"""Scoring trajectories: ``POST /v1/score/trajectory`` and ``POST /v1/score/trajectories`` (batched), by the
verifier ensemble wherever the backend runs it (in this process, or through the ensemble deployment)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from far.rollout.scenario import Scenario
from far.rollout.trajectory import Trajectory
from far.serve.schemas import (
    ScoreTrajectoriesRequest,
    ScoreTrajectoriesResponse,
    ScoreTrajectoryRequest,
    ScoreTrajectoryResponse,
    verdict_response,
)
from far.verifiers.verdict import Verdict
from fastapi import APIRouter, HTTPException

# The verifiers' input checks (e.g. an AgentDojo trajectory without its result) raise ValueError naming the field.
INPUT_ERRORS = (ValueError,)
UNFIT_TRAJECTORY = {422: {"description": "invalid body, or a trajectory that does not fit its scenario"}}


class TrajectoryScorer(Protocol):
    """Verdicts for (scenario, trajectory) pairs; raises one of ``INPUT_ERRORS`` for a trajectory that does not
    fit its scenario."""

    async def score(self, items: list[tuple[Scenario, Trajectory]]) -> list[Verdict]: ...


def trajectory_routes(scorer_of: Callable[[], TrajectoryScorer]) -> APIRouter:
    """The trajectory-scoring routes over ``scorer_of()`` (read per request)."""
    router = APIRouter()

    async def score(items: list[tuple[Scenario, Trajectory]]) -> list[Verdict]:
        try:
            return await scorer_of().score(items)
        except INPUT_ERRORS as error:  # a trajectory that does not fit its scenario is the client's error
            cause = getattr(error, "cause", None) or error  # never Ray's wrapper text (node, pid, actor id)
            raise HTTPException(422, f"the trajectory does not fit its scenario: {cause}"[:300]) from None

    @router.post("/v1/score/trajectory", response_model=ScoreTrajectoryResponse, responses=UNFIT_TRAJECTORY)
    async def score_trajectory(body: ScoreTrajectoryRequest) -> ScoreTrajectoryResponse:
        verdicts = await score([(body.scenario, body.trajectory.to_trajectory())])
        return verdict_response(verdicts[0])

    @router.post("/v1/score/trajectories", response_model=ScoreTrajectoriesResponse, responses=UNFIT_TRAJECTORY)
    async def score_trajectories(body: ScoreTrajectoriesRequest) -> ScoreTrajectoriesResponse:
        verdicts = await score([(item.scenario, item.trajectory.to_trajectory()) for item in body.items])
        return ScoreTrajectoriesResponse(results=[verdict_response(v) for v in verdicts])

    return router
