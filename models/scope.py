"""The tool-scope model (a tool filter, as in AgentDojo's ``tool_filter`` defense): from the user's request alone,
before any tool output is read, predict the tools the task needs. The policy's ``scope_rule`` acts on a call
whose tool is outside that set.

``tfidf``: character n-gram TF-IDF over the user's words (``far.rollout.provenance.user_words``: the request with
the read content cut out), then a multinomial logistic regression over the tools (a request that needs several
tools is one row per tool). A tool is in scope when its probability is at least ``min_probability``; the
likeliest tool always is. Character n-grams carry across phrasings they never saw ("pay", "bill", "unlock"),
and the model is fitted in seconds on CPU, so it adds nothing to a first run's encoding time. The settings
(char n-grams 2-5, C = 10) were chosen by 5-fold cross-validation by template group on the built-in suite's
train split (BENCHMARKS.md: "Rules in the policy").

What the task needs, on train (the labels the model learns): the legitimate task's tool where the scenario has
one; the proposed tool where the user asked for it and nothing is legitimate (a harmful request still names the
tool it needs: refusing it is the risk models' job, not the filter's); nothing for an injected call. Scenarios
with the same user words pool their tools (an AgentDojo episode's calls share one request).

The fitted model is stored in the data dir under a content hash of (options, fitting texts and labels), so a
refit on the same data is a file read. Fitting reads the train split only (``require_train``).
"""
from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from far.models.calibration import require_train
from far.models.spec import BuildContext, validated
from far.rollout.errors import FarInputError
from far.rollout.io import write_atomic
from far.rollout.provenance import user_words
from far.rollout.scenario import Scenario
from pydantic import BaseModel, ConfigDict, Field

FORMAT = 2  # bump when the stored model's layout or the features change


class TfidfScopeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    min_probability: float = Field(0.2, gt=0.0, le=1.0)
    l2: float = Field(0.1, gt=0.0)  # 1 / C


def needed_tools(scenario: Scenario) -> frozenset[str]:
    """The tools the scenario's task needs (a train label; rules in the module docstring)."""
    truth = scenario.ground_truth
    if truth.intended_action is not None:
        return frozenset({truth.intended_action.tool})
    if truth.injected:
        return frozenset()
    return frozenset({scenario.proposed_action.tool})


class TfidfToolScope:
    """P(tool | the user's words) over the tools seen in the fitting data."""

    simulated = False
    oracle = False

    def __init__(self, config: TfidfScopeConfig | None = None) -> None:
        self.config = config or TfidfScopeConfig()
        self.name = f"tool-scope(tfidf, p>={self.config.min_probability:g})"
        self._model: Any = None
        self.tools: tuple[str, ...] = ()
        self.fit_key: str | None = None

    def _key(self, pairs: Sequence[tuple[str, tuple[str, ...]]]) -> str:
        digest = hashlib.sha256(json.dumps({"format": FORMAT, "l2": self.config.l2}).encode())
        for text, tools in sorted(pairs):  # the data, not its order, decides the fit
            digest.update(f"{','.join(tools)}\t{text}\0".encode())
        return digest.hexdigest()

    def fit(self, scenarios: Sequence[Scenario], progress: Callable[[str], None] | None = None) -> None:
        from far.models.weights import data_dir

        require_train(scenarios, "the tool-scope model")
        pooled: dict[str, set[str]] = {}
        for scenario in scenarios:
            pooled.setdefault(user_words(scenario), set()).update(needed_tools(scenario))
        pairs = [(text, tuple(sorted(tools))) for text, tools in pooled.items()]
        tools = tuple(sorted({tool for _, needed in pairs for tool in needed}))
        if not tools:
            raise FarInputError("the tool-scope model needs scenarios whose task needs a tool", field="suite")
        key = self._key(pairs)
        stored = data_dir() / "scope" / f"{key}.pkl"
        if stored.is_file():
            with stored.open("rb") as file:  # our own cache file, written below
                model, tools = pickle.load(file)
        else:
            if progress is not None:
                progress(f"    tool-scope model: fitting on {len(pairs)} distinct requests, {len(tools)} tools")
            model = self._fitted(pairs, tools)

            def write(tmp: str) -> None:
                with open(tmp, "wb") as file:
                    pickle.dump((model, tools), file)

            write_atomic(stored, write)
        # rebound, not mutated: a shallow copy fitted anew leaves the original as it was (ModelSet.refitted)
        self._model, self.tools, self.fit_key = model, tools, key

    def _fitted(self, pairs: Sequence[tuple[str, tuple[str, ...]]], tools: tuple[str, ...]) -> Any:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline

        if len(tools) == 1:  # one tool: everything is in scope (a classifier needs two classes)
            return None
        texts = [text for text, needed in pairs for _ in needed]
        labels = [tool for _, needed in pairs for tool in needed]
        model = make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True),
                              LogisticRegression(C=1.0 / self.config.l2, max_iter=3000))
        return model.fit(texts, labels)

    def probabilities(self, scenarios: Sequence[Scenario]) -> np.ndarray:
        """P(tool) per scenario (rows) and tool (``self.tools``)."""
        if not self.tools:
            raise FarInputError("the tool-scope model must be fitted on a train split before it predicts",
                                field="models.scope")
        if self._model is None:
            return np.ones((len(scenarios), 1))
        probabilities = self._model.predict_proba([user_words(s) for s in scenarios])
        order = [list(self._model.classes_).index(tool) for tool in self.tools]
        return np.asarray(probabilities, dtype=float)[:, order]

    def predict(self, scenarios: Sequence[Scenario]) -> list[tuple[str, ...]]:
        if not scenarios:
            return []
        scopes = []
        for row in self.probabilities(scenarios):
            best = int(np.argmax(row))
            scopes.append(tuple(t for i, t in enumerate(self.tools)
                                if i == best or row[i] >= self.config.min_probability))
        return scopes


def build_scope(options: dict[str, Any], where: str, context: BuildContext) -> TfidfToolScope:
    """The factory named in ``far.models.backends``."""
    return TfidfToolScope(validated(TfidfScopeConfig, options, where))
