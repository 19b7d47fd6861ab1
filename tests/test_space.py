import random

import pytest
from far.rollout.errors import FarInputError
from far.rollout.policy import Policy
from far.search.searchers.space import load_space, parse_space

SPACE = {
    "parameters": {
        "cloud_threshold": {"type": "float", "low": 0.2, "high": 0.8, "grid": [0.2, 0.5, 0.8]},
        "max_retries": {"type": "int", "low": 0, "high": 2},
        "require_confirmation": {"type": "bool"},
        "fallback_mode": {"type": "choice", "values": ["safe_shutdown", "ask_user"]},
    }
}


def test_grid_enumerates_the_product():
    space = parse_space(SPACE)
    grid = list(space.grid())
    assert len(grid) == space.grid_size() == 3 * 3 * 2 * 2
    assert len(set(p.model_dump_json() for p in grid)) == len(grid)
    assert all(space.contains(p) for p in grid)


def test_samples_stay_in_bounds():
    space = parse_space(SPACE)
    rng = random.Random(0)
    for _ in range(200):
        policy = space.sample(rng)
        assert 0.2 <= policy.cloud_threshold <= 0.8 and 0 <= policy.max_retries <= 2
        assert space.contains(policy)
    assert not space.contains(Policy(cloud_threshold=0.9))


def test_fixed_parameters_and_default_grid():
    space = parse_space({"parameters": {"cloud_threshold": {"type": "float", "low": 0, "high": 1}},
                         "fixed": {"max_retries": 3}})
    grid = list(space.grid())
    assert [p.cloud_threshold for p in grid] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert all(p.max_retries == 3 for p in grid)


@pytest.mark.parametrize("body, fragment", [
    ({"parameters": {"colour": {"type": "bool"}}}, "unknown policy parameter 'colour'"),
    ({"parameters": {"max_retries": {"type": "int", "low": 3, "high": 1}}}, "low (3) must be <= high (1)"),
    ({"parameters": {"cloud_threshold": {"type": "float", "low": 0, "high": 2}}}, "cloud_threshold"),
    ({"parameters": {"fallback_mode": {"type": "choice", "values": ["explode"]}}}, "fallback_mode"),
    ({"parameters": {"max_retries": {"type": "range", "low": 0, "high": 1}}}, "max_retries"),
    ({"parameters": {}}, "parameters"),
])
def test_bad_spaces_name_the_problem(tmp_path, body, fragment):
    import yaml

    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({"space": body}))
    with pytest.raises(FarInputError) as info:
        load_space(path)
    assert fragment in str(info.value) and str(path) in str(info.value)
