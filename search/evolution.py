"""The evolutionary searcher: a Ray Tune ``Searcher`` whose selection uses the lexicographic rule.

Steady state: the first ``population`` suggestions are random points of the space; after that each
suggestion is a child of two parents drawn by tournament from the breeding pool (the best ``population``
completed policies by ``search.rank``; the ``elite`` best are always in it), crossed over (uniform, per
parameter) and mutated (each parameter with ``mutation_rate``, at least one): a float or int moves to a
neighbouring value (a neighbouring grid point when searching the grid), a bool flips, a choice changes.
Suggestions already made are not repeated; when the grid is exhausted the searcher finishes.
State is saved atomically (temp file + ``os.replace``) for ``--resume``.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from ray.tune.search import Searcher

from rollout.io import write_json_atomic
from search.rank import rank_key
from search.space import BoolDomain, ChoiceDomain, FloatDomain, IntDomain, PolicySpace

Config = dict[str, Any]


def config_key(config: Config) -> str:
    return json.dumps(config, sort_keys=True)


@dataclass(frozen=True)
class Scored:
    """What selection needs of a completed trial."""

    config: Config
    critical_failures: float
    reward: float
    cost: float

    @classmethod
    def from_result(cls, config: Config, result: dict[str, Any]) -> "Scored":
        return cls(config, result["critical_failures"], result["reward"], result["cost"])


def random_config(space: PolicySpace, rng: random.Random, on_grid: bool) -> Config:
    if on_grid:
        return {name: rng.choice(domain.grid_values()) for name, domain in space.parameters.items()}
    return {name: domain.sample(rng) for name, domain in space.parameters.items()}


def mutate_value(domain: Any, value: Any, rng: random.Random, on_grid: bool) -> Any:
    """A different value near ``value``, inside the domain."""
    if isinstance(domain, BoolDomain):
        return not value
    if isinstance(domain, ChoiceDomain) or (on_grid and isinstance(domain, FloatDomain)) or isinstance(
            domain, IntDomain):
        values = list(domain.grid_values())
        if len(values) == 1:
            return value
        if isinstance(domain, ChoiceDomain):
            return rng.choice([v for v in values if v != value])
        index = values.index(value) if value in values else min(range(len(values)),
                                                                  key=lambda i: abs(values[i] - value))
        step = rng.choice([-2, -1, -1, 1, 1, 2])
        return values[max(0, min(len(values) - 1, index + step))]
    assert isinstance(domain, FloatDomain)
    sigma = 0.1 * (domain.high - domain.low)
    return min(domain.high, max(domain.low, value + rng.gauss(0.0, sigma)))


def mutate(space: PolicySpace, config: Config, rng: random.Random, rate: float, on_grid: bool) -> Config:
    child = dict(config)
    names = list(space.parameters)
    chosen = [n for n in names if rng.random() < rate] or [rng.choice(names)]
    for name in chosen:
        child[name] = mutate_value(space.parameters[name], child[name], rng, on_grid)
    return child


def crossover(space: PolicySpace, a: Config, b: Config, rng: random.Random) -> Config:
    """Uniform crossover, in the space's parameter order (so a restored searcher draws the same)."""
    return {name: (a if rng.random() < 0.5 else b)[name] for name in space.parameters}


def tournament(pool: list[Scored], rng: random.Random, size: int) -> Scored:
    """The best of ``size`` random entrants, by the lexicographic rule."""
    entrants = [rng.choice(pool) for _ in range(size)]
    return min(entrants, key=rank_key)


class EvolutionarySearcher(Searcher):
    def __init__(self, space: PolicySpace, population: int = 12, elite: int = 2, tournament_size: int = 3,
                 mutation_rate: float = 0.3, crossover_rate: float = 0.7, seed: int = 0, on_grid: bool = True,
                 metric: str = "score", mode: str = "max") -> None:
        super().__init__(metric=metric, mode=mode)
        self.space = space
        self.population = population
        self.elite = elite
        self.tournament_size = tournament_size
        self.mutation_rate = mutation_rate
        self.crossover_rate = crossover_rate
        self.on_grid = on_grid
        self.rng = random.Random(seed)
        self.archive: list[Scored] = []
        self.pending: dict[str, Config] = {}
        self.seen: set[str] = set()
        self.grid_size = space.grid_size() if on_grid else None

    # -- the Searcher surface ------------------------------------------------------------------------
    def suggest(self, trial_id: str) -> Config | None:
        if self.grid_size is not None and len(self.seen) >= self.grid_size:
            return Searcher.FINISHED
        candidate = self._candidate()
        if candidate is None:
            return Searcher.FINISHED
        self.pending[trial_id] = candidate
        self.seen.add(config_key(candidate))
        return dict(candidate)

    def _candidate(self) -> Config | None:
        """A policy not suggested before (subclasses change where candidates come from)."""
        return self._novel(self._breed)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        config = self.pending.pop(trial_id, None)
        if config is not None and result is not None and not error and "critical_failures" in result:
            self.archive.append(Scored.from_result(config, result))

    def save(self, checkpoint_path: str) -> None:
        write_json_atomic(checkpoint_path, self.get_state())

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, encoding="utf-8") as handle:
            self.set_state(json.load(handle))

    def get_state(self) -> dict:
        return {
            "archive": [[s.config, s.critical_failures, s.reward, s.cost] for s in self.archive],
            "pending": self.pending, "seen": sorted(self.seen),
            "rng": _encode_rng(self.rng.getstate()),
        }

    def set_state(self, state: dict) -> None:
        order = list(self.space.parameters)
        self.archive = [Scored({n: c[n] for n in order}, k, r, x) for c, k, r, x in state["archive"]]
        self.pending = {t: {n: c[n] for n in order} for t, c in state["pending"].items()}
        self.seen = set(state["seen"])
        self.rng.setstate(_decode_rng(state["rng"]))

    # -- breeding ------------------------------------------------------------------------------------
    def breeding_pool(self) -> list[Scored]:
        ranked = sorted(self.archive, key=rank_key)
        return ranked[:max(self.population, self.elite)]

    def _breed(self) -> Config:
        if len(self.archive) < self.population:
            return random_config(self.space, self.rng, self.on_grid)
        pool = self.breeding_pool()
        first = tournament(pool, self.rng, self.tournament_size)
        if self.rng.random() < self.crossover_rate:
            second = tournament(pool, self.rng, self.tournament_size)
            child = crossover(self.space, first.config, second.config, self.rng)
        else:
            child = dict(first.config)
        return mutate(self.space, child, self.rng, self.mutation_rate, self.on_grid)

    def _novel(self, make, attempts: int = 200) -> Config | None:
        for _ in range(attempts):
            candidate = make()
            if config_key(candidate) not in self.seen:
                return candidate
        for _ in range(attempts):  # stuck near the optimum: widen with random points
            candidate = random_config(self.space, self.rng, self.on_grid)
            if config_key(candidate) not in self.seen:
                return candidate
        return None


def _encode_rng(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _decode_rng(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
