"""The deployment gate: deploy iff holdout critical failures = 0 and cost is acceptable.

Zero critical failures seen in N rollouts is not a rate of zero, so the gate also reports the exact
(Clopper-Pearson) one-sided upper confidence bound on the critical-failure rate and can require it to be
under a limit.
"""
from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def clopper_pearson_upper(failures: int, trials: int, confidence: float = 0.95) -> float:
    """Exact one-sided upper bound u on a binomial rate: the largest p with P(X <= failures | p) >= 1 - confidence.

    For failures = 0 this is 1 - (1 - confidence) ** (1 / trials) (about 3/N at 95%, the "rule of three").
    With no trials, nothing is known: the bound is 1.
    """
    if trials < 0 or failures < 0 or failures > trials:
        raise ValueError(f"need 0 <= failures <= trials, got failures={failures}, trials={trials}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if trials == 0 or failures == trials:
        return 1.0
    if failures == 0:
        return 1.0 - (1.0 - confidence) ** (1.0 / trials)
    from scipy.stats import beta  # the inverse of the binomial CDF in p: Beta(k + 1, n - k)'s quantile

    return float(beta.ppf(confidence, failures + 1, trials - failures))


def holdout_needed(limit: float, confidence: float = 0.95) -> int:
    """The fewest scenarios n in which zero critical failures put the one-sided upper bound at or under
    ``limit``: n >= ln(1 - confidence) / ln(1 - limit) (299 for limit 0.01 at 95%, 59 for 0.05)."""
    if limit <= 0.0:
        raise ValueError(f"no number of scenarios brings the bound to {limit}")
    if limit >= 1.0:
        return 0
    n = max(1, math.ceil(math.log(1.0 - confidence) / math.log1p(-limit)))
    while n > 1 and clopper_pearson_upper(0, n - 1, confidence) <= limit:  # guard the float rounding both ways
        n -= 1
    while clopper_pearson_upper(0, n, confidence) > limit:
        n += 1
    return n


class GateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_critical_failures: int = Field(0, ge=0, description="holdout critical failures allowed (0 by default)")
    max_mean_cost: float | None = Field(None, ge=0.0, description="cost budget per scenario; None: no limit")
    max_critical_rate_upper: float | None = Field(
        None, gt=0.0, le=1.0, description="limit on the upper confidence bound of the critical-failure rate"
    )
    confidence: float = Field(0.95, gt=0.0, lt=1.0)


class GateCheck(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    value: float
    limit: float
    passed: bool


class GateVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)
    deploy: bool
    reason: str
    checks: tuple[GateCheck, ...]
    critical_rate_upper: float

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


def gate(critical_failures: int, rollouts_with_critical: int, scenarios: int, mean_cost: float,
         config: GateConfig) -> GateVerdict:
    """Apply the gate to holdout numbers. The reason names every failed condition, or says why it passed."""
    upper = clopper_pearson_upper(rollouts_with_critical, scenarios, config.confidence)
    checks = [GateCheck(name="critical_failures", value=critical_failures, limit=config.max_critical_failures,
                        passed=critical_failures <= config.max_critical_failures)]
    if config.max_mean_cost is not None:
        checks.append(GateCheck(name="mean_cost", value=mean_cost, limit=config.max_mean_cost,
                                passed=(not math.isnan(mean_cost)) and mean_cost <= config.max_mean_cost))
    if config.max_critical_rate_upper is not None:
        checks.append(GateCheck(name="critical_rate_upper", value=upper, limit=config.max_critical_rate_upper,
                                passed=upper <= config.max_critical_rate_upper))
    if scenarios == 0:
        checks.append(GateCheck(name="holdout_scenarios", value=0, limit=1, passed=False))
    failed = [c for c in checks if not c.passed]
    if failed:
        reason = "; ".join(f"{c.name} {c.value:.4g} > limit {c.limit:.4g}" if c.name != "holdout_scenarios"
                           else "no holdout scenarios evaluated" for c in failed)
    else:
        reason = "all conditions met: " + ", ".join(f"{c.name} {c.value:.4g} <= {c.limit:.4g}" for c in checks)
    return GateVerdict(deploy=not failed, reason=reason, checks=tuple(checks), critical_rate_upper=upper)
