"""The benchmarks' harness: what every script under bench/ shares, so that no benchmark imports another.

- ``--set KEY=YAML`` overrides of a config (``add_overrides_argument``, ``apply_overrides``, ``write_config``):
  dotted keys reach nested settings (``training.pfpo.lr=5e-5``, ``model.lora_targets=[q_proj, v_proj]``); each
  value is parsed as YAML;
- the facts of the machine a result was measured on (``machine``): the CPU's model and the flags an encoder's speed
  follows, the cores this process may use, Python's and the main packages' versions;
- result files (``read_result``, ``write_result``): JSON written atomically (``far.rollout.io.write_json_atomic``)
  and stamped with the machine, so a long run may rewrite its file after each part and keep what it measured;
- the code a result was measured with (``source_commit``): the commit and whether the tree was clean;
- ``run(main)``: a benchmark's entry point, where bad input (``FarInputError``) is one line naming the file or
  field, exit status 2, as the ``far`` command has it.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError
from far.rollout.io import load_mapping, write_json_atomic, write_text_atomic

EXIT_BAD_INPUT = 2
CPU_FLAGS = ("amx", "avx512_bf16", "avx512_vnni", "avx2")  # bf16 and int8 matrix units, wide vectors


def add_overrides_argument(parser: argparse.ArgumentParser, config: str) -> None:
    """``--set KEY=YAML`` (repeatable) on ``parser``, overriding keys of ``config`` (named in the help)."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=YAML",
                        help=f"override a key of {config} (dotted for nested: training.pfpo.lr=5e-5)")


def apply_overrides(mapping: dict[str, Any], items: Iterable[str]) -> dict[str, Any]:
    """Sets each ``KEY=YAML`` of ``items`` in ``mapping`` (in place, creating nested mappings); returns it. An item
    that is not KEY=YAML, a value that is not YAML, or a key below a setting that is not a mapping is a
    ``FarInputError`` naming ``--set``."""
    import yaml

    for item in items:
        key, equals, text = item.partition("=")
        names = key.split(".")
        if not equals or not all(name.strip() for name in names):
            raise FarInputError(f"{item!r} is not KEY=YAML (dotted for nested: training.pfpo.lr=5e-5)", field="--set")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise FarInputError(f"{key}: {text!r} is not YAML ({getattr(error, 'problem', error)})",
                                field="--set") from None
        node = mapping
        for depth, name in enumerate(names[:-1], start=1):
            node = node.setdefault(name, {})
            if not isinstance(node, dict):
                raise FarInputError(f"{key}: {'.'.join(names[:depth])} is not a mapping", field="--set")
        node[names[-1]] = value
    return mapping


def write_config(path: str | Path, source: str | Path, overrides: Sequence[str] = (), **updates: Any) -> Path:
    """The YAML config ``source`` with the ``--set`` ``overrides``, then ``updates``, applied, written to ``path``
    (the config a run read, kept beside its outputs); returns ``path``."""
    import yaml

    config = apply_overrides(load_mapping(source), overrides)
    config.update(updates)
    return write_text_atomic(path, yaml.safe_dump(config))


def cpu_info() -> dict[str, str]:
    """/proc/cpuinfo's ``key: value`` lines (every processor reports the same model and flags); empty where there
    is no such file."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {}
    return {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in lines if ":" in line)}


def usable_cores() -> int:
    """The cores this process may run on (its affinity, where the system reports one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def machine() -> dict[str, Any]:
    """The facts of the machine a result was measured on: the CPU's model and its ``CPU_FLAGS``, the cores this
    process may use (``cores``) and the machine has (``cpus``), Python's and the main packages' versions."""
    from far.search.jobs.summary import versions

    info = cpu_info()
    return {"cpu": info.get("model name") or platform.processor() or platform.machine(),
            "flags": sorted(flag for flag in info.get("flags", "").split() if flag.startswith(CPU_FLAGS)),
            "cores": usable_cores(), "cpus": os.cpu_count(), "versions": versions()}


def source_commit(root: str | Path) -> dict[str, object]:
    """The commit checked out at ``root`` and whether its tracked files are unchanged (``clean``)."""
    import subprocess

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True).stdout.strip()
    return {"commit": head, "clean": not dirty}


def read_result(path: str | Path) -> dict[str, Any]:
    """The result file at ``path`` as far as it was written (a run that resumes adds to it); empty when there is
    none yet. A file that is not a JSON mapping is a ``FarInputError`` naming it."""
    return load_mapping(path) if Path(path).is_file() else {}


def write_result(path: str | Path, result: dict[str, Any]) -> Path:
    """``result`` as JSON at ``path``, atomically (readers see the old file or the new one), with the ``machine``
    it was measured on."""
    return write_json_atomic(path, {**result, "machine": machine()})


def run(main: Callable[[], int | None]) -> None:
    """A benchmark's entry point: exits with ``main``'s status; bad input is one line naming the file or field,
    exit status 2."""
    try:
        status = main()
    except FarInputError as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    raise SystemExit(status)
