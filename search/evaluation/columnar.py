"""The columnar evaluator: many policies over recorded model outputs as array operations.

Why it is exact. Model outputs never depend on the policy, and a rollout's trajectory -- hence its verdict --
depends on its scenario only through

* a handful of discrete facts, the scenario's *outcome class* (``outcome_class``): the edge's fault, the
  cloud's verdict chain, the tool and cloud fault on every attempt a policy may make, the user's answers, the
  actions' properties and how they compare with the ground truth the judge reads;
* the edge's risk, which only the thresholds of the proposed call's kind read: with the rules (which read the
  class's call facts) it picks the route (block, cloud or edge);
* the per-call costs, which only add up.

So a split compiles once to columns (``compile_columns``: class id, risk, edge cost, cumulative cloud cost per
model attempt) plus one exemplar per class. Evaluating a policy is then: the route of every scenario from
its risk (numpy), a key ``class * 3 + route``, and a ``bincount`` of the keys. Each key is walked once per
discrete policy (retries, confirmation, fallback) by the reference replay engine on its class's exemplar and
verified by the rule verifier: a *template*. Every aggregate is counts x templates; the cost is the column
sums plus the templates' fixed parts. Replay and the LangGraph graph stay the reference engines (a property
test holds all three equal), and per-rollout rows come from replay, for the policies that need them.

Columns stream: ``evaluate`` takes any iterable of column batches (``parquet_batches`` reads a file one row
group at a time), so memory is one row group plus the templates, whatever the suite's size.

Scope: scenarios judged from their ground truth (``GroundTruthJudge``) and scored by the rule verifier.
Environment-backed suites (AgentDojo) and verifier ensembles are judged by running checks or models on each
rollout: ``unsupported`` says why, and those runs use replay.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from far.rollout.agent import DEFAULT_COSTS, Costs, replay_calls
from far.rollout.calls import MAX_RECORDED_MODEL_ATTEMPTS, RecordedCalls
from far.rollout.judgement import GroundTruthJudge
from far.rollout.policy import CALL_KINDS, MAX_RETRIES_LIMIT, RULES, FallbackMode, Policy, rule_decision
from far.search.evaluation.results import MODEL_DECIDED, PolicyResult
from far.search.ranking.gate import clopper_pearson_upper
from far.verifiers.judge import SuiteJudge
from far.verifiers.rules import RuleVerifier
from far.verifiers.taxonomy import FailureKind, SuccessKind
from far.verifiers.verdict import Z_DIMENSIONS

BLOCK, CLOUD, EDGE = 0, 1, 2  # routes
ROUTES = 3
ATTEMPTS = MAX_RETRIES_LIMIT + 1  # the most attempts any policy makes at one operation
CUM = MAX_RECORDED_MODEL_ATTEMPTS + 1  # cumulative cloud cost after 0..MAX_RECORDED_MODEL_ATTEMPTS model calls
FAILURE_KINDS = tuple(FailureKind)
SUCCESS_KINDS = tuple(SuccessKind)
FALLBACKS = tuple(mode.value for mode in FallbackMode)
COLUMNS = ("class_id", "risk", "edge_cost", *(f"cloud_cost_{m}" for m in range(CUM)), "cloud_cost_last")
Batch = dict[str, np.ndarray]


def suite_problem(suite: Any) -> str | None:
    """Why a suite's scenarios cannot be evaluated column-wise (None: they can), before anything is recorded."""
    if hasattr(suite, "prepare"):
        return f"suite {getattr(suite, 'name', '?')} rolls out episodes in its own environment"
    for split in ("train", "holdout"):
        judged = next((s for s in suite.scenarios(split) if s.environment is not None), None)
        if judged is not None:
            return f"scenario {judged.id} is judged by its environment"
    return None


def unsupported(items: Sequence[Any], verifier: Any) -> str | None:
    """Why these prepared scenarios cannot be evaluated column-wise with this verifier (None: they can)."""
    if type(verifier) is not RuleVerifier:
        return f"the verifier is {getattr(verifier, 'name', type(verifier).__name__)!r}, not the rule verifier"
    judge = verifier.judge
    if type(judge) is not SuiteJudge or type(judge.default) is not GroundTruthJudge:
        return f"the judge {getattr(judge, 'name', type(judge).__name__)!r} is not the ground-truth judge"
    for item in items:
        if not isinstance(item, RecordedCalls):
            return f"{type(item).__name__} episodes are rolled out by their environment"
        if item.scenario.environment is not None:
            return f"scenario {item.scenario.id} is judged by its environment"
    return None


def outcome_class(calls: RecordedCalls) -> tuple:
    """Everything about a scenario that a rollout and the ground-truth judge can observe, except the edge's risk
    and the costs. Two scenarios of one class give the same trajectory shape and verdict under every policy
    that routes them the same way (actions enter only through their properties and equalities, as the agent
    and the judge use them)."""
    scenario, record = calls.scenario, calls.record
    truth = scenario.ground_truth
    proposal, revision = calls.action("proposal"), calls.action("revision")
    target = scenario.proposed_action

    def action_facts(action: Any) -> tuple:
        return (action.sensitive, action.idempotent, action.local, action == target,
                truth.intended_action is not None and action == truth.intended_action)

    facts = calls.facts()
    return (
        facts,
        record.edge.error,
        tuple((review.verdict, review.error) for review in record.cloud),
        action_facts(proposal), action_facts(revision), revision == proposal,
        calls.user_confirms("proposal"), calls.user_confirms("revision"),
        tuple(calls.tool_result(a) for a in range(ATTEMPTS)),
        tuple(calls.cloud_reachable(a) for a in range(ATTEMPTS)),
        truth.unsafe, truth.injected, truth.needs_cloud, truth.intended_action is None,
    )


@dataclass
class CompiledSplit:
    """A split as columns (``class_id`` indexes ``exemplars``) and one exemplar per outcome class."""

    exemplars: list[RecordedCalls]
    columns: Batch

    @property
    def size(self) -> int:
        return len(self.columns["class_id"])

    def batches(self, rows: int = 1 << 20) -> Iterator[Batch]:
        for start in range(0, self.size, rows):
            yield {name: column[start:start + rows] for name, column in self.columns.items()}


class ClassIndex:
    """Outcome classes met so far, each with its first scenario as exemplar (grows as batches compile)."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.exemplars: list[RecordedCalls] = []

    def compile(self, items: Sequence[RecordedCalls]) -> Batch:
        """The columns of these scenarios (new classes are added)."""
        n = len(items)
        class_id = np.empty(n, dtype=np.int32)
        risk = np.empty(n)
        edge_cost = np.empty(n)
        cloud = np.zeros((n, CUM))
        last = np.empty(n)
        for i, calls in enumerate(items):
            key = outcome_class(calls)
            found = self.ids.get(key)
            if found is None:
                found = self.ids[key] = len(self.exemplars)
                self.exemplars.append(calls)
            class_id[i] = found
            edge = calls.record.edge
            risk[i], edge_cost[i] = edge.risk, edge.cost
            reviews = calls.record.cloud
            padded = [reviews[min(m, len(reviews) - 1)].cost for m in range(MAX_RECORDED_MODEL_ATTEMPTS)]
            total = 0.0
            for m, cost in enumerate(padded):  # summed in the order a rollout's steps add them
                total += cost
                cloud[i, m + 1] = total
            last[i] = padded[-1]
        columns = {"class_id": class_id, "risk": risk, "edge_cost": edge_cost, "cloud_cost_last": last}
        columns.update({f"cloud_cost_{m}": cloud[:, m] for m in range(CUM)})
        return columns


def compile_columns(items: Sequence[RecordedCalls]) -> CompiledSplit:
    """A prepared split (``RecordedCalls``, as the evaluator records them) as columns."""
    index = ClassIndex()
    return CompiledSplit(index.exemplars, index.compile(items))


def write_columns(path: str | Path, batches: Iterable[Batch]) -> int:
    """Write column batches to Parquet, one row group per batch, atomically; returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from far.rollout.io import write_atomic

    rows = 0

    def write(tmp: str) -> None:
        nonlocal rows
        writer = None
        try:
            for batch in batches:
                table = pa.table({name: batch[name] for name in COLUMNS})
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema)
                writer.write_table(table, row_group_size=len(table))
                rows += len(table)
        finally:
            if writer is not None:
                writer.close()

    write_atomic(path, write)
    return rows


def parquet_batches(path: str | Path) -> Iterator[Batch]:
    """Stream a columns file one row group at a time."""
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    for group in range(file.num_row_groups):
        table = file.read_row_group(group, columns=list(COLUMNS))
        yield {name: table.column(name).to_numpy() for name in COLUMNS}


@dataclass(frozen=True)
class Template:
    """One (class, route, discrete policy)'s rollout as verified, reduced to what the aggregates need."""

    model_calls: int  # cloud model attempts made (their costs are per scenario)
    fixed_cost: float  # costs that are the same for every scenario of the class (timeouts, tools, user)
    critical: int
    failures: np.ndarray  # count per FAILURE_KINDS
    successes: np.ndarray  # count per SUCCESS_KINDS
    z: np.ndarray
    reward: float
    lost: tuple[tuple[str, str, float], ...]  # (failure kind, parameter or MODEL_DECIDED, reward lost)
    benign: tuple[int, int, int] = (0, 0, 0)  # (benign, benign refused, benign completed): 0 or 1 each


KIND_INDEX = {kind: i for i, kind in enumerate(CALL_KINDS)}


def discrete_part(policy: Policy) -> tuple:
    """What of a policy is not a threshold: the templates of one discrete part serve every threshold. Which
    per-kind thresholds are set is part of it: it decides the parameter a route step names."""
    general = tuple(getattr(policy, f"{name}_{kind}") is None  # the kind uses the general threshold
                    for name in ("cloud_threshold", "edge_block_threshold") for kind in CALL_KINDS)
    return (policy.max_retries, policy.require_confirmation, FallbackMode(policy.fallback_mode).value,
            *(getattr(policy, name) for name, _ in RULES), general)


def routes(risk: np.ndarray, policy: Policy, kind: np.ndarray | None = None,
           rule: np.ndarray | None = None) -> np.ndarray:
    """The agent's route rule (``far.rollout.agent.route``) over a column of risks, with each row's call kind
    (``KIND_INDEX``; None: every row of the general thresholds' kind) and the rules' action on it (``RULE_*``;
    None: no rule applies): a rule's block, then the kind's block threshold, a rule's review, the kind's cloud
    threshold."""
    if kind is None:
        block, cloud = policy.edge_block_threshold, policy.cloud_threshold
    else:
        block = np.array([policy.block_threshold_for(k)[0] for k in CALL_KINDS])[kind]
        cloud = np.array([policy.cloud_threshold_for(k)[0] for k in CALL_KINDS])[kind]
    route = np.where(risk > block, BLOCK, np.where(risk >= cloud, CLOUD, EDGE)).astype(np.int64)
    if rule is not None:
        route = np.where(rule == RULE_REVIEW, np.where(risk > block, BLOCK, CLOUD), route)
        route = np.where(rule == RULE_BLOCK, BLOCK, route)
    return route


RULE_OTHER, RULE_REVIEW, RULE_BLOCK = 0, 1, 2  # what the rules do to a class's calls, as the route reads it


@dataclass
class Totals:
    """One policy's running sums over the batches seen."""

    key_counts: np.ndarray  # scenarios per class * ROUTES + route
    cost: float = 0.0
    scenarios: int = 0


@dataclass
class ColumnarEvaluator:
    """Templates per discrete policy part, filled on first need from the classes' exemplars."""

    exemplars: Sequence[RecordedCalls]
    verifier: RuleVerifier = field(default_factory=RuleVerifier)
    costs: Costs = DEFAULT_COSTS
    templates: list[Template] = field(default_factory=list)
    walks: int = 0  # exemplar rollouts made (the compile cost of templates)
    _maps: dict[tuple, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # discrete part -> ``_map``
    _rules: dict[tuple, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # ``class_rules`` by rules

    @property
    def keys(self) -> int:
        return len(self.exemplars) * ROUTES

    def _map(self, part: tuple) -> tuple[np.ndarray, np.ndarray]:
        """(template id, cloud model calls) per key for a discrete part; -1: not walked yet."""
        found = self._maps.get(part)
        if found is None or len(found[0]) < self.keys:  # classes may grow as batches compile
            grown = (np.full(self.keys, -1, dtype=np.int64), np.zeros(self.keys, dtype=np.int64))
            if found is not None:
                for new, old in zip(grown, found):
                    new[:len(old)] = old
            found = self._maps[part] = grown
        return found

    def _template(self, key: int, risk: float, policy: Policy) -> Template:
        exemplar = self.exemplars[key // ROUTES]
        record = exemplar.record
        # the exemplar walked at a risk that takes this route under this policy (risk is all the route reads)
        calls = RecordedCalls(exemplar.scenario, replace(record, edge=replace(record.edge, risk=risk)),
                              exemplar.environment)
        trajectory = replay_calls(calls, policy, self.costs)
        verdict = self.verifier.verify(exemplar.scenario, trajectory)
        self.walks += 1
        model_calls, fixed = 0, 0.0
        for step in trajectory.steps:
            if step.node == "edge_assess":
                continue
            if step.node == "cloud_review" and not step.decision.startswith("unavailable"):
                model_calls += 1
                continue
            fixed += step.cost
        failures = np.zeros(len(FAILURE_KINDS), dtype=np.int64)
        lost: Counter[tuple[str, str]] = Counter()
        for failure in verdict.failures:
            failures[FAILURE_KINDS.index(failure.kind)] += 1
            lost[(failure.kind.value, failure.parameter or MODEL_DECIDED)] += -failure.penalty
        successes = np.array([verdict.successes.count(kind) for kind in SUCCESS_KINDS], dtype=np.int64)
        benign = (int(verdict.benign), int(verdict.benign and verdict.refused),
                  int(verdict.benign and verdict.task_done))
        return Template(model_calls, fixed, verdict.critical_failures, failures, successes,
                        np.array(verdict.z, dtype=float), verdict.reward,
                        tuple((kind, parameter, value) for (kind, parameter), value in lost.items()), benign)

    def new_totals(self) -> Totals:
        return Totals(np.zeros(self.keys, dtype=np.int64))

    def class_rules(self, policy: Policy) -> tuple[np.ndarray, np.ndarray]:
        """Per class: the proposed call's kind (``KIND_INDEX``) and the rules' action on it (``RULE_*``)."""
        key = (*(getattr(policy, name) for name, _ in RULES), len(self.exemplars))
        found = self._rules.get(key)
        if found is not None:
            return found
        kinds = np.empty(len(self.exemplars), dtype=np.int64)
        rules = np.empty(len(self.exemplars), dtype=np.int64)
        for i, exemplar in enumerate(self.exemplars):
            facts = exemplar.facts()
            kinds[i] = KIND_INDEX[facts.kind]
            action, _ = rule_decision(policy, facts)
            rules[i] = RULE_BLOCK if action == "block" else RULE_REVIEW if action == "review" else RULE_OTHER
        self._rules[key] = kinds, rules
        return kinds, rules

    def add(self, totals: Totals, policy: Policy, batch: Batch) -> None:
        """Add one batch of columns to a policy's totals."""
        class_id = batch["class_id"].astype(np.int64, copy=False)
        risk = batch["risk"]
        kinds, rules = self.class_rules(policy)
        keys = class_id * ROUTES + routes(risk, policy, kinds[class_id], rules[class_id])
        part = discrete_part(policy)
        mapping, calls_by_key = self._map(part)
        missing = mapping[keys] < 0
        if missing.any():
            unique, first = np.unique(keys[missing], return_index=True)
            rows = np.flatnonzero(missing)[first]
            for key, row in zip(unique.tolist(), rows.tolist()):
                template = self._template(key, float(risk[row]), policy)
                mapping[key], calls_by_key[key] = len(self.templates), template.model_calls
                self.templates.append(template)
        model_calls = calls_by_key[keys]
        capped = np.minimum(model_calls, CUM - 1)
        cloud = np.choose(capped, [batch[f"cloud_cost_{m}"] for m in range(CUM)])
        cloud = cloud + np.maximum(model_calls - (CUM - 1), 0) * batch["cloud_cost_last"]
        if len(totals.key_counts) < self.keys:
            totals.key_counts = np.concatenate([totals.key_counts,
                                                np.zeros(self.keys - len(totals.key_counts), dtype=np.int64)])
        totals.key_counts += np.bincount(keys, minlength=self.keys)
        totals.cost += float(batch["edge_cost"].sum() + cloud.sum())
        totals.scenarios += len(keys)

    def evaluate(self, policies: Sequence[Policy], batches: Iterable[Batch]) -> list[Totals]:
        """Every policy over every batch (each batch read once, for all the policies)."""
        all_totals = [self.new_totals() for _ in policies]
        for batch in batches:
            for policy, totals in zip(policies, all_totals):
                self.add(totals, policy, batch)
        return all_totals

    def result(self, name: str, policy: Policy, split: str, totals: Totals, simulated: bool,
               confidence: float = 0.95, oracle: Sequence[str] = ()) -> PolicyResult:
        """The ``PolicyResult`` that ``far.search.evaluation.results.aggregate`` gives for the same rollouts."""
        mapping, _ = self._map(discrete_part(policy))
        used = np.flatnonzero(totals.key_counts)
        counts = totals.key_counts[used]
        templates = [self.templates[t] for t in mapping[used]]
        n = totals.scenarios
        failures = np.zeros(len(FAILURE_KINDS), dtype=np.int64)
        successes = np.zeros(len(SUCCESS_KINDS), dtype=np.int64)
        z_sums = np.zeros(len(Z_DIMENSIONS))
        critical = with_critical = 0
        benign = np.zeros(3, dtype=np.int64)
        reward = fixed = 0.0
        lost: dict[str, dict[str, float]] = {}
        for count, template in zip(counts.tolist(), templates):
            benign += count * np.array(template.benign, dtype=np.int64)
            failures += count * template.failures
            successes += count * template.successes
            z_sums += count * template.z
            critical += count * template.critical
            with_critical += count * (template.critical > 0)
            reward += count * template.reward
            fixed += count * template.fixed_cost
            for kind, parameter, value in template.lost:
                by_parameter = lost.setdefault(kind, {})
                by_parameter[parameter] = by_parameter.get(parameter, 0.0) + count * value
        cost = totals.cost + fixed
        return PolicyResult(
            policy_name=name, policy=policy, split=split, scenarios=n, critical_failures=critical,
            rollouts_with_critical=with_critical,
            critical_rate_upper=clopper_pearson_upper(with_critical, n, confidence) if n else 1.0,
            reward=reward, cost=cost, mean_cost=cost / n if n else float("nan"),
            failure_counts={k.value: int(c) for k, c in zip(FAILURE_KINDS, failures)},
            success_counts={k.value: int(c) for k, c in zip(SUCCESS_KINDS, successes)},
            z_mean={d: (float(s) / n if n else float("nan")) for d, s in zip(Z_DIMENSIONS, z_sums)},
            reward_lost=lost, simulated=simulated, oracle=tuple(oracle),
            benign_scenarios=int(benign[0]), benign_refused=int(benign[1]), benign_completed=int(benign[2]),
        )


# per process: the templates of a ColumnarTrials, kept across the trials a Tune actor runs
_EVALUATORS: dict[tuple[str, str], ColumnarEvaluator] = {}


class ColumnarTrials:
    """The columnar engine as Tune trials use it: the compiled splits travel once (numpy columns and a few
    exemplars), and each worker process walks a template once, whatever the number of trials it runs."""

    def __init__(self, compiled: dict[str, CompiledSplit], verifier: RuleVerifier, costs: Costs = DEFAULT_COSTS,
                 confidence: float = 0.95) -> None:
        import uuid

        self.compiled = compiled
        self.verifier = verifier
        self.costs = costs
        self.confidence = confidence
        self.token = uuid.uuid4().hex

    def shutdown(self) -> None:
        """Nothing to stop (no actors): the same surface as ``far.cluster.rollout_pool.RolloutPool``."""

    def evaluator(self, split: str) -> ColumnarEvaluator:
        key = (self.token, split)
        if key not in _EVALUATORS:
            _EVALUATORS[key] = ColumnarEvaluator(self.compiled[split].exemplars, self.verifier, self.costs)
        return _EVALUATORS[key]

    def result(self, name: str, policy: Policy, split: str, simulated: bool,
               oracle: Sequence[str] = ()) -> PolicyResult:
        evaluator = self.evaluator(split)
        [totals] = evaluator.evaluate([policy], self.compiled[split].batches())
        return evaluator.result(name, policy, split, totals, simulated, self.confidence, oracle)
