"""A learned backend's fitted state as a file in the data dir, named by the content hash of its fit: what a
policy file records of its models, and what a runtime guard restores them from.

Probes (the MiniLM edge, the SmolLM2 reviewer) keep ``probes/<fit key>.json``; the tool-scope model keeps
``scope/<fit key>.pkl``. ``fitted_state`` names a fitted model's file and its SHA-256; ``restore`` loads it into
a freshly built model of the same backend, after checking that hash and, for a probe, that the model encodes
with the encoder it was fitted on (the precision may differ: a guard fitted on a host with bf16 runs in fp32 on
one without, its vectors within a cosine of ~3e-5).
"""
from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
from far.models.encoders import without_precision
from far.rollout.errors import FarInputError
from far.rollout.io import data_dir


def _file_of(model: Any) -> Path | None:
    probe = getattr(model, "probe", None)
    if probe is not None and getattr(probe, "fit_key", None):
        return data_dir() / "probes" / f"{probe.fit_key}.json"
    if getattr(model, "fit_key", None) and hasattr(model, "tools"):
        return data_dir() / "scope" / f"{model.fit_key}.pkl"
    return None


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fitted_state(model: Any) -> dict[str, str] | None:
    """``{"file": <path under the data dir>, "sha256": ...}`` of a fitted learned model; None for a model that
    learns nothing (or was not fitted here)."""
    path = _file_of(model)
    if path is None or not path.is_file():
        return None
    return {"file": str(path.relative_to(data_dir())), "sha256": sha256_of(path)}


def restore(model: Any, state: dict[str, str], where: str) -> None:
    """Load a fitted state into ``model`` (built from the same backend config); a missing file or a hash that
    differs is a ``FarInputError`` naming ``where``."""
    path = data_dir() / state["file"]
    if not path.is_file():
        raise FarInputError(f"fitted state {state['file']} is not in the data dir ({data_dir()}): fit it here "
                            "(far search with the same config) or copy the file", field=where)
    if sha256_of(path) != state["sha256"]:
        raise FarInputError(f"fitted state {state['file']} does not match its hash in the policy file", field=where)
    if path.suffix == ".json":
        probe = getattr(model, "probe", None)
        if probe is None:
            raise FarInputError(f"a probe state for a backend without a probe ({type(model).__name__})", field=where)
        data = json.loads(path.read_text())
        stored, current = data.get("encoder", ""), getattr(model, "model_id", "")
        if stored and current and without_precision(stored) != without_precision(current):
            raise FarInputError(f"fitted state {state['file']} was fitted on encoder {stored}; this model encodes "
                                f"with {current}", field=where)
        probe.mean, probe.scale = np.asarray(data["mean"]), np.asarray(data["scale"])
        probe.coef, probe.intercept, probe.fit_key = np.asarray(data["coef"]), float(data["intercept"]), path.stem
    else:
        if not hasattr(model, "tools"):
            raise FarInputError(f"a tool-scope state for another backend ({type(model).__name__})", field=where)
        with path.open("rb") as file:  # FAR's own cache file, checked against the policy file's hash above
            model._model, model.tools = pickle.load(file)
        model.fit_key = path.stem
