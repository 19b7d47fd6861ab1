"""FATE's rounds, the orchestrator: each stage lives in its own module with a pure core.

Round t (π_t is the current model; an action is one JSON object under the scenario's schema, ``far.evolve.task``):
1. collect (``far.evolve.collect``): π_t writes its action greedily on each dev input; every action whose z falls
   below the input's κ (per task mode) is a failure f = (x, a, z);
2. repair (``far.evolve.repair``): p_f = Prompt(x, a, z) is answered K times by π_t itself, each candidate scored
   by the verifier ensemble;
3. select (``far.evolve.select``): κ filter → Pareto front of z → tie break (reward table, then cost) → q* ∝
   1[front]·exp(β·r) → a* ~ q*, on selection's own random stream; the replay buffer R_t = {(p_f, a*, z)} is
   saved, with which rule settled each failure and the front's size;
4. train (``far.evolve.train``): LoRA SFT on a* on p_f (prompt tokens masked) beside rehearsed correct actions on
   x, in the data-order stream's order, until learned; 5. PFPO on the repair prompts p_f (G actions each,
   group-relative advantages on r_PF, clipping and KL);
6. gate (``far.evolve.acceptance``): on the check slice (train templates none of the lessons taught), a round that
   raises ASR or HCR is rolled back, one that is no progress ends the run, and the run returns the round that
   lets the least harm take effect there, then has the best TSR. The holdout is judged after every round for
   reporting only.

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

from far.evolve.acceptance import ROUND_SCORE, handled_harm, improved, kept_round, unsafe_rise
from far.evolve.collect import draw_slices, failures, rehearsal_order, require_trainable
from far.evolve.config import EvolveConfig
from far.evolve.metrics import holdout_metrics
from far.evolve.record import RoundRecord
from far.evolve.repair import propose
from far.evolve.select import RULES, input_thresholds, select
from far.evolve.task import ActionTask, ScoredAction, ToolCatalog, decision_points
from far.evolve.train import Lesson, PFPOStats, build_lesson, pfpo, rehearsal_count, sft
from far.rollout.errors import FarInputError
from far.rollout.progress import rate_reporter
from far.rollout.scenario import Scenario

# inputs decoded per call of the model, its batch (``PolicyModel.generate``'s chunk): a holdout of hundreds decodes
# for minutes, with a progress line between calls
ACT_BLOCK = 64


@dataclass(frozen=True)
class Kept:
    """A round the gate kept: its number, its check figures, and the adapter as it left it."""
    round: int
    check: dict[str, float]
    adapter: Any


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
        train, holdout = decision_points(suite.scenarios("train")), decision_points(suite.scenarios("holdout"))
        require_trainable(train)  # before any model loads: every slice that is fitted or taught comes from train
        catalog = ToolCatalog.from_scenarios(train)  # the tools offered: read from train's proposed calls
        slices = draw_slices(config, train, holdout)
        self.dev, self.check, self.holdout = slices.dev, slices.check, slices.holdout
        if not self.check:
            raise FarInputError(f"the train split ({len(train)} scenarios) leaves none for the check slice after "
                                f"dev_size {config.data.dev_size}: early stopping and the safety gate need it "
                                "(lower dev_size or enlarge the suite)", field="data.dev_size")
        if not any(s.ground_truth.unsafe or s.ground_truth.injected for s in self.check):
            self.progress("  warning: the check slice holds no harmful or injected scenario: the safety gate "
                          "cannot see ASR or HCR rise (raise data.check_size)")
        self.correct: dict[str, tuple[Scenario, str]] = {}  # the rehearsal pool: scenario id -> (it, action text)
        self._greedy: dict[tuple[str, int], dict[str, str]] = {}  # (weights' digest, max tokens) -> id -> action
        models = build_models(config.models, base_dir=base_dir)
        models.fit(train, progress=self.progress)  # learned backends (the default cloud reviewer): train only
        verifier = run_verifier(config.verifier, parse_reward_table(config.rewards), cache=config.models.cache,
                                models=models)
        self.task = ActionTask(models, verifier, config.policy, catalog, config.costs)
        if model is None:
            from far.evolve.policy_model import PolicyModel

            model = PolicyModel(config.model)
        self.model = model

    # --- the model's actions and their figures ---------------------------------------------------------------
    def act(self, scenarios: Sequence[Scenario]) -> list[ScoredAction]:
        """The model's greedy action on each input, scored. Actions are memoised per adapter state (the digest
        of its weights) and input: the same weights write the same action, so a restored round (a rollback, the
        round returned, every arm's base) is not decoded again. Inputs are decoded ``ACT_BLOCK`` at a time (one
        batch of the model's), with a progress line between blocks where there is more than one."""
        tokens = self.config.repair.max_new_tokens
        memo = self._greedy.setdefault((self.model.digest(), tokens), {})
        todo = [s for s in scenarios if s.id not in memo]
        report = rate_reporter(self.progress, "    writing actions") if len(todo) > ACT_BLOCK else None
        for start in range(0, len(todo), ACT_BLOCK):
            block = todo[start:start + ACT_BLOCK]
            prompts = [self.model.prompt(self.task.messages(s)) for s in block]
            texts = self.model.generate(prompts, [self.task.schema(s) for s in block], 0.0, max_new_tokens=tokens)
            memo.update((s.id, out[0]) for s, out in zip(block, texts))
            if report is not None:
                report(start + len(block), len(todo))
        return self.task.score(scenarios, [memo[s.id] for s in scenarios])

    def figures(self, scenarios: Sequence[Scenario], scored: Sequence[ScoredAction], by_category: bool = True
                ) -> dict[str, Any]:
        return holdout_metrics(scenarios, scored, self.config.selection, by_category)

    def evaluate(self) -> dict[str, Any]:
        """The holdout figures: reported only, never chosen on."""
        return self.figures(self.holdout, self.act(self.holdout))

    def check_metrics(self) -> dict[str, float]:
        """The check-slice figures the gate compares round to round."""
        return self.figures(self.check, self.act(self.check), by_category=False)["overall"]

    def thresholds(self, scenarios: Sequence[Scenario]) -> list[tuple[float, ...]]:
        """κ per input, by its task mode."""
        return [input_thresholds(self.config.selection, s) for s in scenarios]

    # --- the stages of a round -------------------------------------------------------------------------------
    def streams(self, round_index: int) -> tuple[random.Random, random.Random]:
        """The round's two random streams: selection's (a* ~ q*) and data order's (rehearsal pick, lesson order,
        SFT batches), so an arm that draws nothing in selection orders its data alike."""
        order = self.config.seed if self.config.order_seed is None else self.config.order_seed
        return random.Random(f"select-{self.config.seed}-{round_index}"), random.Random(f"order-{order}-{round_index}")

    def lesson(self, round_index: int) -> Lesson | None:
        """Steps 1-3: the failures on dev, their repairs, what is taught (None when dev holds no failure)."""
        config = self.config
        failed, correct, other = failures(self.dev, self.act(self.dev), self.thresholds(self.dev))
        self.correct.update({s.id: (s, text) for s, text in correct})
        for scenario_id in other:  # no longer acted on correctly: not rehearsed as such
            self.correct.pop(scenario_id, None)
        if not failed:
            return None
        selecting, ordering = self.streams(round_index)
        repairs = propose(self.model, self.task, config.repair, config.selection, failed,
                          self.thresholds([f.scenario for f in failed]), config.seed, round_index)
        selections = [select(config.selection, f, group, selecting) for f, group in zip(failed, repairs.groups)]
        count = rehearsal_count(config.training, sum(s.chosen is not None for s in selections))
        rehearsed = rehearsal_order(list(self.correct.values()), count, ordering) if count else []
        lesson = build_lesson(self.model, self.task, failed, repairs.prompts, selections, repairs.distinct_rate(),
                              rehearsed, ordering, RULES)
        require_trainable([example.scenario for example in lesson.examples])
        return lesson

    def train_round(self, t: int, output: Path) -> tuple[RoundRecord, Lesson] | None:
        """Steps 1-5 of round ``t`` on the current model: the record of what it did (its figures are filled in
        by ``one_round``), or None when dev holds no failure."""
        config, started = self.config, time.perf_counter()
        timed: dict[str, float] = {}

        def lap(step: str) -> None:
            timed[step] = time.perf_counter() - started - sum(timed.values())

        lesson = self.lesson(t)
        if lesson is None:
            return None
        _save_buffer(output / f"replay_buffer_round{t}.parquet", lesson)
        lap("lesson")
        tokens = config.repair.max_new_tokens
        batches = self.streams(t)[1].randrange(2**31)  # the SFT batches' order: the data-order stream's too
        losses, fit = sft(self.model, self.task, lesson, config.training.sft, tokens, batches)
        fitted = fit.share() if lesson.taught else None  # before PFPO and any rollback moves the model
        lap("sft")
        stats = (pfpo(self.model, self.task, config.selection, config.training.pfpo, lesson, config.seed, t, tokens)
                 if lesson.taught and config.training.pfpo.enabled else PFPOStats([], [], []))
        lap("pfpo")
        if stats.losses:
            means = stats.means()
            self.progress(f"    pfpo: loss {means['pfpo_loss']:+.4f}, clip fraction {means['clip_fraction']:.3f}, "
                          f"kl {means['kl']:.4f} ({len(stats.losses)} steps)")
        fronts = lesson.front_sizes
        record = RoundRecord(
            round=t, holdout={}, check={}, seconds=0.0, failures=len(lesson.failures),
            distinct_rate=lesson.distinct, repairing=lesson.repairing, feasible=lesson.feasible,
            buffer=len(lesson.taught), rehearsed=len(lesson.rehearsed),
            sft_loss=losses[-1] if losses else None,
            sft_epochs=config.training.sft.epochs + fit.extra if lesson.taught else None, sft_fit=fitted,
            **stats.means(), decided=lesson.decided, front_size=sum(fronts) / len(fronts) if fronts else None,
            timed=timed)
        return record, lesson

    # --- the loop ------------------------------------------------------------------------------------------
    def run(self, output: Path) -> dict[str, Any]:
        """Round 0 (the base model), then rounds until one teaches nothing, is rolled back or makes no progress
        on the check slice; the best round's model is kept. Rounds are written as they finish."""
        import resource

        output.mkdir(parents=True, exist_ok=True)
        started, log = time.perf_counter(), _RoundLog(output)
        kept = [self.round_zero(log, started)]
        kinds = [s.ground_truth for s in self.check]  # the check slice's harmful / injected counts
        harm = (sum(g.injected for g in kinds), sum(g.unsafe and not g.injected for g in kinds))
        stopped = "rounds done"
        for t in range(1, self.config.rounds + 1):
            reason = self.one_round(t, output, kept, harm, log)
            if reason:
                stopped = reason
                break
        returned = self.return_best(kept, harm)
        rows = [r.row() for r, _ in log.records]
        summary = {"command": "evolve", "config": self.config.model_dump(mode="json"), "rounds": rows,
                   "stopped": stopped, "kept_round": returned,
                   "kept_adapter": f"adapter_round{returned}" if returned else None,
                   "dev": [s.id for s in self.dev], "check": [s.id for s in self.check],
                   "holdout": [s.id for s in self.holdout], "seconds": time.perf_counter() - started,
                   "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        from far.rollout.io import write_json_atomic

        write_json_atomic(output / "summary.json", summary)
        _report(output, rows)
        return summary

    def round_zero(self, log: _RoundLog, started: float) -> Kept:
        """The base model's figures, before training moves it."""
        before = self.evaluate()
        zero = Kept(0, self.check_metrics(), self.model.snapshot())
        log.save(RoundRecord(0, before["overall"], zero.check, time.perf_counter() - started), before)
        self.progress(f"  round 0 (before training): {_line(before['overall'])}; "
                      f"check slice {ROUND_SCORE} {zero.check[ROUND_SCORE]:.3f}")
        return zero

    def one_round(self, t: int, output: Path, kept: list[Kept], harm: tuple[int, int], log: _RoundLog) -> str | None:
        """Round ``t``: train, check (rolled back when the model got less safe), save the adapter, evaluate.
        Returns why the rounds stop here, or None to go on."""
        round_started, last = time.perf_counter(), kept[-1]
        trained = self.train_round(t, output)
        if trained is None:
            return f"no failures on dev in round {t}"
        record, lesson = trained
        record.check = self.check_metrics()
        record.rolled_back = unsafe_rise(last.check, record.check, self.config.gate.safety_tolerance) or None
        if record.rolled_back:
            self.roll_back(t, record, last)
        self.model.save(output / f"adapter_round{t}")  # the adapter kept after this round
        record.timed["check"] = time.perf_counter() - round_started - sum(record.timed.values())
        after = self.evaluate()
        record.holdout = after["overall"]
        record.timed["holdout"] = time.perf_counter() - round_started - sum(record.timed.values())
        record.seconds = time.perf_counter() - round_started
        log.save(record, after)
        self.progress(f"  round {t}: {len(lesson.failures)} failures, {lesson.repairing} candidates repair one "
                      f"({lesson.feasible} meet κ), {len(lesson.taught)} repairs kept, "
                      f"decided by {_decided(lesson.decided)}; holdout {_line(after['overall'])} "
                      f"({record.seconds:.0f}s)")
        if record.rolled_back:  # the same dev slice would teach the same lesson again
            return f"round {t} rolled back ({record.rolled_back})"
        previous = kept[kept_round([k.check for k in kept], *harm)]
        kept.append(Kept(t, record.check, self.model.snapshot()))
        if improved(previous.check, record.check, *harm, self.config.gate.min_improvement):
            return None
        gain = record.check[ROUND_SCORE] - previous.check[ROUND_SCORE]
        return (f"round {t} was no progress over the best round before it on the check slice (train): "
                f"{handled_harm(record.check, *harm)} harmful or injected requests let through against "
                f"{handled_harm(previous.check, *harm)}, {ROUND_SCORE} {gain:+.3f} "
                f"(min_improvement {self.config.gate.min_improvement})")

    def roll_back(self, t: int, record: RoundRecord, last: Kept) -> None:
        """The round made the model less safe: undo it, and say so."""
        overall = self.evaluate()["overall"]  # what the gate kept from shipping (reported only)
        record.discarded = {key: overall[key] for key in ("asr", "hcr", "tsr", "over_refusal")}
        self.model.restore(last.adapter)
        record.check = last.check
        self.progress(f"  round {t}: rolled back ({record.rolled_back})")

    def return_best(self, kept: list[Kept], harm: tuple[int, int]) -> int:
        """The best kept round on the check slice, restored when a later round was worse; its number."""
        best = kept[kept_round([k.check for k in kept], *harm)]
        if best is not kept[-1]:
            self.model.restore(best.adapter)
        self.progress(f"  the model returned: round {best.round}'s" + (
            f" (adapter_round{best.round}/)" if best.round else
            " (the base model: no round beat it on the check slice)"))
        return best.round


def _save_buffer(path: Path, lesson: Lesson) -> None:
    """The replay buffer R_t = {(p_f, a*, z)}: one row per taught repair."""
    import pyarrow as pa
    from far.rollout.io import write_parquet_atomic

    write_parquet_atomic(path, pa.Table.from_pylist([
        {"scenario_id": k.failure.scenario.id, "split": k.failure.scenario.split, "prompt": k.prompt,
         "failed_action": k.failure.action, "repair": k.chosen.text, "z": list(k.chosen.scored.z),
         "r_pf": k.chosen.reward, "q": k.q} for k in lesson.taught])
        if lesson.taught else pa.table({"scenario_id": pa.array([], pa.string())}))


def _decided(decided: dict[str, int]) -> str:
    return ", ".join(f"{rule} {n}" for rule, n in decided.items() if n) or "nothing"


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


def _line(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k} {metrics[k]:.3f}" for k in ("asr", "hcr", "tsr", "over_refusal", "control_violations",
                                                       "malformed"))


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
