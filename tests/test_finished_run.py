"""A finished ``far evolve`` run read back to replay (``far.evolve.finished_run``): its config beside it or named,
the rounds saved and asked for, and bad input as one line naming the file or option, before any model loads."""
from __future__ import annotations

import argparse
import json

import pytest
from far.evolve.finished_run import FinishedRun, add_run_arguments, finished_run, saved_rounds
from far.rollout.errors import FarInputError


@pytest.fixture
def run_folder(tmp_path):
    folder = tmp_path / "evolve-seed0"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"rounds": [{}, {}, {}, {}], "holdout": ["a"]}))
    for t in (1, 3):  # round 2 was rolled back: no adapter saved
        (folder / f"adapter_round{t}").mkdir()
    (tmp_path / "evolve-seed0.yaml").write_text("rounds: 3\n")
    return folder


def test_round_0_and_every_saved_round_by_default(run_folder) -> None:
    found = finished_run(run_folder)
    assert found == FinishedRun(run_folder.resolve(), run_folder.parent.resolve() / "evolve-seed0.yaml",
                                {"rounds": [{}, {}, {}, {}], "holdout": ["a"]}, [0, 1, 3])
    assert saved_rounds(run_folder, found.summary) == [0, 1, 3]


def test_the_rounds_asked_for_ascending_once_each(run_folder, tmp_path) -> None:
    assert finished_run(run_folder, "3,0,3").rounds == [0, 3]
    other = tmp_path / "other.yaml"
    other.write_text("rounds: 3\n")
    assert finished_run(run_folder, config=other).config == other


@pytest.mark.parametrize("rounds, words", [("2", "[2] not saved"), ("1,x", "not a comma-separated list")])
def test_rounds_not_saved_or_not_numbers_name_the_option(run_folder, rounds: str, words: str) -> None:
    with pytest.raises(FarInputError, match="--rounds") as caught:
        finished_run(run_folder, rounds)
    assert words in str(caught.value)


def test_a_missing_run_or_config_names_the_file(run_folder, tmp_path) -> None:
    with pytest.raises(FarInputError, match="field 'run'") as caught:
        finished_run(tmp_path / "nowhere")
    assert "summary.json" in str(caught.value)
    with pytest.raises(FarInputError, match="--config"):
        finished_run(run_folder, config=tmp_path / "missing.yaml")


def test_the_command_line_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    args = parser.parse_args(["bench/out/x", "--rounds", "0,2"])
    assert (str(args.run), args.rounds, args.config) == ("bench/out/x", "0,2", None)
