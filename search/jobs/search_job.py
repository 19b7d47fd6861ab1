"""``far search``: search the policy space on Ray Tune (a local Ray, or the cluster at ``address`` or
``$RAY_ADDRESS``), re-evaluate the top policies on holdout, gate them, and answer which policy can ship;
Parquet, JSON, ``policy.json`` (the winner, for a runtime guard) and ``report.html`` under the output directory.

Stages: prepare (read and check the config before Ray starts, then Ray, the host and the evaluator) -> search
(the trials on Tune, over rollout actors closed however it ends) -> select (the leaderboard: top-k on train,
re-evaluated and gated on holdout) -> write -> render (the text the command prints).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError
from far.rollout.policy import Policy
from far.search.evaluation.evaluate import Evaluator
from far.search.evaluation.results import PolicyResult
from far.search.jobs.assemble import Progress, build_evaluator, model_host
from far.search.jobs.config import (
    LoadedSearchConfig,
    check_capacity,
    check_fit_data,
    load_fit_suites,
    load_search_config,
    load_suite,
)
from far.search.jobs.summary import RunSummary, calls_line, run_summary, write_run_files
from far.search.ranking.gate import GateVerdict
from far.search.ranking.leaderboard import Leaderboard


@dataclass
class SearchResult:
    """``run_search``'s answer: the winner, whether it may ship, the leaderboard and every trial."""

    output: Path
    winner: Policy
    deployable: bool
    gate: GateVerdict  # the winner's, on holdout
    train: PolicyResult
    holdout: PolicyResult
    leaderboard: list[dict[str, Any]]
    trials: list[Any]
    summary: RunSummary  # what summary.json holds
    report: str = ""  # what `far search` prints
    advice: list[str] = field(default_factory=list)  # what failed and what would deploy (when nothing does)


@dataclass
class SearchRun:
    """A prepared search: the checked config, its suite, the model host and the evaluator."""

    loaded: LoadedSearchConfig
    suite: Any
    host: Any
    evaluator: Evaluator
    started: float = field(default_factory=time.perf_counter)


@dataclass
class Trials:
    tune: Any  # search.searchers.tune's run: the trials, seconds, failed and rescued counts, searcher counts
    proposer: Any  # the LLM proposer's LM (``method: llm``), else None
    actor_placement: list[str]  # the node each rollout actor was placed on at the start
    actor_nodes: list[str]  # the node each rollout actor is on at the end ("lost" where its node is gone)


@dataclass
class Choice:
    """The leaderboard and its winner: the best on train that passes the gate on holdout (else the best)."""

    board: Leaderboard
    entries: list[dict[str, Any]]
    advice: list[str]  # what failed and what would deploy, when nothing does
    front: list[dict[str, Any]]  # critical failures vs cost and over-refusal on train

    @property
    def index(self) -> int:
        return self.board.winner_index

    @property
    def winner(self) -> Policy:
        return self.board.policies[self.index]

    @property
    def train(self) -> PolicyResult:
        return self.board.train[self.index]

    @property
    def holdout(self) -> PolicyResult:
        return self.board.holdout[self.index]

    @property
    def gate(self) -> GateVerdict:
        return self.board.gates[self.index]

    def results(self) -> list[PolicyResult]:
        """Train and holdout of each leaderboard policy, in rank order."""
        return [r for pair in zip(self.board.train, self.board.holdout) for r in pair]


def run_search(config: str | Path | LoadedSearchConfig, *, output: str | Path | None = None,
               resume: bool = False, address: str | None = None, tune_progress: bool = False,
               progress: Progress | None = None) -> SearchResult:
    """``far search`` (see the module's docstring); bad input raises ``FarInputError`` before Ray starts."""
    run = prepare(config, output, address, progress)
    trials = search(run, resume, tune_progress, progress)
    choice = select(run, trials)
    summary = write(run, trials, choice)
    return SearchResult(run.loaded.output, choice.winner, choice.board.deployable, choice.gate, choice.train,
                        choice.holdout, choice.entries, list(trials.tune.trials), summary,
                        render(run, trials, choice), [] if choice.board.deployable else choice.advice)


def prepare(config: str | Path | LoadedSearchConfig, output: str | Path | None, address: str | None,
            progress: Progress | None) -> SearchRun:
    from far.cluster.hosting import ensure_ray

    loaded = config if isinstance(config, LoadedSearchConfig) else load_search_config(
        config, output=str(output) if output is not None else None)
    settings, remote = loaded.config.search, address or os.environ.get("RAY_ADDRESS")
    if not remote:
        check_capacity(settings, float(len(os.sched_getaffinity(0))), loaded.source, "this machine")
    suite, fit_on = load_suite(loaded), load_fit_suites(loaded)
    check_fit_data(loaded.config.models, loaded.source, suite, fit_on, "search")
    ensure_ray(address)  # all validation above: Ray starts only for a config that can run
    if remote:
        import ray

        check_capacity(settings, float(ray.cluster_resources().get("CPU", 0)), loaded.source, "the cluster")
    host = model_host(loaded.config, always=True)
    evaluator = build_evaluator(loaded.config, suite=suite, base_dir=loaded.base_dir, source=loaded.source,
                                rewards=loaded.rewards, fit_on=fit_on, host=host, progress=progress)
    if progress is not None:
        engine = loaded.config.engine
        progress(f"FAR search: {settings.method}, budget {settings.budget}, space of {loaded.space.grid_size()} "
                 f"grid points; suite {suite.name} (train {len(suite.scenarios('train'))}, holdout "
                 f"{len(suite.scenarios('holdout'))}); "
                 + ("columnar engine" if engine == "columnar" else f"{settings.actors} rollout actors"))
    return SearchRun(loaded, suite, host, evaluator)


def proposer_engine(config: Any, explicit: bool) -> tuple[Any, bool]:
    """The LM for ``method: llm``: ``search.llm`` if given, else the cloud model's engine when the cloud is an
    LM backend, else SmolLM2 through transformers."""
    from far.models.backends import CLOUD_LM_DEFAULTS
    from far.models.engines import EngineSpec

    llm = config.search.llm
    cloud = config.models.cloud
    if not explicit and cloud.backend in CLOUD_LM_DEFAULTS:
        options = {**CLOUD_LM_DEFAULTS[cloud.backend], **cloud.options()}
        spec = EngineSpec(engine=options["engine"], model=options.get("model", "smollm2"),
                          options=options.get("engine_options", {}))
        return spec, bool(options.get("actor", False))
    return EngineSpec(engine=llm.engine, model=llm.model, options=llm.engine_options), llm.actor


def proposer_lm(run: SearchRun) -> Any:
    """The LLM searcher's LM behind the model-call cache, or None for the other searchers."""
    from far.models.backends import open_cache
    from far.models.cache import CachedLM

    loaded = run.loaded
    if loaded.config.search.method != "llm":
        return None
    spec, actor = proposer_engine(loaded.config, "llm" in (loaded.raw.get("search") or {}))
    proposer = run.host.lm(spec, actor)
    cache = open_cache(loaded.config.models.cache)
    return proposer if cache is None else CachedLM(proposer, cache)


def rollout_pool(run: SearchRun) -> Any:
    """Where trials roll out: rollout actors over the prepared model calls, or the columnar engine's own
    processes."""
    from far.cluster.rollout_pool import RolloutPool
    from far.rollout.scenario import SPLITS

    config, settings = run.loaded.config, run.loaded.config.search
    if config.engine == "columnar":
        return run.evaluator.columnar()
    calls = {split: run.evaluator.prepared(split) for split in SPLITS}
    return RolloutPool(calls, run.evaluator.verifier, config.costs, config.engine, settings.actors,
                       settings.chunk_size)


def search(run: SearchRun, resume: bool, tune_progress: bool, progress: Progress | None) -> Trials:
    """The trials on Ray Tune; the rollout actors are stopped however it ends."""
    from far.cluster.rollout_pool import RolloutPool
    from far.search.searchers.tune import run_tune

    pool = rollout_pool(run)
    try:
        proposer = proposer_lm(run)
        tune = run_tune(run.loaded, pool, run.evaluator.models.simulated, resume=resume, proposer_lm=proposer,
                        verbose=1 if tune_progress else 0)
        placed, nodes = (pool.placed, pool.nodes()) if isinstance(pool, RolloutPool) else ([], [])
    finally:
        pool.shutdown()
    if not tune.trials:
        raise FarInputError("no trial finished: see the Tune log above", field="search")
    if progress is not None and tune.failed:
        progress(f"warning: {tune.failed} trial(s) failed after {run.loaded.config.search.trial_retries} retries "
                 "and are left out")
    if progress is not None and tune.rescued:
        progress(f"note: {tune.rescued} trial(s) that Tune ended in error (a lost node) were evaluated again here")
    return Trials(tune, proposer, placed, nodes)


def select(run: SearchRun, trials: Trials) -> Choice:
    from far.search.ranking.leaderboard import advice, build_leaderboard, front_rows

    gate_config = run.loaded.config.gate
    board = build_leaderboard(trials.tune.trials, run.evaluator, gate_config, run.loaded.config.search.top_k)
    return Choice(board, board.entries(), advice(board, gate_config, len(run.suite.scenarios("holdout"))),
                  front_rows(trials.tune.trials))


def call_stats(run: SearchRun, trials: Trials) -> dict[str, Any]:
    """The run's model calls; the LLM searcher's count like any other model's."""
    from far.models.cache import CachedLM

    stats, proposer = run.evaluator.models.cache_stats(), trials.proposer
    if proposer is None:
        return stats
    if isinstance(proposer, CachedLM):
        asked = {"hits": proposer.stats.hits, "misses": proposer.stats.misses}
    else:
        asked = {"hits": 0, "misses": trials.tune.searcher_counts.get("proposed", 0)}
    return {"hits": stats["hits"] + asked["hits"], "misses": stats["misses"] + asked["misses"],
            "calls_made": stats["calls_made"] + asked["misses"], "proposer": {**asked, "calls_made": asked["misses"]}}


def answer(run: SearchRun, trials: Trials, choice: Choice) -> dict[str, Any]:
    settings, tune, board = run.loaded.config.search, trials.tune, choice.board
    winner = choice.winner
    return {
        "search": settings.model_dump(),
        "trials": len(tune.trials),
        "failed_trials": tune.failed,
        "searcher": tune.searcher_counts,
        "winner": {"policy": winner.model_dump(mode="json"), "rank": choice.index + 1, "deployable": board.deployable,
                   "rules": winner.rules_in_words(), "rule_effects_holdout": board.effects[choice.index],
                   "train": choice.train.model_dump(mode="json"), "holdout": choice.holdout.model_dump(mode="json")},
        "gate": {**choice.gate.to_dict(), "oracle": list(choice.holdout.oracle),
                 "shift": run.evaluator.shift_note or None},
        "no_deploy": None if board.deployable else {"advice": choice.advice, "tradeoff_front": choice.front},
        "leaderboard": choice.entries,
        "gates": [v.to_dict() for v in board.gates],
        "seeds": {"search": settings.seed, "suite": run.loaded.config.suite.model_dump().get("seed")},
    }


def trial_rows(run: SearchRun, trials: Trials) -> list[dict[str, Any]]:
    """trials.parquet: each trial's parameters and scalar metrics, in the order Tune reported them."""
    oracle = ",".join(run.evaluator.models.oracle_roles)  # "" = no model read the labels
    return [{"trial_id": t.trial_id, "order": i, **{f"param_{k}": v for k, v in t.params.items()},
             **{k: v for k, v in t.metrics.items() if isinstance(v, (int, float, str, bool))}, "oracle": oracle}
            for i, t in enumerate(trials.tune.trials)]


def placement(trials: Trials) -> dict[str, Any]:
    import ray

    return {"cluster_nodes": sum(node["Alive"] for node in ray.nodes()), "rollout_actor_placement": trials.actor_placement,
            "rollout_actor_nodes": trials.actor_nodes,
            "trial_nodes": sorted({t.metrics.get("node", "") for t in trials.tune.trials})}


def write(run: SearchRun, trials: Trials, choice: Choice) -> RunSummary:
    """The Parquet tables, ``summary.json``, ``policy.json``, ``run_stats.json`` and ``report.html``, each
    atomically."""
    from far.rollout.io import write_json_atomic, write_rows_atomic, write_text_atomic
    from far.search.jobs.policy_file import policy_file
    from far.search.ranking.rank import Constraints
    from far.search.reports.html import render as render_html

    out, models = run.loaded.output, run.evaluator.models
    write_rows_atomic(out / "trials.parquet", trial_rows(run, trials))
    write_rows_atomic(out / "rollouts.parquet", choice.board.rows)
    write_rows_atomic(out / "policy_results.parquet", [r.row() for r in choice.results()])
    summary = run_summary("search", run.loaded, run.suite, run.evaluator, answer(run, trials, choice))
    write_run_files(out, summary, {"seconds": round(time.perf_counter() - run.started, 3),
                                   "tune_seconds": round(trials.tune.seconds, 3),
                                   "model_calls": call_stats(run, trials), "rescued_trials": trials.tune.rescued,
                                   **placement(trials)})
    write_json_atomic(out / "policy.json", policy_file(
        choice.winner, run.loaded.raw.get("models") or {}, models, run.suite.name, choice.board.deployable,
        choice.holdout, choice.gate.to_dict()))
    write_text_atomic(out / "report.html", render_html(
        f"FAR search: {run.loaded.config.search.method}", summary.to_dict(), trials.tune.trials, choice.entries,
        choice.train, choice.holdout, Constraints.from_gate(run.loaded.config.gate)))
    return summary


def leaderboard_lines(choice: Choice, mark: str) -> list[str]:
    from far.search.reports.text import pct

    return [f"  {row['rank']}. {row['policy']}: train critical {row['train_critical']}, holdout critical "
            f"{row['holdout_critical']}, reward/scn train {row['train_reward/scn']} vs holdout "
            f"{row['holdout_reward/scn']} (gap {row['gap_reward/scn']}), cost/scn holdout {row['holdout_cost/scn']}, "
            f"benign refused {pct(row['holdout_refused'])} / done {pct(row['holdout_benign_done'])} holdout, "
            f"{row['gate']}{mark}" for row in choice.entries]


def verdict_lines(choice: Choice, mark: str) -> list[str]:
    """The answer: the winner and its gate, or what failed, what would deploy and the front found."""
    from far.search.reports.text import front_table

    if choice.board.deployable:
        return [f"\nWinner (the best on train that passes the gate on holdout): rank{choice.index + 1}, "
                f"{choice.winner.short()}\nGate on holdout: DEPLOY{mark} -- {choice.gate.reason}"]
    return [f"\nNo policy found passes the gate on holdout; best on train: {choice.winner.short()}\n"
            f"Gate on holdout: NO-DEPLOY{mark} -- {choice.gate.reason}", "\nWhat failed, and what would deploy:",
            *(f"  {line}" for line in choice.advice),
            "\nCritical failures vs cost and over-refusal on train, the front of what was found:",
            front_table(choice.front)]


def render(run: SearchRun, trials: Trials, choice: Choice) -> str:
    """What ``far search`` prints: the leaderboard, the answer, the winner's rules and what they did."""
    from far.search.ranking.rank import RANKING_WORDS
    from far.search.reports.text import attribution_table, effects_table, results_table

    holdout = choice.holdout
    mark = f" [{holdout.mark}]" if holdout.oracle or holdout.shift else ""  # beside every verdict an oracle made
    tune, calls = trials.tune, call_stats(run, trials)
    lines = ["", f"{len(tune.trials)} trials in {tune.seconds:.1f}s. Top {len(choice.board.policies)} on train "
             f"({RANKING_WORDS}), re-evaluated on holdout:", results_table(choice.results()), "",
             *leaderboard_lines(choice, mark), *verdict_lines(choice, mark),
             "\nThe winner's rules, in words:", *(f"  {line}" for line in choice.winner.rules_in_words()),
             "\nWhat the winner's parameters stopped or rerouted on holdout (harmful: the judge's labels):",
             effects_table(choice.board.effects[choice.index]),
             "\nReward lost on train by failure and deciding parameter, winner:", attribution_table(choice.train)]
    if tune.searcher_counts:
        lines.append(f"\nLLM proposals: {tune.searcher_counts}")
    lines += [f"\n{calls_line(calls)}",
              f"Results: {run.loaded.output}/ (policy.json: the winner for a runtime guard, far.Guard.load; "
              "summary.json, trials.parquet, rollouts.parquet, policy_results.parquet, report.html, run_stats.json, "
              "tune/)"]
    return "\n".join(lines)
