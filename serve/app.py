"""FAR's REST API on Ray Serve: a FastAPI ingress running the verifier ensemble (``topology: ingress``, the
default), or one deployment per verifier and one composing them behind it (``topology: deployments``).

    far serve configs/serve.yaml                 # or: serve run serve/config.yaml

Endpoints (OpenAPI at ``/docs``): ``POST /v1/score/trajectory`` (and ``/v1/score/trajectories``, batched),
``POST /v1/score/policy`` (202 + ``GET /v1/jobs/{id}`` above ``sync_limit`` scenarios), ``GET /v1/healthz``,
``GET /v1/suites``.

Security: a bearer token is required whenever the app binds a non-loopback address (and on loopback with
``auth.require_on_loopback``); only its SHA-256 reaches the replicas. Bodies over ``max_body_bytes`` get 413;
invalid bodies 422 with field paths; unknown suites 404; any other error a generic 500 with a request id --
no stack trace or secret in a response or a log line.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import threading
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from far.rollout.errors import FarInputError
from far.rollout.scenario import Scenario
from far.rollout.trajectory import Trajectory
from far.serve.schemas import (
    DecideRequest,
    DecideResponse,
    JobStatus,
    PolicyScore,
    ScorePolicyRequest,
    ScoreTrajectoriesRequest,
    ScoreTrajectoriesResponse,
    ScoreTrajectoryRequest,
    ScoreTrajectoryResponse,
    ServeConfig,
    SuiteInfo,
    verdict_response,
)
from far.verifiers.rules import verify_all
from far.verifiers.verdict import Verdict
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from ray import serve

logger = logging.getLogger("far.serve")
OPEN_PATHS = frozenset({"/v1/healthz"})


# The verifiers' input checks (e.g. an AgentDojo trajectory without its result) raise ValueError naming the field.
INPUT_ERRORS = (ValueError,)


@dataclass(frozen=True)
class InputProblem:
    """A member's verdict that the input does not fit (a 422), passed back as a value across deployments."""

    message: str


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Backend(Protocol):
    """What the routes need; in-process (``LocalBackend``) or through Serve handles (``ServeBackend``)."""

    config: ServeConfig
    token_sha256: str | None  # None: no token required

    async def score(self, items: list[tuple[Scenario, Trajectory]]) -> list[Verdict]: ...

    def policy_scorer(self) -> "PolicyScorer": ...


# --- policy scoring (in the ingress process) -----------------------------------------------------------------

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
    if config.guard is not None:  # the policy file parses and names its models' states (loaded on first use)
        from far.search.jobs.policy_file import read_policy_file

        try:
            read_policy_file((base_dir or Path(".")) / config.guard.policy_file)
        except FarInputError as error:
            raise FarInputError(error.message, file=error.file or source,
                                field=f"guard.policy_file: {error.field}" if error.field else "guard.policy_file",
                                row=error.row) from None


class PolicyScorer:
    """Scores a policy on a configured suite's split; suites, recorded model outputs and the verifier are
    built on first use and kept. Long scorings run as jobs on a worker thread."""

    def __init__(self, config: ServeConfig, base_dir: Path | None = None) -> None:
        self.config = config
        self.base_dir = base_dir
        self._evaluators: dict[str, Any] = {}
        self._lock = threading.Lock()
        from far.serve.jobs import JobStore, JobWorker

        jobs = config.jobs
        self.store = JobStore(config.jobs_database(), lease_s=jobs.lease_s, max_attempts=jobs.max_attempts,
                              scope=config.jobs_scope())
        # this replica's worker: runs its own submissions, and any job a stopped replica left behind
        self.worker = JobWorker(self.store, self._run, owner=uuid.uuid4().hex, retention_s=jobs.retention_s,
                                max_jobs=jobs.max_jobs, describe_error=_job_error).start()

    def evaluator(self, suite_name: str):
        if suite_name not in self.config.suites:
            raise UnknownSuite(suite_name)
        with self._lock:
            if suite_name not in self._evaluators:
                from far.search.jobs.pipeline import RunConfig, build_evaluator

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


def _job_error(error: BaseException) -> str:
    """A failed job's reason: what was wrong with the input, else only the error's class (no trace, no detail
    that could carry a secret)."""
    if isinstance(error, FarInputError):
        return f"invalid input: {error}"[:300]
    logger.error("policy job failed: %s", type(error).__name__)
    return f"internal error ({type(error).__name__})"


class Guard:
    """Pure ASGI middleware (Starlette's ``BaseHTTPMiddleware`` costs a task and a stream per request): the
    bearer token, the body size limit (declared or actually received, chunked included: 413), a body that is
    not UTF-8 or not finite JSON (422), and a generic 500 for anything unexpected, logged by request id and
    exception class only."""

    def __init__(self, app: Any, backend_of: Any) -> None:
        self.app = app
        self.backend_of = backend_of

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        backend = self.backend_of()
        limit = backend.config.max_body_bytes
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if backend.token_sha256 is not None and scope["path"] not in OPEN_PATHS:
            scheme, _, presented = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token_digest(presented.strip()),
                                                                     backend.token_sha256):
                await _reply(send, 401, {"detail": "missing or invalid bearer token"},
                             [(b"www-authenticate", b"Bearer")])
                return
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _reply(send, 413, {"detail": f"request body over {limit} bytes"})
            return
        body = b""
        if scope["method"] in ("POST", "PUT", "PATCH"):
            # read the whole body here (declared or chunked), so an oversize one is a 413 and a malformed one a
            # 422 before any route runs
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                more = message.get("more_body", False)
                if len(body) > limit:
                    await _reply(send, 413, {"detail": f"request body over {limit} bytes"})
                    return
            problem = body_problem(body)  # every body, whatever its content-type says: the routes read JSON
            if problem is not None:
                await _reply(send, 422, {"detail": [{"loc": ["body"], "msg": problem, "type": "invalid_body"}]})
                return
        replayed = False

        async def replay_receive() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        started = False

        async def tracked_send(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, replay_receive, tracked_send)
        except Exception as error:  # no stack trace leaves the service
            request_id = uuid.uuid4().hex[:12]
            logger.error("request %s %s failed: %s", request_id, scope["path"], type(error).__name__)
            if not started:
                await _reply(send, 500, {"detail": "internal error", "request_id": request_id})


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


async def _reply(send: Any, status: int, body: dict, headers: list | None = None) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": payload})


# --- the FastAPI app ----------------------------------------------------------------------------------------

def create_api(backend_of: Any) -> FastAPI:
    """The routes over a backend (``backend_of()`` returns it: in a Serve replica it is set at start). The
    token's digest and the body limit are read from the backend, so one module-level app serves any config."""
    from fastapi_offline import FastAPIOffline

    # /docs loads Swagger UI's script and styles from the package (served here), so it works offline
    api = FastAPIOffline(title="FAR", version="1.0", description="Failure-as-Reward: score agent trajectories "
                         "and policies with FAR's verifier ensemble.")

    api.add_middleware(Guard, backend_of=backend_of)

    @api.get("/v1/healthz")
    async def healthz() -> dict[str, Any]:
        backend = backend_of()
        return {"status": "ok", "members": list(backend.config.verifier.members),
                "aggregation": backend.config.verifier.aggregation}

    @api.get("/v1/suites", response_model=list[SuiteInfo])
    async def suites() -> list[SuiteInfo]:
        return [SuiteInfo(name=name, spec=spec.model_dump(mode="json"))
                for name, spec in backend_of().config.suites.items()]

    async def score(items: list[tuple[Scenario, Trajectory]]) -> list[Verdict]:
        try:
            return await backend_of().score(items)
        except INPUT_ERRORS as error:  # a trajectory that does not fit its scenario is the client's error
            cause = getattr(error, "cause", None) or error  # never Ray's wrapper text (node, pid, actor id)
            raise HTTPException(422, f"the trajectory does not fit its scenario: {cause}"[:300]) from None

    @api.post("/v1/score/trajectory", response_model=ScoreTrajectoryResponse,
              responses={422: {"description": "invalid body, or a trajectory that does not fit its scenario"}})
    async def score_trajectory(body: ScoreTrajectoryRequest) -> ScoreTrajectoryResponse:
        verdicts = await score([(body.scenario, body.trajectory.to_trajectory())])
        return verdict_response(verdicts[0])

    @api.post("/v1/score/trajectories", response_model=ScoreTrajectoriesResponse,
              responses={422: {"description": "invalid body, or a trajectory that does not fit its scenario"}})
    async def score_trajectories(body: ScoreTrajectoriesRequest) -> ScoreTrajectoriesResponse:
        verdicts = await score([(item.scenario, item.trajectory.to_trajectory()) for item in body.items])
        return ScoreTrajectoriesResponse(results=[verdict_response(v) for v in verdicts])

    @api.post("/v1/score/policy", response_model=PolicyScore | JobStatus,
              responses={202: {"model": JobStatus}, 404: {"description": "unknown suite"}})
    async def score_policy(body: ScorePolicyRequest):
        scorer = backend_of().policy_scorer()
        try:
            size = await asyncio.to_thread(scorer.size, body)
        except UnknownSuite:
            raise HTTPException(404, f"unknown suite {body.suite!r}") from None
        if size > backend_of().config.sync_limit:
            job = await asyncio.to_thread(scorer.submit, body)
            return JSONResponse(job.model_dump(mode="json"), status_code=202,
                                headers={"Location": f"/v1/jobs/{job.job_id}"})
        return await asyncio.to_thread(scorer.score, body)

    @api.post("/v1/decide", response_model=DecideResponse,
              responses={404: {"description": "no policy file configured"}, 422: {"description": "invalid call"}})
    async def decide(body: DecideRequest) -> DecideResponse:
        """The configured policy file's runtime guard on each proposed call (``far.rollout.guard``)."""
        decider = backend_of().decider
        if decider.config is None:
            raise HTTPException(404, "no policy file configured (the serve config's guard.policy_file)")
        try:
            return DecideResponse(decisions=await asyncio.to_thread(decider.decide, body.items))
        except FarInputError as error:
            raise HTTPException(422, str(error)[:300]) from None

    @api.get("/v1/jobs/{job_id}", response_model=JobStatus, responses={404: {"description": "unknown job"}})
    async def job_status(job_id: str) -> JobStatus:
        job = await asyncio.to_thread(backend_of().policy_scorer().job, job_id)
        if job is None:
            raise HTTPException(404, "unknown job")
        return job

    return api


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


class LocalBackend:
    """Everything in this process: the same verifier and routes, no Serve (tests, fuzzing, small uses)."""

    def __init__(self, config: ServeConfig, token: str | None = None, base_dir: Path | None = None) -> None:
        from far.search.jobs.pipeline import RunConfig, build_verifier

        self.config = config
        self.token_sha256 = token_digest(token) if token else None
        self.verifier = build_verifier(RunConfig(models=config.models, rewards=config.rewards,
                                                 verifier=config.verifier))
        self._scorer = PolicyScorer(config, base_dir)
        self.decider = Decider(config, base_dir)

    async def score(self, items: list[tuple[Scenario, Trajectory]]) -> list[Verdict]:
        return verify_all(self.verifier, [s for s, _ in items], [t for _, t in items])

    def policy_scorer(self) -> PolicyScorer:
        return self._scorer


# --- Ray Serve deployments ----------------------------------------------------------------------------------

_BACKEND: Backend | None = None  # set in each ingress replica when it starts


def _backend() -> Backend:
    assert _BACKEND is not None, "the ingress replica has not started"
    return _BACKEND


def set_backend(backend: Backend) -> None:
    # a module-level function: Serve ships the ingress class by value, whose own ``global`` would land in a
    # copy of this module's namespace; this function runs in the real one
    global _BACKEND
    _BACKEND = backend


def build_member(name: str, config: ServeConfig):
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


class ServeBackend:
    def __init__(self, config: ServeConfig, ensemble: Any, token_sha256: str | None,
                 base_dir: Path | None) -> None:
        self.config = config
        self.ensemble = ensemble
        if ensemble is None:
            from far.search.jobs.pipeline import RunConfig, build_verifier

            self.local = build_verifier(RunConfig(models=config.models, rewards=config.rewards,
                                                  verifier=config.verifier))
        self.token_sha256 = token_sha256
        self._scorer = PolicyScorer(config, base_dir)
        self.decider = Decider(config, base_dir)

    async def score(self, items: list[tuple[Scenario, Trajectory]]) -> list[Verdict]:
        if self.ensemble is None:  # topology "ingress": the members run in this replica
            scenarios, trajectories = [s for s, _ in items], [t for _, t in items]
            if "llm_judge" in self.config.verifier.members:  # slow: keep the event loop free
                return await asyncio.to_thread(verify_all, self.local, scenarios, trajectories)
            return verify_all(self.local, scenarios, trajectories)
        answer = await self.ensemble.score.remote(items)  # a batch travels as one call to each member
        if isinstance(answer, InputProblem):
            raise ValueError(answer.message)  # here, in the ingress: the route makes it a 422
        return answer

    def policy_scorer(self) -> PolicyScorer:
        return self._scorer


api = create_api(_backend)


@serve.deployment(name="ingress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
@serve.ingress(api)
class Ingress:
    def __init__(self, config_json: str, ensemble: Any, token_sha256: str | None, base_dir: str | None) -> None:
        set_backend(ServeBackend(ServeConfig.model_validate_json(config_json), ensemble, token_sha256,
                                 Path(base_dir) if base_dir else None))


def build_app(config: ServeConfig, token: str | None, base_dir: Path | None = None):
    """The Serve application: verifier deployments -> ensemble -> FastAPI ingress (``topology:
    deployments``), or the ensemble inside the ingress replicas (``topology: ingress``). Only the token's
    SHA-256 is passed on."""
    config_json = config.model_dump_json()
    digest = token_digest(token) if token else None
    ingress = Ingress.options(num_replicas=config.replicas)
    if config.topology == "ingress":
        return ingress.bind(config_json, None, digest, str(base_dir) if base_dir else None)
    members = [VerifierDeployment.options(name=f"verifier-{name}", num_replicas=config.replicas)
               .bind(name, config_json) for name in config.verifier.members]
    ensemble = EnsembleDeployment.options(num_replicas=config.replicas).bind(config_json, *members)
    return ingress.bind(config_json, ensemble, digest, str(base_dir) if base_dir else None)


def app_builder(args: dict[str, Any]):
    """For ``serve run serve/config.yaml``: ``args: {config: path/to/serve.yaml}``."""
    import os

    from far.serve.schemas import load_serve_config

    path = Path(args.get("config", "configs/serve.yaml"))
    config = load_serve_config(path).with_absolute_paths()
    # ``serve run`` starts Ray before this runs, so its processes may already hold the token: ``far serve``
    # takes it out of the environment first, and is the way to run with a token
    token = os.environ.pop(config.auth.token_env, None) or None
    from far.serve.schemas import MIN_TOKEN_LENGTH

    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise RuntimeError(f"the token in {config.auth.token_env} is shorter than {MIN_TOKEN_LENGTH} characters")
    if config.token_required() and not token:
        raise RuntimeError(f"{config.host} is not a loopback address: set {config.auth.token_env}")
    return build_app(config, token if config.token_required() else None, path.resolve().parent)
