"""A pool of long-lived rollout actors: each holds the recorded model outputs of the splits (shipped once
through the object store), walks the agent for a policy over a chunk of scenarios and verifies the rollouts.

A trial sends its policy to the pool as chunks (>= 50 scenarios each, so Ray's ~1 ms per call stays small),
pipelined over the actors, and merges the verdicts in chunk order. The actors are placed round-robin over the
cluster's nodes. An actor whose process dies mid-chunk is restarted (``max_restarts``) and the chunk retried
once (``max_task_retries``); one whose node died is replaced by an actor placed anywhere, and its chunks are
sent again. Each chunk's result is taken exactly once, so no rollout is lost or counted twice.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import ray
from far.rollout.agent import Costs, build_graph, rollout_prepared
from far.rollout.policy import Policy
from far.verifiers.rules import Verifier, verify_all
from far.verifiers.verdict import Verdict
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

MIN_CHUNK = 50
MAX_REPLACEMENTS = 3  # actors replaced per evaluation before giving up
# An actor is lost when its node is gone. A call in flight then fails with RayActorError; a call made once Ray
# has tried to restart it fails with ActorUnschedulableError (it is pinned to the dead node), which is not a
# RayActorError. Every trial starts from the pool Tune pickled, with the pinned handle, so a trial that met the
# second would fail on all its retries.
ACTOR_LOST = (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError)


@ray.remote(max_restarts=-1, max_task_retries=1)
class RolloutActor:
    def __init__(self, calls_by_split: dict[str, Any], verifier: Verifier, costs: Costs, engine: str) -> None:
        # refs passed at top level of a dict are not resolved automatically: fetch them here, once
        self.calls = {split: ray.get(ref) if isinstance(ref, ray.ObjectRef) else ref
                      for split, ref in calls_by_split.items()}
        self.verifier = verifier
        self.costs = costs
        self.engine = engine
        self._graphs: dict[str, Any] = {}

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def evaluate(self, policy: Policy, split: str, start: int, stop: int) -> tuple[list[Verdict], list[float]]:
        import gc

        calls: Sequence[Any] = self.calls[split][start:stop]  # RecordedCalls or episodes
        gc.disable()  # acyclic garbage only; see far.search.evaluation.evaluate.gc_paused
        try:
            graph = None
            if self.engine == "graph":
                key = policy.model_dump_json()
                if key not in self._graphs:
                    self._graphs[key] = build_graph(policy)  # built here: compiled graphs do not pickle
                graph = self._graphs[key]
            trajectories = rollout_prepared(calls, policy, self.costs, graph)
            verdicts = verify_all(self.verifier, [c.scenario for c in calls], trajectories)
        finally:
            gc.enable()
        return verdicts, [t.cost for t in trajectories]


class RolloutPool:
    """Handles to the actors plus the chunking rule; picklable, so Tune trials can carry it."""

    def __init__(self, calls_by_split: dict[str, list[Any]], verifier: Verifier, costs: Costs,
                 engine: str = "replay", actors: int = 2, chunk_size: int = 200) -> None:
        if chunk_size < MIN_CHUNK:
            raise ValueError(f"chunk_size must be >= {MIN_CHUNK}")
        self.sizes = {split: len(calls) for split, calls in calls_by_split.items()}
        self.chunk_size = chunk_size
        self.verifier, self.costs, self.engine = verifier, costs, engine
        self._refs = {split: ray.put(calls) for split, calls in calls_by_split.items()}  # alive for restarts
        # round-robin over the nodes, pinned: Ray's SPREAD, and soft affinity, often pack them all on the head
        nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
        self.actors = [self._spawn(nodes[i % len(nodes)]) for i in range(actors)]
        self.placed = [ray.get(actor.node.remote()) for actor in self.actors]  # waits until each is placed

    def _spawn(self, node: str | None = None) -> Any:
        # num_cpus=0: the actors do the work while trials wait on them; reserving CPUs for both deadlocks a
        # 2-core machine (see stack notes)
        strategy = NodeAffinitySchedulingStrategy(node, soft=False) if node is not None else "DEFAULT"
        return RolloutActor.options(num_cpus=0, scheduling_strategy=strategy).remote(
            self._refs, self.verifier, self.costs, self.engine)

    def chunks(self, split: str) -> list[tuple[int, int]]:
        size = self.sizes[split]
        return [(start, min(start + self.chunk_size, size)) for start in range(0, size, self.chunk_size)]

    def evaluate(self, policy: Policy, split: str) -> tuple[list[Verdict], list[float]]:
        """Verdicts and costs for every scenario of the split, in scenario order."""
        chunks = self.chunks(split)
        results: list[Any] = [None] * len(chunks)
        todo = list(range(len(chunks)))
        for _ in range(MAX_REPLACEMENTS + 1):
            pending = {i: self.actors[i % len(self.actors)].evaluate.remote(policy, split, *chunks[i]) for i in todo}
            todo = []
            for i, ref in pending.items():
                try:
                    results[i] = ray.get(ref)
                except ACTOR_LOST:  # its node is gone (a dead process was restarted and its chunk retried)
                    todo.append(i)
            if not todo:
                break
            for slot in {i % len(self.actors) for i in todo}:
                ray.kill(self.actors[slot], no_restart=True)
                self.actors[slot] = self._spawn()  # anywhere: its node may be gone
        else:
            raise RuntimeError(f"rollout actors lost {MAX_REPLACEMENTS + 1} times in a row")
        verdicts: list[Verdict] = []
        costs: list[float] = []
        for chunk_verdicts, chunk_costs in results:
            verdicts.extend(chunk_verdicts)
            costs.extend(chunk_costs)
        return verdicts, costs

    def nodes(self) -> list[str]:
        """The Ray node each actor runs on (as of now: a restarted actor may have moved); "lost" for an actor
        whose node is gone (a trial replaces it in its own copy of the pool)."""
        found = []
        for actor in self.actors:
            try:
                found.append(ray.get(actor.node.remote(), timeout=30))
            except (*ACTOR_LOST, ray.exceptions.GetTimeoutError):
                found.append("lost")
        return found

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
