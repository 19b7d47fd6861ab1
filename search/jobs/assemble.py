"""A run assembled from its config: the verifier, the model host and the Evaluator.

The one place each is built, for the jobs, the service, FATE and the benches alike.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from far.search.evaluation.evaluate import Evaluator
from far.search.jobs.config import RunConfig, fit_suites, reward_table
from far.verifiers.ensemble import EnsembleConfig, LLMJudgeConfig, build_verifier
from far.verifiers.taxonomy import RewardTable

Progress = Callable[[str], None]  # one line of progress (the CLI prints it to stderr)


def run_verifier(verifier: EnsembleConfig, rewards: RewardTable, *, cache: Any = None, host: Any = None,
                 models: Any = None) -> Any:
    """The run's verifier: the remote endpoint when ``verifier.endpoint`` names one, else the rule verifier or
    the configured ensemble (its LLM judge built like the model backends: hosted by ``host``, behind the
    model-call ``cache`` config; ``models``: the run's, for members that read them)."""
    if verifier.endpoint:
        from far.verifiers.remote import http_verifier

        return http_verifier(verifier.endpoint, verifier.token_env, rewards)
    from far.models.backends import build_lm

    def judge_lm(judge: LLMJudgeConfig) -> Any:
        return build_lm(judge.lm_options(), host, cache)

    return build_verifier(verifier, rewards, judge_lm, models)


def model_host(config: RunConfig, *, always: bool = False) -> Any:
    """A RayHost when a model or the LLM judge runs on an actor (or ``always``); None when everything runs in
    this process. The host starts no actor (nor Ray) until a model call misses the cache."""
    judge_on_actor = "llm_judge" in config.verifier.members and config.verifier.llm_judge.actor
    if not (always or config.models.uses_actors() or judge_on_actor):
        return None
    from far.cluster.hosting import RayHost

    return RayHost()


def build_evaluator(config: RunConfig, *, suite: Any = None, base_dir: Path | None = None,
                    source: str | Path = "config", rewards: RewardTable | None = None,
                    fit_on: dict[str, Any] | None = None, models: Any = None, host: Any = None,
                    progress: Progress | None = None) -> Evaluator:
    """An Evaluator for ``config``: its suite (or ``suite``, built already), its models hosted by ``host``
    (or ``models``), its verifier, the suites its learned models are fitted on (``fit_on``, built from the
    config unless given) and the shift encoder. Relative paths resolve against ``base_dir``."""
    from far.models.backends import build_models
    from far.search.evaluation.shift import shift_encoder
    from far.suites import build_suite

    if suite is None:
        suite = build_suite(config.suite, base_dir)
    if rewards is None:
        rewards = reward_table(config, base_dir)
    if fit_on is None:
        fit_on = fit_suites(config.models, base_dir, source, config.suite)
    if models is None:
        models = build_models(config.models, host, base_dir)
    verifier = run_verifier(config.verifier, rewards, cache=config.models.cache, host=host, models=models)
    return Evaluator(suite, models, verifier, config.costs, config.engine, config.gate.confidence,
                     progress=progress, fit_on=fit_on, shift_encoder=shift_encoder(config.models))
