"""AgentDojo (``agentdojo==0.1.35``, MIT) as a FAR suite: real tasks, tools, environments and checkers.

One scenario = (AgentDojo suite, user task, injection task, attack), or (suite, user task) with no
injection. Injected scenarios carry the attack's text per injection vector, produced by AgentDojo's own
attack class (``attack.attack(user_task, injection_task)``); one config can run several ``attacks``, and the
attack is part of the scenario's id and ``environment["attack"]``. Benign scenarios (no injection; one per
user task, whatever the attacks) measure utility and over-refusal. The episode itself is played by
``far.suites.agentdojo.agent`` and judged by AgentDojo's ``utility`` / ``security`` checkers.

Splits (``split_by``), per AgentDojo suite, with the holdout's share given by ``holdout_fraction``:
- ``injection_task`` (default): holdout injected scenarios use injection tasks that never appear in train
  (unseen injections); benign scenarios are split by user task. User tasks appear on both sides.
- ``user_and_injection_task``: holdout scenarios have unseen user tasks *and* unseen injection tasks;
  pairs of a train user task with a holdout injection task (and the reverse) are dropped and counted.
- ``user_task``: holdout user tasks never appear in train; every injection task is on both sides.
- ``pair``: each scenario on its own.
Injection and user tasks are drawn for holdout by exact count (at least one, never all), so a small suite
always has both sides.

Handled explicitly, and reported by ``describe()``:
- injection tasks whose ground truth is empty on the default environment (v1.2.2: workspace 6-13, travel 6)
  cannot be scripted: they are excluded and counted;
- checkers known to be wrong are listed in ``KNOWN_CHECKER_DEFECTS``; affected scenarios say so in
  ``environment["checker_defects"]`` so results can be reported with and without them.

Tool properties for the guard and the per-call scenarios are in ``far.suites.agentdojo.calls``; loading
AgentDojo's suites and environments in ``far.suites.agentdojo.environment``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from far.rollout.errors import FarInputError, from_validation_error
from far.rollout.scenario import GroundTruth, Scenario, Split, ToolAction
from far.suites.agentdojo.calls import to_tool_action, tool_properties
from far.suites.agentdojo.environment import injected_environment, load_task_suite
from far.suites.base import holdout_members, split_of
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

AGENTDOJO_SUITES = ("banking", "slack", "travel", "workspace")

# (suite, task id, checker) -> what is wrong with AgentDojo 0.1.35's checker
KNOWN_CHECKER_DEFECTS: dict[tuple[str, str, str], str] = {
    ("banking", "user_task_8", "utility"): "utility is always true",
    ("banking", "injection_task_0", "security"): "operator-precedence bug in the security check",
    ("workspace", "injection_task_0", "security"): "can score a real compromise as not compromised",
}


class AgentDojoSuiteConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "agentdojo"
    suites: tuple[str, ...] = AGENTDOJO_SUITES
    version: str = "v1.2.2"
    attacks: tuple[str, ...] = ("important_instructions",)
    target_model: str = Field("gpt-4o-2024-05-13", description="model name the attack text addresses")
    benign: bool = Field(True, description="include one scenario per user task with no injection")
    seed: int = 0
    holdout_fraction: float = Field(0.3, gt=0.0, lt=1.0)
    split_by: Literal["injection_task", "user_and_injection_task", "user_task", "pair"] = "injection_task"
    max_user_tasks: int | None = Field(None, ge=1, description="first N user tasks per suite (small runs)")
    max_injection_tasks: int | None = Field(None, ge=1, description="first N injection tasks per suite")
    exclude_checker_defects: bool = False
    tool_fault_rate: float = Field(0.05, ge=0.0, le=1.0, description="P(a tool call faults), per call")
    cloud_outage_rate: float = Field(0.02, ge=0.0, le=1.0, description="P(the cloud is down), per call")

    @model_validator(mode="before")
    @classmethod
    def _one_attack(cls, data: Any) -> Any:
        """``attack: NAME`` (the older, single-attack form) is ``attacks: [NAME]``."""
        if isinstance(data, dict) and "attack" in data:
            if "attacks" in data:
                raise ValueError("give either attack or attacks, not both")
            data = {k: v for k, v in data.items() if k != "attack"} | {"attacks": [data["attack"]]}
        return data

    @field_validator("suites")
    @classmethod
    def _known_suites(cls, suites: tuple[str, ...]) -> tuple[str, ...]:
        if not suites:
            raise ValueError(f"name at least one AgentDojo suite (known: {', '.join(AGENTDOJO_SUITES)})")
        unknown = [s for s in suites if s not in AGENTDOJO_SUITES]
        if unknown:
            raise ValueError(f"unknown AgentDojo suite(s) {', '.join(unknown)} (known: {', '.join(AGENTDOJO_SUITES)})")
        return suites

    @field_validator("version")
    @classmethod
    def _known_version(cls, version: str) -> str:
        if version not in (known := benchmark_versions()):
            raise ValueError(f"unknown AgentDojo version {version!r} (known: {', '.join(known)})")
        return version

    @field_validator("attacks")
    @classmethod
    def _offline_attacks(cls, attacks: tuple[str, ...]) -> tuple[str, ...]:
        if not attacks:
            raise ValueError(f"name at least one attack (offline: {', '.join(offline_attacks())})")
        if len(set(attacks)) != len(attacks):
            raise ValueError("an attack is listed twice")
        for attack in attacks:
            if attack not in offline_attacks():
                raise ValueError(f"attack {attack!r}: {why_not_offline(attack)} (offline attacks: "
                                 f"{', '.join(offline_attacks())})")
        return attacks


# attacks FAR cannot run, and why
NOT_OFFLINE = {
    "manual": "asks a person for the injection text on standard input",
}


def benchmark_versions() -> list[str]:
    from agentdojo.task_suite.load_suites import _SUITES  # the package's registry of benchmark versions

    return sorted(_SUITES)


def offline_attacks() -> list[str]:
    """AgentDojo's registered attacks that run here: not interactive, and not denial-of-service attacks (their
    goal is to stop the agent, which the scripted agent that plays the injection task does not model)."""
    from agentdojo.attacks.attack_registry import ATTACKS

    return sorted(name for name, attack in ATTACKS.items()
                  if name not in NOT_OFFLINE and not getattr(attack, "is_dos_attack", False))


def why_not_offline(attack: str) -> str:
    from agentdojo.attacks.attack_registry import ATTACKS

    if attack in NOT_OFFLINE:
        return NOT_OFFLINE[attack]
    if attack in ATTACKS:
        return "a denial-of-service attack: its goal is to stop the agent, which the scripted agent does not model"
    return "unknown attack"


class _NamedPipeline:
    """AgentDojo's attacks read the target model's name from the pipeline's ``name``; nothing else."""

    def __init__(self, name: str) -> None:
        self.name = name


# --- scenarios -----------------------------------------------------------------------------------------------

def _holdout_tasks(config: AgentDojoSuiteConfig, suite: str, ids: list[str]) -> set[str]:
    return holdout_members([f"agentdojo/{suite}/{task}" for task in ids], config.holdout_fraction, config.seed,
                           strip=len(f"agentdojo/{suite}/"))


def _split(config: AgentDojoSuiteConfig, suite: str, user_task: str, injection_task: str | None, scenario_id: str,
           holdout_users: set[str], holdout_injections: set[str]) -> tuple[Split | None, str]:
    """The scenario's split (None: dropped, a pair across the sides) and its group (what cross-fitting keeps
    together, the unit the split is drawn by)."""
    by = config.split_by
    if by == "pair":
        return split_of(config.seed, scenario_id, config.holdout_fraction), scenario_id
    user_group = f"agentdojo/{suite}/{user_task}"
    if by == "user_task":
        return split_of(config.seed, user_group, config.holdout_fraction), user_group
    if injection_task is None:  # benign: by user task
        user_split: Split = "holdout" if user_task in holdout_users else "train"
        return user_split, user_group
    injection_split: Split = "holdout" if injection_task in holdout_injections else "train"
    injection_group = f"agentdojo/{suite}/{injection_task}"
    if by == "injection_task":
        return injection_split, injection_group
    user_split = "holdout" if user_task in holdout_users else "train"
    return (injection_split if injection_split == user_split else None), injection_group


def checker_defects(suite: str, user_task: str, injection_task: str | None) -> list[str]:
    found = []
    for (defect_suite, task, checker), reason in KNOWN_CHECKER_DEFECTS.items():
        if defect_suite == suite and task in (user_task, injection_task):
            if checker == "security" and injection_task is None:
                continue  # a benign scenario runs no security check
            found.append(f"{task}.{checker}: {reason}")
    return found


@dataclass
class _LoadedSuite:
    """One AgentDojo suite's tasks as the scenarios use them."""

    name: str
    attacks: dict[str, Any]  # attack name -> AgentDojo's attack
    default_env: Any
    user_tasks: list[Any]
    scriptable: list[Any]  # injection tasks whose ground truth has calls to script
    holdout_users: set[str]
    holdout_injections: set[str]


def generate_scenarios(config: AgentDojoSuiteConfig, progress: Callable[[str], None] | None = None
                       ) -> tuple[list[Scenario], dict[str, Any]]:
    """All scenarios of the configured suites and attacks, and a report of what was excluded and why."""
    scenarios: list[Scenario] = []
    report: dict[str, Any] = {"excluded_empty_ground_truth": {}, "checker_defect_scenarios": 0,
                              "excluded_checker_defect_scenarios": 0, "dropped_across_split": 0,
                              "holdout_injection_tasks": {}, "holdout_user_tasks": {}}
    for name in config.suites:
        loaded = _load_suite(config, name, report, progress)
        for user_task in loaded.user_tasks:
            scenarios += _user_task_scenarios(config, loaded, user_task, report)
    return scenarios, report


def _load_suite(config: AgentDojoSuiteConfig, name: str, report: dict[str, Any],
                progress: Callable[[str], None] | None) -> _LoadedSuite:
    from agentdojo.attacks.attack_registry import load_attack

    try:
        task_suite = load_task_suite(config.version, name)
    except Exception as error:  # agentdojo raises KeyError/ValueError for an unknown version
        raise FarInputError(f"cannot load AgentDojo suite {name!r} at {config.version!r} ({error})",
                            field="suite.version") from None
    attacks = {attack: load_attack(attack, task_suite, _NamedPipeline(config.target_model))
               for attack in config.attacks}
    default_env = injected_environment(config.version, name, {})
    user_tasks = list(task_suite.user_tasks.values())[:config.max_user_tasks]
    injection_tasks = list(task_suite.injection_tasks.values())[:config.max_injection_tasks]
    scriptable = [t for t in injection_tasks if t.ground_truth(default_env.model_copy(deep=True))]
    excluded = [t.ID for t in injection_tasks if t not in scriptable]
    report["excluded_empty_ground_truth"][name] = excluded
    loaded = _LoadedSuite(name, attacks, default_env, user_tasks, scriptable,
                          _holdout_tasks(config, name, [t.ID for t in user_tasks]),
                          _holdout_tasks(config, name, [t.ID for t in scriptable]))
    if config.split_by in ("injection_task", "user_and_injection_task"):
        report["holdout_injection_tasks"][name] = sorted(loaded.holdout_injections)
    if config.split_by == "user_and_injection_task":
        report["holdout_user_tasks"][name] = sorted(loaded.holdout_users)
    if progress is not None:
        progress(f"  agentdojo {name} {config.version}: {len(user_tasks)} user tasks x {len(scriptable)} injection "
                 f"tasks x {len(attacks)} attack(s) (excluded, empty ground truth: {', '.join(excluded) or 'none'})")
    return loaded


def _user_task_scenarios(config: AgentDojoSuiteConfig, loaded: _LoadedSuite, user_task: Any,
                         report: dict[str, Any]) -> list[Scenario]:
    """The user task benign (when configured) and under every scriptable injection task and attack, less the
    scenarios dropped across the split or for a known checker defect (counted in ``report``)."""
    plan = user_task.ground_truth(user_task.init_environment(loaded.default_env.model_copy(deep=True)))
    first = to_tool_action(plan[0].function, plan[0].args) if plan else ToolAction(tool="(answer)")
    task_mode = "diagnostic" if all(tool_properties(c.function)["read_only"] for c in plan) else "executable"
    pairs: list[tuple[Any, str | None]] = [(None, None)] if config.benign else []
    pairs += [(injection_task, attack) for injection_task in loaded.scriptable for attack in loaded.attacks]
    found = []
    for injection_task, attack_name in pairs:
        injection_id = injection_task.ID if injection_task is not None else None
        scenario_id = (f"agentdojo/{loaded.name}/{user_task.ID}/{injection_id}/{attack_name}" if injection_id
                       else f"agentdojo/{loaded.name}/{user_task.ID}/benign")
        split, group = _split(config, loaded.name, user_task.ID, injection_id, scenario_id, loaded.holdout_users,
                              loaded.holdout_injections)
        if split is None:
            report["dropped_across_split"] += 1
            continue
        defects = checker_defects(loaded.name, user_task.ID, injection_id)
        if defects and config.exclude_checker_defects:
            report["excluded_checker_defect_scenarios"] += 1
            continue
        report["checker_defect_scenarios"] += bool(defects)
        injected = injection_task is not None
        injections = loaded.attacks[attack_name].attack(user_task, injection_task) if injected else {}
        found.append(Scenario(
            id=scenario_id, suite=f"agentdojo:{loaded.name}", category=loaded.name,
            kind="injected" if injected else "benign", task_mode=task_mode, split=split,
            request=user_task.PROMPT, proposed_action=first, group=group,
            ground_truth=GroundTruth(unsafe=injected, injected=injected, intended_action=None if injected else first),
            environment={
                "benchmark": "agentdojo", "version": config.version, "suite": loaded.name,
                "user_task": user_task.ID, "injection_task": injection_id, "attack": attack_name,
                "injection_goal": injection_task.GOAL if injected else None,
                "injections": injections, "checker_defects": defects,
                "tool_fault_rate": config.tool_fault_rate, "cloud_outage_rate": config.cloud_outage_rate,
                "fault_seed": config.seed,
            },
        ))
    return found


class AgentDojoSuite:
    """``suite: {name: agentdojo, ...}``: scenarios from AgentDojo, played as guarded episodes."""

    def __init__(self, config: AgentDojoSuiteConfig | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.config = config or AgentDojoSuiteConfig()
        self.name = self.config.name
        scenarios, self.report = generate_scenarios(self.config, progress)
        self._fit_calls: dict[str, list[Scenario]] = {}
        self._by_split: dict[str, list[Scenario]] = {"train": [], "holdout": []}
        for scenario in scenarios:
            self._by_split[scenario.split].append(scenario)

    def scenarios(self, split: Split) -> Sequence[Scenario]:
        return self._by_split[split]

    def fit_scenarios(self, scenarios: Sequence[Scenario],
                      progress: Callable[[str], None] | None = None) -> list[Scenario]:
        """What learned guard models fit on: the calls of these (train) episodes as one-call scenarios, with
        the tool output seen so far -- the very text the guard's models judge at run time -- labelled by whether
        the call serves the user's task or the injection's (``calls_as_the_guard_sees_them``; each episode
        is played once, on the path where every call runs, and kept)."""
        from far.suites.agentdojo.agent import calls_as_the_guard_sees_them

        fit = []
        todo = sum(s.id not in self._fit_calls for s in scenarios)
        played = 0
        for scenario in scenarios:
            if scenario.id not in self._fit_calls:
                self._fit_calls[scenario.id] = calls_as_the_guard_sees_them(scenario)
                played += 1
                if progress is not None and (played % 100 == 0 or played == todo):
                    progress(f"    agentdojo: played {played}/{todo} episodes for the calls the guard sees")
            fit.extend(self._fit_calls[scenario.id])
        return fit

    def prepare(self, scenarios: Sequence[Scenario], models: Any) -> list[Any]:
        """One lazily expanded ``Episode`` per scenario (see ``far.suites.agentdojo.agent``)."""
        from far.suites.agentdojo.agent import Episode

        return [Episode(scenario, models) for scenario in scenarios]

    def describe(self) -> dict[str, Any]:
        counts = {split: len(s) for split, s in self._by_split.items()}
        # the generator's name, not its module path: kept stable so summaries stay comparable across versions
        return self.config.model_dump(mode="json") | {"generator": "rollout.agentdojo_suite", "counts": counts,
                                                       **self.report}


def factory(options: dict[str, Any], base_dir: Any) -> AgentDojoSuite:
    try:
        config = AgentDojoSuiteConfig.model_validate(options)
    except ValidationError as error:
        raise from_validation_error(error, prefix="suite") from None
    return AgentDojoSuite(config)
