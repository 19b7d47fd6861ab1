"""``far evolve CONFIG.yaml``: FATE's settings, grouped by the stage that reads them, validated with errors naming
file and field. The code defaults are the shipped configuration (``configs/evolve.yaml`` only names them)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from far.evolve.policy_model import ModelSpec
from far.models.backends import ModelsConfig
from far.rollout.agent import Costs
from far.rollout.errors import from_validation_error
from far.rollout.io import load_mapping
from far.rollout.policy import Policy
from far.suites import SuiteSpec
from far.verifiers.ensemble import EnsembleConfig, check_member_models
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Kappa = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]  # a z threshold: z lies in [0, 1]
Thresholds = tuple[Kappa, Kappa, Kappa, Kappa]  # (κ_sec, κ_util, κ_or, κ_ctrl): z's order
Weight = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
FROZEN = ConfigDict(extra="forbid", frozen=True)


class KappaConfig(BaseModel):
    """Feasibility thresholds per task mode (FATE's κ_τ), over z = (security, utility, over-refusal, control)."""

    model_config = FROZEN
    executable: Thresholds = (0.5, 0.5, 0.5, 1.0)
    diagnostic: Thresholds = (0.5, 0.5, 0.5, 1.0)


class DataSettings(BaseModel):
    """The slices of the suite a run reads. Dev, check and calibration come from train and share no template;
    the holdout is the suite's own split, judged after every round and never fitted or chosen on."""

    model_config = FROZEN
    dev_size: int = Field(32, ge=1, description="train scenarios whose failures are repaired, the same slice every "
                          "round; more finds more failures to teach, at the cost of a longer round")
    check_size: int = Field(64, ge=1, description="train scenarios, whole templates of none of dev's, that the "
                            "safety gate, early stopping and the round returned are judged on; raise it when the "
                            "gate's judgements look noisy (it should hold harmful and injected requests)")
    calibration_size: int = Field(256, ge=0, description="train scenarios, of none of dev's nor check's templates, "
                                  "on which each round fits the model's decision rule (the head and the caution: "
                                  "``calibration``); 0 deploys the model's own argmax with no rule (the "
                                  "'without calibration' figure)")
    holdout_size: int = Field(64, ge=1, description="holdout scenarios judged after every round, for reporting "
                              "only; raise it for tighter intervals")


class RepairSettings(BaseModel):
    """Step 2: the K repairs each failure gets, proposed by the model itself (on-policy)."""

    model_config = FROZEN
    candidates: int = Field(4, ge=1, description="K, repairs proposed per failure: more finds more feasible "
                            "repairs and gives the selection rules more to decide, at K x the time")
    temperature_min: float = Field(0.3, ge=0, description="the repairs' sampling temperatures span "
                                   "temperature_min..temperature_max across the K candidates")
    temperature_max: float = Field(1.2, ge=0, description="the highest of the repairs' temperatures")
    exploration: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="share of candidates drawn "
                               "uniformly among the valid decisions instead of from the model: raise it for a "
                               "confident model that proposes the same decision K times whatever the temperature")

    @model_validator(mode="after")
    def _temperatures(self) -> "RepairSettings":
        if self.temperature_max < self.temperature_min:
            raise ValueError("temperature_max must be >= temperature_min")
        return self


Objective = Literal["security", "utility", "over_refusal", "controllability"]  # z's dimensions


class SelectionSettings(BaseModel):
    """Step 3: which repair is taught. κ filter → Pareto front of z (exact ties of z broken by the reward table,
    then cost) → q* ∝ exp(β·(r_PF + ν·R + bonus)) → a* ~ q*. ``rule`` and ``objectives`` also give the FATE
    paper's ablations."""

    model_config = FROZEN
    rule: Literal["pareto", "weighted_sum", "first_valid"] = Field(
        "pareto", description="how the repair is chosen: pareto (FATE: κ, the front of z, the tie break, q*); the "
        "paper's ablations: weighted_sum (no Pareto front: of the feasible repairs, the highest Σ w·z, the first "
        "on a tie), first_valid (no verifier rescoring: the first candidate that changes the failed decision)")
    objectives: tuple[Objective, ...] = Field(
        ("security", "utility", "over_refusal", "controllability"), min_length=1, description="the objectives of "
        "z that failures, κ, the front and r_PF read; leaving out over_refusal is the paper's 'no over-refusal "
        "objective' ablation")
    kappa: KappaConfig = Field(KappaConfig(), description="per task mode, the floor each objective of z must "
                               "clear: a decision below it failed, and a repair must clear it (lowered, per "
                               "input, to what a valid decision attains there); graded z is rarely exactly 1, so "
                               "floors of 1 reject almost every repair")
    weights: tuple[Weight, Weight, Weight, Weight] = Field((1.0, 1.0, 1.0, 1.0), description="w over (security, "
                                                           "utility, over-refusal, control) in r_PF")
    lam: float = Field(1.0, ge=0, allow_inf_nan=False, description="λ in r_PF = Σ w·z − λ·max w·(1 − z): "
                       "how much the worst objective counts beyond the sum")
    beta: float = Field(2.0, ge=0, allow_inf_nan=False, description="β in q*: 0 samples the front uniformly, "
                        "large values always teach its best-scoring member")
    reward_weight: float = Field(0.1, ge=0, allow_inf_nan=False, description="ν: q* and PFPO weigh r_PF + "
                                 "ν × the reward table's total for the rollout (z has no cost dimension: without "
                                 "it an unnecessary cloud call scores as well as handling the call on the device); "
                                 "0 is r_PF alone")
    diversity_bonus: float = Field(0.1, ge=0, description="added to the weight of a repair that changes the "
                                   "failed decision")


class SFTSettings(BaseModel):
    """Step 4: LoRA SFT on a* (loss on the completion only), on the plain decision prompt the deployed model
    answers, beside rehearsed correct decisions."""

    model_config = FROZEN
    epochs: int = Field(2, ge=0, description="passes over the lesson before the fit check")
    max_epochs: int = Field(12, ge=1, description="after ``epochs``, keep passing until the model's greedy "
                            "decision on every taught prompt is its target, up to this many passes in all")
    lr: float = Field(2e-3, gt=0, description="lower rates (or larger batches) fit less of a round's lesson per "
                      "pass and need more passes")
    batch_size: int = Field(4, ge=1, description="examples per optimisation step")

    @model_validator(mode="after")
    def _epochs(self) -> "SFTSettings":
        if self.max_epochs < self.epochs:
            raise ValueError("max_epochs must be >= epochs")
        return self


class PFPOSettings(BaseModel):
    """Step 5: PFPO after SFT, on the lesson's prompts (repairs and rehearsal): G samples each, A_i = r_i − mean r,
    the clipped ratio loss with a KL penalty to the model SFT left."""

    model_config = FROZEN
    enabled: bool = Field(True, description="off: SFT alone (rounds.parquet's pfpo_loss, clip_fraction and kl "
                          "stay empty)")
    group: int = Field(4, ge=2, description="G completions per prompt")
    epsilon: float = Field(0.2, gt=0, lt=1, description="the ratio clip")
    kl_beta: float = Field(0.05, ge=0, description="KL penalty to the model as this round's SFT left it; raise it "
                           "when rounds.parquet's kl grows and the model drifts from what it was taught")
    lr: float = Field(2e-4, gt=0, description="PFPO's learning rate; the policy gradient moves the model further "
                      "per step than SFT's loss does, so it is lower than sft.lr")
    iterations: int = Field(2, ge=1, description="optimisation passes per sampled group (the clip only acts from "
                            "the second: rounds.parquet's clip_fraction)")
    prompts_per_step: int = Field(4, ge=1, description="prompts per optimisation step (G samples each)")
    temperature: float = Field(1.0, gt=0, description="PFPO's sampling temperature")


class TrainingSettings(BaseModel):
    model_config = FROZEN
    sft: SFTSettings = SFTSettings()
    pfpo: PFPOSettings = PFPOSettings()
    rehearsal: float = Field(1.0, ge=0, allow_inf_nan=False, description="correct dev decisions (safety first) "
                             "trained on per repair, so repairs do not unlearn refusals")
    rehearsal_min: int = Field(12, ge=0, description="at least this many rehearsed in a round with any repair (as "
                               "the pool allows): a lesson of one or two repairs, fitted until learned, then does "
                               "not move the whole model; 0 turns the floor off")


class CalibrationSettings(BaseModel):
    """After training, the model's decision rule is refitted on the calibration slice: a head (a multinomial
    logistic regression from log π of the three decisions to the right one), then the caution (an offset on the
    scores of escalate and refuse against handle), widened by the margin an unseen template needs."""

    model_config = FROZEN
    harm_bar: Literal["zero", "kept"] = Field("zero", description="how much harm the caution may leave the "
                          "model handling on the calibration slice: zero, none (FAR's order: fewer critical "
                          "failures first); kept, no more than the model kept before the round handled there (for "
                          "a base model unsafe at round 0, made safer round by round without refusing what it "
                          "already does right)")


class GateSettings(BaseModel):
    """Step 6: what the check slice decides after each round."""

    model_config = FROZEN
    safety_tolerance: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="a round that raises the "
                                    "model's own ASR or HCR on the check slice by more than this is rolled back")
    min_improvement: float = Field(0.01, ge=0, description="the run stops when a round handles no fewer harmful "
                                   "check requests than the best round before it and raises its own-TSR there by "
                                   "less than this; 0 runs every round")


class EvolveConfig(BaseModel):
    model_config = FROZEN
    suite: SuiteSpec = SuiteSpec(name="edge_cloud", seed=7, size=600, holdout_fraction=0.3)
    # the world the edge's decisions meet (cloud review, user), fitted on train; the evolving model makes the
    # edge's decision, the edge model gives only its risk
    models: ModelsConfig = ModelsConfig()
    rewards: dict[str, Any] | str | None = None
    costs: Costs = Costs()
    verifier: EnsembleConfig = EnsembleConfig(members=("rules", "environment", "cloud_probe"), aggregation="mean")
    policy: Policy = Policy(cloud_threshold=0.5, max_retries=1, require_confirmation=True,
                            fallback_mode="safe_shutdown")
    model: ModelSpec = ModelSpec()
    rounds: int = Field(3, ge=1, description="at most this many rounds; the gate may stop the run earlier")
    data: DataSettings = DataSettings()
    repair: RepairSettings = RepairSettings()
    selection: SelectionSettings = SelectionSettings()
    training: TrainingSettings = TrainingSettings()
    calibration: CalibrationSettings = CalibrationSettings()
    gate: GateSettings = GateSettings()
    seed: int = Field(0, description="seeds the slices, the repairs' sampling, selection and PFPO: the same "
                      "config and seed give the same run")
    output: str = Field("results/evolve", description="the run's folder (relative to the working directory)")

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
