"""The rollout pool: the same verdicts as in-process evaluation, in order, even when an actor dies mid-trial."""
import threading
import time

import pytest
from conftest import oracle_models
from far.cluster.rollout_pool import RolloutPool
from far.models.backends import ModelsConfig, build_models
from far.rollout.policy import Policy
from far.search.evaluation.evaluate import Evaluator
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.rules import RuleVerifier

POLICY = Policy(cloud_threshold=0.4, max_retries=2, fallback_mode="ask_user")


def setup(engine="replay"):
    evaluator = Evaluator(EdgeCloudSuite(EdgeCloudSuiteConfig(size=1500, seed=6)),
                          build_models(ModelsConfig.model_validate(oracle_models(cache={"enabled": False}))), RuleVerifier())
    calls = {split: evaluator.prepared(split) for split in ("train", "holdout")}
    return evaluator, RolloutPool(calls, evaluator.verifier, evaluator.costs, engine, actors=2, chunk_size=50)


def test_pool_matches_in_process_evaluation(ray_local):
    evaluator, pool = setup()
    try:
        verdicts, costs = pool.evaluate(POLICY, "holdout")
        local = evaluator.evaluate("p", POLICY, "holdout")
        assert verdicts == local.verdicts
        assert costs == [t.cost for t in local.trajectories]
        assert len(pool.chunks("holdout")) > 2
    finally:
        pool.shutdown()


def test_actor_killed_mid_trial_loses_and_duplicates_nothing(ray_local):
    evaluator, pool = setup(engine="graph")  # slow enough (~2 ms a rollout) to kill an actor mid-chunk
    try:
        expected = evaluator.evaluate("p", POLICY, "train").verdicts
        pids = [ray_local.get(a.pid.remote()) for a in pool.actors]
        killer = threading.Thread(target=lambda: (time.sleep(0.5), ray_local.kill(pool.actors[0], no_restart=False)))
        killer.start()
        verdicts, _ = pool.evaluate(POLICY, "train")
        killer.join()
        assert verdicts == expected  # every scenario once, in order
        assert ray_local.get(pool.actors[0].pid.remote()) != pids[0]  # it was restarted
    finally:
        pool.shutdown()


def test_an_actor_pinned_to_a_node_that_is_gone_is_replaced(ray_local):
    """After a node is lost, its pinned actors cannot be restarted: calls raise ActorUnschedulableError, not
    RayActorError. The pool replaces such an actor and sends its chunks again; every trial starts from Tune's
    pickled pool, which still holds the pinned handle, so this is the path each trial after a node loss takes."""
    from far.cluster.rollout_pool import RolloutActor
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    evaluator, pool = setup()
    try:
        expected = pool.evaluate(POLICY, "train")
        gone = "ab" * 28  # a node ID no node has
        stranded = RolloutActor.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            gone, soft=False)).remote(pool._refs, pool.verifier, pool.costs, pool.engine)
        with pytest.raises(ray_local.exceptions.ActorUnschedulableError):
            ray_local.get(stranded.evaluate.remote(POLICY, "train", 0, 50), timeout=60)
        pool.actors[1] = stranded
        assert pool.evaluate(POLICY, "train") == expected  # every chunk once, in order
        assert pool.actors[1] is not stranded and "lost" not in pool.nodes()
    finally:
        pool.shutdown()
