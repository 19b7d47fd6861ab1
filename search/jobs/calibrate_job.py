"""``far calibrate CONFIG``: the config's real edge and cloud measured on train (out of fold), written as the
calibration file the ``calibrated`` backends read (``far.search.evaluation.calibrate``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError
from far.search.jobs.assemble import Progress
from far.search.jobs.config import (
    LoadedRunConfig,
    check_fit_data,
    load_fit_suites,
    load_run_config,
    load_suite,
)


def run_calibrate(config: str | Path, output: str | Path, *, folds: int = 5, confidence: float = 0.95,
                  progress: Progress | None = None) -> tuple[Any, str]:
    """``far calibrate``: measure the config's real edge and cloud on train (out-of-fold) and write the
    calibration file the ``calibrated`` backends read. Returns the calibration and its table."""
    from far.models.backends import build_models
    from far.rollout.io import write_json_atomic
    from far.search.evaluation.calibrate import calibrate, calibration_table

    if folds < 2:
        raise FarInputError("needs at least 2 folds", field="--folds")
    if not 0.0 < confidence < 1.0:
        raise FarInputError("must be in (0, 1)", field="--confidence")
    output = Path(output)
    if output.is_dir() or not output.parent.is_dir():
        raise FarInputError("must be a file in an existing directory", file=output, field="--output")
    loaded: LoadedRunConfig = load_run_config(config)
    run_config = loaded.config
    if run_config.models.uses_actors():
        raise FarInputError("far calibrate runs its models in this process: set actor: false", file=loaded.source,
                            field="models")
    suite = load_suite(loaded)
    fit_on = load_fit_suites(loaded)
    check_fit_data(run_config.models, loaded.source, suite, fit_on, "calibrate")
    models = build_models(run_config.models, None, loaded.base_dir)
    calibration = calibrate(suite, models, folds, confidence, progress, fit_on)
    write_json_atomic(output, calibration.model_dump(mode="json"))
    return calibration, calibration_table(calibration)
