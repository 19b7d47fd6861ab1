"""Training (``far.evolve.train``): what a lesson teaches (each kept repair on its repair prompt p_f, rehearsed correct
actions on the plain prompt x, in the data-order stream's order), how much is rehearsed, SFT with the prompt's tokens
masked, the fit check on the model's greedy actions, and PFPO on the repair prompts p_f alone with its KL anchored to
the model SFT left."""
from __future__ import annotations

import json
import random

import pytest
from evolve_helpers import action_task, harmful, suite_scenarios, tiny_config
from far.evolve.collect import Failure
from far.evolve.config import SFTSettings, TrainingSettings
from far.evolve.select import RULES, Candidate, Selection
from far.evolve.task import action_text, repair_messages, right_action
from far.evolve.train import Example, Fit, Lesson, build_lesson, rehearsal_count, sft

task = pytest.fixture(scope="module", name="task")(action_task)


@pytest.mark.parametrize("repairs, per_repair, floor, expected", [
    (2, 1.0, 0, 2), (2, 1.0, 5, 5), (6, 1.0, 5, 6), (2, 2.0, 3, 4), (1, 1.0, 99, 99), (0, 1.0, 5, 0)])
def test_rehearsal_takes_per_repair_or_the_floor(repairs, per_repair, floor, expected):
    assert rehearsal_count(TrainingSettings(rehearsal=per_repair, rehearsal_min=floor), repairs) == expected


class Prompts:
    """A stand-in for the model's chat template: the prompt is the last message's text."""

    def prompt(self, messages) -> str:
        return "x| " + messages[-1].content


def hand_made(task, count: int = 6):
    """``count`` failures (the model asked where the labels call for another action) on train inputs, their repair
    prompts, and per failure a selection of the right action (or none, every third)."""
    train, _ = suite_scenarios()
    inputs = [s for s in train if not harmful(s) and task.parse(s, action_text(right_action(s)))][:count]
    asked = task.score(inputs, ['{"action":"ask","question":"which one?"}'] * len(inputs))
    failed = [Failure(s, a.text, a) for s, a in zip(inputs, asked)]
    prompts = [Prompts().prompt(repair_messages(task, f.scenario, f.scored)) for f in failed]
    right = task.score(inputs, [action_text(right_action(s)) for s in inputs])
    selections = [Selection(None, [0.0], "none") if i % 3 == 2 else
                  Selection(Candidate(r.text, r, 1.0), [1.0], "repair" if i % 2 else "r_pf", front=1 + i % 2,
                            repairing=2 + i % 2, feasible=1 + i % 2)
                  for i, r in enumerate(right)]
    return failed, prompts, selections


def test_a_lesson_teaches_each_kept_repair_on_p_f_and_rehearsal_on_x(task):
    failed, prompts, selections = hand_made(task)
    train, _ = suite_scenarios()
    pool = [(s, '{"action":"refuse","reason":"harm"}') for s in train if harmful(s)][:3]
    lesson = build_lesson(Prompts(), task, failed, prompts, selections, 0.5, pool, random.Random(0), RULES)
    kept = [i for i, s in enumerate(selections) if s.chosen is not None]
    assert [t.failure for t in lesson.taught] == [failed[i] for i in kept]
    assert [t.prompt for t in lesson.taught] == [prompts[i] for i in kept]
    assert [t.chosen.text for t in lesson.taught] == [selections[i].chosen.text for i in kept]
    assert lesson.decided == {rule: sum(s.rule == rule for s in selections) for rule in RULES}
    assert sum(lesson.decided.values()) == len(failed) and lesson.decided["none"] == 2
    assert lesson.front_sizes == [s.front for s in selections] and lesson.distinct == 0.5
    assert (lesson.repairing, lesson.feasible) == (sum(s.repairing for s in selections),
                                                   sum(s.feasible for s in selections)) != (0, 0)
    expected = [(prompts[i], failed[i].scenario.id, selections[i].chosen.text) for i in kept]
    expected += [(Prompts().prompt(task.messages(s)), s.id, text) for s, text in pool]
    assert sorted((e.prompt, e.scenario.id, e.target) for e in lesson.examples) == sorted(expected)
    assert lesson.rehearsed == pool and all(isinstance(e, Example) for e in lesson.examples)
    # mixed in the data-order stream's order: its seed alone moves it
    again = build_lesson(Prompts(), task, failed, prompts, selections, 0.5, pool, random.Random(0), RULES)
    assert again.examples == lesson.examples
    orders = {tuple(e.target for e in build_lesson(Prompts(), task, failed, prompts, selections, 0.5, pool,
                                                   random.Random(seed), RULES).examples) for seed in range(6)}
    assert len(orders) > 1
    # nothing kept: nothing taught, nothing rehearsed
    none = [Selection(None, [0.0], "none")] * len(failed)
    empty = build_lesson(Prompts(), task, failed, prompts, none, 0.5, pool, random.Random(0), RULES)
    assert empty.taught == [] and empty.examples == [] and empty.rehearsed == []
    assert empty.decided["none"] == len(failed)


class Scripted(Prompts):
    """Answers each prompt with a scripted text; records what SFT was asked."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.fitted = answers, []

    def generate(self, prompts, schemas, temperature, n=1, seed=0, max_new_tokens=96):
        assert temperature == 0.0 and len(schemas) == len(prompts)
        return [[self.answers[p]] * n for p in prompts]

    def sft(self, prompts, completions, epochs, lr, batch_size, max_epochs, learned, seed=None):
        self.fitted.append((list(prompts), list(completions), epochs, lr, batch_size, max_epochs, seed))
        learned()
        return [1.0, 0.5]


def test_the_fit_check_reads_the_models_greedy_actions(task):
    failed, _, _ = hand_made(task, 3)
    scenarios = [f.scenario for f in failed]
    targets = [action_text(right_action(s)) for s in scenarios]
    examples = [Example(f"p{i}", s, t) for i, (s, t) in enumerate(zip(scenarios, targets))]
    answers = {"p0": json.dumps(json.loads(targets[0]), separators=(", ", ": ")), "p1": '{"action":"ask","question":"which one?"}', "p2": targets[2]}
    fit = Fit(Scripted(answers), task, examples, 48)
    assert fit.share() == pytest.approx(2 / 3)  # the same action written otherwise is the same; a question is not
    assert not fit.learned() and fit.extra == 1
    answers["p1"] = targets[1]
    assert fit.learned() and fit.extra == 1
    # a question's wording aside; a malformed action matches nothing, not even itself
    ask = Example("q", scenarios[0], '{"action":"ask","question":"which one?"}')
    assert Fit(Scripted({"q": '{"action":"ask","question":"what?"}'}), task, [ask], 48).share() == 1.0
    broken = Example("b", scenarios[0], "{")
    assert Fit(Scripted({"b": "{"}), task, [broken], 48).share() == 0.0


def test_sft_fits_the_lesson_until_learned_and_nothing_without_a_repair(task):
    failed, prompts, selections = hand_made(task)
    lesson = build_lesson(Prompts(), task, failed, prompts, selections, 0.5, [], random.Random(0), RULES)
    model = Scripted({e.prompt: e.target for e in lesson.examples})
    settings = SFTSettings(epochs=2, max_epochs=5, lr=0.01, batch_size=3)
    losses, fit = sft(model, task, lesson, settings, 48, seed=11)
    assert losses == [1.0, 0.5] and fit.examples == lesson.examples
    assert model.fitted == [([e.prompt for e in lesson.examples], [e.target for e in lesson.examples], 2, 0.01, 3, 5,
                             11)]
    assert fit.share() == 1.0  # the check SFT ran reads the lesson's own examples
    idle = Lesson(failed, 1.0, {}, [], [], [], [])
    assert sft(model, task, idle, settings, 48, seed=11)[0] == [] and len(model.fitted) == 1


# --- on the tiny model ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def evolution(tmp_path_factory):
    pytest.importorskip("torch", reason="needs the models extra (make install-models)")
    pytest.importorskip("peft")
    from far.evolve.loop import Evolution

    return Evolution(tiny_config(tmp_path_factory.mktemp("train"), dev_size=24,
                                 pfpo={"group": 3, "prompts_per_step": 2, "lr": 0.05}))


def lesson_on(evolution) -> Lesson:
    """Every failing dev input repaired by its right action, and two rehearsed actions on x."""
    from far.evolve.collect import failures

    failed, _, _ = failures(evolution.dev, evolution.act(evolution.dev), evolution.thresholds(evolution.dev))
    failed = [f for f in failed if evolution.task.parse(f.scenario, action_text(right_action(f.scenario)))][:5]
    assert len(failed) >= 3
    prompts = [evolution.model.prompt(repair_messages(evolution.task, f.scenario, f.scored)) for f in failed]
    right = evolution.task.score([f.scenario for f in failed], [action_text(right_action(f.scenario)) for f in failed])
    selections = [Selection(Candidate(r.text, r, 1.0), [1.0], "repair", 1) for r in right]
    rehearsed = [(s, '{"action":"refuse","reason":"no"}') for s in evolution.dev[:2]]
    return build_lesson(evolution.model, evolution.task, failed, prompts, selections, 1.0, rehearsed,
                        random.Random(0), RULES)


def test_sft_masks_the_prompt(evolution):
    """SFT's loss is the mean negative log-likelihood of the completion's tokens (and EOS) alone: the first step's
    loss, before any update, is that figure from the model as it was, not one over the prompt's tokens too."""
    torch = pytest.importorskip("torch")
    from far.evolve.objectives import masked_mean

    model = evolution.model
    start = model.snapshot()
    lesson = lesson_on(evolution)
    prompts, targets = [e.prompt for e in lesson.examples], [e.target for e in lesson.examples]
    with torch.no_grad():
        logp, mask = model.completion_logprobs(prompts, targets)
        completion_only = float(-masked_mean(logp, mask))
        whole = model.tokenizer(prompts[0] + targets[0], add_special_tokens=False)["input_ids"]
        assert int(mask[0].sum()) < len(whole)  # the prompt's tokens are not among those counted
    settings = SFTSettings(epochs=3, max_epochs=3, lr=0.01, batch_size=len(prompts))
    try:
        losses, _ = sft(model, evolution.task, lesson, settings, 48, seed=0)
        assert len(losses) == 3 and losses[0] == pytest.approx(completion_only, rel=1e-4)
        assert losses[-1] < losses[0]  # the completions were learned
    finally:
        model.restore(start)


def test_pfpo_samples_the_repair_prompts_alone_and_anchors_its_kl_to_the_model_sft_left(evolution):
    torch = pytest.importorskip("torch")
    from far.evolve.train import pfpo

    lesson = lesson_on(evolution)
    model, config = evolution.model, evolution.config
    settings = config.training.pfpo
    start = model.snapshot()  # as SFT left it
    calls, sampled = [], []
    plain, generate = model.completion_logprobs, model.generate

    def spy(prompts, completions, reference=False):
        weights = dict(model.model.named_parameters())
        calls.append((list(prompts), reference, all(torch.equal(v, weights[k]) for k, v in start.items())))
        return plain(prompts, completions, reference=reference)

    def sampling(prompts, schemas, temperature, n=1, **kwargs):
        sampled.append((list(prompts), temperature, n))
        return generate(prompts, schemas, temperature, n=n, **kwargs)

    model.completion_logprobs, model.generate = spy, sampling
    try:
        stats = pfpo(model, evolution.task, config.selection, settings, lesson, config.seed, 1, 48)
    finally:
        del model.completion_logprobs, model.generate
        model.restore(start)
    repair_prompts = [t.prompt for t in lesson.taught]
    plain_prompts = {model.prompt(evolution.task.messages(s)) for s, _ in lesson.rehearsed}
    chunks = -(-len(repair_prompts) // settings.prompts_per_step)
    # the repair prompts p_f, each sampled G times at PFPO's temperature; never a rehearsed plain prompt x
    assert [p for prompts, _, _ in sampled for p in prompts] == repair_prompts
    assert all(t == settings.temperature and n == settings.group for _, t, n in sampled) and len(sampled) == chunks
    assert all(set(prompts) <= set(repair_prompts) and not set(prompts) & plain_prompts for prompts, _, _ in calls)
    assert all(len(prompts) == settings.group * len(set(prompts)) for prompts, _, _ in calls)
    assert chunks >= 2 and len(calls) == chunks * (2 + settings.iterations)
    refs = [calls[c * 4 + 1][1:] for c in range(chunks)]  # per chunk: old, ref, then one per optimisation pass
    # the adapter on, at the weights SFT left, though PFPO has moved them since the first chunk
    assert refs == [(False, True)] * chunks and not calls[4][2]
    assert len(stats.losses) == len(stats.clipped) == len(stats.kl) == chunks * settings.iterations
    assert stats.kl[0] == pytest.approx(0.0, abs=1e-6) and min(stats.kl) >= 0.0  # at π_ref first
    means = stats.means()
    assert set(means) == {"pfpo_loss", "clip_fraction", "kl"} and 0.0 <= means["clip_fraction"] <= 1.0

