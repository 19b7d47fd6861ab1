"""The LLM judge member with a real model (SmolLM2 through transformers): every answer parses or abstains."""
from __future__ import annotations

import pytest
from conftest import oracle_models

pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("transformers")

from far.models.backends import LMOptions, ModelsConfig, build_lm, build_models  # noqa: E402
from far.rollout.policy import Policy  # noqa: E402
from far.search.evaluation.evaluate import Evaluator  # noqa: E402
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig  # noqa: E402
from far.verifiers.ensemble import EnsembleVerifier  # noqa: E402
from far.verifiers.members import LLMJudgeMember  # noqa: E402
from far.verifiers.rules import RuleVerifier  # noqa: E402


def test_llm_judge_scores_or_abstains_and_the_ensemble_reports_it(tmp_path):
    lm = build_lm(LMOptions(engine="transformers", model="smollm2"), cache=None)
    judge = LLMJudgeMember(lm)
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=40, seed=2))
    evaluator = Evaluator(suite, build_models(ModelsConfig.model_validate(oracle_models(cache={"enabled": False}))),
                          RuleVerifier())
    scenarios = list(evaluator.scenarios("train"))[:3]
    trajectories = evaluator.rollouts(Policy(cloud_threshold=1.0, require_confirmation=False), "train")[:3]
    assessments = judge.assess(scenarios, trajectories)
    assert len(assessments) == 3
    for assessment in assessments:
        for score, confidence in zip(assessment.z, assessment.confidence):
            assert score in (0.0, 1.0, None)
            assert confidence == (0.0 if score is None else 1.0)  # an abstention carries no weight
    ensemble = EnsembleVerifier(RuleVerifier(), [judge], aggregation="min")
    for verdict in ensemble.verify_many(scenarios, trajectories):
        assert set(verdict.breakdown["members"]) == {"rules", "llm_judge"}
