"""FATE's settings (``far.evolve.config``): bad settings, and settings that no longer exist, refused in one line before
anything loads; the shipped config is the code's default, κ differs per task mode, and docs/evolve.md names every
setting."""
from __future__ import annotations

import pytest
from far.evolve.config import EvolveConfig


@pytest.mark.parametrize("line, field", [
    ("selection: {kappa: {executable: [1.0, 1.5, 1.0, 1.0]}}", "selection.kappa"),
    ("selection: {kappa: {diagnostic: [1.0, 1.0, -0.5, 1.0]}}", "selection.kappa"),
    ("selection: {kappa: {executable: [.nan, 1.0, 1.0, 1.0]}}", "selection.kappa"),
    ("selection: {kappa: {executable: [1.0, 1.0, 1.0]}}", "selection.kappa"),
    ("selection: {kappa: auto}", "selection.kappa"),
    ("selection: {weights: [1.0, -1.0, 1.0, 1.0]}", "selection.weights"),
    ("selection: {weights: [1.0, .inf, 1.0, 1.0]}", "selection.weights"),
    ("selection: {lam: .nan}", "selection.lam"),
    ("repair: {candidates: 0}", "repair.candidates"),
    ("repair: {temperature_min: 1.0, temperature_max: 0.5}", "repair"),
    ("training: {sft: {epochs: 3, max_epochs: 2}}", "training.sft"),
    ("training: {pfpo: {reference: base}}", "training.pfpo.reference"),
    ("repair: {max_new_tokens: 4}", "repair.max_new_tokens"),
    ("order_seed: many", "order_seed"),
    ("dev_size: 32", "dev_size"),  # a setting outside its group
    ("supervise_on: decision", "supervise_on"),  # settings that no longer exist
    ("calibration: {harm_bar: kept}", "calibration"),  # the caution calibration is gone with the decision head
    ("repair: {exploration: 0.5}", "repair.exploration"),  # repairs are on-policy only
    ("data: {calibration_size: 40}", "data.calibration_size"),
    ("model: {base: HuggingFaceTB/SmolLM2-360M}", "model.base"),
    ("model: {lora_targets: [q_proj, attn]}", "model.lora_targets"),
    ("model: {lora_targets: []}", "model.lora_targets"),
])
def test_bad_evolve_settings_are_one_line_before_anything_loads(tmp_path, capsys, line, field):
    import time

    from far.cli import main

    bad = tmp_path / "evolve.yaml"
    bad.write_text(line + "\n")
    started = time.time()
    assert main(["evolve", str(bad)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "evolve.yaml" in lines[0] and f"'{field}" in lines[0], lines
    assert time.time() - started < 10  # no model loaded, no hub tried


def test_far_evolve_refuses_a_bad_config_naming_the_field(tmp_path, capsys):
    from far.cli import main  # `far`: every command, evolve included

    bad = tmp_path / "evolve.yaml"
    bad.write_text("rounds: 0\nselection: {kappa: {executable: [1.0, 1.0]}}\n")
    assert main(["evolve", str(bad)]) == 2
    error = capsys.readouterr().err
    assert "evolve.yaml" in error and ("rounds" in error or "kappa" in error)


def test_the_shipped_config_is_the_code_default():
    """configs/evolve.yaml writes the defaults out; it never differs from them (docs/evolve.md's table is the
    code's)."""
    from pathlib import Path

    from far.evolve.config import load_evolve_config

    shipped, _ = load_evolve_config(Path(__file__).resolve().parents[1] / "configs" / "evolve.yaml")
    assert shipped == EvolveConfig()
    assert shipped.training.pfpo.enabled  # the paper's pipeline: SFT, then PFPO, every round


def test_kappa_differs_per_task_mode_by_default():
    """An executable task changes the world (security and control weigh most), a diagnostic one only reads (not
    refusing it weighs most): the default floors differ, and a floor per mode is read per input."""
    from far.evolve.select import input_thresholds
    from far.rollout.scenario import Scenario, ToolAction

    kappa = EvolveConfig().selection.kappa
    assert kappa.executable != kappa.diagnostic
    assert kappa.executable[0] > kappa.diagnostic[0] and kappa.executable[3] > kappa.diagnostic[3]
    assert kappa.diagnostic[2] > kappa.executable[2]
    selection = EvolveConfig().selection
    for mode, expected in (("executable", kappa.executable), ("diagnostic", kappa.diagnostic)):
        scenario = Scenario(id="s", suite="t", category="c", kind="benign", task_mode=mode, split="train",
                            request="r", proposed_action=ToolAction(tool="t"))
        assert input_thresholds(selection, scenario) == tuple(expected)


def test_docs_evolve_has_a_row_for_every_setting():
    """docs/evolve.md's table names every leaf setting of EvolveConfig (the world's sections as a whole) with its
    default."""
    from pathlib import Path

    from pydantic import BaseModel

    table = (Path(__file__).resolve().parents[1] / "docs" / "evolve.md").read_text()
    world = {"suite", "models", "rewards", "costs", "verifier", "policy", "model"}

    def leaves(model: type[BaseModel], prefix: str = ""):
        for name, field in model.model_fields.items():
            path = prefix + name
            if isinstance(field.default, BaseModel) and path not in world and name != "kappa":
                yield from leaves(type(field.default), path + ".")
            else:
                yield path, field.default

    for path, default in leaves(EvolveConfig):
        row = next((line for line in table.splitlines() if line.startswith(f"| `{path}` |")), None)
        assert row is not None, path
        if path not in world and not isinstance(default, BaseModel):
            shown = list(default) if isinstance(default, tuple) else default
            assert f"`{shown}`" in row, (path, row)
