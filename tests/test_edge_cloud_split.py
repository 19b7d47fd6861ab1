"""The built-in suite splits by template as well as by scenario: no wording of the holdout is seen in train."""
import random
import string
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.suites.base import split_of
from rollout.suites.edge_cloud import (
    BUILDERS,
    CATEGORY_WEIGHTS,
    INJECTION,
    KIND_WEIGHTS,
    TEMPLATES,
    EdgeCloudSuite,
    EdgeCloudSuiteConfig,
    generate_with_templates,
    template_splits,
)
from rollout.suites.edge_cloud_phrasings import INJECTION_FRAMINGS, INJECTION_INSTRUCTIONS, PHRASINGS

INTENTS = [(kind, category) for kind in KIND_WEIGHTS for category in CATEGORY_WEIGHTS]
UNSAFE = {"unsafe_request", "injected", "misread"}

# slots every wording of an intent must name, so that the text says what the actions do
REQUIRED_SLOTS = {
    ("benign", "home_iot"): {"room", "temp"}, ("benign", "payments"): {"payee", "amount"},
    ("benign", "messaging"): {"name", "text"}, ("benign", "files"): {"folder"},
    ("benign", "calendar"): {"event", "day"},
    ("diagnostic", "messaging"): {"name"}, ("diagnostic", "files"): {"folder"}, ("diagnostic", "calendar"): {"day"},
    ("benign_sensitive", "home_iot"): {"door", "name"}, ("benign_sensitive", "payments"): {"name", "amount"},
    ("benign_sensitive", "messaging"): {"name"}, ("benign_sensitive", "files"): {"folder"},
    ("needs_cloud", "home_iot"): {"room"}, ("needs_cloud", "payments"): {"payee", "total", "overdue"},
    ("needs_cloud", "messaging"): {"first", "second"}, ("needs_cloud", "files"): {"folder"},
    ("needs_cloud", "calendar"): {"event", "day"},
    ("unsafe_request", "payments"): {"amount", "attacker"},
    ("injected", "messaging"): {"name"}, ("misread", "payments"): {"name"},
}


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def generate(seed, size, holdout_fraction):
    return [generate_with_templates(seed, i, holdout_fraction) for i in range(size)]


@pytest.fixture(scope="module")
def big():
    return generate(7, 4000, 0.3)


def test_no_text_and_no_template_in_both_splits(big):
    texts = {"train": set(), "holdout": set()}
    keys = {"train": set(), "holdout": set()}
    for scenario, used in big:
        texts[scenario.split].add(scenario.request)
        keys[scenario.split].update(used)
    assert not texts["train"] & texts["holdout"]
    assert not keys["train"] & keys["holdout"]
    assert len(texts["holdout"]) > 300 and len(texts["train"]) > 1000
    # and the templates each split uses are the ones assigned to it
    assigned = template_splits(7, 0.3)
    for split in ("train", "holdout"):
        allowed = {key for group in assigned.values() for key in group[split]}
        assert keys[split] <= allowed
    # every intent is drawn on both sides at this size
    intents = {(s.split, s.kind, s.category) for s, _ in big}
    assert all((split, *intent) in intents for intent in INTENTS for split in ("train", "holdout"))


def test_scenario_split_is_still_the_id_hash(big):
    assert all(s.split == split_of(7, s.id, 0.3) for s, _ in big)
    assert 0.27 < Counter(s.split for s, _ in big)["holdout"] / 4000 < 0.33


@settings(max_examples=25)
@given(seed=st.integers(0, 2**32), holdout_fraction=st.floats(0.01, 0.99))
def test_template_splits_are_disjoint_and_every_intent_has_both(seed, holdout_fraction):
    assigned = template_splits(seed, holdout_fraction)
    assert set(assigned) == {f"{k}/{c}" for k, c in INTENTS} | {INJECTION}
    for group, splits in assigned.items():
        train, holdout = set(splits["train"]), set(splits["holdout"])
        assert train and holdout and not train & holdout
        n = len(train) + len(holdout)
        assert len(holdout) == min(n - 1, max(1, round(n * holdout_fraction)))
        assert all(key.rsplit("/", 1)[0] == group for key in train | holdout)
    used = {"train": set(), "holdout": set()}
    for scenario, keys in generate(seed, 150, holdout_fraction):
        used[scenario.split].update(keys)
        assert keys[0].startswith(f"{scenario.kind}/{scenario.category}/")
        assert all(key in assigned[key.rsplit("/", 1)[0]][scenario.split] for key in keys)
    assert not used["train"] & used["holdout"]


def test_assignment_depends_on_seed():
    assert template_splits(1, 0.3) != template_splits(2, 0.3)
    assert template_splits(5, 0.3) == template_splits(5, 0.3)


def test_many_distinct_phrasings_per_intent():
    for kind, category in INTENTS:
        texts = PHRASINGS[kind][category]
        assert len(texts) >= 8 and len(set(texts)) == len(texts), (kind, category)
    assert len(INJECTION_FRAMINGS) >= 8 and len(set(INJECTION_FRAMINGS)) == len(INJECTION_FRAMINGS)
    assert len(set(TEMPLATES.values())) == len(TEMPLATES)  # no wording shared between intents either
    assert all(fields(framing) == {"instruction"} for framing in INJECTION_FRAMINGS)


@pytest.mark.parametrize(("kind", "category"), INTENTS)
def test_every_wording_renders_and_names_its_slots(kind, category):
    for seed in range(5):
        slots, _, _ = BUILDERS[kind](category, random.Random(seed))
        for template in PHRASINGS[kind][category]:
            assert fields(template) <= set(slots), template
            assert REQUIRED_SLOTS.get((kind, category), set()) <= fields(template), template
            template.format(**slots)
        if kind == "injected":
            INJECTION_INSTRUCTIONS[category].format(**slots)
    if (kind, category) == ("benign", "calendar"):
        assert all(fields(t) & {"hour", "hour12"} for t in PHRASINGS[kind][category])


def test_same_inputs_same_suite():
    a = generate(3, 300, 0.25)
    b = generate(3, 300, 0.25)
    assert a == b
    config = EdgeCloudSuiteConfig(seed=3, size=300, holdout_fraction=0.25)
    suite_a, suite_b = EdgeCloudSuite(config), EdgeCloudSuite(config)
    assert list(suite_a.scenarios("holdout")) == list(suite_b.scenarios("holdout"))
    assert [s for s, _ in a if s.split == "train"] == list(suite_a.scenarios("train"))
    assert [s.id for s, _ in a] == [f"ec-3-{i:06d}" for i in range(300)]
    # a scenario does not depend on the suite's size
    assert generate(3, 100, 0.25) == a[:100]


def test_labels_and_actions_follow_the_kind(big):
    for scenario, _ in big:
        truth, kind = scenario.ground_truth, scenario.kind
        intended, proposal = truth.intended_action, scenario.proposed_action
        assert truth.unsafe == (kind in UNSAFE)
        assert truth.needs_cloud == (kind == "needs_cloud")
        assert truth.injected == (kind == "injected")
        assert truth.benign_sensitive == (kind == "benign_sensitive")
        if kind in ("benign", "diagnostic", "benign_sensitive"):
            assert intended == proposal
        if kind in ("needs_cloud", "misread", "injected"):
            assert intended is not None and intended != proposal
        if kind == "unsafe_request":
            assert intended is None
        if kind == "injected":
            assert intended.read_only and not proposal.read_only and "\n[content] ... " in scenario.request
        if kind == "benign_sensitive":
            assert proposal.sensitive
        assert scenario.task_mode == ("diagnostic" if kind in ("diagnostic", "injected") else "executable")


def test_describe_reports_the_template_split():
    description = EdgeCloudSuite(EdgeCloudSuiteConfig(seed=7, size=10, holdout_fraction=0.3)).describe()
    assigned = template_splits(7, 0.3)
    assert description["split_by"] == "template"
    for split in ("train", "holdout"):
        assert description["templates"][split] == sum(
            len(group[split]) for name, group in assigned.items() if name != INJECTION)
        assert description["injection_framings"][split] == len(assigned[INJECTION][split])
    assert sum(description["templates"].values()) == sum(len(PHRASINGS[k][c]) for k, c in INTENTS)
    assert sum(description["injection_framings"].values()) == len(INJECTION_FRAMINGS)
