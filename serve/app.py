"""FAR's REST API on Ray Serve: the FastAPI app (``create_api``) and the Serve application (``build_app``), a
FastAPI ingress running the verifier ensemble (``topology: ingress``, the default), or one deployment per verifier
and one composing them behind it (``topology: deployments``, ``far.serve.deployments``).

    far serve configs/serve.yaml                 # or: serve run serve/config.yaml (``app_builder``)

Endpoints (OpenAPI at ``/docs``): ``POST /v1/score/trajectory`` (and ``/v1/score/trajectories``, batched:
``far.serve.scoring``), ``POST /v1/score/policy`` (202 + ``GET /v1/jobs/{id}`` above ``sync_limit`` scenarios:
``far.serve.policy_scoring``), ``POST /v1/decide`` (``far.serve.decide``), ``GET /v1/healthz``, ``GET /v1/suites``.

Security: a bearer token is required whenever the app binds a non-loopback address (and on loopback with
``auth.require_on_loopback``); only its SHA-256 reaches the replicas (``far.serve.auth``). Bodies over
``max_body_bytes`` get 413; invalid bodies 422 with field paths; unknown suites 404; any other error a generic 500
with a request id -- no stack trace or secret in a response or a log line (``far.serve.middleware``).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from far.serve.auth import BearerToken, take_token, token_digest
from far.serve.backends import Backend, InProcessVerifier
from far.serve.decide import decide_routes
from far.serve.deployments import DeployedVerifier, EnsembleDeployment, VerifierDeployment
from far.serve.middleware import BodyLimit, InternalErrors, JsonBody
from far.serve.policy_scoring import job_routes, policy_routes
from far.serve.schemas import ServeConfig, SuiteInfo, load_serve_config
from far.serve.scoring import trajectory_routes
from fastapi import APIRouter, FastAPI
from ray import serve


def create_api(backend_of: Callable[[], Backend]) -> FastAPI:
    """The routes over a backend (``backend_of()`` returns it: in a Serve replica it is set at start). The
    token's digest and the body limit are read from the backend per request, so one module-level app serves any
    config."""
    from fastapi_offline import FastAPIOffline

    # /docs loads Swagger UI's script and styles from the package (served here), so it works offline
    api = FastAPIOffline(title="FAR", version="1.0", description="Failure-as-Reward: score agent trajectories "
                         "and policies with FAR's verifier ensemble.")
    # the last added runs first: the token, the body's size, its JSON, then internal errors around the routes
    api.add_middleware(InternalErrors)
    api.add_middleware(JsonBody)
    api.add_middleware(BodyLimit, limit_of=lambda: backend_of().config.max_body_bytes)
    api.add_middleware(BearerToken, digest_of=lambda: backend_of().token_sha256)
    api.include_router(service_routes(lambda: backend_of().config))
    api.include_router(trajectory_routes(backend_of))
    api.include_router(policy_routes(lambda: backend_of().policy_scorer()))
    api.include_router(decide_routes(lambda: backend_of().decider))
    api.include_router(job_routes(lambda: backend_of().policy_scorer()))
    return api


def service_routes(config_of: Callable[[], ServeConfig]) -> APIRouter:
    """``GET /v1/healthz`` (liveness, open without a token) and ``GET /v1/suites`` (the configured suites)."""
    router = APIRouter()

    @router.get("/v1/healthz")
    async def healthz() -> dict[str, Any]:
        verifier = config_of().verifier
        return {"status": "ok", "members": list(verifier.members), "aggregation": verifier.aggregation}

    @router.get("/v1/suites", response_model=list[SuiteInfo])
    async def suites() -> list[SuiteInfo]:
        return [SuiteInfo(name=name, spec=spec.model_dump(mode="json")) for name, spec in config_of().suites.items()]

    return router


# --- the Serve application ----------------------------------------------------------------------------------

_BACKEND: Backend | None = None  # set in each ingress replica when it starts


def _backend() -> Backend:
    assert _BACKEND is not None, "the ingress replica has not started"
    return _BACKEND


def set_backend(backend: Backend) -> None:
    # a module-level function: Serve ships the ingress class by value, whose own ``global`` would land in a
    # copy of this module's namespace; this function runs in the real one
    global _BACKEND
    _BACKEND = backend


api = create_api(_backend)


@serve.deployment(name="ingress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
@serve.ingress(api)
class Ingress:
    """The FastAPI app in a Serve replica; ``ensemble``: the ensemble deployment's handle, or None to run the
    verifier ensemble in this replica."""

    def __init__(self, config_json: str, ensemble: Any, token_sha256: str | None, base_dir: str | None) -> None:
        config = ServeConfig.model_validate_json(config_json)
        verifier = InProcessVerifier(config) if ensemble is None else DeployedVerifier(ensemble)
        set_backend(Backend(config, verifier, token_sha256, Path(base_dir) if base_dir else None))


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
    """For ``serve run serve/config.yaml``: ``args: {config: path/to/serve.yaml}``. ``serve run`` starts Ray
    before this runs, so its processes may already hold the token: ``far serve`` takes it out of the environment
    first, and is the way to run with a token."""
    path = Path(args.get("config", "configs/serve.yaml"))
    config = load_serve_config(path).with_absolute_paths()
    return build_app(config, take_token(config, path), path.resolve().parent)
