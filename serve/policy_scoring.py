"""Scoring policies on the configured suites, in the ingress process: ``POST /v1/score/policy`` answers at once up
to ``sync_limit`` scenarios, else queues a job (202, ``Location: /v1/jobs/{id}``) that ``GET /v1/jobs/{id}``
reports on. The jobs are durable (``far.serve.jobs``)."""
from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError
from far.serve.schemas import JobStatus, PolicyScore, ScorePolicyRequest, ServeConfig
from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse

logger = logging.getLogger(__name__)


class UnknownSuite(KeyError):
    pass


def serve_suite(config: ServeConfig, name: str, base_dir: Path | None) -> Any:
    from far.suites import build_suite

    return build_suite(config.suites[name], base_dir)


def check_suites(config: ServeConfig, base_dir: Path | None, source: str | Path) -> None:
    """At start-up, before Ray: every configured suite builds, and no model is fitted on evaluation-only data
    (the learned models fit on each suite's train split, or on ``fit_on``)."""
    from far.search.jobs.config import check_fit_data, fit_suites

    for name in config.suites:
        try:
            suite = serve_suite(config, name, base_dir)
        except FarInputError as error:
            raise FarInputError(error.message, file=error.file or source,
                                field=f"suites.{name}.{error.field}" if error.field else f"suites.{name}",
                                row=error.row) from None
        fit_on = fit_suites(config.models, base_dir, source, config.suites[name])
        check_fit_data(config.models, source, suite, fit_on, "evaluate")


class PolicyScorer:
    """Scores a policy on a configured suite's split; suites, recorded model outputs and the verifier are
    built on first use and kept. Long scorings run as jobs on a worker thread."""

    def __init__(self, config: ServeConfig, base_dir: Path | None = None) -> None:
        from far.serve.jobs import JobStore, JobWorker

        self.config = config
        self.base_dir = base_dir
        self._evaluators: dict[str, Any] = {}
        self._lock = threading.Lock()
        jobs = config.jobs
        self.store = JobStore(config.jobs_database(), lease_s=jobs.lease_s, max_attempts=jobs.max_attempts,
                              scope=config.jobs_scope())
        # this replica's worker: runs its own submissions, and any job a stopped replica left behind
        self.worker = JobWorker(self.store, self._run, owner=uuid.uuid4().hex, retention_s=jobs.retention_s,
                                max_jobs=jobs.max_jobs, describe_error=job_error).start()

    def evaluator(self, suite_name: str) -> Any:
        if suite_name not in self.config.suites:
            raise UnknownSuite(suite_name)
        with self._lock:
            if suite_name not in self._evaluators:
                from far.search.jobs.assemble import build_evaluator
                from far.search.jobs.config import RunConfig

                config = self.config
                run = RunConfig(suite=config.suites[suite_name], models=config.models, rewards=config.rewards,
                                costs=config.costs, gate=config.gate, verifier=config.verifier)
                self._evaluators[suite_name] = build_evaluator(
                    run, suite=serve_suite(config, suite_name, self.base_dir), base_dir=self.base_dir,
                    source="serve config")
            return self._evaluators[suite_name]

    def size(self, request: ScorePolicyRequest) -> int:
        total = len(self.evaluator(request.suite).scenarios(request.split))
        return min(total, request.limit) if request.limit else total

    def score(self, request: ScorePolicyRequest) -> PolicyScore:
        from far.search.ranking.gate import gate

        evaluator = self.evaluator(request.suite)
        # one scoring at a time: an Evaluator records each split once, and episodes grow their tries
        with self._lock:
            result = evaluator.evaluate("api", request.policy, request.split, limit=request.limit).result
        verdict = gate(result, self.config.gate)
        return PolicyScore(suite=request.suite, result=result, gate=verdict.to_dict())

    def _run(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.score(ScorePolicyRequest.model_validate(request)).model_dump(mode="json")

    def submit(self, request: ScorePolicyRequest) -> JobStatus:
        record = self.store.create(uuid.uuid4().hex, request.model_dump(mode="json"))
        self.worker.notify()
        return JobStatus.model_validate(asdict(record))

    def job(self, job_id: str) -> JobStatus | None:
        record = self.store.get(job_id)
        return JobStatus.model_validate(asdict(record)) if record is not None else None


def job_error(error: BaseException) -> str:
    """A failed job's reason: what was wrong with the input, else only the error's class (no trace, no detail
    that could carry a secret)."""
    if isinstance(error, FarInputError):
        return f"invalid input: {error}"[:300]
    logger.error("policy job failed: %s", type(error).__name__)
    return f"internal error ({type(error).__name__})"


def policy_routes(scorer_of: Callable[[], PolicyScorer]) -> APIRouter:
    """``POST /v1/score/policy`` over ``scorer_of()`` (read per request): scored now, or queued as a job."""
    router = APIRouter()

    @router.post("/v1/score/policy", response_model=PolicyScore | JobStatus,
                 responses={202: {"model": JobStatus}, 404: {"description": "unknown suite"}})
    async def score_policy(body: ScorePolicyRequest):
        scorer = scorer_of()
        try:
            size = await asyncio.to_thread(scorer.size, body)
        except UnknownSuite:
            raise HTTPException(404, f"unknown suite {body.suite!r}") from None
        if size > scorer.config.sync_limit:
            job = await asyncio.to_thread(scorer.submit, body)
            return JSONResponse(job.model_dump(mode="json"), status_code=202,
                                headers={"Location": f"/v1/jobs/{job.job_id}"})
        return await asyncio.to_thread(scorer.score, body)

    return router


def job_routes(scorer_of: Callable[[], PolicyScorer]) -> APIRouter:
    """``GET /v1/jobs/{job_id}``: a policy job's status and, once done, its result."""
    router = APIRouter()

    @router.get("/v1/jobs/{job_id}", response_model=JobStatus, responses={404: {"description": "unknown job"}})
    async def job_status(job_id: str) -> JobStatus:
        job = await asyncio.to_thread(scorer_of().job, job_id)
        if job is None:
            raise HTTPException(404, "unknown job")
        return job

    return router
