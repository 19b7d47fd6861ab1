"""One row of rounds.parquet per round: the holdout figures after it (reported only), what the round did, and
what the check slice said. Round 0 is the model before any update: its round facts are empty."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from far.evolve.metrics import CHECKED, OWN_METRICS
from far.evolve.select import RULES

OWN = tuple(OWN_METRICS)  # the model's own figures (also: a rolled-back round's own holdout figures, before the
# rollback: ``discarded_*``; without the rule: ``argmax_*``)
STEPS = ("lesson", "sft", "pfpo", "calibrate", "check", "holdout")  # the timed steps of a round


@dataclass
class RoundRecord:
    round: int
    holdout: dict[str, float]  # the holdout figures of the model kept after the round (``holdout_metrics``)
    check: dict[str, float]  # the kept model's check-slice figures (``CHECKED``)
    caution: float  # the kept rule's offset (0: none)
    decision_head: bool  # whether the kept rule reads log π through a head
    seconds: float
    # its own holdout figures without the decision rule (the model's argmax): what training did, calibration apart
    argmax: dict[str, float] = field(default_factory=dict)
    failures: int | None = None
    distinct_rate: float | None = None
    explored: int | None = None
    buffer: int | None = None  # repairs kept (taught)
    rehearsed: int | None = None
    sft_loss: float | None = None
    sft_epochs: int | None = None
    sft_fit: float | None = None  # share of the taught examples SFT left decided as taught
    pfpo_loss: float | None = None
    clip_fraction: float | None = None  # completion tokens where the clip decided, mean over PFPO's passes
    kl: float | None = None  # mean k3 KL(π_θ ‖ π_SFT) over PFPO's passes
    decided: dict[str, int] | None = None  # per rule (``RULES``), the failures whose repair it settled
    rolled_back: str | None = None  # the gate's reason
    discarded: dict[str, float] | None = None  # a rolled-back round's own holdout figures (reported only)
    timed: dict[str, float] = field(default_factory=dict)  # seconds per step (``STEPS``)

    def row(self) -> dict[str, Any]:
        """The flat rounds.parquet row (every round has every column)."""
        facts = {k: v for k, v in asdict(self).items() if k not in ("holdout", "argmax", "check", "decided",
                                                                       "discarded", "timed")}
        return {**facts, **self.holdout, **{f"argmax_{key}": self.argmax.get(key) for key in OWN},
                **{f"check_{key}": self.check[key] for key in CHECKED},
                **{f"decided_by_{rule}": (self.decided or {}).get(rule) if self.decided is not None else None
                   for rule in RULES},
                **{f"discarded_{key}": (self.discarded or {}).get(key) for key in OWN},
                **{f"seconds_{step}": self.timed.get(step) for step in STEPS}}
