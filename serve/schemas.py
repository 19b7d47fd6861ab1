"""Request and response bodies of FAR's REST API (``/v1``), and the service's configuration."""
from __future__ import annotations

import hashlib
import ipaddress
import json
from pathlib import Path
from typing import Any, Literal

from far.models.backends import ModelsConfig
from far.rollout.agent import Costs
from far.rollout.guard import Decision, ReadItem
from far.rollout.policy import Policy
from far.rollout.scenario import Scenario, ToolAction
from far.rollout.trajectory_io import TrajectoryModel
from far.search.evaluation.results import PolicyResult
from far.search.ranking.gate import GateConfig
from far.suites import SuiteSpec
from far.verifiers.ensemble import EnsembleConfig
from far.verifiers.verdict import Z_DIMENSIONS, Failure, Verdict
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_BATCH = 256
MIN_TOKEN_LENGTH = 32  # e.g. 32 random bytes, URL-safe base64: 43 characters
MAKE_TOKEN = "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class AuthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    token_env: str = Field("FAR_SERVE_TOKEN", description="environment variable holding the bearer token")
    require_on_loopback: bool = Field(False, description="also require the token on 127.0.0.1 / ::1")


class JobsConfig(BaseModel):
    """Where policy-scoring jobs are kept (``far.serve.jobs``) and for how long."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    database: str | None = Field(None, description="a SQLite file path or sqlite:///PATH URL (relative: to the "
                                 "working directory); default <output>/jobs.sqlite")
    retention_s: float = Field(7 * 86400.0, ge=60, allow_inf_nan=False, description="finished jobs kept this long "
                               "(at least a minute, so a client polling a job sees it finish)")
    max_jobs: int = Field(10_000, ge=1, description="finished jobs beyond this many are pruned, oldest first")
    lease_s: float = Field(30.0, gt=0, allow_inf_nan=False, description="a running job whose replica has not "
                           "renewed it for this long is taken up by another replica")
    max_attempts: int = Field(3, ge=1, description="a job whose replica stopped this many times is failed")

    @field_validator("database")
    @classmethod
    def _sqlite_only(cls, database: str | None) -> str | None:
        if database and "://" in database and not database.startswith("sqlite:///"):
            raise ValueError(f"{database.split('://')[0]}:// is not supported: give a SQLite file path or a "
                             "sqlite:///PATH URL")
        return database


class GuardConfig(BaseModel):
    """``guard:``: the policy file ``POST /v1/decide`` enforces (``far search`` writes it), where its decisions are
    logged, and whether it only logs (shadow mode: every answer is execute, ``would`` holds the decision)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy_file: str = Field(min_length=1, description="relative paths: to the config's folder")
    audit_log: str | None = Field(None, description="an append-only JSONL log of every decision (relative: to the "
                                                     "config's folder)")
    shadow: bool = False


class DecideItem(BaseModel):
    """One proposed call: the user's request, what the agent has read so far, the call."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    request: str
    read: list[ReadItem | str] = Field(default_factory=list)
    call: ToolAction
    argument_roles: dict[str, Literal["target", "payload"]] = Field(default_factory=dict)


class DecideRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    items: list[DecideItem] = Field(min_length=1, max_length=256)


class DecideResponse(BaseModel):
    decisions: list[Decision]


class ServeConfig(BaseModel):
    """``far serve CONFIG.yaml``: where to listen, the verifier ensemble, and the suites policies are scored on."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    auth: AuthConfig = AuthConfig()
    max_body_bytes: int = Field(1_000_000, ge=1024)
    sync_limit: int = Field(200, ge=0, description="policy scorings over more scenarios run as jobs (202)")
    verifier: EnsembleConfig = EnsembleConfig(members=("rules", "environment"))
    rewards: dict[str, Any] | str | None = None
    costs: Costs = Costs()
    gate: GateConfig = GateConfig()
    models: ModelsConfig = ModelsConfig()
    suites: dict[str, SuiteSpec] = Field(default_factory=lambda: {"edge_cloud": SuiteSpec(name="edge_cloud")})
    replicas: int = Field(1, ge=1, description="replicas per deployment")
    guard: GuardConfig | None = Field(None, description="the policy POST /v1/decide enforces (None: no such route)")
    output: str = Field("results/serve", description="the service's folder (relative: to the working directory): "
                        "the job database")
    jobs: JobsConfig = JobsConfig()
    topology: Literal["deployments", "ingress"] = Field(
        "ingress", description="ingress (the default: one hop fewer per request): the ensemble runs "
        "inside the ingress replicas; deployments: one Serve deployment per verifier and one composing them "
        "(members scale on their own, e.g. an LLM judge on its own replicas)")

    @model_validator(mode="after")
    def _names(self) -> "ServeConfig":
        bad = [name for name in self.suites if not name.replace("_", "").replace("-", "").isalnum()]
        if bad:
            raise ValueError(f"suite names must be letters, digits, '-' or '_': {bad}")
        if "cloud_probe" in self.verifier.members:  # its members score requests with no run's fitted models
            raise ValueError("verifier member cloud_probe is not served: it reads a run's fitted cloud model (use "
                             "it in far evaluate, search or evolve)")
        return self

    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def token_required(self) -> bool:
        return not self.loopback() or self.auth.require_on_loopback

    def jobs_database(self, base: Path | None = None) -> Path:
        """The job database's file: ``jobs.database``, else ``<output>/jobs.sqlite``; a relative one is taken
        from ``base`` (default: the working directory, as every command's ``output``)."""
        if self.jobs.database:
            path = Path(self.jobs.database.removeprefix("sqlite:///")).expanduser()
        else:
            path = Path(self.output).expanduser() / "jobs.sqlite"
        return path if path.is_absolute() else (base or Path.cwd()) / path

    def jobs_scope(self) -> str:
        """What a job's result depends on (suites, models, verifier, rewards, costs, gate): jobs are claimed
        only by services with the same, so a shared job database never re-runs a job under another config."""
        scoring = self.model_dump(mode="json", include={"suites", "models", "verifier", "rewards", "costs", "gate"})
        return hashlib.sha256(json.dumps(scoring, sort_keys=True).encode()).hexdigest()[:16]

    def with_absolute_paths(self) -> "ServeConfig":
        """This config with the job database fixed to an absolute path: the replicas run elsewhere (their working
        directory is Ray's), so the command that starts them resolves it."""
        return self.model_copy(update={"jobs": self.jobs.model_copy(update={"database": str(self.jobs_database())})})


class ScoreTrajectoryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scenario: Scenario
    trajectory: TrajectoryModel

    @model_validator(mode="after")
    def _same_scenario(self) -> "ScoreTrajectoryRequest":
        if self.trajectory.scenario_id != self.scenario.id:
            raise ValueError(f"trajectory.scenario_id {self.trajectory.scenario_id!r} is not scenario.id "
                             f"{self.scenario.id!r}")
        return self


class ScoreTrajectoriesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[ScoreTrajectoryRequest] = Field(min_length=1, max_length=MAX_BATCH)


class ScoreTrajectoryResponse(BaseModel):
    z: dict[str, float]
    members: dict[str, dict[str, float | None]]
    disagreement: dict[str, float]
    review: bool
    failures: list[Failure]  # with attribution: where it showed, the decision behind it, the parameter
    successes: list[str]
    reward: float
    critical_failures: int
    benign: bool = Field(description="nothing in the scenario was to be refused: counted in the over-refusal rate")


class ScoreTrajectoriesResponse(BaseModel):
    results: list[ScoreTrajectoryResponse]


def verdict_response(verdict: Verdict) -> ScoreTrajectoryResponse:
    breakdown = verdict.breakdown
    z = dict(zip(Z_DIMENSIONS, verdict.z))
    return ScoreTrajectoryResponse(
        z=z, members=breakdown.get("members", {"rules": z}),
        disagreement=breakdown.get("disagreement", {d: 0.0 for d in Z_DIMENSIONS}),
        review=bool(breakdown.get("review", False)),
        failures=list(verdict.failures),
        successes=[s.value for s in verdict.successes], reward=verdict.reward,
        critical_failures=verdict.critical_failures, benign=verdict.benign,
    )


class ScorePolicyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: Policy
    suite: str = Field(min_length=1, max_length=100)
    split: Literal["train", "holdout"] = "holdout"
    limit: int | None = Field(None, ge=1, le=1_000_000, description="score only the first N scenarios")


class PolicyScore(BaseModel):
    suite: str
    result: PolicyResult  # critical failures, reward, cost, failure counts, z means, reward lost by parameter
    gate: dict[str, Any]


class JobStatus(BaseModel):
    job_id: str
    status: Literal["queued", "running", "done", "failed"]
    result: PolicyScore | None = None
    error: str | None = None  # why it failed
    created: float | None = None  # Unix seconds
    updated: float | None = None
    attempts: int = 0  # times a replica took it up (more than one: a replica running it stopped)


class SuiteInfo(BaseModel):
    name: str
    spec: dict[str, Any]


def load_serve_config(path: str | Path) -> ServeConfig:
    from far.rollout.errors import from_validation_error
    from far.rollout.io import load_mapping
    from pydantic import ValidationError

    raw = load_mapping(path)
    rewards = raw.get("rewards")
    if isinstance(rewards, str):  # a path, relative to this file: inline the table
        table_path = Path(rewards) if Path(rewards).is_absolute() else Path(path).resolve().parent / rewards
        table = load_mapping(table_path)
        raw = {**raw, "rewards": table.get("rewards", table)}
    try:
        return ServeConfig.model_validate(raw)
    except ValidationError as error:
        raise from_validation_error(error, file=path) from None
