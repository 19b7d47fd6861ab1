import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from far.rollout.errors import FarInputError
from far.rollout.scenario import load_scenarios, save_scenarios
from far.suites import build_suite, split_manifest
from far.suites.edge_cloud import KIND_WEIGHTS, EdgeCloudSuite, EdgeCloudSuiteConfig, generate_scenario
from far.suites.imported import ParquetSuite, ParquetSuiteConfig


def suite(size=600, seed=3, holdout=0.3):
    return EdgeCloudSuite(EdgeCloudSuiteConfig(size=size, seed=seed, holdout_fraction=holdout))


def test_same_seed_same_scenarios_different_seed_different():
    a, b, c = suite(), suite(), suite(seed=4)
    assert list(a.scenarios("train")) == list(b.scenarios("train"))
    assert [s.request for s in a.scenarios("train")] != [s.request for s in c.scenarios("train")]


def test_splits_disjoint_cover_everything_and_roughly_sized():
    s = suite(size=2000, holdout=0.25)
    train, holdout = s.scenarios("train"), s.scenarios("holdout")
    assert not {x.id for x in train} & {x.id for x in holdout}
    assert len(train) + len(holdout) == 2000
    assert 0.2 < len(holdout) / 2000 < 0.3
    assert all(x.split == "train" for x in train) and all(x.split == "holdout" for x in holdout)


def test_split_of_a_scenario_does_not_depend_on_suite_size():
    small, large = suite(size=300), suite(size=900)
    small_holdout = {x.id for x in small.scenarios("holdout")}
    large_holdout = {x.id for x in large.scenarios("holdout")}
    assert small_holdout and small_holdout <= large_holdout


def test_distribution_has_every_kind_and_category():
    scenarios = list(suite(size=3000).scenarios("train"))
    assert {s.kind for s in scenarios} == set(KIND_WEIGHTS)
    assert len({s.category for s in scenarios}) == 5
    assert {s.task_mode for s in scenarios} == {"executable", "diagnostic"}
    unsafe = [s for s in scenarios if s.ground_truth.unsafe]
    assert all(s.kind in ("unsafe_request", "injected", "misread") for s in unsafe)
    assert any(s.ground_truth.tool_faults for s in scenarios) and any(s.ground_truth.cloud_faults for s in scenarios)
    # needs-cloud proposals differ from what the user meant; benign ones do not
    for s in scenarios:
        if s.kind == "needs_cloud":
            assert s.ground_truth.intended_action != s.proposed_action
        if s.kind in ("benign", "diagnostic", "benign_sensitive"):
            assert s.ground_truth.intended_action == s.proposed_action


def test_parquet_round_trip(tmp_path):
    s = suite(size=200)
    scenarios = list(s.scenarios("train")) + list(s.scenarios("holdout"))
    path = save_scenarios(tmp_path / "sc.parquet", scenarios)
    assert load_scenarios(path) == scenarios
    loaded = ParquetSuite(ParquetSuiteConfig(path=str(path)))
    assert list(loaded.scenarios("holdout")) == list(s.scenarios("holdout"))
    assert split_manifest(loaded) == split_manifest(s)


def test_bad_parquet_row_names_file_row_and_field(tmp_path):
    scenarios = [generate_scenario(1, i, 0.5) for i in range(5)]
    table = save_scenarios(tmp_path / "ok.parquet", scenarios)
    rows = pq.read_table(table).to_pylist()
    rows[3]["split"] = "validation"
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    with pytest.raises(FarInputError) as info:
        load_scenarios(bad)
    assert "row 3" in str(info.value) and "field 'split'" in str(info.value) and str(bad) in str(info.value)


def test_duplicate_ids_and_garbage_files_are_rejected(tmp_path):
    scenario = generate_scenario(1, 0, 0.5)
    path = save_scenarios(tmp_path / "dup.parquet", [scenario, scenario])
    with pytest.raises(FarInputError, match="row 1.*duplicate scenario id"):
        load_scenarios(path)
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(FarInputError, match="not a readable Parquet file"):
        load_scenarios(junk)


def test_unknown_suite_and_bad_options():
    with pytest.raises(FarInputError, match="unknown suite 'nope'"):
        build_suite({"name": "nope"})
    with pytest.raises(FarInputError, match="suite.holdout_fraction"):
        build_suite({"name": "edge_cloud", "holdout_fraction": 1.5})
