"""AgentDojo's objects, loaded once per process: task suites, and fresh copies of their environments with a
scenario's injections."""
from __future__ import annotations

import functools
import json
from collections import OrderedDict
from typing import Any

from far.rollout.errors import FarInputError


@functools.lru_cache(maxsize=None)
def load_task_suite(version: str, name: str):
    from agentdojo.task_suite.load_suites import get_suite

    suite = get_suite(version, name)
    # AgentDojo parses the environment YAML in pure Python on every load (~200 ms for workspace); the same
    # computation with the C loader takes ~35 ms. Shadow the method on this instance (attacks call it too).
    suite.load_and_inject_default_environment = functools.partial(_load_environment, version, name)
    return suite


@functools.lru_cache(maxsize=None)
def _environment_template(version: str, name: str) -> tuple[str, dict[str, str]]:
    from agentdojo.task_suite.load_suites import get_suite
    from agentdojo.task_suite.task_suite import read_suite_file

    suite = get_suite(version, name)
    return read_suite_file(suite.name, "environment.yaml", suite.data_path), suite.get_injection_vector_defaults()


def _load_environment(version: str, name: str, injections: dict[str, str]):
    import yaml

    template, defaults = _environment_template(version, name)
    unknown = set(injections) - set(defaults)
    if unknown:
        raise FarInputError(f"unknown injection vector(s) {sorted(unknown)} for AgentDojo suite {name!r}",
                            field="environment.injections")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(template.format(**{**defaults, **injections}), Loader=loader)
    return load_task_suite(version, name).environment_type.model_validate(data)


_ENVIRONMENTS: OrderedDict[str, Any] = OrderedDict()
ENVIRONMENT_CACHE_SIZE = 64


def injected_environment(version: str, name: str, injections: dict[str, str]):
    """A fresh copy of the suite's environment with these injections: parsed once per process (LRU), then
    deep-copied per run (~2 ms) so no run sees another's changes."""
    key = json.dumps([version, name, injections], sort_keys=True)
    pristine = _ENVIRONMENTS.get(key)
    if pristine is None:
        pristine = _load_environment(version, name, injections)
        _ENVIRONMENTS[key] = pristine
        if len(_ENVIRONMENTS) > ENVIRONMENT_CACHE_SIZE:
            _ENVIRONMENTS.popitem(last=False)
    else:
        _ENVIRONMENTS.move_to_end(key)
    return pristine.model_copy(deep=True)
