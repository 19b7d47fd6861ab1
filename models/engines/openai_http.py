"""An OpenAI-compatible HTTP client engine (for a running vLLM server, or any compatible endpoint).

Batches go out as concurrent requests (the server batches them). Each request has a timeout and is retried
with exponential backoff on timeouts, connection errors, 429 and 5xx; what still fails becomes a fault
result (MODEL_TIMEOUT / MODEL_ERROR), never an exception. JSON-schema outputs use the server's
``response_format: {type: json_schema}``; scores read ``top_logprobs`` of the first generated token.
"""
from __future__ import annotations

import json
import math
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from far.models.lm import GenerateRequest, GenerateResult, ScoreRequest, ScoreResult

RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}


class HTTPFault(Exception):
    def __init__(self, fault: str, detail: str) -> None:
        super().__init__(detail)
        self.fault = fault


class OpenAICompatibleLM:
    def __init__(self, base_url: str, model: str, model_id: str | None = None, api_key: str | None = None,
                 timeout_s: float = 60.0, max_retries: int = 3, backoff_s: float = 0.5, concurrency: int = 16,
                 top_logprobs: int = 20) -> None:
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]
        self.model = model
        # The server cannot tell us its weights' hash: name the model (and its revision) in model_id.
        self.model_id = model_id or f"{model}@{self.base_url}"
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.concurrency = concurrency
        self.top_logprobs = top_logprobs

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = HTTPFault("MODEL_ERROR", "no attempt made")
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as error:
                last = HTTPFault("MODEL_ERROR", f"HTTP {error.code}")
                if error.code not in RETRYABLE_STATUS:
                    raise last from None
            except (TimeoutError, socket.timeout):
                last = HTTPFault("MODEL_TIMEOUT", f"no answer in {self.timeout_s}s")
            except urllib.error.URLError as error:
                is_timeout = isinstance(error.reason, (TimeoutError, socket.timeout))
                last = HTTPFault("MODEL_TIMEOUT" if is_timeout else "MODEL_ERROR", str(error.reason))
            except (json.JSONDecodeError, ConnectionError) as error:
                last = HTTPFault("MODEL_ERROR", type(error).__name__)
        raise last

    def _map(self, fn, items: list) -> list:
        if len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    def _chat_body(self, request_messages, **extra: Any) -> dict[str, Any]:
        return {"model": self.model, "messages": [m.model_dump() for m in request_messages], **extra}

    def _score_one(self, request: ScoreRequest) -> ScoreResult:
        started = time.perf_counter()
        try:
            answer = self._post("/v1/chat/completions", self._chat_body(
                request.messages, max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=self.top_logprobs))
            top = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        except HTTPFault as fault:
            return ScoreResult(error=fault.fault, latency_ms=(time.perf_counter() - started) * 1000)
        except (KeyError, IndexError, TypeError):
            return ScoreResult(error="MALFORMED_OUTPUT", latency_ms=(time.perf_counter() - started) * 1000)
        probabilities = tuple(
            sum(math.exp(entry["logprob"]) for entry in top if entry["token"].strip() == candidate)
            for candidate in request.candidates
        )
        return ScoreResult(probabilities=probabilities, latency_ms=(time.perf_counter() - started) * 1000)

    def _generate_one(self, request: GenerateRequest) -> GenerateResult:
        started = time.perf_counter()
        params = request.params
        extra: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p,
                                 "max_tokens": params.max_tokens, "seed": params.seed}
        if request.json_schema is not None:
            extra["response_format"] = {"type": "json_schema",
                                        "json_schema": {"name": "far", "schema": request.json_schema}}
        try:
            answer = self._post("/v1/chat/completions", self._chat_body(request.messages, **extra))
            text = answer["choices"][0]["message"]["content"] or ""
            tokens = int(answer.get("usage", {}).get("completion_tokens", 0))
        except HTTPFault as fault:
            return GenerateResult(error=fault.fault, latency_ms=(time.perf_counter() - started) * 1000)
        except (KeyError, IndexError, TypeError):
            return GenerateResult(error="MALFORMED_OUTPUT", latency_ms=(time.perf_counter() - started) * 1000)
        return GenerateResult(text=text, completion_tokens=tokens,
                              latency_ms=(time.perf_counter() - started) * 1000)

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        return self._map(self._score_one, requests)

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return self._map(self._generate_one, requests)
