"""One row of rounds.parquet per round: the holdout figures after it (reported only), what the round did, and
what the check slice said. Round 0 is the model before any update: its round facts are empty."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from far.evolve.metrics import CHECKED
from far.evolve.select import RULES

DISCARDED = ("asr", "hcr", "tsr", "over_refusal")  # a rolled-back round's holdout figures, before the rollback
STEPS = ("lesson", "sft", "pfpo", "check", "holdout")  # the timed steps of a round


@dataclass
class RoundRecord:
    round: int
    holdout: dict[str, float]  # the holdout figures of the model kept after the round (``holdout_metrics``)
    check: dict[str, float]  # the kept model's check-slice figures (``CHECKED``)
    seconds: float
    failures: int | None = None
    distinct_rate: float | None = None
    repairing: int | None = None  # candidates, over every failure, that repair it
    feasible: int | None = None  # of those, the candidates that meet κ (what the front may choose among)
    buffer: int | None = None  # repairs kept (taught)
    rehearsed: int | None = None
    sft_loss: float | None = None
    sft_epochs: int | None = None
    sft_fit: float | None = None  # share of the taught examples SFT left answered as taught
    pfpo_loss: float | None = None
    clip_fraction: float | None = None  # completion tokens where the clip decided, mean over PFPO's passes
    kl: float | None = None  # mean k3 KL(π_θ ‖ π_SFT) over PFPO's passes
    decided: dict[str, int] | None = None  # per rule (``RULES``), the failures whose repair it settled
    front_size: float | None = None  # mean distinct actions on a failure's feasible Pareto front
    rolled_back: str | None = None  # the gate's reason
    discarded: dict[str, float] | None = None  # a rolled-back round's holdout figures (reported only)
    timed: dict[str, float] = field(default_factory=dict)  # seconds per step (``STEPS``)

    def row(self) -> dict[str, Any]:
        """The flat rounds.parquet row (every round has every column)."""
        facts = {k: v for k, v in asdict(self).items() if k not in ("holdout", "check", "decided", "discarded",
                                                                       "timed")}
        return {**facts, **self.holdout, **{f"check_{key}": self.check[key] for key in CHECKED},
                **{f"decided_by_{rule}": (self.decided or {}).get(rule) if self.decided is not None else None
                   for rule in RULES},
                **{f"discarded_{key}": (self.discarded or {}).get(key) for key in DISCARDED},
                **{f"seconds_{step}": self.timed.get(step) for step in STEPS}}
