"""``RayHost``: builds engines on long-lived Ray actors (one per distinct engine spec), for ``build_models``."""
from __future__ import annotations

from typing import Any

import ray

from cluster.actors import ActorLM, start_lm_actor
from rollout.backends import InProcessHost
from rollout.engines import EngineSpec, LazyLM, engine_model_id
from rollout.lm import LM


def ensure_ray(address: str | None = None, **init_options: Any) -> None:
    """Join ``address`` (or $RAY_ADDRESS), else start an embedded local Ray."""
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=init_options.pop("include_dashboard", False),
                 log_to_driver=init_options.pop("log_to_driver", False), **init_options)


class RayHost(InProcessHost):
    """Specs with ``actor: true`` run on actors; the rest stay in this process."""

    def __init__(self, timeout_s: float = 600.0) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        self.actors: dict[str, Any] = {}
        self.proxies: dict[str, LM] = {}

    def lm(self, spec: EngineSpec, actor: bool) -> LM:
        if not actor:
            return super().lm(spec, actor=False)
        key = spec.model_dump_json()
        if key not in self.proxies:

            def start() -> LM:
                ensure_ray()
                self.actors[key] = start_lm_actor(spec)
                return ActorLM(self.actors[key], timeout_s=self.timeout_s)

            self.proxies[key] = LazyLM(engine_model_id(spec), start)  # no actor until a call misses the cache
        return self.proxies[key]

    def shutdown(self) -> None:
        for handle in self.actors.values():
            ray.kill(handle)
        self.actors.clear()
        self.proxies.clear()
