"""PFPO's objective on fixed tensors (``far.evolve.objectives``): group advantages, the clipped loss with its k3 KL
penalty, and the figures a round reports of it."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.objectives import group_advantages, pfpo_loss  # noqa: E402


def test_group_advantages_are_centred_not_scaled():
    rewards = torch.tensor([[1.0, 3.0, 5.0, 7.0], [2.0, 2.0, 2.0, 2.0]])
    advantages = group_advantages(rewards)
    assert torch.equal(advantages, torch.tensor([[-3.0, -1.0, 1.0, 3.0], [0.0, 0.0, 0.0, 0.0]]))


def test_pfpo_loss_on_fixed_tensors():
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    advantages = torch.tensor([1.0, -2.0])
    old = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    # at the sampling policy (ratio 1) and the reference: loss = -mean over tokens of A
    assert float(pfpo_loss(old, old, old, advantages, mask, 0.2, 0.1)) == pytest.approx(-(1 + 1 - 2) / 3)
    # ratio 2 on every token: clipped to 1.2 for A > 0, unclipped (min) for A < 0
    new = old + torch.log(torch.tensor(2.0))
    loss = pfpo_loss(new, old, new, advantages, mask, 0.2, 0.0)
    assert float(loss) == pytest.approx(-(1.2 + 1.2 + 2.0 * -2.0) / 3)
    # KL penalty: k3 with log π_ref − log π = −log 2 on every token: exp(d) − d − 1 = 0.5 + log 2 − 1
    k3 = 0.5 + torch.log(torch.tensor(2.0)).item() - 1.0
    with_kl = pfpo_loss(new, new, old, torch.zeros(2), mask, 0.2, 0.5)
    assert float(with_kl) == pytest.approx(0.5 * k3)
    # gradients flow only through the new log-probs
    new = old.clone().requires_grad_(True)
    pfpo_loss(new, old, old, advantages, mask, 0.2, 0.1).backward()
    assert new.grad is not None and new.grad[1, 1] == 0  # masked token: no gradient


def test_the_kl_reported_is_k3_over_the_completion_tokens():
    from far.evolve.objectives import kl_k3, masked_mean

    new = torch.log(torch.tensor([[0.5, 0.2], [0.9, 0.1]]))
    ref = torch.log(torch.tensor([[0.5, 0.4], [0.3, 0.1]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    per_token = kl_k3(new, ref)
    assert per_token[0, 0] == 0.0 and per_token[1, 1] == 0.0  # where π_θ = π_ref
    assert per_token[0, 1] == pytest.approx(2.0 - math.log(2.0) - 1.0)  # r = 0.4/0.2: r - log r - 1
    assert float(masked_mean(per_token, mask)) == pytest.approx(float(per_token[0, 1] + per_token[1, 0]) / 3)
    assert bool((per_token >= 0).all())


def test_clip_fraction_counts_only_the_tokens_where_the_clip_binds():
    from far.evolve.objectives import clip_fraction

    old = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    assert clip_fraction(old, old, torch.tensor([1.0, -1.0]), mask, 0.2) == 0.0  # first pass: ratio 1
    new = torch.log(torch.tensor([[1.5, 1.1, 0.5], [0.5, 1.5, 9.0]]))
    # A > 0 binds above 1.2 (token 0); A < 0 binds below 0.8 (token 3); the masked token does not count
    assert clip_fraction(new, old, torch.tensor([1.0, -1.0]), mask, 0.2) == pytest.approx(2 / 5)
    assert clip_fraction(new, old, torch.tensor([0.0, 0.0]), mask, 0.2) == 0.0  # no advantage, nothing binds
