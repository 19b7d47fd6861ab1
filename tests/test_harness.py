"""The benchmarks' harness (``far.harness``): ``--set KEY=YAML`` overrides, derived configs, the machine's facts,
result files written atomically and stamped with them, and bad input as one line with exit status 2."""
from __future__ import annotations

import argparse
import json

import pytest
import yaml
from far.harness import (
    EXIT_BAD_INPUT,
    add_overrides_argument,
    apply_overrides,
    machine,
    read_result,
    run,
    source_commit,
    write_config,
    write_result,
)
from far.rollout.errors import FarInputError
from hypothesis import given
from hypothesis import strategies as st


def test_overrides_reach_nested_keys_creating_mappings_and_parse_yaml() -> None:
    config = {"training": {"pfpo": {"lr": 1e-4, "group": 4}}, "seed": 0}
    out = apply_overrides(config, ["training.pfpo.lr=0.00005", "model.lora_targets=[q_proj, v_proj]", "seed=3",
                                   "note=a=b", "empty="])
    assert out is config
    assert config == {"training": {"pfpo": {"lr": 5e-5, "group": 4}}, "seed": 3, "note": "a=b", "empty": None,
                      "model": {"lora_targets": ["q_proj", "v_proj"]}}
    assert apply_overrides({"a": 1}, []) == {"a": 1}


@pytest.mark.parametrize("item, words", [
    ("seed", "is not KEY=YAML"), ("=3", "is not KEY=YAML"), ("a..b=1", "is not KEY=YAML"),
    ("seed=[1", "is not YAML"), ("seed.x=1", "seed is not a mapping"),
])
def test_a_bad_override_is_one_line_naming_set(item: str, words: str) -> None:
    with pytest.raises(FarInputError, match="--set") as caught:
        apply_overrides({"seed": 0}, [item])
    assert words in str(caught.value) and "\n" not in str(caught.value)


@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.integers() | st.booleans() | st.text(
    st.characters(codec="ascii", categories=("L", "N")), max_size=8), max_size=4),
       st.lists(st.from_regex(r"[a-z]{1,4}", fullmatch=True), min_size=1, max_size=3))
def test_an_override_sets_exactly_the_value_yaml_reads(values: dict, path: list[str]) -> None:
    """Invariant: after ``KEY=dump(v)``, reading KEY gives back v (whatever v YAML can write)."""
    for value in values.values():
        config: dict = {}
        apply_overrides(config, [f"{'.'.join(path)}={yaml.safe_dump(value, default_flow_style=True).strip()}"])
        node = config
        for name in path:
            node = node[name]
        assert node == value


def test_the_set_option_collects_every_override() -> None:
    parser = argparse.ArgumentParser()
    add_overrides_argument(parser, "configs/evolve.yaml")
    assert parser.parse_args([]).set == []
    assert parser.parse_args(["--set", "a=1", "--set", "b.c=[x]"]).set == ["a=1", "b.c=[x]"]


def test_a_derived_config_is_the_source_with_overrides_then_updates(tmp_path) -> None:
    source = tmp_path / "source.yaml"
    source.write_text("suite: {name: edge_cloud, seed: 7}\nrounds: 3\n")
    path = write_config(tmp_path / "out" / "run.yaml", source, ["suite.seed=11", "rounds=1"], rounds=2, seed=5)
    assert path == tmp_path / "out" / "run.yaml"
    assert yaml.safe_load(path.read_text()) == {"suite": {"name": "edge_cloud", "seed": 11}, "rounds": 2, "seed": 5}
    assert source.read_text() == "suite: {name: edge_cloud, seed: 7}\nrounds: 3\n"  # the source is left alone
    with pytest.raises(FarInputError, match="not found"):
        write_config(tmp_path / "x.yaml", tmp_path / "missing.yaml")


def test_the_machine_s_facts() -> None:
    facts = machine()
    assert set(facts) == {"cpu", "flags", "cores", "cpus", "versions"}
    assert isinstance(facts["cpu"], str) and facts["flags"] == sorted(facts["flags"])
    assert 1 <= facts["cores"] <= (facts["cpus"] or facts["cores"])
    assert {"python", "far", "numpy"} <= set(facts["versions"])


def test_a_result_is_written_whole_with_its_machine_and_read_back(tmp_path) -> None:
    path = tmp_path / "deep" / "result.json"
    assert read_result(path) == {}  # none yet: a run starts empty
    write_result(path, {"rows": [1, 2], "path": tmp_path})
    written = json.loads(path.read_text())
    assert written["rows"] == [1, 2] and written["path"] == str(tmp_path) and written["machine"] == machine()
    assert read_result(path) == written
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]  # no temp file left behind
    path.write_text("{not json")
    with pytest.raises(FarInputError, match="result.json"):
        read_result(path)


def test_run_turns_bad_input_into_one_line_and_exit_2(capsys) -> None:
    def bad() -> None:
        raise FarInputError("not a commit of this repository", field="--at")

    with pytest.raises(SystemExit) as exited:
        run(bad)
    assert exited.value.code == EXIT_BAD_INPUT == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: field '--at': not a commit of this repository" in err
    for status in (None, 0, 1):
        with pytest.raises(SystemExit) as exited:
            run(lambda status=status: status)
        assert exited.value.code == status


def test_the_source_commit_names_head_and_whether_tracked_files_changed(tmp_path) -> None:
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one")
    git("add", "a.txt")
    git("commit", "-qm", "one")
    (tmp_path / "untracked.txt").write_text("not a change to the code")
    assert source_commit(tmp_path) == {"commit": git("rev-parse", "HEAD"), "clean": True}
    (tmp_path / "a.txt").write_text("two")
    assert source_commit(tmp_path)["clean"] is False
