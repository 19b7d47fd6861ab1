"""``RayHost``: builds engines on long-lived Ray actors (one per distinct engine spec), for ``build_models``."""
from __future__ import annotations

import hashlib
from typing import Any

import ray
from far.cluster.actors import ActorLM, start_lm_actor
from far.models.backends import InProcessHost
from far.models.engines import EngineSpec, LazyLM, engine_model_id
from far.models.lm import LM
from far.rollout.errors import FarEnvironmentError


def ensure_ray(address: str | None = None, **init_options: Any) -> None:
    """Join ``address`` (or $RAY_ADDRESS), else start an embedded local Ray. A failure to start or join is
    one ``FarEnvironmentError`` line (its last line of detail), not Ray's traceback."""
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=init_options.pop("include_dashboard", False),
                     log_to_driver=init_options.pop("log_to_driver", False), **init_options)
        except Exception as error:  # Ray raises ConnectionError, TimeoutError, RuntimeError, ... with pages of text
            detail = next((line.strip() for line in reversed(str(error).splitlines()) if line.strip()),
                          type(error).__name__)
            where = f"join the Ray cluster at {address}" if address else "start a local Ray"
            hint = "check the address and that the cluster runs" if address else \
                "the machine may be short of memory or CPU: retry, or join a running cluster with --address"
            raise FarEnvironmentError(f"could not {where} ({type(error).__name__}: {detail[:200]}); {hint}") from None


class RayHost(InProcessHost):
    """Specs with ``actor: true`` run on actors; the rest stay in this process."""

    def __init__(self, timeout_s: float = 600.0) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        self.proxies: dict[str, LazyLM] = {}

    def lm(self, spec: EngineSpec, actor: bool) -> LM:
        if not actor:
            return super().lm(spec, actor=False)
        key = spec.model_dump_json()
        if key not in self.proxies:
            # no actor until a call misses the cache; copies in other processes find the same named actor
            self.proxies[key] = LazyLM(engine_model_id(spec), ActorStarter(spec, self.timeout_s))
        return self.proxies[key]

    def shutdown(self) -> None:
        for proxy in self.proxies.values():
            if proxy._lm is not None:
                ray.kill(proxy._lm.handle)
        self.proxies.clear()


def lm_actor_name(spec: EngineSpec) -> str:
    return "far-lm-" + hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:16]


class ActorStarter:
    """Starts (or joins) the named actor for a spec: picklable, so a ``LazyLM`` shipped to a rollout actor
    reaches the same engine instead of loading another copy."""

    def __init__(self, spec: EngineSpec, timeout_s: float) -> None:
        self.spec = spec
        self.timeout_s = timeout_s

    def __call__(self) -> LM:
        ensure_ray()
        return ActorLM(start_lm_actor(self.spec, name=lm_actor_name(self.spec)), timeout_s=self.timeout_s)
