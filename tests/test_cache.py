import multiprocessing
import pickle

from far.models.cache import CachedLM, CallCache, call_key
from far.models.lm import GenerateRequest, GenerateResult, SamplingParams, ScoreRequest, ScoreResult, messages


class CountingLM:
    """A deterministic test engine that counts the calls reaching it."""

    model_id = "counting@0"

    def __init__(self, fault=None):
        self.calls = 0
        self.fault = fault

    def score(self, requests):
        self.calls += len(requests)
        return [ScoreResult(probabilities=(0.25, 0.5), error=self.fault) for _ in requests]

    def generate(self, requests):
        self.calls += len(requests)
        return [GenerateResult(text=r.messages[-1].content.upper(), error=self.fault) for r in requests]


def gen(text, seed=0, temperature=0.0, schema=None):
    return GenerateRequest(messages=messages("sys", text), params=SamplingParams(seed=seed, temperature=temperature),
                           json_schema=schema)


def test_key_covers_model_prompt_params_seed_and_schema():
    base = call_key("m@1", "generate", gen("hi"))
    assert len({base, call_key("m@2", "generate", gen("hi")), call_key("m@1", "generate", gen("ho")),
                call_key("m@1", "generate", gen("hi", seed=1)), call_key("m@1", "generate", gen("hi", temperature=0.5)),
                call_key("m@1", "generate", gen("hi", schema={"type": "object"})),
                call_key("m@1", "score", ScoreRequest(messages=messages("sys", "hi"), candidates=("Yes",)))}) == 7


def test_the_key_is_the_same_in_another_process():
    """The cache file outlives the process that wrote it: a key must not depend on anything a new process draws
    anew (``hash``'s salt, the order of a set, an object's id), nor on the order a dict was written in."""
    import json
    import os
    import subprocess
    import sys

    schema = {"type": "object", "properties": {"verdict": {"enum": ["execute", "veto"]}, "reason": {}}}
    code = ("from far.models.cache import call_key; from far.models.lm import GenerateRequest, SamplingParams, "
            "messages; import json, sys; schema = json.loads(sys.argv[1]); "
            "print(call_key('m@1', 'generate', GenerateRequest(messages=messages('sys', 'hi'), "
            "params=SamplingParams(seed=3, temperature=0.5), json_schema=schema)))")
    elsewhere = subprocess.run([sys.executable, "-c", code, json.dumps(schema)], capture_output=True, text=True,
                               env={**os.environ, "PYTHONHASHSEED": "12345"}, timeout=120)
    assert elsewhere.returncode == 0, elsewhere.stderr[-2000:]
    reordered = {"properties": {"reason": {}, "verdict": {"enum": ["execute", "veto"]}}, "type": "object"}
    assert elsewhere.stdout.strip() == call_key("m@1", "generate", gen("hi", seed=3, temperature=0.5,
                                                                        schema=reordered))


def test_second_pass_makes_no_calls_and_returns_the_same(tmp_path):
    lm = CountingLM()
    cached = CachedLM(lm, CallCache(tmp_path / "c.sqlite"))
    requests = [gen(f"q{i}") for i in range(20)] + [gen("q0")]  # a duplicate within the batch
    first = cached.generate(requests)
    assert lm.calls == 21 and cached.stats.misses == 21
    again = CachedLM(lm, CallCache(tmp_path / "c.sqlite"))  # a new process would see the same file
    assert again.generate(requests) == first
    assert lm.calls == 21 and again.stats.hits == 21 and again.stats.misses == 0
    scores = again.score([ScoreRequest(messages=messages("s", "x"), candidates=("Yes", "No"))])
    assert scores[0].probabilities == (0.25, 0.5) and again.stats.misses == 1


def test_transient_faults_are_not_cached_but_malformed_output_is(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    timeouts = CountingLM(fault="MODEL_TIMEOUT")
    CachedLM(timeouts, cache).generate([gen("a")])
    CachedLM(timeouts, cache).generate([gen("a")])
    assert timeouts.calls == 2
    malformed = CountingLM(fault="MALFORMED_OUTPUT")
    CachedLM(malformed, cache).generate([gen("b")])
    CachedLM(malformed, cache).generate([gen("b")])
    assert malformed.calls == 1


def _writer(args):
    path, worker = args
    cache = CallCache(path)
    for i in range(150):
        key = f"k{(i + worker * 50) % 300}"  # overlapping keys across writers
        cache.put_many([(key, f'"{key}"')])
        assert cache.get_many([key])[key] == f'"{key}"'
    return worker


def test_several_processes_share_one_cache_file(tmp_path):
    path = tmp_path / "shared.sqlite"
    CallCache(path)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        assert sorted(pool.map(_writer, [(path, w) for w in range(4)])) == [0, 1, 2, 3]
    cache = CallCache(path)
    assert len(cache) == 300
    assert cache.get_many(["k7", "k299"]) == {"k7": '"k7"', "k299": '"k299"'}


def test_cache_pickles_by_path(tmp_path):
    cache = CallCache(tmp_path / "p.sqlite")
    cache.put_many([("a", "1")])
    assert pickle.loads(pickle.dumps(cache)).get_many(["a"]) == {"a": "1"}


def test_the_key_changes_with_the_chat_template_the_tokenizer_and_the_engine(tmp_path):
    """A cached answer is only served to the same weights, tokenizer and chat template, engine and options:
    editing the template or switching engines misses."""
    import shutil

    import pytest

    pytest.importorskip("transformers")
    from far.models.engines import EngineSpec, engine_model_id
    from far.models.weights import MARKER, smollm2

    exported = smollm2().path
    folder = tmp_path / "copy"
    folder.mkdir()
    for file in exported.iterdir():  # the weights by link, the small files copied so they can be edited
        (folder / file.name).symlink_to(file) if file.suffix == ".safetensors" else shutil.copy(file, folder)
    assert (folder / MARKER).is_file()

    def identity(engine="transformers", **options):
        return engine_model_id(EngineSpec(engine=engine, model=str(folder), options=options))

    before = identity()
    assert before == identity() and before.startswith(smollm2().model_id)
    assert len({before, identity(engine="vllm"), identity(batch_size=4)}) == 3
    lm = CountingLM()
    lm.model_id = before
    cache = CallCache(tmp_path / "c.sqlite")
    CachedLM(lm, cache).generate([gen("hello")])
    CachedLM(lm, cache).generate([gen("hello")])
    assert lm.calls == 1  # same identity: served from the cache
    template = folder / "chat_template.jinja"
    template.write_text(template.read_text() + "{# edited #}")
    after = identity()
    assert after != before
    lm.model_id = after
    CachedLM(lm, cache).generate([gen("hello")])
    assert lm.calls == 2  # the edited template misses
    lm.model_id = identity(engine="vllm")
    CachedLM(lm, cache).generate([gen("hello")])
    assert lm.calls == 3  # so does another engine
    from far.models.engines.hf import TransformersLM
    from far.models.weights import local_model

    assert TransformersLM(local_model(folder)).model_id == after  # the engine reports what the key used
