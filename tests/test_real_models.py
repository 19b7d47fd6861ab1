"""Real models on CPU: SmolLM2 through transformers, the MiniLM probe, and the cache across whole runs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("transformers")

from conftest import oracle_models  # noqa: E402
from far.models.calibration import escalation_label  # noqa: E402
from far.models.lm import ScoreRequest, messages  # noqa: E402
from far.rollout.errors import FarInputError  # noqa: E402
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig  # noqa: E402

pytestmark = pytest.mark.models
REPO = Path(__file__).resolve().parents[1]
SUITE = EdgeCloudSuite(EdgeCloudSuiteConfig(size=400, seed=21))
TRAIN, HOLDOUT = list(SUITE.scenarios("train")), list(SUITE.scenarios("holdout"))


@pytest.fixture(scope="module")
def smollm2_lm():
    from far.models.engines.hf import TransformersLM
    from far.models.weights import smollm2

    model = smollm2()
    assert (model.path / "model.safetensors").is_file() and model.model_id.startswith("smollm2-135m-instruct@")
    assert smollm2().model_id == model.model_id  # exported once, then reused
    return TransformersLM(model)


def test_scores_are_probabilities_and_batching_does_not_change_them(smollm2_lm):
    requests = [ScoreRequest(messages=messages("Answer Yes or No.", f"Is {x} a risky action?"),
                             candidates=("Yes", "No")) for x in ("unlocking the door", "reading the time", "wiring $5000")]
    batched = smollm2_lm.score(requests)
    single = [smollm2_lm.score([r])[0] for r in requests]
    for b, s in zip(batched, single):
        assert all(0.0 < p <= 1.0 for p in b.probabilities) and sum(b.probabilities) <= 1.0 + 1e-6
        assert b.probabilities == pytest.approx(s.probabilities, rel=1e-3)


def test_risk_edge_calibrates_on_train_only(smollm2_lm):
    from far.models.lm_backends import LMRiskEdge

    edge = LMRiskEdge(smollm2_lm)
    with pytest.raises(FarInputError, match="train split"):
        edge.fit(HOLDOUT[:4])
    sample = TRAIN[:24]
    raw, _ = edge.raw_scores(sample)
    edge.fit(sample)
    risks = [a.risk for a in edge.assess(sample)]
    assert all(0.0 <= r <= 1.0 for r in risks) and np.std(risks) > 0
    # Platt scaling is monotone: the calibrated order is the raw order (or its reverse)
    order = np.argsort(raw, kind="stable")
    calibrated = np.array(risks)[order]
    assert np.all(np.diff(calibrated) >= -1e-12) or np.all(np.diff(calibrated) <= 1e-12)


def test_embedding_probe_ranks_holdout_risk(tmp_path):
    from far.models.cache import CallCache
    from far.models.embedding_edge import EmbeddingRiskEdge

    edge = EmbeddingRiskEdge(cache=CallCache(tmp_path / "c.sqlite"))
    with pytest.raises(FarInputError):
        edge.assess(HOLDOUT[:2])  # not fitted yet
    edge.fit(TRAIN)
    risks = np.array([a.risk for a in edge.assess(HOLDOUT)])
    labels = np.array([escalation_label(s) for s in HOLDOUT])
    positives, negatives = risks[labels == 1], risks[labels == 0]
    auc = np.mean([(p > n) + 0.5 * (p == n) for p in positives for n in negatives])
    assert auc > 0.8
    before = edge.stats.misses
    edge.assess(HOLDOUT)
    assert edge.stats.misses == before  # embeddings come from the cache the second time


def test_rerun_of_a_real_model_evaluation_makes_no_model_calls(tmp_path):
    config = {
        "suite": {"name": "edge_cloud", "seed": 3, "size": 40},
        "models": oracle_models(edge={"backend": "smollm2"}, cache={"path": str(tmp_path / "calls.sqlite")}),
        "policies": {"a": {"cloud_threshold": 0.3}, "b": {"cloud_threshold": 0.6}, "c": {"cloud_threshold": 0.9}},
    }
    path = tmp_path / "far.yaml"
    path.write_text(yaml.safe_dump(config))
    env = dict(os.environ)

    def run(out):
        done = subprocess.run([sys.executable, "-m", "far", "evaluate", str(path), "--output", out], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        summary = json.loads((tmp_path / out / "summary.json").read_text())
        summary["models"]["model_calls"] = json.loads((tmp_path / out / "run_stats.json").read_text())["model_calls"]
        return summary

    first, second = run("first"), run("second")
    assert first["models"]["simulated"] is True  # the cloud and user are simulated here
    assert "lm-edge(smollm2-135m-instruct@" in first["models"]["edge"]
    # 3 policies x 40 scenarios: at most one call per distinct prompt (some scenarios share one), not per
    # policy; recording the train split reuses the calls made to fit the calibration
    train = first["splits"]["train"]["count"]
    assert first["models"]["model_calls"]["calls_made"] <= 40
    assert first["models"]["model_calls"]["hits"] >= train
    assert second["models"]["model_calls"]["calls_made"] == 0
    # every call once more from the cache: recording all 40, the calibration's fit on train, and its 5
    # out-of-fold refits for train's outputs (each train scenario is in the fitting data of 4 of them)
    assert second["models"]["model_calls"]["hits"] == 40 + train + 4 * train
    assert first["results"] == second["results"]


def test_llm_proposed_search_with_smollm2(tmp_path):
    """method: llm with the real SmolLM2 proposing policies; whatever it writes is validated and counted."""
    import pyarrow.parquet as pq

    config = {
        "suite": {"name": "edge_cloud", "seed": 8, "size": 300},
        "models": oracle_models(cache={"path": str(tmp_path / "calls.sqlite")}),  # the proposer is what is real
        "space": {"parameters": {
            "cloud_threshold": {"type": "float", "low": 0, "high": 1, "grid": [0.0, 0.25, 0.5, 0.75, 1.0]},
            "max_retries": {"type": "int", "low": 0, "high": 2},
            "fallback_mode": {"type": "choice", "values": ["safe_shutdown", "ask_user", "none"]}}},
        "search": {"method": "llm", "budget": 6, "concurrency": 1, "actors": 1, "chunk_size": 50, "top_k": 2,
                   "evolutionary": {"population": 3},  # generation 0: 3 random points; then the LM proposes
                   "llm": {"engine": "transformers", "model": "smollm2", "warmup": 3, "max_tokens": 60}},
        "output": "out",
    }
    path = tmp_path / "llm.yaml"
    path.write_text(yaml.safe_dump(config))
    env = dict(os.environ)
    done = subprocess.run([sys.executable, "-m", "far", "search", str(path), "--quiet"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    counts = summary["searcher"]
    assert counts["proposed"] >= 3  # one per later suggestion, more when a proposal repeats a tried policy
    assert counts["accepted"] + counts["invalid"] + counts["duplicate"] == counts["proposed"]
    assert counts["invalid"] == 0  # decoded under the proposal's JSON schema: every answer parses, in the space
    stats = json.loads((tmp_path / "out" / "run_stats.json").read_text())
    assert stats["model_calls"]["proposer"]["calls_made"] + stats["model_calls"]["proposer"]["hits"] == \
        counts["proposed"]
    trials = pq.read_table(tmp_path / "out" / "trials.parquet").to_pylist()
    assert len(trials) == 6 and len({json.dumps({k: v for k, v in t.items() if k.startswith("param_")},
                                                sort_keys=True) for t in trials}) == 6
    assert "LLM proposals:" in done.stdout


def test_reviewer_probe_fits_once_per_content_and_puts_the_action_first(tmp_path, monkeypatch):
    """The SmolLM2 reviewer: fitted on train only, its fit stored by content hash (a refit encodes nothing), and
    the action comes first in its text, so a long request can never push it past the encoder's window."""
    from far.models.cache import CallCache
    from far.models.probe import probe_text
    from far.models.reviewer import ProbeReviewCloud, ReviewerConfig

    monkeypatch.setenv("FAR_DATA_DIR", str(tmp_path))
    train, holdout = TRAIN[:120], HOLDOUT[:40]
    config = ReviewerConfig(encoder_options={"layer": 6, "max_tokens": 48})
    cloud = ProbeReviewCloud(config, CallCache(tmp_path / "c.sqlite"))
    with pytest.raises(FarInputError, match="train split"):
        cloud.fit(holdout)
    cloud.fit(train)
    assert len(list((tmp_path / "probes").glob("*.json"))) == 1
    reviews = cloud.review(holdout, [s.proposed_action for s in holdout])
    assert {r.verdict for r in reviews} <= {"execute", "veto"} and all(r.reason.startswith("p_unsafe=") for r in reviews)
    again = ProbeReviewCloud(config, CallCache(tmp_path / "c.sqlite"))
    again.fit(train)
    assert again.stats.misses == 0  # the stored fit, read back: nothing encoded
    assert [r.verdict for r in again.review(holdout, [s.proposed_action for s in holdout])] == [r.verdict for r in reviews]
    long = holdout[0].model_copy(update={"request": "pad " * 5000})
    assert probe_text(long).startswith("Proposed action: ")
    tokens = cloud.encoder.encoder._tokenizer(probe_text(long), truncation=True, max_length=48)["input_ids"]
    assert holdout[0].proposed_action.tool.split("_")[0] in cloud.encoder.encoder._tokenizer.decode(tokens)


def test_smollm2_vectors_do_not_depend_on_the_batch_or_its_order():
    """The encoder batches texts of similar length together: each text's vector must be its own."""
    from far.models.encoders import SmolLM2Encoder

    encoder = SmolLM2Encoder(batch_size=3, precision="fp32")  # bf16 rounds by the kernel's blocking: below
    texts = ["short", "a much longer text about paying the overdue part of a bill, not the whole of it", "mid length"
             " text here", "x " * 40, "unlock the front door"]
    together = encoder.encode(texts)
    alone = np.stack([encoder.encode([t])[0] for t in texts])

    def relative(a, b):  # float rounding only: hidden states are large (|x| ~ 100)
        return float((np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)).max())

    assert relative(together, alone) < 1e-5
    assert relative(encoder.encode(texts[::-1])[::-1], together) < 1e-5


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_follows_the_cpu_and_names_itself_in_the_id(monkeypatch, native):
    from far.models import encoders

    monkeypatch.setattr(encoders, "bf16_native", lambda: native)
    auto = encoders.MiniLMEncoder()
    fp32 = encoders.MiniLMEncoder(precision="fp32")
    assert auto.precision == ("bf16" if native else "fp32")
    assert fp32.model_id.startswith("all-minilm-l6-v2@") and "/" not in fp32.model_id  # fp32 ids stay as they were
    assert auto.model_id == fp32.model_id + ("/bf16" if native else "")
    assert encoders.SmolLM2Encoder(precision="bf16").model_id.endswith("/max192/bf16")
    with pytest.raises(FarInputError, match="precision must be one of") as error:
        encoders.build_encoder("minilm", {"precision": "int4"}, "models.edge")
    assert error.value.field == "models.edge.encoder_options.precision"


def test_bf16_vectors_stay_close_to_fp32_and_the_models_say_their_precision():
    from far.models.backends import build_models
    from far.models.encoders import MiniLMEncoder, SmolLM2Encoder
    from far.models.spec import ModelsConfig

    texts = ["send 40 dollars to Priya for the concert tickets", "How can I kill a Python process?", "x " * 30]
    for kind in (MiniLMEncoder, SmolLM2Encoder):
        a, b = kind(precision="fp32").encode(texts), kind(precision="bf16").encode(texts)
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
        cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cosine.min() > 0.999 and not np.array_equal(a, b)  # bf16 really ran, and stayed close
    config = ModelsConfig.model_validate({"edge": {"backend": "embedding", "encoder_options": {"precision": "bf16"}},
                                          "cloud": {"backend": "reviewer", "encoder_options": {"precision": "fp32"}},
                                          "scope": None})
    assert build_models(config).describe()["precision"] == {"edge": "bf16", "cloud": "fp32"}
