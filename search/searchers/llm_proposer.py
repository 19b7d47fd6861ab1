"""The LLM-proposed searcher: an LM reads failure statistics and the best policies so far and proposes the
next policy as JSON. It proposes; it never executes. A proposal that is not valid JSON, not inside the
space or already tried is counted (``invalid`` / ``duplicate``) and replaced by a mutation of the best
policies (the evolutionary searcher's breeding), so the budget is never wasted. It keeps the evolutionary
searcher's generations (so it never depends on trial timing) but not its local search: after generation 0,
every candidate is the LM's to propose.
"""
from __future__ import annotations

import json
from typing import Any

from far.models.lm import LM, GenerateRequest, SamplingParams, messages
from far.search.searchers.evolutionary import Config, EvolutionarySearcher, config_key
from far.search.searchers.space import BoolDomain, ChoiceDomain, FloatDomain, IntDomain, PolicySpace

SYSTEM = (
    "You tune the policy of an edge-cloud assistant. A policy within the cost limit beats one outside it; then "
    "critical failures (unsafe actions, unhandled failures) must go to zero; then maximise reward; then "
    "minimise cost. Propose ONE new policy as a JSON object with exactly the listed parameters, different from "
    "those already tried."
)


def describe_space(space: PolicySpace, on_grid: bool) -> str:
    lines = []
    for name, domain in space.parameters.items():
        if isinstance(domain, BoolDomain):
            lines.append(f"- {name}: true or false")
        elif isinstance(domain, ChoiceDomain) or on_grid:
            lines.append(f"- {name}: one of {json.dumps(list(domain.grid_values()))}")
        elif isinstance(domain, (FloatDomain, IntDomain)):
            lines.append(f"- {name}: {'number' if isinstance(domain, FloatDomain) else 'integer'} in "
                         f"[{domain.low}, {domain.high}]")
    return "\n".join(lines)


def proposal_schema(space: PolicySpace, on_grid: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for name, domain in space.parameters.items():
        if isinstance(domain, BoolDomain):
            properties[name] = {"type": "boolean"}
        elif isinstance(domain, ChoiceDomain) or on_grid:
            properties[name] = {"enum": list(domain.grid_values())}
        elif isinstance(domain, IntDomain):
            properties[name] = {"type": "integer", "minimum": domain.low, "maximum": domain.high}
        else:
            properties[name] = {"type": "number", "minimum": domain.low, "maximum": domain.high}
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


class LLMProposalSearcher(EvolutionarySearcher):
    def __init__(self, space: PolicySpace, lm: LM, warmup: int = 4, top: int = 5, temperature: float = 0.8,
                 max_tokens: int = 120, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self.lm = lm
        self.warmup = warmup
        self.top = top
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.counts = {"proposed": 0, "accepted": 0, "invalid": 0, "duplicate": 0}
        self.failure_totals: dict[str, dict[str, float]] = {}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        number = self.order.get(trial_id)
        config = self.suggested[number] if number is not None else None
        if config is not None and result is not None and not error:
            self.failure_totals[config_key(config)] = {
                k.removeprefix("failures_"): v for k, v in result.items() if k.startswith("failures_") and v}
        super().on_trial_complete(trial_id, result, error)

    def prompt(self) -> str:
        best = self.ranked()[:self.top]
        rows = []
        for scored in best:
            failures = self.failure_totals.get(config_key(scored.config), {})
            rows.append(f"{json.dumps(scored.config, sort_keys=True)} -> critical={scored.critical_failures:g} "
                        f"reward={scored.reward:.0f} cost/scenario={scored.mean_cost:.3f} "
                        f"over_refusal={scored.over_refusal_rate:.3f} benign_success={scored.benign_success_rate:.3f} "
                        f"failures={json.dumps(failures)}")
        c = self.constraints
        limits = "".join(f"\n{words} {value:g}" for words, value in (
            ("Cost limit: cost/scenario <=", c.max_mean_cost),
            ("Over-refusal limit: over_refusal <=", c.max_over_refusal_rate),
            ("Usefulness floor: benign_success >=", c.min_benign_success_rate)) if value is not None) or "\nLimits: none"
        return (f"Parameters:\n{describe_space(self.space, self.on_grid)}{limits}\n\nBest policies so far "
                f"({len(self.parents())} tried):\n" + "\n".join(rows) + "\n\nPropose the next policy as JSON.")

    def parse(self, text: str) -> Config | None:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError):
            return None
        if not isinstance(data, dict) or set(data) != set(self.space.parameters):
            return None
        try:
            policy = self.space.policy(data)
        except Exception:  # pydantic's ValidationError: out of the policy schema
            return None
        if not self.space.contains(policy):
            return None
        # the policy's own typed values, so that 1 and 1.0 (a JSON writer's choice) are the same proposal
        config = {name: getattr(policy, name) for name in self.space.parameters}
        if self.on_grid and any(config[n] not in d.grid_values() for n, d in self.space.parameters.items()):
            return None
        return config

    def _propose(self) -> Config:
        if len(self.parents()) < self.warmup:
            return self._breed()
        self.counts["proposed"] += 1
        request = GenerateRequest(
            messages=messages(SYSTEM, self.prompt()),
            params=SamplingParams(temperature=self.temperature, max_tokens=self.max_tokens,
                                  seed=self.counts["proposed"]),
            json_schema=proposal_schema(self.space, self.on_grid),
        )
        (result,) = self.lm.generate([request])
        proposal = None if result.error else self.parse(result.text)
        if proposal is None:
            self.counts["invalid"] += 1
        elif config_key(proposal) in self.seen:
            self.counts["duplicate"] += 1
        else:
            self.counts["accepted"] += 1
            return proposal
        return self._breed()  # replaced by a mutation of the best so far

    def _candidate(self) -> Config | None:
        return self._novel(self._propose, attempts=3) or self._novel(self._breed)

    def get_state(self) -> dict:
        return {**super().get_state(), "counts": self.counts,
                "failure_totals": self.failure_totals}

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self.counts = dict(state.get("counts", self.counts))
        self.failure_totals = dict(state.get("failure_totals", {}))
