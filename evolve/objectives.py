"""PFPO's objective on tensors: group-relative advantages and the clipped ratio loss with a KL penalty.

A_i = r_i − mean_j r_j over the G completions of one repair prompt (not divided by the std: a group whose
completions all score alike teaches nothing, rather than amplifying noise).

Per completion token t of completion i, with ρ = exp(log π_θ − log π_old):
    ℓ_{i,t} = −min(ρ·A_i, clip(ρ, 1−ε, 1+ε)·A_i) + β·k3,   k3 = exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1
(k3 is the unbiased, non-negative estimator of KL(π_θ ‖ π_ref)). The loss is the mean of ℓ over all completion
tokens of the batch.
"""
from __future__ import annotations


def masked_mean(values, mask):
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def group_advantages(rewards):
    """``rewards`` of shape [G] (or [N, G]: one row per prompt) -> r − mean over the group."""
    return rewards - rewards.mean(dim=-1, keepdim=True)


def pfpo_loss(logp_new, logp_old, logp_ref, advantages, mask, epsilon: float, beta: float):
    """See the module docstring. Shapes: log-probs and ``mask`` [B, T], ``advantages`` [B]."""
    import torch

    ratio = torch.exp(logp_new - logp_old)
    adv = advantages.unsqueeze(-1)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon) * adv)
    return masked_mean(-surrogate + beta * kl_k3(logp_new, logp_ref), mask)


def kl_k3(logp_new, logp_ref):
    """k3 per token: exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1, an unbiased, non-negative estimate
    of KL(π_θ ‖ π_ref) from samples of π_θ (its masked mean is what rounds.parquet reports as ``kl``)."""
    import torch

    delta = logp_ref - logp_new
    return torch.exp(delta) - delta - 1.0


def clip_fraction(logp_new, logp_old, advantages, mask, epsilon: float) -> float:
    """The share of completion tokens on which the clip decides the loss: ρ > 1+ε with A > 0, or ρ < 1−ε with
    A < 0 (there the clipped term is the smaller one and its gradient is zero). With one optimisation pass per
    batch ρ = 1 and this is 0: the clip only acts from the second pass on."""
    import torch

    ratio = torch.exp(logp_new - logp_old)
    adv = advantages.unsqueeze(-1)
    clipped = ((ratio > 1.0 + epsilon) & (adv > 0)) | ((ratio < 1.0 - epsilon) & (adv < 0))
    return float(masked_mean(clipped.float(), mask))
