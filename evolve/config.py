"""``far evolve CONFIG.yaml``: FATE's settings, validated with errors naming file and field."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evolve.policy_model import ModelSpec
from rollout.agent import Costs
from rollout.errors import from_validation_error
from rollout.io import load_mapping
from rollout.models.backends import ModelsConfig
from rollout.policy import Policy
from rollout.suites import SuiteSpec
from verifiers.ensemble import EnsembleConfig, check_member_models

Kappa = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]  # a z threshold: z lies in [0, 1]
Thresholds = tuple[Kappa, Kappa, Kappa, Kappa]  # (κ_sec, κ_util, κ_or, κ_ctrl): z's order
Weight = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class KappaConfig(BaseModel):
    """Feasibility thresholds per task mode (FATE's κ_τ)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    executable: Thresholds = (1.0, 1.0, 1.0, 1.0)
    diagnostic: Thresholds = (1.0, 1.0, 1.0, 1.0)


class SFTSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    epochs: int = Field(2, ge=0)
    max_epochs: int | None = Field(None, ge=1, description="after `epochs`, keep passing over the taught examples, "
                                   "up to this many passes in all, until the model's greedy decision on every "
                                   "taught prompt is its target (judged on the training examples themselves): a "
                                   "handful of repairs barely moves a confident model in two passes")
    lr: float = Field(5e-4, gt=0)
    batch_size: int = Field(8, ge=1)
    select: Literal["last", "check"] = Field(
        "last", description="the adapter a round keeps: the last pass's, or (``check``) the pass the check slice "
                            "judges best: after every pass the check slice is decided, and of the passes that raise "
                            "neither own-ASR nor own-HCR beyond ``safety_tolerance`` the one with the highest mean "
                            "r_PF is kept (a lesson that teaches 'handle' can move the model past telling harmful "
                            "calls apart before it fits; each judged pass costs one check-slice decision pass)")

    @model_validator(mode="after")
    def _epochs(self) -> "SFTSettings":
        if self.max_epochs is not None and self.max_epochs < self.epochs:
            raise ValueError("max_epochs must be >= epochs")
        return self


class PFPOSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = Field(True, description="run PFPO after SFT each round (off: SFT alone; rounds.parquet's "
                          "pfpo_loss and clip_fraction stay empty)")
    group: int = Field(4, ge=2, description="G completions per repair prompt")
    epsilon: float = Field(0.2, gt=0, lt=1, description="PPO clip")
    kl_beta: float = Field(0.05, ge=0, description="KL penalty to the reference model (``reference``)")
    reference: Literal["sft", "base"] = Field("sft", description="π_ref of the KL penalty: the model as this round's "
                                              "SFT left it (what it was just taught, how RLHF anchors its policy), or "
                                              "the base model with the adapter off (for an unsafe base, the KL then "
                                              "pulls back towards the unsafe answers)")
    lr: float = Field(2e-4, gt=0)
    iterations: int = Field(2, ge=1, description="optimisation passes per sampled group (the clip can only act "
                            "from the second: rounds.parquet's clip_fraction)")
    prompts_per_step: int = Field(4, ge=1)
    temperature: float = Field(1.0, gt=0)
    rehearsed: bool = Field(True, description="also sample the rehearsed correct decisions' prompts: on the "
                            "failures' prompts alone (all wrongly handled, say) the policy gradient pushes every "
                            "answer the same way, and the model unlearns what SFT taught it to tell apart")


class EvolveConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    suite: SuiteSpec = SuiteSpec(name="edge_cloud", seed=7, size=600)
    models: ModelsConfig = ModelsConfig()  # the world the decisions meet: cloud, user, faults (simulated)
    rewards: dict[str, Any] | str | None = None
    costs: Costs = Costs()
    verifier: EnsembleConfig = EnsembleConfig(members=("rules", "environment"))
    policy: Policy = Policy(cloud_threshold=0.5, max_retries=1, require_confirmation=True,
                            fallback_mode="safe_shutdown")
    model: ModelSpec = ModelSpec()
    rounds: int = Field(3, ge=1)
    dev_size: int = Field(32, ge=1, description="train scenarios rolled out per round (the dev split)")
    dev_draw: Literal["fixed", "per_round"] = Field(
        "fixed", description="fixed: every round collects its failures on the same dev slice; per_round: each "
        "round on a fresh one (rounds x dev_size train scenarios in all), so a later round meets the model's "
        "errors on wording it was never taught instead of the few it still makes on the slice it trained on, and "
        "a rolled-back round does not end the run (the next round's lesson differs)")
    holdout_size: int = Field(64, ge=1)
    check_size: int = Field(64, ge=1, description="train scenarios, whole templates of none of dev's, that the "
                            "safety gate, early stopping and the round returned are judged on (never the holdout: "
                            "it is evaluated for reporting only)")
    calibration_size: int = Field(0, ge=0, description="train scenarios, written from none of dev's "
                                  "nor check's templates, on which each "
                                  "round fits the model's decision rule (decision_head, then the caution: an "
                                  "offset added to the scores of escalate and refuse against handle in every "
                                  "greedy decision), chosen so the model itself handles no more harmful or "
                                  "injected requests there than harm_bar allows (0: off; SFT can teach the model "
                                  "to rank harmful requests above benign ones and still leave its threshold in the "
                                  "wrong place)")
    calibration_margin: Literal["leave_template_out", "none"] = Field(
        "leave_template_out", description="leave_template_out: the caution fitted on the calibration slice is "
        "raised by the most any of its templates, left out, needed over the fit of the rest (the holdout is "
        "written from templates train never uses, and a fit is tight on the wording it saw); none: the fit as it is")
    harm_bar: Literal["zero", "kept"] = Field(
        "zero", description="how much harm the caution may leave the model itself handling on the calibration "
        "slice: zero: no harmful or injected request (FAR's order: fewer critical failures first, whatever task "
        "success it costs); kept: no more than the model kept before the round handled on the same inputs, over "
        "the slice and on each template left out for the margin (round 0: the base model as it is), so a model "
        "unsafe at round 0 is made safer round by round without refusing what it already does right (the FATE "
        "paper's setting: ASR down, utility held). A base model that handled one harmful request by chance "
        "licenses one under kept (BENCHMARKS.md)")
    decision_head: Literal["logistic", "none"] = Field(
        "logistic", description="logistic: before the caution, each round fits a head on the calibration slice, a "
        "multinomial logistic regression (scikit-learn) from the model's log-probabilities of handle, escalate and "
        "refuse to the decision that is right on its own (refuse harm, escalate what needs the cloud, handle the "
        "rest), and the caution is fitted on its scores, out of fold by template: the caution alone only moves "
        "the line between handle and the rest, so harm the model stops handling is escalated as often as refused "
        "(BENCHMARKS.md); none: the caution on the log-probabilities as they are")
    select_on: Literal["r_pf", "reward", "own_tsr"] = Field(
        "r_pf", description="what the fits of a round rank by once safety is settled (the SFT pass kept, the "
        "caution), on train slices: mean r_PF of z; mean r_PF + reward_weight x the reward table's total (what "
        "q* and PFPO weigh: it also sees an unnecessary cloud call, which z does not); or own_tsr, the share of "
        "the model's own decisions that are right (refuse harm, escalate what needs the cloud, handle the rest)")
    rounds_on: Literal["r_pf", "reward", "own_tsr"] | None = Field(
        None, description="what early stopping and the round returned rank by once safety is settled, on the "
        "check slice (as select_on; none: select_on's). r_PF and the reward are end to end: a model that "
        "escalates everything scores well there while the cloud completes and reviews it; own_tsr sees it")
    candidates: int = Field(4, ge=1, description="K repairs sampled per failure")
    temperature_min: float = Field(0.3, ge=0)
    temperature_max: float = Field(1.2, ge=0)
    diversity_bonus: float = Field(0.1, ge=0, description="added to r_PF of a repair that changes the action")
    exploration: float = Field(0.0, ge=0, le=1, allow_inf_nan=False,
                               description="share of repair candidates drawn uniformly among the valid decisions "
                                           "instead of from the model: a confident model sampled on-policy "
                                           "proposes nothing new, whatever the temperature")
    rehearsal: float = Field(1.0, ge=0, allow_inf_nan=False, description="correct decisions (from dev, safety "
                             "first) trained on per repair, so repairs do not unlearn refusals")
    rehearsal_min: int = Field(0, ge=0, description="at least this many correct decisions rehearsed in a round with "
                               "any repair (as the pool allows): SFT runs until its examples are learned, and a lesson "
                               "of one or two repairs then moves the whole model")
    kappa: KappaConfig | Literal["auto"] = KappaConfig()
    attainable_kappa: bool = Field(True, description="lower κ, per input, to the best z any valid decision attains "
                                   "there: no decision does the user's task when the call was injected, and a κ "
                                   "on utility would then make the safe refusal a failure and filter it out")
    supervise_on: Literal["repair", "decision", "both"] = Field(
        "both", description="the prompts a* is taught on (SFT) and PFPO samples: the repair prompt p_f (FATE), "
                            "the plain decision prompt x (what the model answers when deployed), or both")
    weights: tuple[Weight, Weight, Weight, Weight] = (1.0, 1.0, 1.0, 1.0)
    reward_weight: float = Field(0.0, ge=0, allow_inf_nan=False, description="ν: q* and PFPO weigh r_PF + ν·R, R "
                                 "the reward table's total for the rollout (z has no cost: an unnecessary cloud call "
                                 "scores as well as handling the call on the device); 0 is FATE's r_PF alone")
    front: Literal["z", "z_then_reward_then_cost"] = Field(
        "z", description="the Pareto front q* samples from: of z (FATE's); or of z where, of points equal on z, "
        "only those best on the reward table's total, then the cheapest, stay (z_then_reward_then_cost: FAR's "
        "order, z first). A cloud veto of a harmful request and a refusal on the device score alike on z and "
        "mostly on the reward table too: on the front of z the repair taught is whichever the model proposed "
        "more often (BENCHMARKS.md)")
    lam: float = Field(1.0, ge=0, allow_inf_nan=False, description="λ in r_PF")
    beta: float = Field(2.0, ge=0, allow_inf_nan=False, description="β in q* ∝ 1[PF]·exp(β r_PF)")
    sft: SFTSettings = SFTSettings()
    pfpo: PFPOSettings = PFPOSettings()
    min_improvement: float = Field(0.01, ge=0, description="stop when a round handles no fewer harmful or injected "
                                   "check-slice requests than the best round before it, and its score there "
                                   "(rounds_on) improves by less")
    safety_tolerance: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="a round that raises the "
                                    "model's own ASR or HCR on the check slice by more than this is rolled back")
    seed: int = 0
    output: str = "results/evolve"

    @model_validator(mode="after")
    def _temperatures(self) -> "EvolveConfig":
        if self.temperature_max < self.temperature_min:
            raise ValueError("temperature_max must be >= temperature_min")
        return self

    _members_fit_models = model_validator(mode="after")(check_member_models)


def load_evolve_config(path: str | Path) -> tuple[EvolveConfig, Path]:
    raw = load_mapping(path)
    base = Path(path).resolve().parent
    rewards = raw.get("rewards")
    if isinstance(rewards, str):
        table = load_mapping(Path(rewards) if Path(rewards).is_absolute() else base / rewards)
        raw = {**raw, "rewards": table.get("rewards", table)}
    try:
        return EvolveConfig.model_validate(raw), base
    except ValidationError as error:
        raise from_validation_error(error, file=path) from None
