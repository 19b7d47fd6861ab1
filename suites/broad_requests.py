"""Broad training data for the guards: harmful requests from public sets, benign requests on the same tools.

The built-in suite's harm is a handful of household intents; nothing there shows a guard what fraud,
harassment, weapons or malware look like. This suite does, from licensed public sets (HarmBench, AdvBench,
Do-Not-Answer's malicious uses: ``data/broad_requests/SOURCES.md``), each request turned into the tool call an
agent would make for it, beside benign requests written for FAR on the same tools -- ordinary ones and ones that
look unsafe and are not (a process to kill, a network of one's own to scan) -- so that neither the tool nor the
register gives the label away.

Tool calls. Each request is sent to one tool family; a harmful request and a twin of either label by the
first rule of ``FAMILY_RULES`` its text matches (code before email before a public post ..., questions to the
web search, the rest to a document), a benign one by the family it is written under. The call's arguments are
the request as the agent's brief (what to search, write, post or run), cut to ``BRIEF_CHARS``, with
recipients, platforms and languages drawn from pools shared by both labels.

Labels. Harmful: ``unsafe`` (refusing is right; no intended action), kind ``unsafe_request``. Benign: kind
``benign`` or ``benign_sensitive`` (a benign twin is ``benign_sensitive``: it looks unsafe and is not), the
proposed call is the intended one. No faults: the suite is for fitting guards, not for testing fallbacks.

Size and splits. All benign requests, ``harmful_per_benign`` times as many harmful ones, drawn in the order
of a seeded hash (every source keeps about its share), and every twin. Each request is its own group, but twins
share theirs (a prompt and its contrasts); a group's split is a hash of (seed, group) (``split_of``), so twins
are never split between train and holdout. Scenario ids are ``br-<source>-<index>``.

Sources. ``sources`` keeps some of them (``SOURCES``; ``benign`` is FAR's own requests), after the draw: a
source's scenarios and splits are the same whichever others are kept, so a guard can be fitted without one
source and scored on it (leave one source out: ``bench/bench_loso.py``, the twins stand-in in BENCHMARKS.md).
"""
from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from far.rollout.errors import from_validation_error
from far.rollout.scenario import GroundTruth, Scenario, Split, ToolAction
from far.suites.base import split_of
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

DATA = Path(__file__).resolve().parent / "data" / "broad_requests"
BRIEF_CHARS = 240

# family -> (tool, its declared properties); the argument that carries the brief is filled by ``_call``
TOOLS: dict[str, tuple[str, dict[str, bool]]] = {
    "web": ("web_search", {"read_only": True}),
    "email": ("send_email", {"sensitive": True, "idempotent": False}),
    "social": ("post_online", {"sensitive": True, "idempotent": False}),
    "document": ("write_document", {"local": True}),
    "code": ("run_code", {"sensitive": True, "idempotent": False}),
    "shopping": ("place_order", {"sensitive": True, "idempotent": False}),
    "messaging": ("send_message", {"sensitive": True, "idempotent": False}),
}
FAMILY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((family, re.compile(pattern, re.IGNORECASE)) for
                                                           family, pattern in (
    ("code", r"\b(code|scripts?|programs?|software|malware|virus(es)?|ransomware|keyloggers?|botnets?|exploits?"
             r"|apps?|algorithms?|sql injection|ddos|worms?|trojans?|hack\w*)\b"),
    ("email", r"\b(e-?mails?|phishing)\b"),
    ("social", r"\b(post|tweet|social media|blog|article|reviews?|fake news|news story|website|propaganda"
               r"|podcast|video|advertisement)\b"),
    ("messaging", r"\b(messages?|text|letter|note|threat)\b"),
    ("shopping", r"\b(buy|purchase|order|acquire|obtain)\b"),
    ("web", r"^(how|what|where|why|which|who|can you|is|are|give|list|explain|describe|provide|tell|find)\b"),
))
RECIPIENTS = ("Priya", "Marco", "Lena", "the team", "jordan.lee@example.com", "my neighbour", "all contacts",
              "support@example.org", "Dr. Hart", "the group chat")
PLATFORMS = ("x", "facebook", "reddit", "instagram", "a community forum", "the company blog")
LANGUAGES = ("python", "bash", "javascript")


def family_of(text: str) -> str:
    """The tool family of a harmful request: the first rule its text matches, else ``document``."""
    return next((family for family, rule in FAMILY_RULES if rule.search(text)), "document")


def _call(family: str, text: str, rng: random.Random) -> ToolAction:
    brief = text if len(text) <= BRIEF_CHARS else text[:BRIEF_CHARS - 3] + "..."
    args: dict[str, Any] = {
        "web": lambda: {"query": brief},
        "email": lambda: {"to": rng.choice(RECIPIENTS), "subject": " ".join(text.split()[:6]), "body": brief},
        "social": lambda: {"platform": rng.choice(PLATFORMS), "text": brief},
        "document": lambda: {"title": " ".join(text.split()[:6]), "text": brief},
        "code": lambda: {"language": rng.choice(LANGUAGES), "task": brief},
        "shopping": lambda: {"item": brief, "quantity": 1},
        "messaging": lambda: {"to": rng.choice(RECIPIENTS), "text": brief},
    }[family]()
    tool, properties = TOOLS[family]
    return ToolAction(tool=tool, args=args, **properties)


@functools.lru_cache(maxsize=1)
def harmful_rows() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(line) for line in (DATA / "harmful.jsonl").read_text().splitlines() if line.strip())


@functools.lru_cache(maxsize=1)
def benign_rows() -> tuple[dict[str, str], ...]:
    """(family, kind, text) of every benign request, from ``benign.txt``'s "## <family> <kind>" sections."""
    rows, header = [], None
    for line in (DATA / "benign.txt").read_text().splitlines():
        if line.startswith("## "):
            header = line[3:].split()
        elif line.strip() and not line.startswith("#") and header is not None:
            rows.append({"family": header[0], "kind": header[1], "text": line.strip()})
    return tuple(rows)


@functools.lru_cache(maxsize=1)
def twin_rows() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(line) for line in (DATA / "twins.jsonl").read_text().splitlines() if line.strip())


def _order(seed: int, key: str) -> bytes:
    return hashlib.sha256(f"broad\x1f{seed}\x1f{key}".encode()).digest()


SOURCES = ("harmbench", "advbench", "donotanswer", "benign", "xstest")


def source_of(scenario: Scenario) -> str:
    return scenario.id.split("-")[1]


class BroadRequestsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "broad_requests"
    seed: int = 0
    holdout_fraction: float = Field(0.3, gt=0.0, lt=1.0)
    # harmful requests drawn per benign one (the sets hold about four times as many harmful as FAR's benign)
    harmful_per_benign: float = Field(2.0, gt=0.0, le=5.0)
    sources: tuple[str, ...] = SOURCES

    @field_validator("sources")
    @classmethod
    def _known(cls, sources: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(sources) - set(SOURCES))
        if unknown or not sources:
            raise ValueError(f"sources must be a non-empty list of {', '.join(SOURCES)}"
                             + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
        return sources


def build_scenarios(config: BroadRequestsConfig) -> list[Scenario]:
    benign = benign_rows()
    harmful = sorted(harmful_rows(), key=lambda r: _order(config.seed, f"{r['source']}:{r['index']}"))
    harmful = harmful[:round(config.harmful_per_benign * len(benign))]
    scenarios = []
    for index, row in enumerate(benign):
        scenarios.append(_scenario(config, f"br-benign-{index:04d}", row["family"], row["kind"], row["text"]))
    for row in harmful:
        scenarios.append(_scenario(config, f"br-{row['source']}-{row['index']:04d}", family_of(row["text"]),
                                   "unsafe_request", row["text"]))
    for row in twin_rows():
        scenarios.append(_scenario(config, f"br-{row['source']}-{row['index']:04d}", family_of(row["text"]),
                                   "unsafe_request" if row["unsafe"] else "benign_sensitive", row["text"],
                                   group=row["group"]))
    return [s for s in scenarios if source_of(s) in config.sources]


def _scenario(config: BroadRequestsConfig, scenario_id: str, family: str, kind: str, text: str,
              group: str | None = None) -> Scenario:
    rng = random.Random(_order(config.seed, scenario_id))
    call = _call(family, text, rng)
    unsafe = kind == "unsafe_request"
    truth = GroundTruth(unsafe=unsafe, benign_sensitive=kind == "benign_sensitive",
                        intended_action=None if unsafe else call)
    return Scenario(id=scenario_id, suite=config.name, category=family, kind=kind,
                    task_mode="diagnostic" if call.read_only else "executable",
                    split=split_of(config.seed, group or scenario_id, config.holdout_fraction),
                    request=text, proposed_action=call, ground_truth=truth, group=group or scenario_id)


class BroadRequestsSuite:
    def __init__(self, config: BroadRequestsConfig | None = None) -> None:
        self.config = config or BroadRequestsConfig()
        self.name = self.config.name
        self._by_split: dict[str, list[Scenario]] | None = None

    def scenarios(self, split: Split) -> Sequence[Scenario]:
        if self._by_split is None:
            self._by_split = {"train": [], "holdout": []}
            for scenario in build_scenarios(self.config):
                self._by_split[scenario.split].append(scenario)
        return self._by_split[split]

    def describe(self) -> dict[str, Any]:
        return self.config.model_dump() | {"generator": "rollout.broad_requests", "sources": "SOURCES.md"}


def factory(options: dict[str, Any], base_dir: Any) -> BroadRequestsSuite:
    try:
        return BroadRequestsSuite(BroadRequestsConfig.model_validate(options))
    except ValidationError as error:
        raise from_validation_error(error, prefix="suite") from None
