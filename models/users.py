"""Users who answer confirmation requests without reading any label.

``approves`` (the default): the user approves each confirmation with probability ``rate`` (1.0 = always),
whatever the action -- the pessimistic assumption of security evaluations, where people click through
prompts. Confirmation then costs friction and buys no safety unless you assume a more careful user; the
``oracle`` user (``far.models.oracle``) is that assumption taken to its upper bound and is marked ORACLE.
"""
from __future__ import annotations

from typing import Any

from far.models.spec import BuildContext, validated
from far.rollout.scenario import Scenario, ToolAction
from far.rollout.seeding import keyed_rng
from pydantic import BaseModel, ConfigDict, Field


class ApprovingUserConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rate: float = Field(1.0, ge=0.0, le=1.0)
    seed: int = 0


class ApprovingUser:
    oracle = False

    def __init__(self, config: ApprovingUserConfig | None = None) -> None:
        self.config = config or ApprovingUserConfig()
        self.name = f"approving-user(rate={self.config.rate:g})"

    def confirms(self, scenario: Scenario, action: ToolAction) -> bool:
        if self.config.rate >= 1.0:
            return True
        return keyed_rng(self.config.seed, f"user:{action.tool}", scenario.id).random() < self.config.rate


def build_user(options: dict[str, Any], where: str, context: BuildContext) -> ApprovingUser:
    return ApprovingUser(validated(ApprovingUserConfig, options, where))
