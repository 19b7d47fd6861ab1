"""Transformers engine on CPU: batched next-token scoring and generation for small models such as SmolLM2.

A request with a ``json_schema`` is decoded under that schema's grammar (xgrammar's logits processor: at each
step only tokens that keep the output a valid prefix of a schema-conforming JSON document are allowed), as the
vLLM and HTTP engines do, so every answer parses unless it runs out of ``max_tokens``. Callers still parse
strictly (a malformed answer is a MALFORMED_OUTPUT fault, not a crash).
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from far.models.lm import GenerateRequest, GenerateResult, ScoreRequest, ScoreResult
from far.models.weights import LocalModel, offline


class TransformersLM:
    def __init__(self, model: LocalModel, threads: int = 1, batch_size: int = 16) -> None:
        offline()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(threads)
        self.torch = torch
        self.model_id = model.lm_identity("transformers", {"threads": threads, "batch_size": batch_size})
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(model.path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model.path, dtype=torch.float32)
        self.model.eval()
        self._candidate_ids: dict[str, list[int]] = {}
        self._grammar_compiler: Any = None
        self._grammars: dict[str, Any] = {}

    def _schema_processor(self, schema: dict[str, Any]) -> Any:
        """A fresh logits processor constraining one generation to ``schema`` (compiled grammars are kept)."""
        import xgrammar

        if self._grammar_compiler is None:
            info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.model.config.vocab_size)
            self._grammar_compiler = xgrammar.GrammarCompiler(info)
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            # compact JSON: whitespace costs a small model tokens (time) and nothing else
            self._grammars[key] = self._grammar_compiler.compile_json_schema(key, strict_mode=True,
                                                                             any_whitespace=False)
        return xgrammar.contrib.hf.LogitsProcessor(self._grammars[key])

    def _prompt(self, messages) -> str:
        return self.tokenizer.apply_chat_template([m.model_dump() for m in messages], tokenize=False,
                                                  add_generation_prompt=True)

    def _token_ids(self, candidate: str) -> list[int]:
        """First-token ids of the candidate as the model may write it: bare and after a space."""
        if candidate not in self._candidate_ids:
            ids = {self.tokenizer.encode(form, add_special_tokens=False)[0] for form in (candidate, " " + candidate)}
            self._candidate_ids[candidate] = sorted(ids)
        return self._candidate_ids[candidate]

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        torch = self.torch
        results: list[ScoreResult] = []
        for start in range(0, len(requests), self.batch_size):
            batch = requests[start:start + self.batch_size]
            started = time.perf_counter()
            encoded = self.tokenizer([self._prompt(r.messages) for r in batch], return_tensors="pt", padding=True)
            with torch.inference_mode():
                logits = self.model(**encoded).logits[:, -1, :]
            probabilities = torch.softmax(logits.float(), dim=-1)
            latency = (time.perf_counter() - started) * 1000 / len(batch)
            for row, request in zip(probabilities, batch):
                results.append(ScoreResult(
                    probabilities=tuple(float(row[self._token_ids(c)].sum()) for c in request.candidates),
                    latency_ms=latency,
                ))
        return results

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        torch = self.torch
        results: list[GenerateResult] = []
        for request in requests:  # one at a time: a per-request seed must not depend on batch neighbours
            started = time.perf_counter()
            params = request.params
            encoded = self.tokenizer([self._prompt(request.messages)], return_tensors="pt")
            generator_kwargs = {}
            if params.temperature > 0:
                torch.manual_seed(params.seed)
                generator_kwargs = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p}
            else:
                generator_kwargs = {"do_sample": False}
            if request.json_schema is not None:
                generator_kwargs["logits_processor"] = [self._schema_processor(request.json_schema)]
            with torch.inference_mode():
                output = self.model.generate(**encoded, max_new_tokens=params.max_tokens,
                                             pad_token_id=self.tokenizer.pad_token_id, **generator_kwargs)
            new_tokens = output[0, encoded["input_ids"].shape[1]:]
            results.append(GenerateResult(
                text=self.tokenizer.decode(new_tokens, skip_special_tokens=True),
                completion_tokens=int(new_tokens.shape[0]),
                latency_ms=(time.perf_counter() - started) * 1000,
            ))
        return results
