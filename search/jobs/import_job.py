"""``far import-scenarios FILE``: logged agent runs or scenarios (JSONL) to a Parquet scenario file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError
from far.search.jobs.assemble import Progress


def import_scenarios(file: str | Path, output: str | Path, *, suite: str | None = None, seed: int = 0,
                     holdout_fraction: float = 0.3, eval_only: bool = False,
                     progress: Progress | None = None) -> Any:
    """``far import-scenarios``: a JSONL file of scenarios to Parquet (malformed lines are skipped and listed in
    the answer's ``errors``; a file with no valid line is an error). Returns the import."""
    from far.rollout.scenario import save_scenarios
    from far.suites.imported import import_jsonl

    output = Path(output)
    if output.is_dir() or not output.parent.is_dir():
        raise FarInputError("must be a file in an existing directory", file=output, field="--output")
    imported = import_jsonl(file, suite=suite, seed=seed, holdout_fraction=holdout_fraction, eval_only=eval_only,
                            progress=progress)
    if progress is not None:
        for error in imported.errors:
            progress(f"far: skipped {error}")
    if not imported.scenarios:
        raise FarInputError("no valid scenario in the file", file=file)
    save_scenarios(output, imported.scenarios)
    return imported
