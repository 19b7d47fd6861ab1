"""A Ray actor hosting one LM engine, and the proxy that makes it an ``LM`` again in the caller.

The actor restarts after a crash (``max_restarts``) and Ray retries the call that was in flight exactly once
(``max_task_retries=1``); if that fails too, or the call outlives ``timeout_s``, the proxy returns fault
results (ACTOR_DIED, MODEL_TIMEOUT) instead of raising, so a search never crashes on a model.
"""
from __future__ import annotations

import os
from typing import Any

import ray
from far.models.engines import EngineSpec, build_engine
from far.models.lm import GenerateRequest, GenerateResult, ScoreRequest, ScoreResult
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

MODEL_PROCESS_ENV = {
    "OMP_NUM_THREADS": "1",  # 2 torch threads on a busy 2-core machine were ~9-40x slower than 1
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


@ray.remote(max_restarts=2, max_task_retries=1)
class LMActor:
    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        self.engine = build_engine(spec)

    def model_id(self) -> str:
        return self.engine.model_id

    def pid(self) -> int:
        return os.getpid()

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        return self.engine.score(requests)

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return self.engine.generate(requests)


def gpus_available() -> bool:
    return ray.is_initialized() and ray.cluster_resources().get("GPU", 0) >= 1


def start_lm_actor(spec: EngineSpec, name: str | None = None) -> Any:
    """One engine per actor. vLLM gets a GPU where the cluster has one; CPU engines take no CPU reservation
    (num_cpus=0) so Tune trials can still be scheduled beside them on a small machine."""
    wants_gpu = spec.engine == "vllm" and gpus_available()
    options: dict[str, Any] = {
        "num_cpus": 0 if not wants_gpu else 1,
        "num_gpus": 1 if wants_gpu else 0,
        "runtime_env": {"env_vars": MODEL_PROCESS_ENV},
    }
    if name:
        options.update(name=name, get_if_exists=True)
    return LMActor.options(**options).remote(spec)


class ActorLM:
    """``LM`` over an ``LMActor`` handle; faults come back as data."""

    def __init__(self, handle: Any, timeout_s: float = 600.0) -> None:
        self.handle = handle
        self.timeout_s = timeout_s
        self.model_id = ray.get(handle.model_id.remote())

    def _call(self, method: str, requests: list, result_type: type) -> list:
        if not requests:
            return []
        reference = getattr(self.handle, method).remote(requests)
        try:
            return ray.get(reference, timeout=self.timeout_s)
        except GetTimeoutError:
            ray.cancel(reference, force=False)
            return [result_type(error="MODEL_TIMEOUT") for _ in requests]
        except RayActorError:
            return [result_type(error="ACTOR_DIED") for _ in requests]
        except RayTaskError:
            return [result_type(error="MODEL_ERROR") for _ in requests]

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        return self._call("score", requests, ScoreResult)

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return self._call("generate", requests, GenerateResult)
