"""``--set KEY=YAML`` for the bench scripts: dotted keys reach nested settings (``pfpo.lr=5e-5``,
``model.lora_targets=[q_proj, v_proj]``); each value is parsed as YAML."""
from __future__ import annotations

from collections.abc import Iterable


def apply_overrides(mapping: dict, items: Iterable[str]) -> dict:
    """Sets each ``KEY=YAML`` of ``items`` in ``mapping`` (in place, creating nested mappings); returns it."""
    import yaml

    for item in items:
        key, _, value = item.partition("=")
        *parents, leaf = key.split(".")
        node = mapping
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = yaml.safe_load(value)
    return mapping
