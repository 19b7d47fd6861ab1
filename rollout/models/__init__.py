"""Model backends: oracle (label-reading) and real edge/cloud/user models, LM engines (transformers, vLLM, HTTP), local
weights and the persistent model-call cache; the backend tables are in ``rollout.models.backends``.

May import rollout's core (scenario, calls, errors, io, seeding, registry); never rollout.suites, verifiers
or anything above. A backend module never imports the tables that name it.
"""

# Old module paths (before the suites/ and models/ layout) -> new ones; see rollout.moved.
MOVED = {
    "rollout.backends": "rollout.models.backends",
    "rollout.simulated": "rollout.models.oracle",
    "rollout.models.simulated": "rollout.models.oracle",
    "rollout.lm": "rollout.models.lm",
    "rollout.lm_backends": "rollout.models.lm_backends",
    "rollout.embedding_edge": "rollout.models.embedding_edge",
    "rollout.calibration": "rollout.models.calibration",
    "rollout.cache": "rollout.models.cache",
    "rollout.weights": "rollout.models.weights",
    "rollout.engines": "rollout.models.engines",
    "rollout.engines.hf": "rollout.models.engines.hf",
    "rollout.engines.openai_http": "rollout.models.engines.openai_http",
    "rollout.engines.vllm_engine": "rollout.models.engines.vllm_engine",
}

# What the old ``rollout.models`` module held now lives in ``rollout.calls``.
_CALLS_NAMES = frozenset({
    "Verdict", "ActionRole", "MAX_RECORDED_MODEL_ATTEMPTS", "EdgeAssessment", "CloudReview", "Fittable",
    "EdgeModel", "CloudModel", "UserModel", "Environment", "GroundTruthEnvironment", "ModelRecord", "Calls",
    "RecordedCalls", "LiveCalls", "ModelSet",
})


def __getattr__(name: str):
    if name in _CALLS_NAMES:
        import warnings

        import rollout.calls

        warnings.warn(f"rollout.models.{name} moved to rollout.calls.{name}", DeprecationWarning, stacklevel=2)
        return getattr(rollout.calls, name)
    raise AttributeError(f"module 'rollout.models' has no attribute {name!r}")
