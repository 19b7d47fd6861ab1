"""The policy model (``far.evolve.policy_model``) on the tiny random model: completion and option log-probs against a
plain forward pass, generation under a JSON schema (against an uncached greedy decode), SFT's
epochs and the LoRA targets."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

DECISIONS = ("handle", "escalate", "refuse")  # the options of a categorical choice


def plain_completion_logprobs(model, prompt: str, completion: str, complete: bool = True):
    """The reference: one unpadded, uncached forward pass over prompt + completion (+ EOS where ``complete``);
    the log-probs of the completion's tokens."""
    prompt_ids = model.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    end = [model.tokenizer.eos_token_id] if complete else []
    completion_ids = model.tokenizer(completion, add_special_tokens=False)["input_ids"] + end
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


@pytest.mark.parametrize("complete", [True, False])
@pytest.mark.parametrize("options", [("handle", "escalate", "refuse"), ("handle",), ("yes", "no"),
                                     ('{"action":"call","tool":"pay_bill"', '{"action":"ask"')])
@pytest.mark.parametrize("prompts", PROMPT_SETS)
def test_option_logprobs_equal_the_sum_over_each_completions_tokens(options, prompts, complete):
    # the prompts' common prefix runs once and each prompt's cache is shared by the options: the same figures
    # as a plain pass over prompt + option (+ EOS for a whole completion)
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", seed=2))
    prompts = prompt_set(model, prompts)
    with torch.inference_mode():
        shared = model.option_logprobs(prompts, options, chunk=2, complete=complete)
        full = torch.tensor([[float(plain_completion_logprobs(model, p, o, complete).sum()) for o in options]
                             for p in prompts])
    assert shared.shape == (len(prompts), len(options)) and torch.allclose(shared, full, atol=1e-4)


def test_a_prefix_is_at_least_as_probable_as_any_completion_that_starts_with_it():
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", seed=4))
    prompts = prompt_set(model, "chat")
    with torch.inference_mode():
        prefix = model.option_logprobs(prompts, ["escalate"], complete=False)
        whole = model.option_logprobs(prompts, ["escalate", "escalate now"])
    assert (prefix[:, 0] >= whole.max(dim=1).values - 1e-5).all()
    with pytest.raises(ValueError, match="empty option"):
        model.option_logprobs(prompts, [""], complete=False)


def decision_messages_for(request: str):
    from far.models.lm import Message

    return [Message(role="system", content="guard"), Message(role="user", content=request)]


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
    assert Fit(model, None, [], max_new_tokens=8).share() == 0.0  # a lesson with nothing taught fits nothing


# --- generation under a JSON schema -----------------------------------------------------------------------------
def _object(properties: dict) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


PAY = _object({"action": {"const": "call"}, "tool": {"const": "pay_bill"},
               "args": _object({"payee": {"type": "string", "maxLength": 60}, "amount": {"type": "number"}}),
               "confirm": {"type": "boolean"}})
THERMOSTAT = _object({"action": {"const": "call"}, "tool": {"const": "set_thermostat"},
                      "args": _object({"room": {"type": "string", "maxLength": 60}, "celsius": {"type": "integer"},
                                       "minutes": {"type": ["integer", "null"]}}),
                      "confirm": {"type": "boolean"}})
ASK = _object({"action": {"const": "ask"}, "question": {"type": "string", "maxLength": 80}})
REFUSE = _object({"action": {"const": "refuse"}, "reason": {"type": "string", "maxLength": 80}})
ACTION_SCHEMA = {"anyOf": [PAY, THERMOSTAT, ASK, REFUSE]}  # the shape of ``task.action_schema``
JSON_TYPES = {"string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,), "null": (type(None),),
              "object": (dict,)}


def conforms(value, schema: dict) -> bool:
    """The schema's subset used here (anyOf, const, type, maxLength, objects with every property required and no
    other), the keys in the schema's order (as the model writes them)."""
    if "anyOf" in schema:
        return any(conforms(value, branch) for branch in schema["anyOf"])
    if "const" in schema:
        return value == schema["const"]
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if not any(isinstance(value, JSON_TYPES[t]) and (t == "boolean" or not isinstance(value, bool)) for t in types):
        return False
    if isinstance(value, str):
        return len(value) <= schema.get("maxLength", len(value))
    if isinstance(value, dict):
        return list(value) == list(schema["properties"]) and all(conforms(value[k], schema["properties"][k])
                                                                 for k in value)
    return True


def a_cut_prefix(model, text: str, schema: dict) -> bool:
    """The text the grammar allowed so far, stopped before the document was complete (``max_new_tokens``)."""
    import xgrammar

    matcher = xgrammar.GrammarMatcher(model._grammar(schema))
    return matcher.accept_string(text) and not matcher.is_completed()


@pytest.fixture(scope="module")
def tiny():
    from far.evolve.policy_model import ModelSpec, PolicyModel

    return PolicyModel(ModelSpec(base="tiny-random", seed=4))


def requests(model, count: int) -> list[str]:  # chat prompts of different lengths: left padding
    return [model.prompt(decision_messages_for("pay the bill " * (i + 1))) for i in range(count)]


def test_generated_actions_parse_and_follow_the_schema(tiny):
    import json

    texts = tiny.generate(requests(tiny, 3), [ACTION_SCHEMA] * 3, temperature=1.0, n=4, seed=1, max_new_tokens=96)
    assert [len(row) for row in texts] == [4, 4, 4]
    finished = 0
    for text in (t for row in texts for t in row):
        try:
            data = json.loads(text)  # strict, as ``task.parse_action`` parses: no raw control character
        except json.JSONDecodeError:
            assert a_cut_prefix(tiny, text, ACTION_SCHEMA), text
            continue
        assert conforms(data, ACTION_SCHEMA), text
        if data["action"] != "call":  # written as ``task.action_text`` writes it (a number may be spelled otherwise)
            assert text == json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        finished += 1
    assert finished >= 6
    assert tiny.model.training is False  # the mode it had


def test_each_prompt_is_held_to_its_own_schema(tiny):
    import json

    only_refuse, only_ask = {"anyOf": [REFUSE]}, {"anyOf": [ASK]}
    texts = tiny.generate(requests(tiny, 3), [only_refuse, only_ask, ACTION_SCHEMA], temperature=1.0, n=3, seed=2,
                          max_new_tokens=96, chunk=4)
    for row, (kind, schema) in enumerate([("refuse", only_refuse), ("ask", only_ask), (None, ACTION_SCHEMA)]):
        for text in texts[row]:
            assert text.startswith('{"action":"' + (kind or ""))
            if not a_cut_prefix(tiny, text, schema):
                assert conforms(json.loads(text), schema)


def test_the_same_seed_gives_the_same_completions(tiny):
    prompts = requests(tiny, 2)

    def sample(seed: int):
        return tiny.generate(prompts, [ACTION_SCHEMA] * 2, temperature=1.0, n=3, seed=seed, max_new_tokens=24)

    first = sample(7)
    assert sample(7) == first and sample(8) != first
    assert len({t for row in first for t in row}) > 1  # sampled: the rows differ


def test_samples_follow_the_tempered_masked_distribution(sharp):
    # one step from one prompt: the first token of a boolean, drawn 1500 times, against softmax(masked logits / T)
    import xgrammar

    schema, temperature = {"type": "boolean"}, 0.7
    prompt = "Is the bill paid?"
    with torch.inference_mode():
        samples = sharp.generate([prompt], [schema], temperature=temperature, n=1500, seed=3, max_new_tokens=1,
                                  chunk=500)[0]
        logits = sharp.model(input_ids=torch.tensor([sharp.tokenizer(prompt, add_special_tokens=False)["input_ids"]]
                                                    )).logits[:, -1].float()
    bitmask = xgrammar.allocate_token_bitmask(1, sharp.model.config.vocab_size)
    xgrammar.GrammarMatcher(sharp._grammar(schema)).fill_next_token_bitmask(bitmask, 0)
    xgrammar.apply_token_bitmask_inplace(logits, bitmask)
    expected: dict[str, float] = {}
    for token, probability in enumerate(torch.softmax(logits[0] / temperature, dim=-1).tolist()):
        if probability > 0:
            text = sharp.tokenizer.decode([token])
            expected[text] = expected.get(text, 0.0) + probability
    assert set(samples) <= set(expected) and len(expected) > 2
    assert all(abs(samples.count(text) / len(samples) - p) < 0.04 for text, p in expected.items())


def greedy_uncached(model, prompt: str, schema: dict, max_new_tokens: int) -> str:
    """The reference: one row, every step a plain forward pass over the whole sequence, the grammar's (and the
    control tokens') mask, the most probable token."""
    import xgrammar

    matcher = xgrammar.GrammarMatcher(model._grammar(schema))
    bitmask = xgrammar.allocate_token_bitmask(1, model.model.config.vocab_size)
    ids = model.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    written: list[int] = []
    for _ in range(max_new_tokens):
        logits = model.model(input_ids=torch.tensor([ids + written])).logits[:, -1].float()
        matcher.fill_next_token_bitmask(bitmask, 0)
        xgrammar.apply_token_bitmask_inplace(logits, bitmask)
        logits.masked_fill_(model._control_tokens, float("-inf"))
        token = int(logits.argmax())
        assert matcher.accept_token(token)
        if matcher.is_terminated():
            break
        written.append(token)
    return model.tokenizer.decode(written, skip_special_tokens=True).strip()


@pytest.fixture(scope="module")
def sharp():
    """The tiny model with its base weights ×10: its random text then depends on the tokens and positions before
    it (at ×1 it repeats a token whatever came first, and would hide a wrong position or a row mixed up)."""
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", seed=4))
    with torch.no_grad():
        for name, p in model.model.named_parameters():
            if p.dim() == 2 and "lora_" not in name:
                p.mul_(10.0)
    return model


@pytest.mark.parametrize("chunk", [1, 2, 16])
def test_greedy_gives_n_equal_completions_those_of_an_uncached_decode(sharp, chunk):
    # left padding, the shared prompt cache (repeated for the n rows of a prompt), rows leaving the batch as they
    # end (a short refusal, a long question cut at max_new_tokens): each row must be what one unpadded, uncached
    # row writes. A temperature near 0 samples the same tokens through the n-row path.
    import json

    short = {"anyOf": [_object({"action": {"const": "refuse"}, "reason": {"type": "string", "maxLength": 3}})]}
    prompts, schemas = requests(sharp, 3), [short, ACTION_SCHEMA, {"anyOf": [ASK]}]
    with torch.inference_mode():
        expected = [greedy_uncached(sharp, p, s, 20) for p, s in zip(prompts, schemas)]
    assert conforms(json.loads(expected[0]), short) and a_cut_prefix(sharp, expected[2], schemas[2])  # ended, cut
    greedy = sharp.generate(prompts, schemas, temperature=0.0, n=3, max_new_tokens=20, chunk=chunk)
    assert greedy == [[e] * 3 for e in expected]
    assert sharp.generate(prompts, schemas, temperature=1e-6, n=3, max_new_tokens=20, chunk=chunk) == greedy


def test_no_prompts_generate_nothing(tiny):
    assert tiny.generate([], [], temperature=1.0, n=4) == []
    with pytest.raises(ValueError, match="one schema per prompt"):
        tiny.generate(requests(tiny, 2), [ACTION_SCHEMA], temperature=1.0)
