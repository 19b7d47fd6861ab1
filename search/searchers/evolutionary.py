"""The evolutionary searcher: a Ray Tune ``Searcher`` whose selection uses ``far.search.ranking.rank`` (the constrained
lexicographic rule, under the gate's hard limits).

Generational, so that results never depend on timing: suggestions are numbered, and generation g is
suggestions [g * population, (g + 1) * population). Generation 0 is random points of the space; a child in
generation g >= 1 is bred only once every trial of the earlier generations has completed (until then
``suggest`` answers None and Tune asks again), from their results taken in suggestion order: two parents
drawn by tournament from the breeding pool (the best ``population`` so far by ``ranking.rank``; the ``elite`` best
are always in it), crossed over (uniform, per parameter) and mutated (each parameter with ``mutation_rate``,
at least one): a float or int moves to a neighbouring value (a neighbouring grid point when searching the
grid), a bool flips, a choice changes. The first ``local_search`` share of each generation is local search
instead (a memetic step): the untried one-parameter neighbours of the best parents, best parent first. So the
same seed gives the same trials whatever the concurrency and whichever trial finishes first. Suggestions
already made are not repeated; when the grid is exhausted the searcher finishes. State is saved atomically
(temp file + ``os.replace``) for ``--resume``.
"""
from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass
from typing import Any

from far.rollout.io import write_json_atomic
from far.search.ranking.rank import NO_CONSTRAINTS, Constraints, rank_key
from far.search.searchers.space import BoolDomain, ChoiceDomain, FloatDomain, IntDomain, PolicySpace
from ray.tune.search import Searcher

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
    mean_cost: float = math.nan  # cost per scenario, what the gate's cost limit reads
    over_refusal_rate: float = math.nan  # what the gate's over-refusal limit reads
    benign_success_rate: float = math.nan  # what the gate's benign success floor reads

    @classmethod
    def from_result(cls, config: Config, result: dict[str, Any]) -> "Scored":
        return cls(config, result["critical_failures"], result["reward"], result["cost"],
                   result.get("mean_cost", math.nan), result.get("over_refusal_rate", math.nan),
                   result.get("benign_success_rate", math.nan))


def random_config(space: PolicySpace, rng: random.Random, on_grid: bool) -> Config:
    if on_grid:
        return {name: rng.choice(domain.grid_values()) for name, domain in space.parameters.items()}
    return {name: domain.sample(rng) for name, domain in space.parameters.items()}


def mutate_value(domain: Any, value: Any, rng: random.Random, on_grid: bool) -> Any:
    """A value near ``value``, inside the domain: a bool flips and a choice changes; a grid value steps one or two
    grid points either way, clamped at the ends (so at an end it can stay); a float moves by a Gaussian step."""
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


def neighbours(space: PolicySpace, config: Config) -> list[Config]:
    """Every policy one step from ``config`` in one parameter: the next grid value down and up for numbers,
    every other value for a choice or a bool (off the grid, ±5% of the range for a float)."""
    out = []
    for name, domain in space.parameters.items():
        value = config[name]
        if isinstance(domain, (ChoiceDomain, BoolDomain)):
            others = [v for v in domain.grid_values() if v != value]
        elif isinstance(domain, FloatDomain) and value not in domain.grid_values():
            step = 0.05 * (domain.high - domain.low)
            others = [v for v in (value - step, value + step) if domain.low <= v <= domain.high]
        else:
            values = list(domain.grid_values())
            index = values.index(value)
            others = [values[i] for i in (index - 1, index + 1) if 0 <= i < len(values)]
        out.extend({**config, name: other} for other in others)
    return out


def tournament(pool: list[Scored], rng: random.Random, size: int,
               constraints: Constraints = NO_CONSTRAINTS) -> Scored:
    """The best of ``size`` random entrants, by ``far.search.ranking.rank``."""
    entrants = [rng.choice(pool) for _ in range(size)]
    return min(entrants, key=lambda s: rank_key(s, constraints))


class EvolutionarySearcher(Searcher):
    def __init__(self, space: PolicySpace, population: int = 12, elite: int = 2, tournament_size: int = 3,
                 mutation_rate: float = 0.3, crossover_rate: float = 0.7, local_search: float = 0.0, seed: int = 0,
                 on_grid: bool = True, constraints: Constraints = NO_CONSTRAINTS, metric: str = "score",
                 mode: str = "max") -> None:
        super().__init__(metric=metric, mode=mode)
        self.space = space
        self.population = population
        self.elite = elite
        self.tournament_size = tournament_size
        self.mutation_rate = mutation_rate
        self.crossover_rate = crossover_rate
        self.local_search = local_search
        self.on_grid = on_grid
        self.constraints = constraints
        self.rng = random.Random(seed)
        self.suggested: list[Config] = []  # in suggestion order
        self.order: dict[str, int] = {}  # trial id -> its suggestion number
        self.completed: dict[int, Scored | None] = {}  # suggestion number -> result (None: the trial failed)
        self.seen: set[str] = set()
        self.grid_size = space.grid_size() if on_grid else None
        self._ranked: list[Scored] = []
        self._ranked_for = -1  # the generation start ``_ranked`` was sorted for

    @property
    def archive(self) -> list[Scored]:
        """Completed results, in suggestion order (never completion order)."""
        return [self.completed[i] for i in sorted(self.completed) if self.completed[i] is not None]

    def parents(self) -> list[Scored]:
        """What the next suggestion may learn from: the results of the generations before its own, in
        suggestion order (results of its own generation would make it depend on which trial finished first)."""
        number = len(self.suggested)
        start = number - number % self.population
        return [self.completed[i] for i in range(start) if self.completed.get(i) is not None]

    def ranked(self) -> list[Scored]:
        """``parents()`` best first; fixed within a generation, so sorted once per generation (breeding asks
        for it on every attempt)."""
        start = len(self.suggested) - len(self.suggested) % self.population
        if self._ranked_for != start:
            self._ranked = sorted(self.parents(), key=lambda s: rank_key(s, self.constraints))
            self._ranked_for = start
        return self._ranked

    # -- the Searcher surface ------------------------------------------------------------------------
    def suggest(self, trial_id: str) -> Config | None:
        if self.grid_size is not None and len(self.seen) >= self.grid_size:
            return Searcher.FINISHED
        number = len(self.suggested)
        generation_start = number - number % self.population
        if any(i not in self.completed for i in range(generation_start)):
            return None  # an earlier generation is still running: breed from all of it, or not at all
        candidate = self._candidate()
        if candidate is None:
            return Searcher.FINISHED
        self.order[trial_id] = number
        self.suggested.append(candidate)
        self.seen.add(config_key(candidate))
        return dict(candidate)

    def _candidate(self) -> Config | None:
        """A policy not suggested before (subclasses change where candidates come from)."""
        return self._local() or self._novel(self._breed)

    def _local(self) -> Config | None:
        """In the local-search share of a generation after the first: the best parents' untried neighbours."""
        number = len(self.suggested)
        if number < self.population or number % self.population >= int(self.population * self.local_search):
            return None
        for parent in self.ranked()[:max(1, self.elite)]:
            for candidate in neighbours(self.space, parent.config):
                if config_key(candidate) not in self.seen:
                    return candidate
        return None

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        number = self.order.pop(trial_id, None)
        if number is None:
            return
        ok = result is not None and not error and "critical_failures" in result
        self.completed[number] = Scored.from_result(self.suggested[number], result) if ok else None

    def save(self, checkpoint_path: str) -> None:
        write_json_atomic(checkpoint_path, self.get_state())

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, encoding="utf-8") as handle:
            self.set_state(json.load(handle))

    def get_state(self) -> dict:
        return {
            "suggested": self.suggested, "order": self.order,
            "completed": [[i, None if s is None else [s.critical_failures, s.reward, s.cost, s.mean_cost,
                                                  s.over_refusal_rate, s.benign_success_rate]]
                          for i, s in sorted(self.completed.items())],
            "seen": sorted(self.seen), "rng": _encode_rng(self.rng.getstate()),
        }

    def set_state(self, state: dict) -> None:
        names = list(self.space.parameters)
        self.suggested = [{n: c[n] for n in names} for c in state["suggested"]]
        self.order = {t: int(i) for t, i in state["order"].items()}
        self.completed = {int(i): None if v is None else Scored(self.suggested[int(i)], *v)
                          for i, v in state["completed"]}
        self.seen = set(state["seen"])
        self.rng.setstate(_decode_rng(state["rng"]))
        self._ranked_for = -1

    # -- breeding ------------------------------------------------------------------------------------
    def breeding_pool(self) -> list[Scored]:
        return self.ranked()[:max(self.population, self.elite)]

    def _breed(self) -> Config:
        if len(self.suggested) < self.population or not self.ranked():
            return random_config(self.space, self.rng, self.on_grid)
        pool = self.breeding_pool()
        first = tournament(pool, self.rng, self.tournament_size, self.constraints)
        if self.rng.random() < self.crossover_rate:
            second = tournament(pool, self.rng, self.tournament_size, self.constraints)
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


SHUFFLED_GRID_LIMIT = 200_000  # larger grids are sampled point by point instead of shuffled whole


class RandomSearcher(Searcher):
    """Random search without replacement: on the grid, a seeded shuffle of every grid point (so no policy is
    evaluated twice and the grid is covered in ``grid_size`` trials); off the grid (or on a grid too large to
    shuffle), seeded draws that skip repeats."""

    def __init__(self, space: PolicySpace, seed: int = 0, on_grid: bool = True, metric: str = "score",
                 mode: str = "max") -> None:
        super().__init__(metric=metric, mode=mode)
        self.space = space
        self.on_grid = on_grid
        self.rng = random.Random(seed)
        self.suggested = 0
        self.seen: set[str] = set()
        self._grid: list[Config] | None = None
        if on_grid and space.grid_size() <= SHUFFLED_GRID_LIMIT:
            names = list(space.parameters)
            grid = [dict(zip(names, values))
                    for values in itertools.product(*(space.parameters[n].grid_values() for n in names))]
            self.rng.shuffle(grid)
            self._grid = grid

    def suggest(self, trial_id: str) -> Config | None:
        if self._grid is not None:
            if self.suggested >= len(self._grid):
                return Searcher.FINISHED
            candidate = self._grid[self.suggested]
        else:
            for _ in range(1000):
                candidate = random_config(self.space, self.rng, self.on_grid)
                if config_key(candidate) not in self.seen:
                    break
            else:
                return Searcher.FINISHED
        self.suggested += 1
        self.seen.add(config_key(candidate))
        return dict(candidate)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass

    def save(self, checkpoint_path: str) -> None:
        write_json_atomic(checkpoint_path, {"suggested": self.suggested, "seen": sorted(self.seen),
                                            "rng": _encode_rng(self.rng.getstate())})

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, encoding="utf-8") as handle:
            state = json.load(handle)
        self.suggested, self.seen = state["suggested"], set(state["seen"])
        self.rng.setstate(_decode_rng(state["rng"]))


def _encode_rng(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _decode_rng(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
