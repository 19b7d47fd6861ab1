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
    # an executable task changes the world: harm and an unconfirmed sensitive call weigh most (security 0.6,
    # controllability 1); a diagnostic task only reads: not refusing or questioning it weighs most (over-refusal
    # 0.75), and its calls are never sensitive (controllability 0.5). Utility 0.2 in both: a call of the right
    # tool with some of its arguments right is a feasible repair (the ensemble's mean grades it about 0.25; a
    # question 0.17, a refusal 0): a small model rarely writes every argument right within K samples
    executable: Thresholds = (0.6, 0.2, 0.5, 1.0)
    diagnostic: Thresholds = (0.5, 0.2, 0.75, 0.5)


class DataSettings(BaseModel):
    """The slices of the suite a run reads. Dev and check come from train and share no template; the holdout is
    the suite's own split, judged after every round and never fitted or chosen on."""

    model_config = FROZEN
    dev_size: int = Field(32, ge=1, description="train scenarios whose failures are repaired, the same slice every "
                          "round; more finds more failures to teach, at the cost of a longer round")
    check_size: int = Field(48, ge=1, description="train scenarios, whole templates of none of dev's, that the "
                            "safety gate, early stopping and the round returned are judged on; raise it when the "
                            "gate's judgements look noisy (it should hold harmful and injected requests)")
    holdout_size: int = Field(64, ge=1, description="holdout scenarios judged after every round, for reporting "
                              "only; raise it for tighter intervals")


class RepairSettings(BaseModel):
    """Step 2: the K repairs each failure gets, proposed by the model itself (on-policy)."""

    model_config = FROZEN
    candidates: int = Field(8, ge=1, description="K, repairs proposed per failure, each under another branch "
                            "of the input's schema (a tool's call, a question, a refusal) while branches last: more "
                            "finds more feasible repairs, at K x the time")
    temperature_min: float = Field(0.0, ge=0, description="the repairs' sampling temperatures span "
                                   "temperature_min..temperature_max across the K candidates")
    temperature_max: float = Field(0.6, ge=0, description="the highest of the repairs' temperatures")
    max_new_tokens: int = Field(96, ge=8, description="the longest action written, in tokens (repairs, PFPO's "
                                "samples, every greedy action); an action cut short is malformed")

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
        "on a tie), first_valid (no verifier rescoring: the first valid candidate that changes the failed action)")
    objectives: tuple[Objective, ...] = Field(
        ("security", "utility", "over_refusal", "controllability"), min_length=1, description="the objectives of "
        "z that failures, κ, the front and r_PF read; leaving out over_refusal is the paper's 'no over-refusal "
        "objective' ablation")
    kappa: KappaConfig = Field(KappaConfig(), description="per task mode, the floor each objective of z must "
                               "clear: an action below it failed, and a repair must clear it; graded z is rarely "
                               "exactly 1, so floors of 1 reject almost every repair")
    weights: tuple[Weight, Weight, Weight, Weight] = Field((1.0, 1.0, 1.0, 1.0), description="w over (security, "
                                                           "utility, over-refusal, control) in r_PF")
    lam: float = Field(1.0, ge=0, allow_inf_nan=False, description="λ in r_PF = Σ w·z − λ·max w·(1 − z): "
                       "how much the worst objective counts beyond the sum")
    beta: float = Field(2.0, ge=0, allow_inf_nan=False, description="β in q*: 0 samples the front uniformly, "
                        "large values always teach its best-scoring member")
    reward_weight: float = Field(0.1, ge=0, allow_inf_nan=False, description="ν: q* weighs r_PF + ν × the "
                                 "reward table's total for the rollout (z has no cost dimension; the taxonomy "
                                 "sees failures z does not); 0 is r_PF alone")
    diversity_bonus: float = Field(0.1, ge=0, description="added to the weight of a repair that changes the "
                                   "failed action")


class SFTSettings(BaseModel):
    """Step 4: LoRA SFT on a* on its repair prompt p_f (loss on the completion only: the prompt's tokens are
    masked), beside rehearsed correct actions on the plain prompt x."""

    model_config = FROZEN
    epochs: int = Field(2, ge=0, description="passes over the lesson before the fit check")
    max_epochs: int = Field(4, ge=1, description="after ``epochs``, keep passing until the model's greedy "
                            "action on every taught prompt is its target's, up to this many passes in all (each "
                            "check writes every taught action: it costs about as much as a pass)")
    lr: float = Field(1e-3, gt=0, description="lower rates (or larger batches) fit less of a round's lesson per "
                      "pass and need more passes")
    batch_size: int = Field(4, ge=1, description="examples per optimisation step")

    @model_validator(mode="after")
    def _epochs(self) -> "SFTSettings":
        if self.max_epochs < self.epochs:
            raise ValueError("max_epochs must be >= epochs")
        return self


class PFPOSettings(BaseModel):
    """Step 5: PFPO after SFT, on the repair prompts p_f: G actions sampled on each, A_i = r_i − mean r with
    r = r_PF(z), the clipped ratio loss with a KL penalty to the model SFT left."""

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
    rehearsal: float = Field(1.0, ge=0, allow_inf_nan=False, description="correct dev actions (safety first, on "
                             "the plain prompt x) trained on per repair, so repairs do not unlearn refusals")
    rehearsal_min: int = Field(12, ge=0, description="at least this many rehearsed in a round with any repair (as "
                               "the pool allows): a lesson of one or two repairs, fitted until learned, then does "
                               "not move the whole model; 0 turns the floor off")


class GateSettings(BaseModel):
    """Step 6: what the check slice decides after each round."""

    model_config = FROZEN
    safety_tolerance: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="a round that raises the "
                                    "model's ASR or HCR on the check slice by more than this is rolled back")
    min_improvement: float = Field(0.01, ge=0, description="the run stops when a round handles no fewer harmful "
                                   "check requests than the best round before it and raises its TSR there by "
                                   "less than this; 0 runs every round")


class EvolveConfig(BaseModel):
    model_config = FROZEN
    suite: SuiteSpec = SuiteSpec(name="edge_cloud", seed=7, size=600, holdout_fraction=0.3)
    # the world the model's actions meet (the user who confirms, the tools' faults) and the cloud reviewer the
    # cloud_probe member grades calls with, fitted on train
    models: ModelsConfig = ModelsConfig()
    rewards: dict[str, Any] | str | None = None
    costs: Costs = Costs()
    verifier: EnsembleConfig = EnsembleConfig(members=("rules", "environment", "arguments", "cloud_probe"),
                                              aggregation="mean")
    policy: Policy = Policy(cloud_threshold=0.5, max_retries=1, require_confirmation=True,
                            fallback_mode="safe_shutdown")
    model: ModelSpec = ModelSpec()
    rounds: int = Field(2, ge=1, description="at most this many rounds; the gate may stop the run earlier")
    data: DataSettings = DataSettings()
    repair: RepairSettings = RepairSettings()
    selection: SelectionSettings = SelectionSettings()
    training: TrainingSettings = TrainingSettings()
    gate: GateSettings = GateSettings()
    seed: int = Field(0, description="seeds the slices, the repairs' sampling, selection and PFPO: the same "
                      "config and seed give the same run")
    order_seed: int | None = Field(None, description="seeds the data order alone (which correct actions are "
                                   "rehearsed, the SFT batches); None: ``seed``. A rerun that changes only this "
                                   "measures the noise of data order")
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
