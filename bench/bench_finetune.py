"""Fine-tuned reviewers (issue 14's survey, continued): is a classifier trained end to end on train a better
cloud guard than the frozen-feature probes FAR ships? Same data and metrics as ``bench_real.py survey``.

    python bench/bench_finetune.py [minilm] [smollm2] [--agentdojo banking,slack] [--epochs N]

minilm   all-MiniLM-L6-v2 (22M) with a classification head, every weight trained (a cross-encoder over the
         text the guard sees, action first): FAR's ``finetuned`` cloud backend (models/finetuned.py).
smollm2  SmolLM2-135M-Instruct with a classification head and a LoRA adapter (r=8 on the attention
         projections; the head trained in full).

Each is trained on one suite's train split (seeded; class-balanced loss) and scored on both suites' holdouts
(AUROC, TPR at 1% / 5% FPR), like the probes. Train sizes, epochs and seconds per epoch are recorded.
Writes the ``finetune`` section of bench/out/real_models.json.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from far.harness import read_result, run, write_result
from far.search.evaluation.guards import roc_figures, survey_data, survey_suites

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")


def load(name: str):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    from far.models.weights import smollm2
    from peft import LoraConfig, get_peft_model

    weights = smollm2()
    tokenizer = AutoTokenizer.from_pretrained(weights.path)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(weights.path, num_labels=2, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="SEQ_CLS",
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    return model, tokenizer, {"max_tokens": 192, "lr": 5e-4, "batch": 8, "what": "SmolLM2-135M LoRA r=8 classifier"}


def batches(texts, tokenizer, size: int, max_tokens: int):
    for start in range(0, len(texts), size):
        yield start, tokenizer(texts[start:start + size], return_tensors="pt", padding=True, truncation=True,
                               max_length=max_tokens)


def backend_scores(train, holdouts: dict, epochs: int) -> list[dict]:
    """MiniLM through FAR's own ``finetuned`` cloud backend (checkpoint cached by content hash)."""
    from far.models.finetuned import FinetunedConfig, FinetunedReviewCloud
    from far.models.reviewer import unsafe_label

    cloud = FinetunedReviewCloud(FinetunedConfig(epochs=epochs))
    started = time.perf_counter()
    cloud.fit(train, progress=lambda m: print(m, flush=True))
    fit_seconds = time.perf_counter() - started
    rows = []
    for evaluated, scenarios in holdouts.items():
        started = time.perf_counter()
        scores = cloud.unsafe_probability(scenarios, [s.proposed_action for s in scenarios])
        truth = np.array([unsafe_label(s) for s in scenarios])
        rows.append({"model": "all-MiniLM-L6-v2 fine-tuned (finetuned backend)", "train_n": len(train),
                     "epochs": epochs, "fit_seconds": fit_seconds, "evaluated_on": f"{evaluated} holdout",
                     "n": len(scenarios), "positives": int(truth.sum()),
                     "decisions_per_s": len(scenarios) / (time.perf_counter() - started),
                     **roc_figures(truth, np.array(scores))})
        print(f"  {rows[-1]['model']} -> {evaluated}: AUROC {rows[-1]['auroc']:.3f}", flush=True)
    return rows


def train_and_score(name: str, train, holdouts: dict, epochs: int) -> list[dict]:
    import torch

    if name == "minilm":
        return backend_scores(train, holdouts, epochs)

    from far.models.probe import probe_text
    from far.models.reviewer import unsafe_label

    model, tokenizer, options = load(name)
    texts = [probe_text(s) for s in train]
    labels = torch.tensor([int(unsafe_label(s)) for s in train])
    counts = torch.bincount(labels, minlength=2).float()
    loss_fn = torch.nn.CrossEntropyLoss(weight=counts.sum() / (2 * counts.clamp(min=1)))  # class-balanced
    optimiser = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=options["lr"])
    generator = np.random.default_rng(0)
    epoch_seconds = []
    model.train()
    for epoch in range(epochs):
        order = generator.permutation(len(texts))
        shuffled = [texts[i] for i in order]
        started = time.perf_counter()
        for start, batch in batches(shuffled, tokenizer, options["batch"], options["max_tokens"]):
            target = labels[order[start:start + options["batch"]]]
            loss = loss_fn(model(**batch).logits, target)
            loss.backward()
            optimiser.step()
            optimiser.zero_grad()
            if start // options["batch"] % 20 == 0:
                print(f"    {name} epoch {epoch + 1}: {start}/{len(texts)} loss {loss.item():.3f}", flush=True)
        epoch_seconds.append(time.perf_counter() - started)
    model.eval()
    rows = []
    for evaluated, scenarios in holdouts.items():
        started = time.perf_counter()
        scores = []
        with torch.no_grad():
            for _, batch in batches([probe_text(s) for s in scenarios], tokenizer, 32, options["max_tokens"]):
                scores.extend(torch.softmax(model(**batch).logits, dim=-1)[:, 1].tolist())
        rate = len(scenarios) / (time.perf_counter() - started)
        truth = np.array([unsafe_label(s) for s in scenarios])
        rows.append({"model": options["what"], "train_n": len(texts), "epochs": epochs,
                     "seconds_per_epoch": float(np.mean(epoch_seconds)), "evaluated_on": f"{evaluated} holdout",
                     "n": len(scenarios), "positives": int(truth.sum()), "decisions_per_s": rate,
                     **roc_figures(truth, np.array(scores))})
        print(f"  {options['what']} -> {evaluated}: AUROC {rows[-1]['auroc']:.3f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*", default=["minilm", "smollm2"])
    parser.add_argument("--agentdojo", default="banking,slack")
    parser.add_argument("--fit-on", default="edge_cloud,agentdojo")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--output", default=str(ROOT / "bench" / "out" / "real_models.json"))
    args = parser.parse_args()
    data = survey_data(survey_suites(args.agentdojo.split(",")), lambda message: print(message, flush=True))
    holdouts = {name: d["holdout"] for name, d in data.items()}
    out = Path(args.output)
    for name in args.models:
        for fit_on in args.fit_on.split(","):
            print(f"{name}: fitting on {fit_on} train ({len(data[fit_on]['train'])})", flush=True)
            rows = [{**row, "fitted_on": f"{fit_on} train"}
                    for row in train_and_score(name, data[fit_on]["train"], holdouts, args.epochs)]
            results = read_result(out)
            section = results.setdefault("finetune", {})
            section[f"{name}/{fit_on}"] = rows
            write_result(out, results)  # after each model: a long run keeps what it measured
    print(f"wrote {out}")


if __name__ == "__main__":
    run(main)
