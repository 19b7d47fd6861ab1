"""A trial that Tune ends in error (e.g. its node died while Tune reset a cached actor onto it, which Tune 2.60
ends in error whatever max_failures says) is evaluated again in the driver before the searcher hears of it:
the search suggests, ranks and records exactly what it would have without the fault."""
import json
import sys
from types import SimpleNamespace

import yaml
from conftest import ORACLE_MODELS
from far.cluster.rollout_pool import RolloutPool
from far.rollout.scenario import SPLITS
from far.search.jobs.assemble import build_evaluator
from far.search.jobs.config import load_search_config
from far.search.searchers.tune import config_of, rescued_metrics, run_tune
from ray import cloudpickle
from test_search import SPACE

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers get the pool below by value


class FailsInTrials:
    """A rollout pool that fails one policy inside Tune's trial actors (as a lost node does), never in the driver."""

    def __init__(self, pool, doomed):
        self.pool, self.doomed = pool, doomed

    def evaluate(self, policy, split):
        import ray

        if policy == self.doomed and ray.get_runtime_context().get_actor_id() is not None:
            raise RuntimeError("the trial's node is gone")
        return self.pool.evaluate(policy, split)


def loaded_config(tmp_path, name):
    config = {"suite": {"name": "edge_cloud", "seed": 4, "size": 300}, "space": SPACE, "models": ORACLE_MODELS,
              "gate": {"max_mean_cost": 0.9}, "output": str(tmp_path / name),
              "search": {"method": "evolutionary", "budget": 8, "seed": 2, "concurrency": 2, "actors": 1,
                         "chunk_size": 100, "trial_retries": 0, "evolutionary": {"population": 4}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_search_config(path)


def test_a_trial_tune_ends_in_error_is_evaluated_again_and_the_search_goes_on_unchanged(tmp_path, ray_local):
    clean_config = loaded_config(tmp_path, "clean")
    evaluator = build_evaluator(clean_config.config, base_dir=clean_config.base_dir, rewards=clean_config.rewards)
    pool = RolloutPool({split: evaluator.prepared(split) for split in SPLITS}, evaluator.verifier, evaluator.costs,
                       actors=1, chunk_size=100)
    try:
        clean = run_tune(clean_config, pool, True, resume=False, verbose=0)
        doomed = clean.trials[1].policy  # in the first generation: the second one is bred from it
        faulty = run_tune(loaded_config(tmp_path, "faulty"), FailsInTrials(pool, doomed), True, resume=False,
                          verbose=0)
    finally:
        pool.shutdown()
    assert (faulty.rescued, faulty.failed, clean.rescued) == (1, 0, 0)

    def record(run):
        return [(t.params, t.critical_failures, round(t.reward, 6), round(t.cost, 6)) for t in run.trials]

    assert record(faulty) == record(clean)  # the same trials, in suggestion order, with the same results
    assert [t.metrics.get("node") for t in faulty.trials].count("driver (rescued)") == 1


def test_a_rescued_trial_keeps_the_tag_tune_gave_it():
    metrics = {"trial_id": "6a31049f", "reward": 1.0}
    path = "/x/tune/evaluate_trial_6a31049f_5_cloud_threshold=0.4000,max_retries=2_2026-12-04_07-56-09"
    assert rescued_metrics(metrics, path)["experiment_tag"].startswith("5_cloud_threshold=0.4000")
    assert "experiment_tag" not in rescued_metrics(metrics, "/x/tune/somewhere_else")


def test_a_trial_lost_before_its_first_result_is_known_by_its_params_file(tmp_path):
    """Tune's result of a trial that never reported has no config: the trial's params.json says which policy it
    was; with neither, there is nothing to say (None, counted as a failed trial)."""
    assert config_of(SimpleNamespace(config={"a": 1}, path=None)) == {"a": 1}
    (tmp_path / "params.json").write_text(json.dumps({"cloud_threshold": 0.4}))
    assert config_of(SimpleNamespace(config=None, path=str(tmp_path))) == {"cloud_threshold": 0.4}
    assert config_of(SimpleNamespace(config=None, path=str(tmp_path / "gone"))) is None
    assert config_of(SimpleNamespace(config=None, path=None)) is None


def test_a_trial_that_never_started_is_known_by_its_rescue(tmp_path):
    """Tune ends a trial in error while resetting a cached actor onto it when that actor's node dies: the trial
    never started, so it has no result and no params.json (Tune writes it when a trial starts). The rescuer
    evaluated it; collecting the trials counts it once, with the rescue's config and metrics, not as failed."""
    from far.search.searchers.evolutionary import RandomSearcher
    from far.search.searchers.space import PolicySpace
    from far.search.searchers.tune import RescueLostTrials, collect_trials

    space = PolicySpace.model_validate(SPACE)
    rescuer = RescueLostTrials(RandomSearcher(space, seed=0), lambda config: {"critical_failures": 0,
                                                                               "reward": config["max_retries"]})
    configs = {trial_id: rescuer.suggest(trial_id) for trial_id in ("aaaa0001", "aaaa0002", "aaaa0003")}
    rescuer.on_trial_complete("aaaa0002", error=True)
    rescuer.on_trial_complete("aaaa0003", error=True)
    never_started = str(tmp_path / "evaluate_trial_aaaa0002_2_cloud_threshold=0.2_2026-12-07_17-36-22")
    results = [
        SimpleNamespace(config=configs["aaaa0001"], path=str(tmp_path / "evaluate_trial_aaaa0001_1_x"), error=None,
                        metrics={"critical_failures": 0, "reward": 1.0, "trial_id": "aaaa0001",
                                 "experiment_tag": "1_x", "config": configs["aaaa0001"]}),
        SimpleNamespace(config=None, path=never_started, error=RuntimeError("reset failed"), metrics={}),
        SimpleNamespace(config=None, path=str(tmp_path / "evaluate_trial_bbbb0009_4_x"), error=RuntimeError(),
                        metrics={}),  # neither rescued nor known: a failed trial
    ]
    run = collect_trials(results, space, rescuer)
    assert (len(run.trials), run.rescued, run.failed) == (2, 1, 1)
    rescued = next(t for t in run.trials if t.trial_id == "aaaa0002")
    assert rescued.params == configs["aaaa0002"] and rescued.reward == configs["aaaa0002"]["max_retries"]
    assert [t.trial_id for t in run.trials] == ["aaaa0001", "aaaa0002"]  # suggestion order, from the tags
    assert rescuer.rescued_trial(str(tmp_path / "evaluate_trial_aaaa0003_3_x")) is not None
    assert rescuer.rescued_trial(str(tmp_path / "evaluate_trial_aaaa0001_1_x")) is None  # it did not fail
