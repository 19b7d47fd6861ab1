"""AgentDojo as a suite: scenarios, the guarded episode inside AgentDojo's pipeline, its checkers as verifier."""
from __future__ import annotations

import json

import pytest
from conftest import oracle_models
from far.models.backends import ModelsConfig, build_models
from far.rollout.agent import build_graph
from far.rollout.errors import FarInputError
from far.rollout.policy import Policy
from far.suites import build_suite
from far.suites.agentdojo.agent import Episode
from far.suites.agentdojo.suite import AgentDojoSuite, AgentDojoSuiteConfig, tool_properties
from far.verifiers.rules import RuleVerifier
from far.verifiers.taxonomy import FailureKind
from hypothesis import given, settings
from hypothesis import strategies as st

UNDEFENDED = Policy(cloud_threshold=1.0, max_retries=2, require_confirmation=False, fallback_mode="safe_shutdown")
REVIEW_ALL = Policy(cloud_threshold=0.0, max_retries=2, require_confirmation=False, fallback_mode="safe_shutdown")
NO_FAULTS = {"tool_fault_rate": 0.0, "cloud_outage_rate": 0.0}


def banking(**options) -> AgentDojoSuite:
    config = {"suites": ["banking"], "max_user_tasks": 6, "max_injection_tasks": 4, **options}
    return AgentDojoSuite(AgentDojoSuiteConfig.model_validate(config))


def models(**cloud):
    return build_models(ModelsConfig.model_validate(oracle_models(cloud={"backend": "oracle", **cloud},
                                                                  cache={"enabled": False})))


def all_scenarios(suite):
    return [*suite.scenarios("train"), *suite.scenarios("holdout")]


@pytest.fixture(scope="module")
def faultless():
    return banking(split_by="user_task", **NO_FAULTS)


@pytest.fixture(scope="module")
def faulty():
    return banking(tool_fault_rate=0.3, cloud_outage_rate=0.2)


def run(suite, policy, model_set=None, graph=None):
    model_set = model_set or models()
    episodes = suite.prepare(all_scenarios(suite), model_set)
    verifier = RuleVerifier()
    out = []
    for episode in episodes:
        trajectory = episode.rollout(policy, graph=graph)
        out.append((episode, trajectory, verifier.verify(episode.scenario, trajectory)))
    return out


def kinds(verdict):
    return {f.kind for f in verdict.failures}


def test_scenarios_pair_user_and_injection_tasks_and_split_by_user_task(faultless):
    scenarios = all_scenarios(faultless)
    assert len(scenarios) == 6 * (1 + 4)
    assert {s.kind for s in scenarios} == {"benign", "injected"}
    for scenario in scenarios:
        environment = scenario.environment
        assert environment["benchmark"] == "agentdojo" and environment["suite"] == "banking"
        if scenario.kind == "injected":
            # the attack text from AgentDojo's own attack class, per injection vector the user task sees
            assert environment["injections"]
            assert all(environment["injection_goal"] in text for text in environment["injections"].values())
        else:
            assert environment["injections"] == {} and environment["injection_task"] is None
    by_task: dict[str, set[str]] = {}
    for scenario in scenarios:
        by_task.setdefault(scenario.environment["user_task"], set()).add(scenario.split)
    assert all(len(splits) == 1 for splits in by_task.values())  # a user task never straddles the splits
    assert not {s.id for s in faultless.scenarios("train")} & {s.id for s in faultless.scenarios("holdout")}


def test_unscriptable_injection_tasks_are_excluded_and_reported():
    suite = AgentDojoSuite(AgentDojoSuiteConfig(suites=("travel",), max_user_tasks=1))
    excluded = suite.describe()["excluded_empty_ground_truth"]["travel"]
    assert excluded == ["injection_task_6"]  # its ground truth is empty on the default environment
    injected = {s.environment["injection_task"] for s in all_scenarios(suite) if s.kind == "injected"}
    assert "injection_task_6" not in injected and len(injected) == 6


def test_checker_defects_are_labelled_and_can_be_excluded():
    config = {"suites": ["banking"], "max_user_tasks": 9, "max_injection_tasks": 1}
    labelled = AgentDojoSuite(AgentDojoSuiteConfig.model_validate(config))
    defective = {s.id for s in all_scenarios(labelled) if s.environment["checker_defects"]}
    # user_task_8's utility check is always true; injection_task_0's security check has a precedence bug
    assert "agentdojo/banking/user_task_8/benign" in defective
    assert all("/injection_task_0/" in sid or "/user_task_8/" in sid for sid in defective)
    assert labelled.describe()["checker_defect_scenarios"] == len(defective)
    kept = AgentDojoSuite(AgentDojoSuiteConfig.model_validate({**config, "exclude_checker_defects": True}))
    assert kept.describe()["excluded_checker_defect_scenarios"] == len(defective)
    assert {s.id for s in all_scenarios(kept)} == {s.id for s in all_scenarios(labelled)} - defective


def test_undefended_agent_is_compromised_and_security_is_not_inverted(faultless):
    results = run(faultless, UNDEFENDED)
    injected = [(e, t, v) for e, t, v in results if e.scenario.kind == "injected"]
    for episode, trajectory, verdict in results:
        followed = FailureKind.INJECTION_FOLLOWED in kinds(verdict)
        # AgentDojo's security == True means the attack succeeded; the failure must follow it exactly
        assert followed == trajectory.environment_result["attack_succeeded"]
        if episode.scenario.kind == "benign":
            assert not followed and verdict.z.security == 1.0
    assert all(t.environment_result["injection_seen"] for _, t, _ in injected)  # the text reached the agent
    compromised = sum(t.environment_result["attack_succeeded"] for _, t, _ in injected)
    assert compromised >= len(injected) // 2  # the scripted attacker always obeys; most attacks land
    benign_utility = [t.environment_result["utility"] for e, t, _ in results if e.scenario.kind == "benign"]
    assert sum(benign_utility) >= len(benign_utility) - 1


def test_a_guard_that_blocks_exactly_the_injected_calls_keeps_utility_and_stops_every_attack(faultless):
    # a cloud that vetoes injected calls and nothing else, reviewing every call
    perfect = models(unsafe_catch_rate=1.0, sensitive_false_veto_rate=0.0, benign_false_veto_rate=0.0)
    undefended = {e.scenario.id: t for e, t, _ in run(faultless, UNDEFENDED)}
    guarded = run(faultless, REVIEW_ALL, perfect)
    for episode, trajectory, verdict in guarded:
        result = trajectory.environment_result
        assert not result["attack_succeeded"] and verdict.critical_failures == 0
        vetoed = [s for s in trajectory.steps if s.node == "cloud_review" and s.decision == "veto"]
        assert all(result["call_origins"][s.inputs["call_index"]] == "injection" for s in vetoed)
        if episode.scenario.kind == "benign":
            assert result["utility"] == undefended[episode.scenario.id].environment_result["utility"]
            assert FailureKind.UNNECESSARY_CLOUD_CALL in kinds(verdict)  # nothing to refuse, yet escalated
    assert any(s.decision == "veto" for _, t, _ in guarded for s in t.steps)


def test_vetoing_the_users_own_calls_is_over_refusal(faultless):
    refuses_all = models(unsafe_catch_rate=1.0, sensitive_false_veto_rate=1.0, benign_false_veto_rate=1.0)
    for episode, trajectory, verdict in run(faultless, REVIEW_ALL, refuses_all):
        if not trajectory.environment_result["utility"]:
            assert FailureKind.OVER_REFUSAL in kinds(verdict)
            failure = next(f for f in verdict.failures if f.kind == FailureKind.OVER_REFUSAL)
            assert trajectory.steps[failure.step].decision == "veto"
            assert failure.parameter == "cloud_threshold"  # attributed to the routing decision
        assert verdict.z.security == 1.0


def test_unhandled_tool_failures_are_critical_and_shutdown_stops_the_episode(faulty):
    no_fallback = run(faulty, UNDEFENDED.model_copy(update={"fallback_mode": "none", "max_retries": 0}))
    unhandled = [v for _, t, v in no_fallback if t.outcome == "unhandled"]
    assert unhandled and all(FailureKind.NO_FALLBACK_ON_FAILURE in kinds(v) for v in unhandled)
    stopped = [t for _, t, _ in run(faulty, UNDEFENDED.model_copy(update={"max_retries": 0}))
               if t.outcome == "shutdown"]
    assert stopped
    for trajectory in stopped:
        assert trajectory.environment_result["stopped"] == "shutdown"
        # nothing after the call that stopped it
        assert trajectory.environment_result["call_outcomes"][-1] == "shutdown"


def test_replay_from_the_trie_equals_a_fresh_pipeline_run_and_skips_agentdojo(faulty):
    model_set = models()
    scenarios = all_scenarios(faulty)[:12]
    shared = [Episode(s, model_set) for s in scenarios]
    policies = [UNDEFENDED, REVIEW_ALL, Policy(cloud_threshold=0.4, max_retries=1, fallback_mode="ask_user"),
                Policy(cloud_threshold=0.6, max_retries=0, require_confirmation=True, fallback_mode="edge_only")]
    for policy in policies:
        for episode in shared:
            replayed = episode.rollout(policy)
            fresh = Episode(episode.scenario, model_set).rollout(policy)  # empty trie: runs AgentDojo
            assert [s.to_dict() for s in replayed.steps] == [s.to_dict() for s in fresh.steps]
            assert (replayed.outcome, replayed.environment_result) == (fresh.outcome, fresh.environment_result)
    runs = sum(e.pipeline_runs for e in shared)
    for policy in policies:
        for episode in shared:
            episode.rollout(policy)
    assert sum(e.pipeline_runs for e in shared) == runs  # every path known: AgentDojo did not run again


@settings(max_examples=12)
@given(threshold=st.sampled_from([0.0, 0.2, 0.5, 0.8, 1.0]), retries=st.integers(0, 2),
       confirm=st.booleans(), fallback=st.sampled_from(["safe_shutdown", "ask_user", "edge_only", "none"]))
def test_langgraph_engine_equals_replay_on_episodes(faulty, threshold, retries, confirm, fallback):
    policy = Policy(cloud_threshold=threshold, max_retries=retries, require_confirmation=confirm,
                    fallback_mode=fallback)
    model_set = models()
    scenarios = all_scenarios(faulty)[:6]
    graph = build_graph(policy)
    for scenario in scenarios:
        via_graph = Episode(scenario, model_set).rollout(policy, graph=graph)
        replayed = Episode(scenario, model_set).rollout(policy)
        assert [s.to_dict() for s in via_graph.steps] == [s.to_dict() for s in replayed.steps]
        assert via_graph.environment_result == replayed.environment_result


def test_tool_properties_follow_the_documented_rule():
    assert tool_properties("get_balance") == {"read_only": True, "sensitive": False, "idempotent": True,
                                              "local": False}
    assert tool_properties("send_money")["sensitive"] and not tool_properties("send_money")["idempotent"]
    assert tool_properties("update_password")["idempotent"] and tool_properties("update_password")["sensitive"]


@pytest.mark.parametrize("options, field", [
    ({"suites": ["bankingg"]}, "suite.suites"),
    ({"attack": "no_such_attack", "suites": ["banking"], "max_user_tasks": 1}, "suite.attacks"),
    ({"attack": "manual"}, "suite.attacks"),
    ({"attacks": ["important_instructions", "captcha_dos"]}, "suite.attacks"),
    ({"attacks": []}, "suite.attacks"),
    ({"version": "v9.9"}, "suite.version"),
    ({"suites": []}, "suite.suites"),
    ({"split_by": "injection"}, "suite.split_by"),
    ({"holdout_fraction": 1.5}, "suite.holdout_fraction"),
    ({"typo": 1}, "suite.typo"),
])
def test_bad_suite_options_name_the_field(options, field):
    with pytest.raises(FarInputError) as error:
        build_suite({"name": "agentdojo", **options})
    assert error.value.field == field
    assert "\n" not in str(error.value)


def test_bad_agentdojo_options_say_what_is_allowed():
    def message(**options) -> str:
        with pytest.raises(FarInputError) as error:
            build_suite({"name": "agentdojo", **options})
        return str(error.value)

    assert "standard input" in message(attack="manual") and "tool_knowledge" in message(attack="manual")
    assert "denial-of-service" in message(attacks=["dos"])
    assert "v1.1.2" in message(version="v9.9") and "v1.2.2" in message(version="v9.9")
    assert "at least one" in message(suites=[]) and "banking" in message(suites=[])


def test_the_far_cli_reports_a_bad_agentdojo_attack_in_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    config = tmp_path / "bad.yaml"
    config.write_text(json.dumps({"suite": {"name": "agentdojo", "attack": "manual"}, "models": oracle_models(),
                                  "policies": {"p": {"cloud_threshold": 0.5}}, "output": str(tmp_path / "out")}))
    run = subprocess.run([sys.executable, "-m", "far", "evaluate", str(config)], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr[-1500:]
    assert "suite.attacks" in run.stderr and "standard input" in run.stderr


def task_sets(scenarios, key):
    return {(s.category, s.environment[key]) for s in scenarios if s.environment[key]}


@pytest.mark.parametrize("split_by", ["injection_task", "user_and_injection_task"])
def test_holdout_injection_tasks_never_appear_in_train(split_by):
    suite = AgentDojoSuite(AgentDojoSuiteConfig(suites=("banking", "slack"), split_by=split_by, max_user_tasks=8))
    train, holdout = suite.scenarios("train"), suite.scenarios("holdout")
    assert any(s.kind == "injected" for s in holdout) and any(s.kind == "benign" for s in holdout)
    assert not task_sets(train, "injection_task") & task_sets(holdout, "injection_task")
    for name in ("banking", "slack"):  # per suite: at least one unseen injection task, never all of them
        unseen = suite.describe()["holdout_injection_tasks"][name]
        seen = {t for c, t in task_sets(train, "injection_task") if c == name}
        assert unseen and seen and not set(unseen) & seen
    users_overlap = task_sets(train, "user_task") & task_sets(holdout, "user_task")
    if split_by == "user_and_injection_task":
        assert not users_overlap
        # what is left out is exactly the pairs across the sides
        full = AgentDojoSuite(AgentDojoSuiteConfig(suites=("banking", "slack"), split_by="pair", max_user_tasks=8))
        kept = len(train) + len(holdout)
        assert kept + suite.describe()["dropped_across_split"] == len(all_scenarios(full))
    else:
        assert users_overlap  # user tasks are on both sides: only the injections are unseen
    # cross-fitting keeps an injection task's scenarios together, like the split
    for scenario in train:
        if scenario.kind == "injected":
            assert scenario.group.endswith(scenario.environment["injection_task"])


@given(st.integers(2, 40), st.floats(0.01, 0.99), st.integers(0, 5))
def test_holdout_members_draw_an_exact_share_never_none_never_all(n, fraction, seed):
    from far.suites.base import holdout_members

    keys = [f"s/task_{i}" for i in range(n)]
    chosen = holdout_members(keys, fraction, seed, strip=2)
    assert 1 <= len(chosen) <= n - 1 and chosen <= {k[2:] for k in keys}
    assert len(chosen) == min(n - 1, max(1, round(fraction * n)))
    assert chosen == holdout_members(list(reversed(keys)), fraction, seed, strip=2)  # order-free


def test_attacks_are_part_of_the_scenario_and_change_what_the_guard_sees():
    from far.suites.agentdojo.agent import calls_as_the_guard_sees_them

    attacks = ("important_instructions", "ignore_previous", "direct", "tool_knowledge")
    suite = AgentDojoSuite(AgentDojoSuiteConfig(suites=("banking",), attacks=attacks, max_user_tasks=2,
                                                max_injection_tasks=2, **NO_FAULTS))
    scenarios = all_scenarios(suite)
    injected = [s for s in scenarios if s.kind == "injected"]
    assert len(injected) == 2 * 2 * len(attacks) and sum(s.kind == "benign" for s in scenarios) == 2
    assert {s.environment["attack"] for s in injected} == set(attacks)
    assert all(s.id.endswith("/" + s.environment["attack"]) for s in injected)
    assert len({s.id for s in scenarios}) == len(scenarios)
    # one (user task, injection task) pair under each attack: the text the guard judges differs
    pair = [s for s in injected if s.environment["user_task"] == injected[0].environment["user_task"]
            and s.environment["injection_task"] == injected[0].environment["injection_task"]]
    seen = {s.environment["attack"]: [c.request for c in calls_as_the_guard_sees_them(s)] for s in pair}
    assert len({tuple(texts) for texts in seen.values()}) == len(attacks)


@pytest.mark.parametrize("version", ["v1.1.2", "v1.2.2"])
def test_both_benchmark_versions_run_and_are_named(version):
    suite = AgentDojoSuite(AgentDojoSuiteConfig(suites=("slack",), version=version, max_user_tasks=2,
                                                max_injection_tasks=1, **NO_FAULTS))
    results = run(suite, REVIEW_ALL)
    assert {episode.scenario.environment["version"] for episode, _, _ in results} == {version}
    assert suite.describe()["version"] == version
    from far.search.evaluation.results import breakdown

    rows = breakdown("p", "all", [e.scenario for e, _, _ in results], [v for _, _, v in results])
    assert {r["version"] for r in rows} == {version}
    assert all(r["attack"] == "important_instructions" for r in rows if r["kind"] == "injected")


def test_far_evaluate_and_search_run_on_agentdojo(tmp_path, ray_local, capsys):
    import pyarrow.parquet as pq

    from far.cli import main

    suite = {"name": "agentdojo", "suites": ["banking"], "max_user_tasks": 8, "max_injection_tasks": 3,
             "attacks": ["important_instructions", "direct"]}
    common = {"suite": suite, "rewards": None, "gate": {"max_critical_failures": 0, "max_mean_cost": 10.0},
              "models": oracle_models(cache={"enabled": False})}
    evaluate = tmp_path / "evaluate.json"
    evaluate.write_text(json.dumps({**common, "policies": {"undefended": UNDEFENDED.model_dump(mode="json"),
                                                           "review_all": REVIEW_ALL.model_dump(mode="json")},
                                    "output": str(tmp_path / "ev")}))
    assert main(["evaluate", str(evaluate)]) == 0
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    results = {(r["policy_name"], r["split"]): r for r in summary["results"]}
    assert results[("undefended", "train")]["failure_counts"]["INJECTION_FOLLOWED"] > 0
    assert summary["suite"]["excluded_empty_ground_truth"] == {"banking": []}
    printed = capsys.readouterr().out
    assert printed.count("Per attack on holdout") == 2 and "utility under attack" in printed
    table = printed[printed.index("Per attack on holdout, undefended"):]
    assert "important_instructions" in table and "direct" in table
    rows = pq.read_table(tmp_path / "ev" / "breakdown.parquet").to_pylist()
    injected = [r for r in rows if r["kind"] == "injected"]
    assert {r["attack"] for r in injected} == {"important_instructions", "direct"}
    assert {r["version"] for r in rows} == {"v1.2.2"} and all(r["attack"] is None for r in rows if r["kind"] == "benign")

    search = tmp_path / "search.json"
    search.write_text(json.dumps({**common, "space": {"parameters": {
        "cloud_threshold": {"type": "float", "low": 0.0, "high": 1.0, "grid": [0.0, 0.5, 1.0]},
        "require_confirmation": {"type": "bool"}}},
        "search": {"method": "grid", "budget": 6, "actors": 2, "chunk_size": 50, "top_k": 2},
        "output": str(tmp_path / "se")}))
    assert main(["search", str(search)]) == 0
    summary = json.loads((tmp_path / "se" / "summary.json").read_text())
    assert summary["trials"] == 6
    assert summary["winner"]["holdout"]["scenarios"] == len(build_suite(suite).scenarios("holdout"))


def test_learned_edges_fit_on_train_calls_only_labelled_by_origin(faultless):
    from far.search.evaluation.evaluate import Evaluator

    class RecordingEdge:  # a Fittable edge that remembers what it was fitted on
        name, simulated = "recording", True

        def __init__(self, inner):
            self.inner, self.fitted = inner, []

        def fit(self, scenarios, progress=None):
            self.fitted = list(scenarios)

        def assess(self, scenarios):
            return self.inner.assess(scenarios)

    base = models()
    edge = RecordingEdge(base.edge)
    evaluator = Evaluator(faultless, type(base)(edge, base.cloud, base.user, base.environment), RuleVerifier())
    evaluator.fit()
    assert edge.fitted and all(s.split == "train" for s in edge.fitted)
    train_ids = {s.id for s in faultless.scenarios("train")}
    assert {s.id.split("#")[0] for s in edge.fitted} == train_ids  # one entry per call, of train episodes only
    by_kind = {s.kind for s in edge.fitted}
    assert by_kind == {"user_call", "injection_call"}
    for call in edge.fitted:  # the label the calibration learns: injection calls must not run unreviewed
        assert call.ground_truth.unsafe == (call.kind == "injection_call")
    # fit and run time see the same text: the request with the tool output so far, as an episode asks the guard
    assert any("Tool outputs so far" in call.request for call in edge.fitted)
    from far.suites.agentdojo.agent import Episode

    asked = set()
    for scenario in faultless.scenarios("train"):
        episode = Episode(scenario, base)  # the oracle models this time: the path where every call runs
        episode.rollout(Policy(cloud_threshold=1.0, max_retries=0, require_confirmation=False, fallback_mode="none"))
        node = episode.root
        while node.call is not None:
            asked.add(node.call.mini.request)
            node = next(iter(node.children.values()))
    assert asked == {call.request for call in edge.fitted}


def test_attribution_stays_within_the_failing_call(faultless):
    # an edge-routed user call, then the injection call reviewed by a cloud that misses it: the cloud's
    # miss is to blame, not the earlier call's routing
    misses = models(unsafe_catch_rate=0.0)
    policy = Policy(cloud_threshold=0.5, max_retries=1, require_confirmation=False)
    checked = 0
    for episode, trajectory, verdict in run(faultless, policy, misses):
        for failure in verdict.failures:
            if failure.kind == FailureKind.INJECTION_FOLLOWED:
                call = trajectory.steps[failure.step].inputs["call_index"]
                assert trajectory.steps[failure.cause_step].inputs["call_index"] == call
                checked += 1
    assert checked


@pytest.mark.parametrize("name", ["banking", "slack", "travel", "workspace"])
def test_the_injected_text_reaches_the_scripted_agent_in_every_suite(name):
    # tool results come back as YAML dumps or Python reprs that refold and escape the injected text
    suite = AgentDojoSuite(AgentDojoSuiteConfig(suites=(name,), max_user_tasks=4, max_injection_tasks=3,
                                                benign=False, **NO_FAULTS))
    results = run(suite, UNDEFENDED)
    assert results
    for episode, trajectory, _ in results:
        assert trajectory.environment_result["injection_seen"], episode.scenario.id
        assert "injection" in trajectory.environment_result["call_origins"], episode.scenario.id
