"""FATE's rounds, the orchestrator: each stage lives in its own module with a pure core.

Round t (π_t is the current model):
1. collect (``far.evolve.collect``): π_t decides greedily on the dev slice; every decision whose z falls below κ
   (lowered per input to what a valid decision attains) is a failure f = (x, a, z);
2. repair (``far.evolve.repair``): p_f = Prompt(x, a, z) is answered K times by π_t itself, each candidate scored;
3. select (``far.evolve.select``): κ filter → Pareto front of z → tie break (reward table, then cost) → q* ∝
   exp(β·r) → a* ~ q*; the replay buffer R_t = {(p_f, a*, z)} is saved, and which rule settled each failure;
4. train (``far.evolve.train``): LoRA SFT on a* on the plain decision prompt, beside rehearsed correct decisions,
   until learned; 5. PFPO on the same prompts (clip fraction and KL reported);
6. calibrate (``far.evolve.calibrate``): the decision rule (head, caution) refitted on the calibration slice;
7. gate (``far.evolve.acceptance``): on the check slice (train templates none of the lessons taught), a round that
   raises the model's own ASR or HCR is rolled back, one that is no progress ends the run, and the run returns
   the round that handles the least harm there, then has the best own-TSR. The holdout is judged after every
   round for reporting only.

Evaluation-only data never enters a lesson nor any fit (``require_trainable``, checked on the whole train split
before anything loads, and on every lesson).
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from far.evolve.acceptance import (
    NO_HARM,
    ROUND_SCORE,
    handled_harm,
    improved,
    kept_round,
    unsafe_rise,
)
from far.evolve.calibrate import (
    Calibration,
    cautious_decisions,
    fit_caution,
    head_scores,
)
from far.evolve.collect import draw_slices, failures, rehearsal_order, require_trainable
from far.evolve.config import EvolveConfig
from far.evolve.decision_head import DecisionRule
from far.evolve.metrics import holdout_metrics, own_right_decision
from far.evolve.record import OWN, RoundRecord
from far.evolve.repair import propose
from far.evolve.select import RULES, input_thresholds, select
from far.evolve.task import DECISIONS, DecisionTask, ScoredDecision, decision_messages
from far.evolve.train import Lesson, PFPOStats, build_lesson, pfpo, rehearsal_count, sft
from far.rollout.errors import FarInputError
from far.rollout.scenario import Scenario


@dataclass(frozen=True)
class Kept:
    """A round the gate kept: its number, its check figures, and the model as it left it (adapter, rule, and its
    decisions on the calibration slice, the bar under harm_bar kept)."""
    round: int
    check: dict[str, float]
    adapter: Any
    rule: DecisionRule
    calibration_decisions: list[str] | None


class Evolution:
    def __init__(self, config: EvolveConfig, base_dir: Path | None = None,
                 progress: Callable[[str], None] | None = None, model: Any = None) -> None:
        from far.models.backends import build_models
        from far.search.jobs.assemble import run_verifier
        from far.suites import build_suite
        from far.verifiers.taxonomy import parse_reward_table

        self.config = config
        self.progress = progress or (lambda message: None)
        suite = build_suite(config.suite, base_dir)
        train, holdout = list(suite.scenarios("train")), list(suite.scenarios("holdout"))
        require_trainable(train)  # before any model loads: every slice that is fitted or taught comes from train
        slices = draw_slices(config, train, holdout)
        self.dev, self.check, self.calibration, self.holdout = (slices.dev, slices.check, slices.calibration,
                                                                slices.holdout)
        if not self.check:
            raise FarInputError(f"the train split ({len(train)} scenarios) leaves none for the check slice after "
                                f"dev_size {config.data.dev_size}: early stopping and the safety gate need it "
                                "(lower dev_size or enlarge the suite)", field="data.dev_size")
        if not any(s.ground_truth.unsafe or s.ground_truth.injected for s in self.check):
            self.progress("  warning: the check slice holds no harmful or injected scenario: the safety gate "
                          "cannot see own-ASR or own-HCR rise (raise data.check_size)")
        if len(self.calibration) < config.data.calibration_size:
            self.progress(f"  warning: the calibration slice holds {len(self.calibration)} of calibration_size "
                          f"{config.data.calibration_size} scenarios: train has no more apart from dev's and "
                          "check's templates" + (" (no decision rule is fitted)" if not self.calibration else ""))
        self.rule = DecisionRule()  # log π -> decision: no head and no caution until ``calibrate`` fits them
        self.correct: dict[str, tuple[Scenario, str]] = {}  # the rehearsal pool: scenario id -> (it, decision)
        self.calibration_decisions: list[str] | None = None  # the kept model's there (the bar under harm_bar kept)
        self._best: dict[str, tuple[float, ...]] = {}  # scenario id -> best attainable z (``best``)
        models = build_models(config.models, base_dir=base_dir)
        models.fit(train, progress=self.progress)  # learned backends (the default cloud reviewer): train only
        verifier = run_verifier(config.verifier, parse_reward_table(config.rewards), cache=config.models.cache,
                                models=models)
        self.task = DecisionTask(models, verifier, config.policy, config.costs)
        if model is None:
            from far.evolve.policy_model import PolicyModel

            model = PolicyModel(config.model)
        self.model = model

    # --- the model's decisions and their figures -------------------------------------------------------------
    def logprobs(self, scenarios: Sequence[Scenario]) -> list[list[float]]:
        """log π(decision | x) over ``DECISIONS``, per scenario."""
        import torch

        prompts = [self.model.prompt(decision_messages(s)) for s in scenarios]
        with torch.inference_mode():
            return self.model.option_logprobs(prompts, DECISIONS).cpu().tolist()

    def decide_with_scores(self, scenarios: Sequence[Scenario], rule: DecisionRule | None = None
                           ) -> tuple[list[ScoredDecision], list[float]]:
        """The greedy decisions through the decision rule (the fitted one by default; ``DecisionRule()``: the
        model's own argmax), scored, and each input's caution score max(s(escalate), s(refuse)) − s(handle)."""
        rule = self.rule if rule is None else rule
        rows = rule.scores(self.logprobs(scenarios))
        scores = [max(escalate, refuse) - handle for handle, escalate, refuse in rows]
        return self.task.score(scenarios, cautious_decisions(rows, rule.caution)), scores

    def decide(self, scenarios: Sequence[Scenario]) -> list[ScoredDecision]:
        return self.decide_with_scores(scenarios)[0]

    def figures(self, scenarios: Sequence[Scenario], scored: Sequence[ScoredDecision],
                scores: Sequence[float] | None = None, by_category: bool = True) -> dict[str, Any]:
        return holdout_metrics(scenarios, scored, self.config.selection, scores, by_category)

    def evaluate(self, rule: DecisionRule | None = None) -> dict[str, Any]:
        """The holdout figures, under the fitted rule (or ``rule``): reported only, never chosen on."""
        return self.figures(self.holdout, *self.decide_with_scores(self.holdout, rule))

    def argmax_figures(self, evaluated: dict[str, Any]) -> dict[str, float]:
        """The model's own holdout figures without its decision rule (its argmax over the three decisions), beside
        ``evaluated``, the figures under the rule: the head and the caution are deployment calibration, and this
        is what the model itself decides (reported only)."""
        overall = evaluated["overall"] if self.rule == DecisionRule() else self.evaluate(DecisionRule())["overall"]
        return {key: overall[key] for key in OWN}

    def check_metrics(self) -> dict[str, float]:
        """The check-slice figures the gate compares round to round."""
        return self.figures(self.check, self.decide(self.check), by_category=False)["overall"]

    def best(self, scenarios: Sequence[Scenario]) -> list[tuple[float, ...]]:
        """Per scenario, the best z each dimension attains over the valid decisions (all three are scored: the
        world is recorded, so this is replay; cached, as the scores of a decision never change)."""
        missing = [s for s in scenarios if s.id not in self._best]
        if missing:
            per_decision = [self.task.score(missing, [d] * len(missing)) for d in DECISIONS]
            for i, scenario in enumerate(missing):
                self._best[scenario.id] = tuple(max(scored[i].z[d] for scored in per_decision) for d in range(4))
        return [self._best[s.id] for s in scenarios]

    def thresholds(self, scenarios: Sequence[Scenario]) -> list[tuple[float, ...]]:
        """κ per input, lowered to what a valid decision attains there: below it a decision failed."""
        return [input_thresholds(self.config.selection, s, b) for s, b in zip(scenarios, self.best(scenarios))]

    # --- the stages of a round -------------------------------------------------------------------------------
    def lesson(self, round_index: int, rng: random.Random) -> Lesson | None:
        """Steps 1-3: the failures on dev, their repairs, what is taught (None when dev holds no failure)."""
        config = self.config
        failed, correct, other = failures(self.dev, self.decide(self.dev), self.thresholds(self.dev),
                                          self.best(self.dev))
        self.correct.update({s.id: (s, d) for s, d in correct})
        for scenario_id in other:  # no longer decided correctly: not rehearsed as such
            self.correct.pop(scenario_id, None)
        if not failed:
            return None
        repairs = propose(self.model, self.task, config.repair, config.selection, failed,
                          self.thresholds([f.scenario for f in failed]), config.seed, round_index)
        selections = [select(config.selection, f, group, rng) for f, group in zip(failed, repairs.groups)]
        count = rehearsal_count(config.training, sum(s.chosen is not None for s in selections))
        rehearsed = rehearsal_order(list(self.correct.values()), count, rng) if count else []
        lesson = build_lesson(self.model, failed, repairs.prompts, selections, repairs.distinct_rate(),
                              repairs.explored, rehearsed, random.Random(f"pfpo-{config.seed}-{round_index}"), RULES)
        require_trainable([scenario for _, scenario, _ in lesson.examples])
        return lesson

    def calibrate(self) -> Calibration:
        """Step 6: the decision rule refitted on the calibration slice: the head (``head_scores``), then the
        caution on its out-of-fold scores (``fit_caution``), held to the harm bar (``judges``)."""
        scenarios = self.calibration
        groups = [s.group_key for s in scenarios]
        head, scores = head_scores(self.logprobs(scenarios), [own_right_decision(s) for s in scenarios], groups)
        return fit_caution(head, scores, groups, [s.ground_truth.unsafe or s.ground_truth.injected for s in scenarios],
                           *self.judges(), self.config.gate.safety_tolerance)

    def judges(self) -> tuple[Callable[[Sequence[int], Sequence[str]], dict[str, float]],
                              Callable[[Sequence[int]], dict[str, float]]]:
        """What the caution is fitted against on the calibration slice: the figures of decisions on inputs (by
        index; each decision's score is replayed, not rolled out again), and the harm bar on inputs: none
        handled (``harm_bar: zero``) or no more than the kept model handled there (``kept``)."""
        scenarios, kept = self.calibration, self.kept_decisions()
        scored = {d: self.task.score(scenarios, [d] * len(scenarios)) for d in DECISIONS}

        def figures(ids: Sequence[int], decisions: Sequence[str]) -> dict[str, float]:
            return self.figures([scenarios[i] for i in ids], [scored[d][i] for i, d in zip(ids, decisions)],
                                by_category=False)["overall"]

        def bar(ids: Sequence[int]) -> dict[str, float]:
            return NO_HARM if kept is None else figures(ids, [kept[i] for i in ids])

        return figures, bar

    def kept_decisions(self) -> list[str] | None:
        """The harm bar's reference on the calibration slice: None under ``harm_bar: zero`` (no harm at all, not
        the kept model's count: a base model that handled one harmful request by chance would license a later
        round to handle another); under ``kept`` the kept model's decisions there, one per input (recorded
        before training and after every kept round)."""
        if self.config.calibration.harm_bar == "zero":
            return None
        if self.calibration_decisions is None:
            self.calibration_decisions = [scored.decision for scored in self.decide(self.calibration)]
        return self.calibration_decisions

    def train_round(self, t: int, rng: random.Random, output: Path) -> tuple[RoundRecord, Lesson] | None:
        """Steps 1-6 of round ``t`` on the current model: the record of what it did (its figures are filled in
        by ``run``), or None when dev holds no failure."""
        import pyarrow as pa
        from far.rollout.io import write_parquet_atomic

        config, started = self.config, time.perf_counter()
        timed: dict[str, float] = {}

        def lap(step: str) -> None:
            timed[step] = time.perf_counter() - started - sum(timed.values())

        lesson = self.lesson(t, rng)
        if lesson is None:
            return None
        write_parquet_atomic(output / f"replay_buffer_round{t}.parquet", pa.Table.from_pylist([
            {"scenario_id": k.failure.scenario.id, "split": k.failure.scenario.split, "prompt": k.prompt,
             "failed_action": k.failure.action, "repair": k.chosen.scored.decision, "z": list(k.chosen.scored.z),
             "r_pf": k.chosen.reward, "q": k.q} for k in lesson.taught])
            if lesson.taught else pa.table({"scenario_id": pa.array([], pa.string())}))
        lap("lesson")
        losses, fit = sft(self.model, lesson, config.training.sft)
        fitted = fit.share() if lesson.taught else None  # before PFPO and any rollback moves the model
        lap("sft")
        stats = (pfpo(self.model, self.task, config.selection, config.training.pfpo, lesson, config.seed, t)
                 if lesson.taught and config.training.pfpo.enabled else PFPOStats([], [], []))
        lap("pfpo")
        if stats.losses:
            means = stats.means()
            self.progress(f"    pfpo: loss {means['pfpo_loss']:+.4f}, clip fraction {means['clip_fraction']:.3f}, "
                          f"kl {means['kl']:.4f} ({len(stats.losses)} steps)")
        if self.calibration and lesson.taught:
            calibrated = self.calibrate()
            self.rule = calibrated.rule
            if config.calibration.harm_bar == "kept":
                self.calibration_decisions = calibrated.decisions
            head = " on a decision head" if self.rule.head else ""
            self.progress(f"    caution {self.rule.caution:+.3f}{head} (calibration slice, out of fold: "
                          f"{_line(_own(calibrated.figures))}; harm_bar {config.calibration.harm_bar}: own_asr "
                          f"{calibrated.bar['own_asr']:.3f}, own_hcr {calibrated.bar['own_hcr']:.3f})")
        lap("calibrate")
        record = RoundRecord(
            round=t, holdout={}, check={}, caution=self.rule.caution, decision_head=self.rule.head is not None,
            seconds=0.0, failures=len(lesson.failures), distinct_rate=lesson.distinct, explored=lesson.explored,
            buffer=len(lesson.taught), rehearsed=len(lesson.rehearsed), sft_loss=losses[-1] if losses else None,
            sft_epochs=config.training.sft.epochs + fit.extra if lesson.taught else None, sft_fit=fitted,
            **stats.means(), decided=lesson.decided, timed=timed)
        return record, lesson

    # --- the loop ------------------------------------------------------------------------------------------
    def run(self, output: Path) -> dict[str, Any]:
        """Round 0 (the base model), then rounds until one teaches nothing, is rolled back or makes no progress
        on the check slice; the best round's model is kept. Rounds are written as they finish."""
        output.mkdir(parents=True, exist_ok=True)
        rng, started, log = random.Random(self.config.seed), time.perf_counter(), _RoundLog(output)
        kept = [self.round_zero(log, started)]
        kinds = [s.ground_truth for s in self.check]  # the check slice's harmful / injected counts
        harm = (sum(g.injected for g in kinds), sum(g.unsafe and not g.injected for g in kinds))
        stopped = "rounds done"
        for t in range(1, self.config.rounds + 1):
            reason = self.one_round(t, rng, output, kept, harm, log)
            if reason:
                stopped = reason
                break
        returned = self.return_best(kept, harm)
        rows = [r.row() for r, _ in log.records]
        summary = {"command": "evolve", "config": self.config.model_dump(mode="json"), "rounds": rows,
                   "stopped": stopped, "kept_round": returned,
                   "kept_adapter": f"adapter_round{returned}" if returned else None,
                   "dev": [s.id for s in self.dev], "check": [s.id for s in self.check],
                   "calibration": [s.id for s in self.calibration], "holdout": [s.id for s in self.holdout],
                   "seconds": time.perf_counter() - started}
        from far.rollout.io import write_json_atomic

        write_json_atomic(output / "summary.json", summary)
        _report(output, rows)
        return summary

    def round_zero(self, log: _RoundLog, started: float) -> Kept:
        """The base model's figures, and its decisions under harm_bar kept, before training moves it."""
        before = self.evaluate()
        self.kept_decisions()
        zero = Kept(0, self.check_metrics(), self.model.snapshot(), self.rule, self.calibration_decisions)
        log.save(RoundRecord(0, before["overall"], zero.check, self.rule.caution, False,
                             time.perf_counter() - started, argmax=self.argmax_figures(before)), before)
        self.progress(f"  round 0 (before training): {_line(before['overall'])}; "
                      f"check slice {ROUND_SCORE} {zero.check[ROUND_SCORE]:.3f}")
        return zero

    def one_round(self, t: int, rng: random.Random, output: Path, kept: list[Kept], harm: tuple[int, int],
                  log: _RoundLog) -> str | None:
        """Round ``t``: train, check (rolled back when the model itself got less safe), save the adapter, evaluate.
        Returns why the rounds stop here, or None to go on."""
        from far.rollout.io import write_json_atomic

        round_started, last = time.perf_counter(), kept[-1]
        trained = self.train_round(t, rng, output)
        if trained is None:
            return f"no failures on dev in round {t}"
        record, lesson = trained
        record.check = self.check_metrics()
        record.rolled_back = unsafe_rise(last.check, record.check, self.config.gate.safety_tolerance) or None
        if record.rolled_back:
            self.roll_back(t, record, last)
        self.model.save(output / f"adapter_round{t}")  # the adapter kept after this round, and its rule
        write_json_atomic(output / f"adapter_round{t}" / "caution.json", self.rule.to_json())
        record.timed["check"] = time.perf_counter() - round_started - sum(record.timed.values())
        after = self.evaluate()
        record.holdout, record.argmax = after["overall"], self.argmax_figures(after)
        record.timed["holdout"] = time.perf_counter() - round_started - sum(record.timed.values())
        record.seconds = time.perf_counter() - round_started
        log.save(record, after)
        self.progress(f"  round {t}: {len(lesson.failures)} failures, {len(lesson.taught)} repairs kept, "
                      f"distinct {lesson.distinct:.2f}; holdout {_line(after['overall'])} ({record.seconds:.0f}s)")
        if record.rolled_back:  # the same dev slice would teach the same lesson again
            return f"round {t} rolled back ({record.rolled_back})"
        previous = kept[kept_round([k.check for k in kept], *harm)]
        kept.append(Kept(t, record.check, self.model.snapshot(), self.rule, self.calibration_decisions))
        if improved(previous.check, record.check, *harm, self.config.gate.min_improvement):
            return None
        gain = record.check[ROUND_SCORE] - previous.check[ROUND_SCORE]
        return (f"round {t} was no progress over the best round before it on the check slice (train): "
                f"{handled_harm(record.check, *harm)} harmful or injected requests handled against "
                f"{handled_harm(previous.check, *harm)}, {ROUND_SCORE} {gain:+.3f} "
                f"(min_improvement {self.config.gate.min_improvement})")

    def roll_back(self, t: int, record: RoundRecord, last: Kept) -> None:
        """The round made the model itself less safe: undo it, and say so."""
        overall = self.evaluate()["overall"]  # what the gate kept from shipping (reported only)
        record.discarded = {key: overall[key] for key in OWN}
        self.model.restore(last.adapter)
        self.rule, self.calibration_decisions = last.rule, last.calibration_decisions
        record.check, record.caution, record.decision_head = last.check, last.rule.caution, bool(last.rule.head)
        self.progress(f"  round {t}: rolled back ({record.rolled_back})")

    def return_best(self, kept: list[Kept], harm: tuple[int, int]) -> int:
        """The best kept round on the check slice, restored when a later round was worse; its number."""
        best = kept[kept_round([k.check for k in kept], *harm)]
        if best is not kept[-1]:
            self.model.restore(best.adapter)
            self.rule, self.calibration_decisions = best.rule, best.calibration_decisions
        self.progress(f"  the model returned: round {best.round}'s" + (
            f" (adapter_round{best.round}/)" if best.round else
            " (the base model: no round beat it on the check slice)"))
        return best.round


class _RoundLog:
    """Each finished round's record and figures, rewritten to Parquet as rounds finish."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.records: list[tuple[RoundRecord, dict[str, Any]]] = []

    def save(self, record: RoundRecord, figures: dict[str, Any]) -> None:
        from far.rollout.io import write_rows_atomic

        self.records.append((record, figures))
        write_rows_atomic(self.output / "rounds.parquet", [r.row() for r, _ in self.records])
        write_rows_atomic(self.output / "rounds_by_category.parquet", [
            {"round": r.round, "category": category, **values}
            for r, f in self.records for category, values in f["by_category"].items()])


def _own(metrics: dict[str, float]) -> dict[str, float]:
    return {k: metrics[k] for k in (*OWN, "mean_r_pf")}


def _line(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())


def _report(output: Path, rows: Sequence[dict[str, Any]]) -> None:
    from far.rollout.io import write_text_atomic
    from far.search.reports.html import metric_rounds_page

    rounds = [r["round"] for r in rows]
    series = {name: [r[name] for r in rows] for name in ("asr", "hcr", "tsr", "over_refusal", "mean_r_pf")}
    write_text_atomic(output / "report.html", metric_rounds_page("FATE rounds", rounds, series, "round"))


def run_evolve(config: str | Path, output: str | Path | None = None,
               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``far evolve``: FATE's rounds on the config's suite; results under ``output`` (default: the config's).
    Returns what summary.json holds, with ``output`` added."""
    from far.evolve.config import load_evolve_config

    evolve_config, base = load_evolve_config(config)
    out = Path(output) if output else Path.cwd() / evolve_config.output
    if out.exists() and not out.is_dir():
        raise FarInputError("output path exists and is not a directory", file=out, field="output")
    if progress is not None:
        c = evolve_config
        progress(f"FAR evolve: {c.rounds} rounds of FATE on {c.model.base} (LoRA r={c.model.lora_r}), dev "
                 f"{c.data.dev_size}, holdout {c.data.holdout_size}, K={c.repair.candidates}, "
                 f"G={c.training.pfpo.group}" + ("" if c.training.pfpo.enabled else " (PFPO off)"))
    summary = Evolution(evolve_config, base, progress=progress).run(out.resolve())
    return {**summary, "output": str(out)}
