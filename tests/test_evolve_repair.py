"""Repair candidates (``far.evolve.repair``): the temperature schedule and exploration."""
from __future__ import annotations

import pytest
from evolve_helpers import tiny_config

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.collect import Failure, failures  # noqa: E402
from far.evolve.loop import Evolution  # noqa: E402
from far.evolve.repair import propose, temperatures  # noqa: E402


def test_temperature_schedule_spans_the_range():
    assert temperatures(4, 0.3, 1.2) == pytest.approx([0.3, 0.6, 0.9, 1.2])
    assert temperatures(1, 0.3, 1.2) == [0.3]


def dev_failures(evolution: Evolution) -> list[Failure]:
    failed, _, _ = failures(evolution.dev, evolution.decide(evolution.dev), evolution.thresholds(evolution.dev),
                            evolution.best(evolution.dev))
    return failed


@pytest.mark.parametrize("exploration", [0.0, 1.0])
def test_exploration_draws_repair_candidates_uniformly(tmp_path, exploration):
    """A confident model sampled on-policy proposes the same decision K times; with ``exploration`` a share of
    the candidates is drawn uniformly among the valid decisions (and counted)."""
    evolution = Evolution(tiny_config(tmp_path, exploration=exploration, candidates=6))
    failed = dev_failures(evolution)[:8] or pytest.skip("no failures to repair on this draw")
    config = evolution.config

    def proposed():
        return propose(evolution.model, evolution.task, config.repair, config.selection, failed,
                       evolution.thresholds([f.scenario for f in failed]), config.seed, 1)

    repairs = proposed()
    drawn = [c.scored.decision for group in repairs.groups for c in group]
    assert len(drawn) == 6 * len(failed) and repairs.explored == (len(drawn) if exploration == 1.0 else 0)
    if exploration == 1.0:
        assert set(drawn) == {"handle", "escalate", "refuse"}
    assert 1 / 6 <= repairs.distinct_rate() <= 3 / 6
    again = proposed()  # seeded: the same draws
    assert [c.text for g in again.groups for c in g] == [c.text for g in repairs.groups for c in g]
