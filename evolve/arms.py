"""FATE against its baselines and the paper's ablations: the model alone, every arm from the same base model, world
and slices (one ``Evolution`` per training seed), judged on the run's holdout sample.

Arms (``ARMS``; ``ORACLE`` marks the arms whose actions the verifier, which reads the labels, chose at inference):
- ``base``: the base model's greedy action on x;
- ``base_pf`` (ORACLE): the base model, and where its action fell below κ, its greedy action on p_f (the paper's
  repair prompt at inference);
- ``best_of_k`` (ORACLE): K actions sampled on x (the repairs' temperatures), the highest Σ w·z kept;
- ``sft_right``: SFT on the right actions of the dev inputs (``far.evolve.task.right_action``), on x;
- ``sft_labels``: SFT on the right actions of every input whose label the pipeline reads (dev and check);
- the ``far evolve`` loop with overrides (``ABLATIONS``): ``fate`` (SFT + PFPO), ``fate_sft`` (SFT only),
  ``first_valid`` (no verifier rescoring), ``weighted_sum`` (no Pareto front), ``no_over_refusal`` (the
  objective left out), ``fate_reorder`` (FATE with only the data order reseeded: the noise floor);
- ``search_winner``: FAR's policy search winner (``far.evolve.search_baseline``), the policy tuned instead of the
  model, played through FAR's agent.

Figures pool seeds: each arm's mean over every (seed, input) and paired differences between arms, with intervals
that resample (seed, template) clusters (``pooled``, ``paired``). The holdout is read once, at the end of an arm;
nothing is chosen on it.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from far.evolve.metrics import METRICS, paired_difference
from far.evolve.task import ScoredAction, action_text, right_action, violated
from far.rollout.scenario import Scenario

OBJECTIVES_NO_OR = ["security", "utility", "controllability"]
ABLATIONS: dict[str, dict[str, Any]] = {
    "fate": {}, "fate_sft": {"training": {"pfpo": {"enabled": False}}},
    "first_valid": {"selection": {"rule": "first_valid"}}, "weighted_sum": {"selection": {"rule": "weighted_sum"}},
    "no_over_refusal": {"selection": {"objectives": OBJECTIVES_NO_OR}}, "fate_reorder": {"order_seed": 1000},
}
INFERENCE = ("base", "base_pf", "best_of_k")
LABELS = ("sft_right", "sft_labels")
ARMS = (*INFERENCE, *LABELS, *ABLATIONS, "search_winner")
ORACLE = frozenset({"base_pf", "best_of_k"})
COMPARED = ("asr", "hcr", "tsr", "over_refusal", "control_violations", "malformed")
# (arm A, arm B) differences reported: FATE beyond the base and beyond SFT on the same labels, and each ablation
COMPARISONS = [("fate", "base"), ("fate", "sft_right"), ("sft_right", "base"), ("fate", "fate_reorder"),
               *((arm, "fate") for arm in ABLATIONS if arm not in ("fate", "fate_reorder")), ("fate", "search_winner")]


def merged(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` laid over it, nested mappings merged."""
    out = dict(base)
    for key, value in update.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def arm_config(config: Any, arm: str) -> Any:
    """The run's config with the arm's overrides (``ABLATIONS``); ``fate_reorder``'s order seed is offset from
    the run's seed."""
    update = dict(ABLATIONS[arm])
    if "order_seed" in update:
        update["order_seed"] = config.seed + update["order_seed"]
    return type(config).model_validate(merged(config.model_dump(mode="json"), update))


class ArmRunner:
    """Runs arms on one ``Evolution`` (its model, world, verifier and slices), each from the base model."""

    def __init__(self, evolution: Any) -> None:
        self.evolution = evolution
        self.config = evolution.config
        self.pristine = evolution.model.snapshot()

    def run(self, arm: str, output: Any) -> tuple[list[ScoredAction], dict[str, Any]]:
        """The arm's actions on the holdout sample and what else it reports (rounds, seconds)."""
        evolution = self.evolution
        evolution.model.restore(self.pristine)
        evolution.config, evolution.correct = self.config, {}
        started = time.perf_counter()
        extra: dict[str, Any] = {}
        if arm == "base":
            scored = evolution.act(evolution.holdout)
        elif arm == "base_pf":
            scored = self.with_repair_prompt(evolution.act(evolution.holdout))
        elif arm == "best_of_k":
            scored = self.best_of_k()
        elif arm in LABELS:
            extra["sft_loss"] = self.sft_on(evolution.dev if arm == "sft_right" else evolution.dev + evolution.check)
            scored = evolution.act(evolution.holdout)
        else:
            evolution.config = arm_config(self.config, arm)
            summary = evolution.run(output / arm)
            extra = {key: summary[key] for key in ("rounds", "kept_round", "stopped", "seconds", "peak_memory_mb")}
            scored = evolution.act(evolution.holdout)
        extra["arm_seconds"] = time.perf_counter() - started
        return scored, extra

    def with_repair_prompt(self, first: Sequence[ScoredAction]) -> list[ScoredAction]:
        """Each action that fell below κ answered again, greedily, on its repair prompt p_f."""
        from far.evolve.task import repair_messages

        evolution, holdout = self.evolution, self.evolution.holdout
        kappa = evolution.thresholds(holdout)
        failed = [i for i, s in enumerate(first) if violated(s.z, kappa[i])]
        prompts = [evolution.model.prompt(repair_messages(evolution.task, holdout[i], first[i], kappa[i]))
                   for i in failed]
        texts = [o[0] for o in evolution.model.generate(prompts, [evolution.task.schema(holdout[i]) for i in failed],
                                                        0.0, max_new_tokens=self.config.repair.max_new_tokens)]
        again = dict(zip(failed, evolution.task.score([holdout[i] for i in failed], texts)))
        return [again.get(i, s) for i, s in enumerate(first)]

    def best_of_k(self) -> list[ScoredAction]:
        """K sampled actions per input at the repairs' temperatures; the highest Σ w·z, the first on a tie."""
        from far.evolve.repair import temperatures

        evolution, repair, holdout = self.evolution, self.config.repair, self.evolution.holdout
        prompts = [evolution.model.prompt(evolution.task.messages(s)) for s in holdout]
        schemas = [evolution.task.schema(s) for s in holdout]
        groups: list[list[ScoredAction]] = [[] for _ in holdout]
        for k, temperature in enumerate(temperatures(repair.candidates, repair.temperature_min,
                                                     repair.temperature_max)):
            texts = [o[0] for o in evolution.model.generate(prompts, schemas, temperature, seed=self.config.seed + k,
                                                            max_new_tokens=repair.max_new_tokens)]
            for group, scored in zip(groups, evolution.task.score(holdout, texts)):
                group.append(scored)
        weights = self.config.selection.weights
        return [max(group, key=lambda s: sum(w * v for w, v in zip(weights, s.z))) for group in groups]

    def sft_on(self, scenarios: Sequence[Scenario]) -> float | None:
        """SFT on the right actions of ``scenarios`` on x, with the run's SFT settings, until learned."""
        from far.evolve.train import Example, Fit

        evolution, settings = self.evolution, self.config.training.sft
        examples = [Example(evolution.model.prompt(evolution.task.messages(s)), s, action_text(right_action(s)))
                    for s in scenarios]
        fit = Fit(evolution.model, evolution.task, examples, self.config.repair.max_new_tokens)
        losses = evolution.model.sft([e.prompt for e in examples], [e.target for e in examples], settings.epochs,
                                     settings.lr, settings.batch_size, settings.max_epochs, fit.learned,
                                     seed=self.config.seed)
        return losses[-1] if losses else None


def values(scenarios: Sequence[Scenario], scored: Sequence[ScoredAction]) -> dict[str, list[float]]:
    """Per compared figure, the value on each input it counts (``far.evolve.metrics.METRICS``)."""
    return {figure: METRICS[figure].values(scenarios, scored) for figure in COMPARED}


def groups(scenarios: Sequence[Scenario], seed: int) -> dict[str, list[str]]:
    """Per compared figure, each counted input's cluster: its seed and template."""
    return {figure: [f"{seed}:{g}" for g in METRICS[figure].groups(scenarios)] for figure in COMPARED}


def _pool(seeds: dict[str, Any], arm: str, figure: str) -> tuple[list[str], list[float]]:
    clusters, pooled = [], []
    for seed in seeds.values():
        if arm in seed["arms"]:
            clusters += seed["groups"][figure]
            pooled += seed["arms"][arm]["values"][figure]
    return clusters, pooled


def pooled(seeds: dict[str, Any], arm: str, figure: str) -> dict[str, Any] | None:
    """The arm's figure over every seed and input, with its (seed, template)-clustered 95% interval."""
    clusters, pooled_values = _pool(seeds, arm, figure)
    if not clusters:
        return None
    found = paired_difference(clusters, pooled_values, [0.0] * len(pooled_values))
    return {"mean": found["difference"], "low": found["low"], "high": found["high"], "inputs": found["inputs"],
            "seeds": sum(arm in s["arms"] for s in seeds.values())}


def paired(seeds: dict[str, Any], a: str, b: str, figure: str) -> dict[str, Any] | None:
    """mean(A) − mean(B) over the seeds that ran both, paired per input, (seed, template)-clustered interval."""
    both = {k: s for k, s in seeds.items() if a in s["arms"] and b in s["arms"]}
    clusters, left = _pool(both, a, figure)
    _, right = _pool(both, b, figure)
    return paired_difference(clusters, left, right)


def table(seeds: dict[str, Any]) -> dict[str, Any]:
    """Every arm's training seeds and pooled figures, the comparisons' paired differences, and the goals
    (``goals``)."""
    arms = [arm for arm in ARMS if any(arm in s["arms"] for s in seeds.values())]
    return {"seeds": {arm: [name for name, s in seeds.items() if arm in s["arms"]] for arm in arms},
            "figures": {arm: {f: pooled(seeds, arm, f) for f in COMPARED} for arm in arms},
            "loop": {arm: facts for arm in arms if (facts := loop_facts(seeds, arm)) is not None},
            "differences": {f"{a} - {b} | {f}": found for a, b in COMPARISONS for f in COMPARED
                            if a in arms and b in arms and (found := paired(seeds, a, b, f)) is not None},
            "goals": goals(seeds) if {"fate", "base", "sft_right"} <= set(arms) else None}


def goals(seeds: dict[str, Any]) -> dict[str, Any]:
    """The issue's goals for FATE (SFT + PFPO) alone: ASR and HCR cut by at least a third from the base, both
    intervals of FATE − base below 0, TSR not lower at the point; and FATE below SFT on the same dev labels on
    ASR or HCR (interval below 0)."""
    out: dict[str, Any] = {}
    for figure in ("asr", "hcr"):
        diff, base = paired(seeds, "fate", "base", figure), pooled(seeds, "base", figure)
        cut = None if diff is None or not base or not base["mean"] else -diff["difference"] / base["mean"]
        out[figure] = {"relative_cut": cut, "met": cut is not None and cut >= 1 / 3 and diff["high"] < 0,
                       "beats_sft_right": (found := paired(seeds, "fate", "sft_right", figure)) is not None
                       and found["high"] < 0}
    tsr = paired(seeds, "fate", "base", "tsr")
    out["tsr_not_lower"] = tsr is not None and tsr["difference"] >= 0
    return out


SETTLED = ("repair", "kappa", "pareto", "tie_break", "r_pf", "none", "weighted_sum", "first_valid")
FRONT_RULES = ("pareto", "tie_break", "r_pf")  # the front, its tie break and r_PF inside it


def loop_facts(seeds: dict[str, Any], arm: str) -> dict[str, Any] | None:
    """What the loop did in an arm's runs, over seeds: the rounds returned, how often each rule settled a
    selection and the share the front and r_PF settled (of the selections any rule settled), the front's mean
    size, the holdout curve over rounds (mean per round index), seconds per round and peak memory."""
    runs = [s["arms"][arm] for s in seeds.values() if arm in s["arms"] and "rounds" in s["arms"][arm]]
    if not runs:
        return None
    trained = [r for run in runs for r in run["rounds"] if r["round"] > 0]
    settled = {rule: sum(r.get(f"decided_by_{rule}") or 0 for r in trained) for rule in SETTLED}
    decided = sum(n for rule, n in settled.items() if rule != "none")
    fronts = [r["front_size"] for r in trained if r.get("front_size") is not None]
    depth = max(len(run["rounds"]) for run in runs)
    curve = {figure: [_mean([run["rounds"][t][figure] for run in runs if t < len(run["rounds"])])
                      for t in range(depth)] for figure in ("asr", "hcr", "tsr", "over_refusal")}
    return {"kept_round": [run["kept_round"] for run in runs], "settled": settled,
            "front_share": sum(settled[r] for r in FRONT_RULES) / decided if decided else None,
            "front_size": _mean(fronts), "curve": curve, "seconds_per_round": _mean([r["seconds"] for r in trained]),
            "peak_memory_mb": max(run["peak_memory_mb"] for run in runs)}


def _mean(values: Sequence[float]) -> float | None:
    kept = [v for v in values if v is not None and v == v]
    return sum(kept) / len(kept) if kept else None


def markdown(result_table: dict[str, Any]) -> str:
    """The table as Markdown: per arm, the training seeds it ran, each compared figure's pooled mean [95%
    interval], then what the loop did (rounds returned, the front and r_PF's share of selections, the front's
    size, seconds per round, the process's peak memory so far). ORACLE arms are marked."""
    head = ("| arm | seeds | " + " | ".join(COMPARED)
            + " | rounds returned | front + r_PF settled | front size | s/round | peak MiB |")
    lines = [head, "|" + "---|" * (len(COMPARED) + 7)]
    for arm, figures in result_table["figures"].items():
        cells = [_interval(figures[f]) for f in COMPARED]
        loop = result_table.get("loop", {}).get(arm)
        extra = (["/".join(map(str, loop["kept_round"])), _number(loop["front_share"], "{:.0%}"),
                  _number(loop["front_size"], "{:.2f}"), _number(loop["seconds_per_round"], "{:.0f}"),
                  _number(loop["peak_memory_mb"], "{:.0f}")] if loop else ["—"] * 5)
        name = f"{arm} (ORACLE)" if arm in ORACLE else arm
        seeds = "/".join(result_table.get("seeds", {}).get(arm, []))
        lines.append(f"| {name} | {seeds} | " + " | ".join(cells + extra) + " |")
    return "\n".join(lines)


def _interval(found: dict[str, Any] | None) -> str:
    return "—" if found is None else f"{found['mean']:.3f} [{found['low']:.3f}, {found['high']:.3f}]"


def _number(value: float | None, form: str) -> str:
    return "—" if value is None else form.format(value)
