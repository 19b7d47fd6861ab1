"""``far search``: policy search on Ray Tune, trials fanned out to rollout actors.

Tune is given one scalar, ``score`` (``ranking.rank.tune_score``: the constrained lexicographic rule in bands),
which it only displays: the searchers select with ``ranking.rank`` itself, all trials are ranked with it (under
the gate's cost limit), the top-k are re-evaluated on holdout, and the winner is the best of them that passes
the gate there.

Trials come back in suggestion order, never completion order, and every searcher suggests the same policies
for the same seed whatever the concurrency (``far.search.searchers.evolutionary``): same config and seed, same trials.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from far.cluster.rollout_pool import RolloutPool
from far.rollout.policy import Policy
from far.search.evaluation.columnar import ColumnarTrials
from far.search.evaluation.results import PolicyResult, aggregate
from far.search.jobs.config import LoadedSearchConfig, SearchSettings
from far.search.ranking.rank import NO_CONSTRAINTS, Constraints, tune_score
from far.search.searchers.evolutionary import EvolutionarySearcher, RandomSearcher
from far.search.searchers.space import PolicySpace
from ray import tune
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Searcher

logger = logging.getLogger(__name__)

METRIC = "score"


def trial_metrics(result: PolicyResult, constraints: Constraints = NO_CONSTRAINTS) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        METRIC: tune_score(result, constraints),
        "critical_failures": result.critical_failures,
        "reward": result.reward,
        "cost": result.cost,
        "mean_cost": result.mean_cost,
        "scenarios": result.scenarios,
        "over_refusal_rate": result.over_refusal_rate,
        "benign_success_rate": result.benign_success_rate,
    }
    metrics.update({f"failures_{k}": v for k, v in result.failure_counts.items()})
    metrics.update({f"z_{k}": v for k, v in result.z_mean.items()})
    return metrics


def trial_result(pool: RolloutPool | ColumnarTrials, policy: Policy, simulated: bool) -> PolicyResult:
    """One policy on the train split: through the rollout actors, or column-wise in this trial's process."""
    if isinstance(pool, ColumnarTrials):
        return pool.result("trial", policy, "train", simulated)
    verdicts, costs = pool.evaluate(policy, "train")
    return aggregate("trial", policy, "train", verdicts, costs, simulated)


def evaluate_trial(config: dict[str, Any], pool: RolloutPool | ColumnarTrials, space: PolicySpace,
                   simulated: bool, constraints: Constraints = NO_CONSTRAINTS) -> None:
    """The Tune trainable: one policy on the train split."""
    started, started_at = time.perf_counter(), time.time()
    policy = space.policy({name: config[name] for name in space.parameters})
    result = trial_result(pool, policy, simulated)
    # eval_s and finished_at let a benchmark separate Tune's own overhead from the evaluation
    tune.report({**trial_metrics(result, constraints), "eval_s": time.perf_counter() - started,
                 "started_at": started_at, "finished_at": time.time(),
                 "node": ray.get_runtime_context().get_node_id()})


class RescueLostTrials(Searcher):
    """Wraps a searcher: a trial Tune ends in error is evaluated again here, in the driver, before the searcher
    hears of it, and the searcher gets its result, so a search that loses a node goes on as it would have
    without the fault. A trial's result is a pure function of its policy, so evaluating it again is exact; an
    evaluation that fails again here stays an error.

    Why not Tune's retries alone (``trial_retries``): Ray Tune 2.60 ends a trial in error, whatever its
    ``max_failures``, when the node of the cached actor it is being reset onto (``reuse_actors``) dies -- the
    reset task's failure arrives while the trial is PENDING again (most trials, under load).
    Not reusing actors would start a worker process per trial, ~1 s each against Tune's 0.065 s overhead."""

    def __init__(self, searcher: Searcher, evaluate: Any) -> None:
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher = searcher
        self.evaluate = evaluate  # config -> the trial's metrics, in this process
        self.configs: dict[str, dict] = {}  # trial id -> config, while the trial runs
        self.rescued: dict[str, dict] = {}  # trial id -> {"config", "metrics"}, for the trials evaluated here

    def __getstate__(self) -> dict:
        return {**self.__dict__, "evaluate": None}  # Tune saves the searcher; a restored one rescues nothing

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return self.searcher.set_search_properties(metric, mode, config, **spec)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return self.searcher.set_max_concurrency(max_concurrent)

    def suggest(self, trial_id: str) -> dict | None:
        config = self.searcher.suggest(trial_id)
        if isinstance(config, dict):
            self.configs[trial_id] = config
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        config = self.configs.pop(trial_id, None)
        if error and config is not None and self.evaluate is not None:
            try:
                result = {**self.evaluate(config), "trial_id": trial_id}
            except Exception as failure:  # noqa: BLE001 -- it fails here too: an error, as Tune said
                logger.warning("trial %s failed again when evaluated in the driver: %r", trial_id, failure)
            else:
                error = False
                self.rescued[trial_id] = {"config": config, "metrics": result}
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def rescued_trial(self, trial_path: str | None) -> dict | None:
        """The rescue of the trial in ``trial_path`` (Tune names a trial's directory
        ``<trainable>_<trial id>_<tag>_<date>``), or None. A trial Tune ended in error while resetting a cached actor
        onto it never started: it has neither a result nor a ``params.json``, so its id is all that names it."""
        name = os.path.basename(trial_path or "")
        return next((rescue for trial_id, rescue in self.rescued.items() if f"_{trial_id}_" in name), None)

    def save(self, checkpoint_path: str) -> None:
        self.searcher.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.searcher.restore(checkpoint_path)

    def get_state(self) -> dict:  # this wrapper's own state (Tune saves each wrapper's, then the base searcher)
        return {"configs": dict(self.configs), "rescued": dict(self.rescued)}

    def set_state(self, state: dict) -> None:
        self.configs, self.rescued = dict(state["configs"]), dict(state["rescued"])


def make_searcher(settings: SearchSettings, space: PolicySpace, proposer_lm: Any = None,
                  constraints: Constraints = NO_CONSTRAINTS, rescue: Any = None) -> tuple[Any, dict, int]:
    """(search_alg, param_space, num_samples) for the method; ``rescue`` (config -> metrics, in the driver)
    evaluates the trials Tune ends in error (``RescueLostTrials``)."""
    if settings.method == "grid":
        grid = {name: tune.grid_search(list(d.grid_values())) for name, d in space.parameters.items()}
        return BasicVariantGenerator(random_state=settings.seed), grid, 1
    budget = settings.budget
    if settings.on_grid:
        budget = min(budget, space.grid_size())
    if settings.method == "random":
        searcher: Any = RandomSearcher(space, seed=settings.seed, on_grid=settings.on_grid, metric=METRIC,
                                       mode="max")
        return ConcurrencyLimiter(with_rescue(searcher, rescue), max_concurrent=settings.concurrency), {}, budget
    evolution = settings.evolutionary.model_dump()
    if settings.method == "evolutionary":
        searcher = EvolutionarySearcher(space, seed=settings.seed, on_grid=settings.on_grid,
                                        constraints=constraints, metric=METRIC, mode="max", **evolution)
    else:
        from far.search.searchers.llm_proposer import LLMProposalSearcher

        llm = settings.llm
        searcher = LLMProposalSearcher(space, proposer_lm, warmup=llm.warmup, temperature=llm.temperature,
                                       max_tokens=llm.max_tokens, seed=settings.seed, on_grid=settings.on_grid,
                                       constraints=constraints, metric=METRIC, mode="max", **evolution)
    return ConcurrencyLimiter(with_rescue(searcher, rescue), max_concurrent=settings.concurrency), {}, budget


def with_rescue(searcher: Searcher, rescue: Any) -> Searcher:
    return searcher if rescue is None else RescueLostTrials(searcher, rescue)


def suggestion_number(experiment_tag: str) -> int:
    """Tune's trial tag starts with the trial's creation number ("12_cloud_threshold=..."); unknown: last."""
    head = str(experiment_tag).split("_", 1)[0]
    return int(head) if head.isdigit() else 1 << 62


@dataclass
class TrialRecord:
    trial_id: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    policy: Policy
    finished_at: float

    @property
    def critical_failures(self) -> float:
        return self.metrics["critical_failures"]

    @property
    def reward(self) -> float:
        return self.metrics["reward"]

    @property
    def cost(self) -> float:
        return self.metrics["cost"]

    @property
    def mean_cost(self) -> float:
        return self.metrics["mean_cost"]

    @property
    def over_refusal_rate(self) -> float:
        return self.metrics.get("over_refusal_rate", math.nan)

    @property
    def benign_success_rate(self) -> float:
        return self.metrics.get("benign_success_rate", math.nan)


@dataclass
class SearchRun:
    trials: list[TrialRecord]
    searcher_counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    failed: int = 0  # trials that errored after all their retries
    rescued: int = 0  # trials Tune ended in error, evaluated again in the driver (``RescueLostTrials``)


def run_tune(loaded: LoadedSearchConfig, pool: RolloutPool | ColumnarTrials, simulated: bool, resume: bool,
             proposer_lm: Any = None, verbose: int = 1) -> SearchRun:
    """The search on Ray Tune: a new experiment, or the saved one under the output directory when ``resume``."""
    # save the experiment state after every event, so a killed driver resumes without re-running finished trials
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "0")
    started = time.perf_counter()
    tuner, searcher, rescuer = make_tuner(loaded, pool, simulated, resume, proposer_lm, verbose)
    run = collect_trials(tuner.fit(), loaded.space, rescuer)
    run.searcher_counts = dict(getattr(searcher, "counts", {})) if searcher is not None else {}
    run.seconds = time.perf_counter() - started
    return run


def make_tuner(loaded: LoadedSearchConfig, pool: RolloutPool | ColumnarTrials, simulated: bool, resume: bool,
               proposer_lm: Any, verbose: int) -> tuple[tune.Tuner, Any, RescueLostTrials | None]:
    """The Tuner, our own searcher object (for its counts; a restored run has Tune's copy instead: None) and the
    rescuer of trials Tune ends in error."""
    settings, space = loaded.config.search, loaded.space
    constraints = Constraints.from_gate(loaded.config.gate)
    storage = loaded.output.resolve()
    trainable = tune.with_resources(
        tune.with_parameters(evaluate_trial, pool=pool, space=space, simulated=simulated, constraints=constraints),
        {"cpu": settings.trial_cpus},
    )
    if resume and tune.Tuner.can_restore(str(storage / "tune")):
        return tune.Tuner.restore(str(storage / "tune"), trainable=trainable, resume_errored=True), None, None

    def rescue(config: dict[str, Any]) -> dict[str, Any]:  # a trial Tune ended in error, evaluated here
        policy = space.policy({name: config[name] for name in space.parameters})
        return {**trial_metrics(trial_result(pool, policy, simulated), constraints), "node": "driver (rescued)"}

    search_alg, param_space, num_samples = make_searcher(settings, space, proposer_lm, constraints, rescue)
    searcher, rescuer = getattr(search_alg, "searcher", None), None
    if isinstance(searcher, RescueLostTrials):
        rescuer, searcher = searcher, searcher.searcher
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(metric=METRIC, mode="max", search_alg=search_alg, num_samples=num_samples,
                                    max_concurrent_trials=settings.concurrency, reuse_actors=True),
        # a trial whose node died is run again (its result is deterministic), never dropped or counted twice
        run_config=tune.RunConfig(name="tune", storage_path=str(storage), verbose=verbose,
                                  failure_config=tune.FailureConfig(max_failures=settings.trial_retries)),
    )
    return tuner, searcher, rescuer


def collect_trials(grid: Any, space: PolicySpace, rescuer: RescueLostTrials | None) -> SearchRun:
    """Tune's results as trial records in suggestion order; a trial that errored after its retries is counted
    as failed (said in the output, never silently ranked), one the rescuer evaluated is kept."""
    run = SearchRun(trials=[])
    for result in grid:
        rescue = rescuer.rescued_trial(result.path) if rescuer is not None and result.error is not None else None
        config = config_of(result) or (rescue or {}).get("config")
        if config is None:  # no result, no params.json and no rescue: nothing says which policy it was
            run.failed += 1
            continue
        params = {name: config[name] for name in space.parameters}
        metrics = result.metrics
        if rescue is not None:
            metrics = rescued_metrics(rescue["metrics"], result.path)
            run.rescued += 1
        elif result.error is not None or not metrics or "critical_failures" not in metrics:
            run.failed += 1
            continue
        run.trials.append(TrialRecord(
            trial_id=metrics.get("trial_id", ""), params=params,
            metrics={k: v for k, v in metrics.items() if not isinstance(v, dict)},
            policy=space.policy(params), finished_at=metrics.get("finished_at", 0.0),
        ))
    # suggestion order, never completion order: Tune numbers each trial's tag as it creates it (and keeps the
    # counter across --resume, where it re-queues restored trials by their last result time)
    run.trials.sort(key=lambda t: suggestion_number(t.metrics.get("experiment_tag", "")))
    return run


def config_of(result: Any) -> dict[str, Any] | None:
    """A trial's config: its last result's, or for a trial that never reported (lost with its node before its
    first result) the ``params.json`` Tune wrote in its directory when it started."""
    if result.config is not None:
        return result.config
    params = os.path.join(result.path or "", "params.json")
    if not os.path.isfile(params):
        return None
    with open(params, encoding="utf-8") as handle:
        return json.load(handle)


def rescued_metrics(metrics: dict[str, Any], trial_path: str | None) -> dict[str, Any]:
    """A rescued trial's metrics, with the experiment tag Tune gave it (its number orders the trials): Tune names
    a trial's directory ``<trainable>_<trial id>_<tag>_<date>``."""
    name = os.path.basename(trial_path or "")
    _, _, tag = name.partition(f"_{metrics.get('trial_id', '')}_")
    return {**metrics, "experiment_tag": tag} if tag else metrics
