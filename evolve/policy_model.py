"""π_t: a causal LM with a LoRA adapter (peft), in plain torch on CPU: the probability of an option or a prefix,
generation under a JSON schema (xgrammar), completion log-probs, SFT on completions only. Torch runs with one
thread (2 threads made a training step ~9x slower on these 2-core machines)."""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from far.models.lm import Message
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

os.environ.setdefault("OMP_NUM_THREADS", "1")


# the linear layers of Llama-style decoders (SmolLM2, Qwen2, Mistral, Gemma): what ``lora_targets`` may name there
DECODER_LINEARS = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
LLAMA_STYLE = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"})


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    base: str = Field("smollm2", description="smollm2, a path to a HF folder, or tiny-random (tests)")
    lora_r: int = Field(8, ge=1)
    lora_alpha: int = Field(16, ge=1)
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    lora_targets: tuple[str, ...] = Field(("q_proj", "v_proj"), min_length=1, description="the linear layers "
                                          "the adapter wraps (names of the base model's modules)")
    seed: int = 0

    @field_validator("base")
    @classmethod
    def _known_base(cls, base: str) -> str:
        """Checked at load, with no network: a named model, or a local Hugging Face folder (never a hub id)."""
        if base in ("smollm2", "tiny-random"):
            return base
        folder = Path(base).expanduser()
        if not (folder / "config.json").is_file():
            raise ValueError(f"{base!r} is neither smollm2 (or tiny-random) nor a local Hugging Face model folder "
                             "(with a config.json); models are never downloaded")
        return base

    @field_validator("lora_targets")
    @classmethod
    def _known_targets(cls, targets: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """Checked at load where the architecture is known (others fail when the adapter is built)."""
        base = info.data.get("base")
        if base is None:  # the base itself was refused: that error is the one to read
            return targets
        if base in ("smollm2", "tiny-random"):
            style = "llama"
        else:
            style = json.loads((Path(base).expanduser() / "config.json").read_text()).get("model_type", "")
        unknown = sorted(set(targets) - DECODER_LINEARS)
        if style in LLAMA_STYLE and unknown:
            raise ValueError(f"{unknown} are not linear layers of a {style} model: choose among "
                             f"{sorted(DECODER_LINEARS)}")
        return targets


def _base_folder(base: str) -> Path:
    if base in ("smollm2", "tiny-random"):
        from far.models.weights import smollm2

        return smollm2().path
    return Path(base).expanduser()


class PolicyModel:
    def __init__(self, spec: ModelSpec) -> None:
        import torch
        from far.models.weights import offline
        from peft import LoraConfig, get_peft_model
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        offline()
        torch.set_num_threads(1)
        torch.manual_seed(spec.seed)
        self.torch = torch
        self.spec = spec
        folder = _base_folder(spec.base)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if spec.base == "tiny-random":  # same tokenizer and architecture, 2 small random layers: for tests
            config = AutoConfig.from_pretrained(folder)
            config.update({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16})
            base = AutoModelForCausalLM.from_config(config)
        else:
            base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        lora = LoraConfig(r=spec.lora_r, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
                          target_modules=list(spec.lora_targets), task_type="CAUSAL_LM")
        # a GPU when there is one (the same code trains a larger model there), else the CPU
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = get_peft_model(base, lora).to(self.device)
        self.model.eval()
        self._grammar_compiler: Any = None
        self._grammars: dict[str, Any] = {}
        self._control_tokens: Any = None

    # --- text ----------------------------------------------------------------------------------------------
    def prompt(self, messages: Sequence[Message]) -> str:
        return self.tokenizer.apply_chat_template([m.model_dump() for m in messages], tokenize=False,
                                                  add_generation_prompt=True)

    def generate(self, prompts: Sequence[str], schemas: Sequence[dict], temperature: float, n: int = 1,
                 seed: int = 0, max_new_tokens: int = 96, chunk: int = 64) -> list[list[str]]:
        """``n`` completions per prompt from π (the adapter on) under that prompt's JSON schema (``schemas[i]``):
        at each step xgrammar masks every token that would not keep the text a prefix of a conforming JSON
        document, written compact in the schema's key order (as ``task.action_text`` writes an action), so a
        completion parses unless it runs out of ``max_new_tokens`` (its prefix is returned: malformed). At
        ``temperature`` 0 the most probable token (the n completions are one, repeated), else a sample of
        softmax(logits / temperature) from a generator seeded with ``seed``: the same call gives the same texts.
        The prompts × n rows run ``chunk`` at a time: each prompt of a chunk runs once (``_prompt_pass``) and its
        key/value cache is shared by its rows there; a finished row leaves the batch."""
        torch = self.torch
        if len(schemas) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(schemas)} schemas: one schema per prompt")
        grammars = [self._grammar(schema) for schema in schemas]
        copies = min(n, 1) if temperature <= 0 else n
        if not prompts or copies == 0:
            return [[] for _ in prompts]
        generator = torch.Generator(device=self.device).manual_seed(seed)
        rows = [i for i in range(len(prompts)) for _ in range(copies)]  # row r: a completion of prompts[rows[r]]
        texts: list[str] = []
        with torch.inference_mode():
            for start in range(0, len(rows), chunk):
                part = rows[start:start + chunk]
                first, last = part[0], part[-1] + 1
                texts += self._decode(prompts[first:last], grammars[first:last], [r - first for r in part],
                                      temperature, generator, max_new_tokens)
        if copies == 1:
            return [[text] * n for text in texts]
        return [texts[i * copies:(i + 1) * copies] for i in range(len(prompts))]

    def _grammar(self, schema: dict) -> Any:
        """The schema's compiled grammar (kept per schema). Compact separators, the schema's own key order (the
        key is not sorted: the order of ``properties`` is the order the model writes)."""
        import xgrammar

        if self._grammar_compiler is None:
            info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.model.config.vocab_size)
            self._grammar_compiler = xgrammar.GrammarCompiler(info)
            # compact JSON never holds a raw control character, but xgrammar's string of bounded length
            # (maxLength) admits all but \r and \n, which json.loads refuses: those tokens are never written
            control = [any(byte < 0x20 for byte in token) for token in info.decoded_vocab]
            self._control_tokens = self.torch.tensor(control, device=self.device)
        key = json.dumps(schema)
        if key not in self._grammars:
            self._grammars[key] = self._grammar_compiler.compile_json_schema(
                key, strict_mode=True, any_whitespace=False, separators=(",", ":"))
        return self._grammars[key]

    def _decode(self, prompts: Sequence[str], grammars: Sequence[Any], rows: Sequence[int], temperature: float,
                generator, max_new_tokens: int) -> list[str]:
        """A grammar-constrained completion per row, row r one of ``prompts[rows[r]]`` under ``grammars[rows[r]]``:
        one matcher per row, one model step per token for the rows still writing (EOS, which the grammar allows
        only once the document is complete, ends a row)."""
        import xgrammar

        torch = self.torch
        out, attention, positions = self._prompt_pass(
            [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts])
        cache = out.past_key_values
        index = torch.tensor(rows, device=self.device)
        cache.batch_select_indices(index)  # each prompt's cache, once per row of it
        logits, attention, positions = out.logits[:, -1].float()[index], attention[index], positions[index]
        position = positions[:, -1:]
        matchers = [xgrammar.GrammarMatcher(grammars[r]) for r in rows]
        bitmask = xgrammar.allocate_token_bitmask(len(matchers), self.model.config.vocab_size)
        tokens: list[list[int]] = [[] for _ in matchers]
        live = list(range(len(matchers)))  # the rows still writing, in the batch's order
        for step in range(max_new_tokens):
            for place, row in enumerate(live):
                matchers[row].fill_next_token_bitmask(bitmask, place)
            xgrammar.apply_token_bitmask_inplace(logits, bitmask[:len(live)].to(logits.device))
            logits.masked_fill_(self._control_tokens, float("-inf"))
            if temperature <= 0:
                picks = logits.argmax(dim=-1)
            else:  # one uniform per row through the cumulative distribution (multinomial draws one per token of
                # the vocabulary: 20 ms a step for 16 rows on one CPU thread); masked tokens add 0: never drawn
                cumulative = torch.softmax(logits / temperature, dim=-1).cumsum(dim=-1)
                uniform = 1 - torch.rand(len(live), 1, generator=generator, device=self.device)  # in (0, 1]
                picks = torch.searchsorted(cumulative, uniform * cumulative[:, -1:]).squeeze(-1)
                picks = picks.clamp(max=cumulative.shape[-1] - 1)
            kept = []
            for place, (row, token) in enumerate(zip(live, picks.tolist())):
                if not matchers[row].accept_token(token):
                    raise RuntimeError(f"the grammar refused token {token} it allowed")
                if not matchers[row].is_terminated():  # EOS accepted: the row is done
                    tokens[row].append(token)
                    kept.append(place)
            if not kept or step == max_new_tokens - 1:
                break
            if len(kept) < len(live):
                index = torch.tensor(kept, device=self.device)
                cache.batch_select_indices(index)
                attention, position, picks = attention[index], position[index], picks[index]
                live = [live[place] for place in kept]
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
            position = position + 1
            out = self.model(input_ids=picks.unsqueeze(-1), attention_mask=attention, position_ids=position,
                             past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1].float()
        return [self.tokenizer.decode(t, skip_special_tokens=True).strip() for t in tokens]

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str], chunk: int = 64,
                        complete: bool = True):
        """log π(option | prompt) for every (prompt, option): shape [len(prompts), len(options)]; ``complete``:
        each option is a whole completion (its EOS scored), else the start of one (the probability of its tokens
        as the tokenizer splits it alone: where a completion merges its last token with what follows, say `"`
        into `",`, this approximates the probability that a completion begins with that text). Each prompt runs through the model once and its key/value cache is shared
        by the options (a few tokens each): the options differ only after the prompt, and a full pass per
        option would cost that many times as much. A pass holds at most ``chunk`` (prompt, option) rows, at least
        one prompt: each row holds a copy of its prompt's cache."""
        torch = self.torch
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        end = [eos] if complete else []
        option_rows = [self.tokenizer(o, add_special_tokens=False)["input_ids"] + end for o in options]
        if not all(option_rows):
            raise ValueError("an empty option: every option has at least one token")
        width, n = max(len(r) for r in option_rows), len(options)
        option_ids = torch.tensor([r + [pad] * (width - len(r)) for r in option_rows], device=self.device)
        option_mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in option_rows],
                                   device=self.device)
        totals = []
        per_pass = max(1, chunk // n)
        for start in range(0, len(prompts), per_pass):
            rows = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts[start:start + per_pass]]
            out, attention, positions = self._prompt_pass(rows)
            b = len(rows)
            targets = option_ids.repeat(b, 1)  # row i*n + o: prompt i, option o
            first = torch.log_softmax(out.logits[:, -1].float(), dim=-1).repeat_interleave(n, dim=0)
            logp = [first.gather(-1, targets[:, :1])]
            if width > 1:  # the options' later tokens, after the cached prompt (padding follows them: causal)
                cache = out.past_key_values
                cache.batch_repeat_interleave(n)
                follow = self.model(input_ids=targets[:, :-1],
                                    attention_mask=torch.cat([attention.repeat_interleave(n, dim=0),
                                                              torch.ones_like(targets[:, :-1])], dim=1),
                                    position_ids=positions[:, -1:].repeat_interleave(n, dim=0)
                                    + torch.arange(1, width, device=self.device),
                                    past_key_values=cache, use_cache=False)
                later = torch.log_softmax(follow.logits.float(), dim=-1)
                logp.append(later.gather(-1, targets[:, 1:].unsqueeze(-1)).squeeze(-1))
            totals.append((torch.cat(logp, dim=1) * option_mask.repeat(b, 1)).sum(dim=-1).view(b, n))
        return torch.cat(totals) if totals else torch.zeros(0, n, device=self.device)  # no prompt: no row

    def _prompt_pass(self, rows: Sequence[list[int]], keep: int = 1):
        """One cached pass over token rows, the logits of each row's last ``keep`` positions kept: the rows'
        common prefix (the system prompt, with a chat template) runs once, then the rest of each row, left-padded
        after it (the padding is masked; positions count real tokens only). With gradients on, the prefix's
        gradient is summed over the rows. Returns the output, the attention mask and the position ids."""
        torch = self.torch
        common = 0
        shortest = min(len(r) for r in rows)
        while common < shortest - keep and all(r[common] == rows[0][common] for r in rows):
            common += 1
        cache = None
        if common:
            cache = self.model(input_ids=torch.tensor([rows[0][:common]], device=self.device),
                               use_cache=True, logits_to_keep=1).past_key_values
            cache.batch_repeat_interleave(len(rows))
        rest = [r[common:] for r in rows]
        length, pad = max(len(r) for r in rest), self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (length - len(r)) + r for r in rest], device=self.device)
        mask = torch.tensor([[0] * (length - len(r)) + [1] * len(r) for r in rest], device=self.device)
        positions = common + (mask.cumsum(-1) - 1).clamp(min=0)
        attention = torch.cat([torch.ones(len(rows), common, dtype=mask.dtype, device=self.device), mask], dim=1)
        out = self.model(input_ids=ids, attention_mask=attention, position_ids=positions, past_key_values=cache,
                         use_cache=True, logits_to_keep=keep)
        return out, attention, positions

    def completion_logprobs(self, prompts: Sequence[str], completions: Sequence[str], reference: bool = False):
        """log π(token | everything before it) for each completion's tokens and EOS, right-aligned: [B, k], k
        the longest completion with its EOS, and the mask of those tokens ([B, k]). Only the last k + 1
        positions' logits are computed (the full vocabulary at every prompt position would cost gigabytes), and
        the prompts' common prefix runs once (``_prompt_pass``). ``reference``: the base model, adapter off."""
        torch = self.torch
        eos = self.tokenizer.eos_token_id
        rows, lengths = [], []
        for prompt, completion in zip(prompts, completions, strict=True):
            completion_ids = self.tokenizer(completion, add_special_tokens=False)["input_ids"] + [eos]
            rows.append(self.tokenizer(prompt, add_special_tokens=False)["input_ids"] + completion_ids)
            lengths.append(len(completion_ids))
        k = max(lengths)
        if reference:
            with self.model.disable_adapter():
                out, _, _ = self._prompt_pass(rows, keep=k + 1)
        else:
            out, _, _ = self._prompt_pass(rows, keep=k + 1)
        pad = self.tokenizer.pad_token_id  # a row shorter than k (a tiny prompt) is padded on the left, masked
        targets = torch.tensor([[pad] * (k - len(r[-k:])) + r[-k:] for r in rows], device=self.device)
        mask = torch.tensor([[0.0] * (k - n) + [1.0] * n for n in lengths], device=self.device)
        logp = torch.log_softmax(out.logits[:, :-1, :].float(), dim=-1)
        return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), mask

    # --- training ------------------------------------------------------------------------------------------
    def optimizer(self, lr: float):
        params = [p for p in self.model.parameters() if p.requires_grad]
        return self.torch.optim.AdamW(params, lr=lr)

    def sft(self, prompts: Sequence[str], completions: Sequence[str], epochs: int, lr: float,
            batch_size: int = 8, max_epochs: int | None = None, learned: Callable[[], bool] | None = None,
            seed: int | None = None) -> list[float]:
        """LoRA SFT, loss on the completion tokens only (the prompt is masked). Returns the loss per step.
        After ``epochs`` passes, further passes up to ``max_epochs`` run while ``learned()`` (called with the
        model in eval mode) is false. ``seed`` orders the batches (None: the model's seed)."""
        from far.evolve.objectives import masked_mean

        torch = self.torch
        optimizer = self.optimizer(lr)
        losses = []
        self.model.train()
        order = list(range(len(prompts)))
        generator = torch.Generator().manual_seed(self.spec.seed if seed is None else seed)
        epoch = 0
        while epoch < epochs or (learned is not None and epoch < (max_epochs or epochs) and not self._eval(learned)):
            epoch += 1
            shuffled = [order[i] for i in torch.randperm(len(order), generator=generator).tolist()]
            for start in range(0, len(shuffled), batch_size):
                chosen = shuffled[start:start + batch_size]
                logp, completion_mask = self.completion_logprobs([prompts[i] for i in chosen],
                                                                 [completions[i] for i in chosen])
                loss = -masked_mean(logp, completion_mask)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
        self.model.eval()
        return losses

    def _eval(self, check: Callable[[], Any]) -> Any:
        self.model.eval()
        try:
            return check()
        finally:
            self.model.train()

    def snapshot(self) -> dict:
        """The trainable (adapter) weights, copied: ``restore`` puts them back (a rolled-back round)."""
        return {name: p.detach().clone() for name, p in self.model.named_parameters() if p.requires_grad}

    def digest(self) -> str:
        """A digest of the trainable (adapter) weights: equal digests, equal models."""
        import hashlib

        sha = hashlib.sha1()
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                sha.update(name.encode())
                sha.update(p.detach().cpu().contiguous().numpy().tobytes())
        return sha.hexdigest()

    def restore(self, snapshot: dict) -> None:
        with self.torch.no_grad():
            for name, p in self.model.named_parameters():
                if name in snapshot:
                    p.copy_(snapshot[name])

    def save(self, path: Path) -> None:
        self.model.save_pretrained(path)

    def load_adapter(self, path: Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(self.model, load_file(str(Path(path) / "adapter_model.safetensors")))
