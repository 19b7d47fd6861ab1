"""Training (``far.evolve.train``): how much is rehearsed, PFPO's KL anchor, and the fit check."""
from __future__ import annotations

import random

import pytest
from evolve_helpers import tiny_config

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.config import TrainingSettings  # noqa: E402
from far.evolve.loop import Evolution  # noqa: E402
from far.evolve.train import rehearsal_count  # noqa: E402


@pytest.mark.parametrize("repairs, per_repair, floor, expected", [
    (2, 1.0, 0, 2), (2, 1.0, 5, 5), (6, 1.0, 5, 6), (2, 2.0, 3, 4), (1, 1.0, 99, 99), (0, 1.0, 5, 0)])
def test_rehearsal_takes_per_repair_or_the_floor(repairs, per_repair, floor, expected):
    assert rehearsal_count(TrainingSettings(rehearsal=per_repair, rehearsal_min=floor), repairs) == expected


def test_pfpo_anchors_its_kl_to_the_model_sft_left(tmp_path):
    from far.evolve.train import pfpo

    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0,
                                      pfpo={"group": 3, "prompts_per_step": 2, "lr": 0.05}))
    lesson = evolution.lesson(1, random.Random(0))
    model, config = evolution.model, evolution.config
    start = model.snapshot()  # as SFT left it
    calls = []
    plain = model.completion_logprobs

    def spy(prompts, completions, reference=False):
        weights = dict(model.model.named_parameters())
        calls.append((reference, all(torch.equal(v, weights[k]) for k, v in start.items())))
        return plain(prompts, completions, reference=reference)

    model.completion_logprobs = spy
    stats = pfpo(model, evolution.task, config.selection, config.training.pfpo, lesson, config.seed, 1)
    chunks = -(-len(lesson.examples) // 2)
    assert chunks >= 2 and len(calls) == chunks * (2 + config.training.pfpo.iterations)
    refs = [calls[c * 4 + 1] for c in range(chunks)]  # per chunk: old, ref, then one per optimisation pass
    # the adapter on, at the weights SFT left, though PFPO has moved them since the first chunk
    assert refs == [(False, True)] * chunks and not calls[4][1]
    assert len(stats.losses) == len(stats.clipped) == len(stats.kl) == chunks * 2
    assert stats.kl[0] == pytest.approx(0.0, abs=1e-6) and min(stats.kl) >= 0.0  # at π_ref first


def test_the_fit_check_reads_the_models_greedy_decisions():
    from far.evolve.train import Fit

    class Scripted:
        def choose(self, prompts, options, temperature, n=1, seed=0):
            assert temperature == 0.0 and tuple(options) == ("handle", "escalate", "refuse")
            return [["refuse"] if "bad" in p else [" handle"] for p in prompts]

    fit = Fit(Scripted(), ["bad one", "fine one", "bad two"], ["refuse", "handle", "handle"])
    assert fit.share() == pytest.approx(2 / 3) and not fit.learned() and fit.extra == 1
    assert Fit(Scripted(), ["bad", "ok"], ["refuse", "handle"]).learned()
