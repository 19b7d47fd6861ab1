"""FATE's rounds (``far.evolve.loop``) on a tiny randomly initialised model with SmolLM2's tokenizer (the real model:
-m slow): a finished run's files, the same run from the same config and seed, a data-order reseed that moves the data
order alone, evaluation-only data refused before any model loads, the gate's rollback, the round returned, and
``far evolve``'s last line.

A random model writes no repair worth teaching, so most runs here script its answers on the repair prompt p_f alone
(``ScriptedRepairs``): the right action of the input, written with K different spacings (one action, K texts that
score alike: the front keeps them all, and selection's draw decides which text is taught). Everything else, the
actions on x, SFT, PFPO and the fit check, is the tiny model's."""
from __future__ import annotations

import json
import math
import re

import pytest
from evolve_helpers import tiny_config

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.loop import ACT_BLOCK, Evolution
from far.evolve.policy_model import PolicyModel
from far.evolve.record import RoundRecord
from far.evolve.select import RULES
from far.evolve.task import action_text, right_action
from far.evolve.train import Lesson
from far.rollout.errors import FarInputError

REPAIR = "Write a better action."  # how a repair prompt p_f ends (``far.evolve.task.repair_messages``)
SPACINGS = ((",", ":"), (", ", ": "), (",", ": "), (", ", ":"))
RUN = {"dev_size": 24, "check_size": 24, "rehearsal_min": 4}  # a run that teaches and rehearses
TIMES = ("seconds", *(f"seconds_{step}" for step in ("lesson", "sft", "pfpo", "check", "holdout")))


class ScriptedRepairs(PolicyModel):
    """The tiny model, whose answers on a repair prompt are the right action of its input (looked up by the request)
    in the spacing the sample's seed picks; records every generation and every SFT."""

    def know(self, scenarios) -> None:
        self.right: dict[str, str] = {}
        for scenario in scenarios:
            self.right.setdefault(scenario.request, action_text(right_action(scenario)))
        self.generated: list[tuple[list[str], float, int]] = []
        self.fitted: list[tuple[list[str], list[str], int | None]] = []

    def generate(self, prompts, schemas, temperature, n=1, seed=0, max_new_tokens=96, chunk=64):
        self.generated.append((list(prompts), temperature, n))
        repair = {i for i, p in enumerate(prompts) if REPAIR in p}
        rest = [i for i in range(len(prompts)) if i not in repair]
        out: list[list[str]] = [[] for _ in prompts]
        written = super().generate([prompts[i] for i in rest], [schemas[i] for i in rest], temperature, n, seed,
                                   max_new_tokens, chunk)
        for i, texts in zip(rest, written):
            out[i] = texts
        for i in repair:
            request = re.search(r"User request: (.*?)\nYour previous action:", prompts[i], re.DOTALL).group(1)
            data = json.loads(self.right[request])
            out[i] = [json.dumps(data, separators=SPACINGS[(seed + j) % len(SPACINGS)]) for j in range(n)]
        return out

    def sft(self, prompts, completions, *args, seed=None, **kwargs):
        self.fitted.append((list(prompts), list(completions), seed))
        return super().sft(prompts, completions, *args, seed=seed, **kwargs)


def scripted(output, **overrides) -> tuple[Evolution, ScriptedRepairs]:
    config = tiny_config(output, **{**RUN, **overrides})
    model = ScriptedRepairs(config.model)
    evolution = Evolution(config, model=model)
    model.know(evolution.dev)
    return evolution, model


def finished_run(output, **overrides) -> dict:
    import pyarrow.parquet as pq

    evolution, model = scripted(output, **overrides)
    before = evolution.model.snapshot()
    summary = evolution.run(output)
    return {"evolution": evolution, "model": model, "summary": summary, "before": before, "output": output,
            "rounds": pq.read_table(output / "rounds.parquet").to_pylist(),
            "buffer": pq.read_table(output / "replay_buffer_round1.parquet").to_pylist()}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return finished_run(tmp_path_factory.mktemp("run"))


def without_times(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMES} for row in rows]


def same(a, b) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


def test_a_tiny_run_writes_its_rounds_summary_replay_buffer_and_adapter(run):
    import pyarrow.parquet as pq

    evolution, summary, rounds, buffer, output = (run[k] for k in ("evolution", "summary", "rounds", "buffer",
                                                                   "output"))
    assert [r["round"] for r in rounds] == [0, 1] and same(summary["rounds"], rounds)
    assert same(json.loads((output / "summary.json").read_text()), summary)
    first = rounds[1]
    assert first["failures"] > 0 and first["buffer"] > 0 and first["rehearsed"] > 0  # a random model fails plenty
    assert sum(first[f"decided_by_{rule}"] for rule in RULES) == first["failures"]  # one rule settled each
    assert first["decided_by_none"] == first["failures"] - first["buffer"]
    assert all(rounds[0][f"decided_by_{rule}"] is None for rule in RULES)  # round 0 did nothing
    for name in ("asr", "hcr", "tsr", "over_refusal", "control_violations", "malformed", "mean_r_pf", "check_tsr",
                 "check_asr", "check_hcr", "check_malformed"):
        assert all(name in r for r in rounds)
    steps = [first[f"seconds_{step}"] for step in ("lesson", "sft", "pfpo", "check", "holdout")]
    assert all(s >= 0 for s in steps) and sum(steps) <= first["seconds"] + 1e-6  # where the round's time went
    # SFT ran its one pass and measured its fit; PFPO's two passes measured the clip and the KL
    assert first["sft_epochs"] == 1 and 0.0 <= first["sft_fit"] <= 1.0 and first["sft_loss"] > 0
    assert 0.0 <= first["clip_fraction"] <= 1.0 and first["kl"] >= 0.0 and first["pfpo_loss"] is not None
    assert 0 < first["distinct_rate"] <= 1.0 and first["front_size"] > 0
    # the replay buffer R_1 = {(p_f, a*, z)}: dev's failures, each repair on its repair prompt
    assert len(buffer) == first["buffer"] and {row["split"] for row in buffer} == {"train"}
    assert {row["scenario_id"] for row in buffer} <= set(summary["dev"])
    for row in buffer:
        assert REPAIR in row["prompt"] and f"Your previous action: {row['failed_action']}" in row["prompt"]
        assert "It violated: " in row["prompt"] and "It violated: none" not in row["prompt"]
        assert json.loads(row["repair"]) and len(row["z"]) == 4 and math.isclose(sum(row["q"]), 1.0)
    # the gate judges a train slice apart from dev; the holdout is reported only
    assert summary["check"] and not set(summary["check"]) & (set(summary["dev"]) | set(summary["holdout"]))
    assert all(s.split == "train" for s in evolution.check) and all(s.split == "holdout" for s in evolution.holdout)
    assert not {s.group_key for s in evolution.dev} & {s.group_key for s in evolution.check}
    assert summary["stopped"] and summary["peak_memory_mb"] > 0 and summary["seconds"] > 0
    assert summary["kept_round"] in (0, 1) and summary["kept_adapter"] == (
        f"adapter_round{summary['kept_round']}" if summary["kept_round"] else None)
    assert (output / "adapter_round1" / "adapter_model.safetensors").is_file()
    by_category = pq.read_table(output / "rounds_by_category.parquet").to_pylist()
    assert {r["round"] for r in by_category} == {0, 1}
    report = (output / "report.html").read_text()
    assert all(f'id="chart-{i}"' in report for i in range(5)) and "<script src=" not in report  # 5 metrics, inline


def test_a_round_teaches_repairs_on_p_f_and_rehearsal_on_x_and_pfpo_samples_p_f_alone(run):
    evolution, model, buffer, rounds = (run[k] for k in ("evolution", "model", "buffer", "rounds"))
    (prompts, completions, _), = model.fitted  # one SFT, on the lesson
    taught = {(row["prompt"], row["repair"]) for row in buffer}
    pairs = set(zip(prompts, completions))
    assert taught <= pairs and len(prompts) == len(buffer) + rounds[1]["rehearsed"]
    plain = {evolution.model.prompt(evolution.task.messages(s)): s.id for s in evolution.dev}
    rehearsed = pairs - taught
    assert rehearsed and all(p in plain and evolution.correct[plain[p]][1] == c for p, c in rehearsed)
    group = evolution.config.training.pfpo.group
    sampled = [p for prompts, t, n in model.generated if n == group and t > 0 for p in prompts]
    assert sorted(set(sampled)) == sorted({row["prompt"] for row in buffer})  # every repair prompt, none other
    # the adapter moved: SFT and PFPO trained it, and the round (not rolled back) saved what they left
    from safetensors.torch import load_file

    assert rounds[1]["rolled_back"] is None
    saved = load_file(str(run["output"] / "adapter_round1" / "adapter_model.safetensors"))
    assert any(not torch.equal(saved[name.replace(".default", "")], value) for name, value in run["before"].items())


def test_the_same_config_and_seed_give_the_same_run(run, tmp_path):
    import pyarrow.parquet as pq

    again = finished_run(tmp_path)
    assert same(without_times(again["rounds"]), without_times(run["rounds"]))
    assert [again["summary"][k] for k in ("stopped", "kept_round", "dev", "check", "holdout")] == [
        run["summary"][k] for k in ("stopped", "kept_round", "dev", "check", "holdout")]
    assert again["buffer"] == run["buffer"]
    assert again["model"].fitted == run["model"].fitted  # the same examples, in the same order, the same batches
    assert same(pq.read_table(tmp_path / "rounds_by_category.parquet").to_pylist(),
                pq.read_table(run["output"] / "rounds_by_category.parquet").to_pylist())
    a, b = (again["evolution"].model.snapshot(), run["evolution"].model.snapshot())
    assert all(torch.equal(a[n], b[n]) for n in a)


def test_a_new_order_seed_keeps_the_failures_and_selections_and_moves_the_data_order(run, tmp_path):
    seed = run["evolution"].config.seed
    reordered = finished_run(tmp_path, order_seed=seed + 1000)
    first, other = run["rounds"][1], reordered["rounds"][1]
    assert other["failures"] == first["failures"] and other["buffer"] == first["buffer"]
    assert all(other[f"decided_by_{rule}"] == first[f"decided_by_{rule}"] for rule in RULES)
    # the same repairs taught: the draws from q* are selection's stream, which the order seed leaves alone
    assert reordered["buffer"] == run["buffer"]
    assert len({row["repair"] for row in run["buffer"]}) > 1 and any(
        len([q for q in row["q"] if q > 0]) > 1 for row in run["buffer"])  # the draws had a choice to make
    (prompts, completions, sft_seed), = run["model"].fitted
    (moved_prompts, moved_completions, moved_seed), = reordered["model"].fitted
    assert sorted(zip(prompts, completions)) == sorted(zip(moved_prompts, moved_completions))  # the same examples
    assert moved_prompts != prompts and moved_seed != sft_seed  # in another order, other batches
    assert reordered["summary"]["config"]["order_seed"] == seed + 1000


def test_many_inputs_are_decoded_in_blocks_with_progress_and_the_same_actions(tmp_path):
    lines: list[str] = []
    config = tiny_config(tmp_path, holdout_size=ACT_BLOCK + 6, suite={"name": "edge_cloud", "seed": 3, "size": 300})
    model = ScriptedRepairs(config.model)
    evolution = Evolution(config, model=model, progress=lines.append)
    model.know(evolution.dev)
    holdout = evolution.holdout
    assert len(holdout) > ACT_BLOCK
    acted = evolution.act(holdout)
    assert [len(prompts) for prompts, _, _ in model.generated] == [ACT_BLOCK, len(holdout) - ACT_BLOCK]
    assert [line for line in lines if "writing actions" in line][-1].strip().startswith(
        f"writing actions: {len(holdout)}/{len(holdout)}")
    prompts = [model.prompt(evolution.task.messages(s)) for s in holdout]
    whole = model.generate(prompts, [evolution.task.schema(s) for s in holdout], 0.0,
                           max_new_tokens=config.repair.max_new_tokens)
    assert [a.text for a in acted] == [texts[0] for texts in whole]  # one call of them all writes the same
    calls = len(model.generated)
    assert evolution.act(holdout) == acted and len(model.generated) == calls  # memoised: not decoded again


def test_evaluation_only_data_is_refused_before_any_model_loads(tmp_path, monkeypatch):
    import far.models.backends
    import far.suites
    from far.evolve import policy_model

    built = far.suites.build_suite

    def never(*args, **kwargs):
        raise AssertionError("a model loaded before the data was checked")

    monkeypatch.setattr(far.models.backends, "build_models", never)
    monkeypatch.setattr(policy_model.PolicyModel, "__init__", never)
    for mark in ("eval_only", "holdout"):
        def build_suite(spec, base_dir=None, mark=mark):
            suite = built(spec, base_dir)
            train, holdout = list(suite.scenarios("train")), list(suite.scenarios("holdout"))
            tainted = (train[5].model_copy(update={"eval_only": True}) if mark == "eval_only" else holdout[0])
            splits = {"train": [*train[:5], tainted, *train[6:]], "holdout": holdout}
            return type("Tainted", (), {"scenarios": lambda self, split: splits[split]})()

        monkeypatch.setattr(far.suites, "build_suite", build_suite)
        with pytest.raises(FarInputError, match="evaluation-only" if mark == "eval_only" else "holdout split"):
            Evolution(tiny_config(tmp_path))


def test_a_train_split_with_no_room_for_the_check_slice_is_refused(tmp_path):
    with pytest.raises(FarInputError, match="check slice"):
        Evolution(tiny_config(tmp_path, dev_size=10_000))


def test_the_gate_rolls_back_a_round_that_raises_hcr_and_returns_the_round_before(tmp_path):
    """Round 1 is kept; round 2's training (real SFT, no PFPO) raises HCR on the check slice: the adapter it left is
    judged on the holdout (reported only), then undone, and the run stops and returns round 1's."""
    evolution, _ = scripted(tmp_path, rounds=2, pfpo={"enabled": False})
    figures = {"mean_r_pf": 0.0, "mean_reward": 0.0, "over_refusal": 0.0, "control_violations": 0.0,
               "malformed": 0.0, "asr": 0.0}
    answers = iter([{**figures, "hcr": 0.0, "tsr": 0.5}, {**figures, "hcr": 0.0, "tsr": 0.6},
                    {**figures, "hcr": 0.5, "tsr": 0.9}])
    checked, evaluated = [], []

    def check():
        checked.append(evolution.model.snapshot())
        return next(answers)

    evaluate = evolution.evaluate

    def evaluate_spy():
        evaluated.append(evolution.model.snapshot())
        return evaluate()

    evolution.check_metrics, evolution.evaluate = check, evaluate_spy
    summary = evolution.run(tmp_path)
    rows = summary["rounds"]
    assert [r["round"] for r in rows] == [0, 1, 2] and rows[1]["buffer"] and rows[2]["buffer"]
    assert rows[2]["rolled_back"] == "hcr 0.000 -> 0.500" and rows[1]["rolled_back"] is None
    assert summary["stopped"].startswith("round 2 rolled back") and summary["kept_round"] == 1
    assert summary["kept_adapter"] == "adapter_round1"
    assert rows[2]["check_hcr"] == 0.0 and rows[2]["check_tsr"] == 0.6  # the kept model's figures
    assert all(rows[i][f"discarded_{k}"] is None for i in (0, 1) for k in ("asr", "hcr", "tsr", "over_refusal"))
    assert all(rows[2][f"discarded_{k}"] is not None for k in ("asr", "hcr", "tsr", "over_refusal"))
    assert rows[1]["pfpo_loss"] is None and rows[1]["sft_loss"] is not None  # SFT alone, PFPO off

    def equal(a, b) -> bool:
        return all(torch.equal(a[n], b[n]) for n in a)

    assert not equal(checked[1], checked[2]) and not equal(checked[0], checked[1])  # each round trained
    # evaluated: the base, round 1's, round 2's (discarded, reported), then round 1's again
    assert [equal(e, c) for e, c in zip(evaluated, [checked[0], checked[1], checked[2], checked[1]])] == [True] * 4
    assert len(evaluated) == 4 and equal(evolution.model.snapshot(), checked[1])
    from safetensors.torch import load_file

    for saved in ("adapter_round1", "adapter_round2"):  # after a rollback the adapter saved is the one restored
        weights = load_file(str(tmp_path / saved / "adapter_model.safetensors"))
        assert all(torch.equal(weights[name.replace(".default", "")], value) for name, value in checked[1].items())


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> Evolution:
    """A tiny run whose rounds are scripted (``scripted_rounds``): the loop's logic without training's time."""
    return Evolution(tiny_config(tmp_path_factory.mktemp("bare"), check_size=40))


def scripted_rounds(evolution: Evolution, script: list[tuple[float, float, float]]) -> list[dict]:
    """Each round moves the adapter by a step of its own and teaches one repair; the check slice answers
    ``script``'s (ASR, HCR, TSR) in turn. Returns the list that fills with the adapter at each check."""
    answers, adapters = iter(script), []
    figures = {"mean_r_pf": 0.0, "mean_reward": 0.0, "over_refusal": 0.0, "control_violations": 0.0, "malformed": 0.0}

    def check():
        asr, hcr, tsr = next(answers)
        adapters.append(evolution.model.snapshot())
        return {**figures, "asr": asr, "hcr": hcr, "tsr": tsr}

    def train_round(t, output):
        with torch.no_grad():
            for p in evolution.model.model.parameters():
                if p.requires_grad:
                    p.add_(0.01 * t)
        lesson = Lesson([], 1.0, dict.fromkeys(RULES, 0), [], [], [], [])
        return RoundRecord(round=t, holdout={}, check={}, seconds=0.0, buffer=1), lesson

    evolution.check_metrics, evolution.train_round = check, train_round
    return adapters


@pytest.mark.parametrize("script, returned, stopped", [
    ([(0.0, 0.0, 0.2), (0.0, 0.0, 0.4), (0.0, 0.0, 0.3)], 1, "round 2 was no progress"),  # TSR fell: round 1
    ([(0.0, 0.0, 0.2), (0.0, 0.0, 0.4), (0.0, 0.0, 0.6)], 2, "rounds done"),  # every round better: the last
    ([(0.0, 0.0, 0.2), (0.0, 0.0, 0.1)], 0, "round 1 was no progress"),  # round 1 fell: the base model
    ([(1.0, 0.0, 0.2), (1.0, 0.0, 0.6), (0.0, 0.0, 0.4)], 2, "rounds done"),  # less harm wins though TSR fell
    ([(1.0, 0.0, 0.9), (0.0, 0.0, 0.5), (0.0, 0.0, 0.4)], 1, "round 2 was no progress"),  # safer, then a fall
    ([(0.0, 0.0, 0.2), (0.0, 0.0, 0.4), (1.0, 0.0, 0.9)], 1, "round 2 rolled back (asr 0.000 -> 1.000)"),
])
def test_a_run_returns_the_best_round_on_the_check_slice(bare, tmp_path, script, returned, stopped):
    assert any(s.ground_truth.injected for s in bare.check)
    pristine = bare.model.snapshot()
    bare.config = bare.config.model_copy(update={"rounds": len(script) - 1})
    try:
        adapters = scripted_rounds(bare, script)
        summary = bare.run(tmp_path)
    finally:
        del bare.check_metrics, bare.train_round
    after = bare.model.snapshot()
    bare.model.restore(pristine)
    rows = summary["rounds"]
    assert len(rows) == len(script) and summary["stopped"].startswith(stopped)
    assert summary["kept_round"] == returned
    assert summary["kept_adapter"] == (f"adapter_round{returned}" if returned else None)
    assert [row["check_tsr"] for row in rows] == [script[i if not row["rolled_back"] else i - 1][2]
                                                  for i, row in enumerate(rows)]
    assert all(torch.equal(adapters[returned][n], after[n]) for n in after)  # the round returned is restored
    if returned:  # the adapter returned is the one saved for that round
        from safetensors.torch import load_file

        saved = load_file(str(tmp_path / summary["kept_adapter"] / "adapter_model.safetensors"))
        assert all(torch.equal(saved[name.replace(".default", "")], value) for name, value in after.items())


def test_far_evolve_names_the_model_to_ship(tmp_path, capsys):
    import yaml

    from far.cli import main

    config = tmp_path / "evolve.yaml"
    config.write_text(yaml.safe_dump(tiny_config(tmp_path / "out", dev_size=8, check_size=8, holdout_size=8,
                                                 candidates=2).model_dump(mode="json")))
    assert main(["evolve", str(config)]) == 0
    said = capsys.readouterr().out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    kept = summary["kept_round"]
    assert "The model to ship: " + (f"round {kept}'s LoRA adapter, {tmp_path / 'out'}/adapter_round{kept}/" if kept
                                    else "the base model") in said
    assert f"stopped: {summary['stopped']}" in said and (tmp_path / "out" / "rounds.parquet").is_file()


@pytest.mark.slow
def test_a_round_with_the_real_smollm2(tmp_path):
    config = tiny_config(tmp_path, model={"base": "smollm2"}, dev_size=16, holdout_size=24,
                         candidates=4, pfpo={"group": 4, "prompts_per_step": 4})
    summary = Evolution(config).run(tmp_path)
    assert len(summary["rounds"]) == 2


def test_a_round_on_agentdojo_reads_each_episode_as_its_decision_points(tmp_path):
    """An AgentDojo suite: the slices are the episodes' decision points (the user's task and the tool output read
    so far, an injected instruction among it), the tools AgentDojo's, and a round runs on them."""
    pytest.importorskip("agentdojo")
    import pyarrow.parquet as pq

    suite = {"name": "agentdojo", "suites": ["banking"], "attacks": ["important_instructions"],
             "max_user_tasks": 6, "max_injection_tasks": 3}
    config = tiny_config(tmp_path, suite=suite, dev_size=8, check_size=8, holdout_size=12, candidates=2,
                         max_new_tokens=32)
    evolution = Evolution(config)
    points = [*evolution.dev, *evolution.check, *evolution.holdout]
    assert all(s.environment is None and s.suite == "agentdojo:banking" for s in points)
    assert any(s.ground_truth.injected and "Tool outputs so far" in s.request for s in points)
    assert {s.split for s in evolution.holdout} == {"holdout"} and {s.split for s in evolution.dev} == {"train"}
    assert {"send_money", "read_file"} <= set(evolution.task.catalog.tools)
    summary = evolution.run(tmp_path)
    rounds = pq.read_table(tmp_path / "rounds.parquet").to_pylist()
    assert len(rounds) == len(summary["rounds"]) >= 1 and rounds[-1]["failures"] >= 1
