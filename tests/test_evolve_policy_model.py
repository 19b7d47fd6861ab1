"""The policy model (``far.evolve.policy_model``) on the tiny random model: completion and option log-probs against a
plain forward pass, constrained choice, SFT's epochs and the LoRA targets."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.task import DECISIONS  # noqa: E402


def plain_completion_logprobs(model, prompt: str, completion: str):
    """The reference: one unpadded, uncached forward pass over prompt + completion + EOS; the log-probs of the
    completion's tokens."""
    prompt_ids = model.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = model.tokenizer(completion, add_special_tokens=False)["input_ids"] + [model.tokenizer.eos_token_id]
    single = torch.tensor([prompt_ids + completion_ids])
    full = torch.log_softmax(model.model(input_ids=single).logits[0, :-1].float(), dim=-1)
    return full.gather(-1, single[0, 1:].unsqueeze(-1)).squeeze(-1)[-len(completion_ids):]


PROMPT_SETS = ("chat", "no common prefix", "identical")


def prompt_set(model, name: str) -> list[str]:
    return {"chat": [model.prompt(decision_messages_for("x" * i)) for i in (1, 7, 30)],
            "no common prefix": ["alpha beta", "Zebra", "9 lives and more words"],
            "identical": ["same prompt"] * 3}[name]


@pytest.mark.parametrize("prompts", PROMPT_SETS)
def test_completion_logprobs_match_a_plain_forward_pass(prompts):
    # only the completion positions' logits are computed, the common prefix once, the rest left-padded after
    # it: each row must equal a plain forward pass over its unpadded sequence
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random"))
    prompts = prompt_set(model, prompts)
    completions = ["handle", "escalate now", "refuse"]
    with torch.no_grad():
        logp, mask = model.completion_logprobs(prompts, completions)
        for row, (prompt, completion) in enumerate(zip(prompts, completions)):
            expected = plain_completion_logprobs(model, prompt, completion)
            assert int(mask[row].sum()) == len(expected) and mask[row, -len(expected):].all()
            assert torch.allclose(logp[row][mask[row].bool()], expected, atol=1e-4)


def test_completion_logprobs_give_the_plain_passs_gradients():
    # the shared prefix runs once with its gradient summed over the rows: the adapter's gradients must be those of
    # the plain per-sequence passes
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", seed=3))
    with torch.no_grad():  # LoRA's B starts at zero (A's gradient would be zero): move it
        for name, p in model.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    prompts, completions = prompt_set(model, "chat"), ["handle", "refuse", "escalate"]
    trained = [p for p in model.model.parameters() if p.requires_grad]

    def gradients(loss):
        model.model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in trained]

    logp, mask = model.completion_logprobs(prompts, completions)
    shared = gradients((logp * mask).sum())
    plain = gradients(sum(plain_completion_logprobs(model, p, c).sum() for p, c in zip(prompts, completions)))
    assert any(g.abs().sum() > 0 for g in plain)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(shared, plain))


@pytest.mark.parametrize("options", [("handle", "escalate", "refuse"), ("handle",), ("yes", "no")])
@pytest.mark.parametrize("prompts", PROMPT_SETS)
def test_option_logprobs_equal_the_sum_over_each_completions_tokens(options, prompts):
    # the prompts' common prefix runs once and each prompt's cache is shared by the options: the same figures
    # as a plain pass over prompt + option + EOS
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", seed=2))
    prompts = prompt_set(model, prompts)
    with torch.inference_mode():
        shared = model.option_logprobs(prompts, options, chunk=2)
        full = torch.tensor([[float(plain_completion_logprobs(model, p, o).sum()) for o in options] for p in prompts])
    assert shared.shape == (len(prompts), len(options)) and torch.allclose(shared, full, atol=1e-4)


def decision_messages_for(request: str):
    from far.models.lm import Message

    return [Message(role="system", content="guard"), Message(role="user", content=request)]


def test_constrained_choice_samples_only_valid_actions_by_their_probability():
    from far.evolve.policy_model import ModelSpec, PolicyModel
    from far.evolve.task import DECISIONS

    model = PolicyModel(ModelSpec(base="tiny-random", seed=1))
    prompts = [model.prompt(decision_messages_for(f"request {i}")) for i in range(3)]
    logp = model.option_logprobs(prompts, DECISIONS)
    greedy = model.choose(prompts, DECISIONS, temperature=0.0)
    for row, picked in zip(logp, greedy):
        assert picked == [DECISIONS[int(row.argmax())]]
    samples = model.choose(prompts[:1], DECISIONS, temperature=1.0, n=3000, seed=5)[0]
    assert set(samples) <= set(DECISIONS)
    expected = torch.softmax(logp[0], dim=-1)
    observed = torch.tensor([samples.count(d) / len(samples) for d in DECISIONS])
    assert torch.allclose(observed, expected, atol=0.04)


@pytest.mark.parametrize("learned_after, expected_epochs", [(None, 1), (0, 1), (2, 3), (99, 4)])
def test_sft_runs_past_its_epochs_until_the_examples_are_learned(learned_after, expected_epochs):
    """``epochs`` passes always; then more, up to ``max_epochs``, while ``learned()`` is false (checked in eval
    mode); without ``learned`` exactly ``epochs``."""
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random"))
    prompts = [model.prompt(decision_messages_for(f"turn on light {i}")) for i in range(5)]
    checks = []

    def learned() -> bool:
        checks.append(model.model.training)
        return len(checks) > learned_after

    losses = model.sft(prompts, ["refuse"] * 5, epochs=1, lr=1e-3, batch_size=2, max_epochs=4,
                       learned=None if learned_after is None else learned)
    assert len(losses) == expected_epochs * 3  # 3 batches of 2 per pass over 5 examples
    assert not any(checks) and model.model.training is False  # checked in eval mode, left in eval mode
    assert len(checks) == (0 if learned_after is None else min(learned_after + 1, 3))


@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                 "up_proj", "down_proj")])
def test_the_adapter_wraps_the_layers_named(targets):
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", lora_targets=targets))
    trained = [name for name, p in model.model.named_parameters() if p.requires_grad]
    wrapped = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trained}
    assert wrapped == set(targets)
    assert all(not p.requires_grad for name, p in model.model.named_parameters() if "lora_" not in name)


def test_no_prompts_give_no_decisions():
    from far.evolve.policy_model import ModelSpec, PolicyModel
    from far.evolve.train import Fit

    model = PolicyModel(ModelSpec(base="tiny-random"))
    assert tuple(model.option_logprobs([], DECISIONS).shape) == (0, 3)
    assert model.choose([], DECISIONS, temperature=0.0) == []
    assert Fit(model, [], []).share() == 0.0  # a lesson with nothing taught fits nothing
