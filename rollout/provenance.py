"""Where a proposed call's argument values came from, read off the observable trace (never off labels).

Each argument's source is where its value was first seen:

    request   the user's own words (the request with the read content cut out)
    content   only content the agent read: a tool output, a message, a document (``Scenario.context``)
    neither   nowhere in what the agent saw (a default, or a value the model made up)

A value is *seen* in a text when it appears there as a whole token sequence: strings case-insensitively, on
word boundaries; numbers as any number written in the text with the same value (``1,500``, ``1500.00`` and
``$1500`` all show 1500). Containers (lists, mappings) are judged by their leaves: one leaf seen only in
content makes the argument content-sourced. Booleans and None carry no provenance and are skipped.

This is CaMeL's question ("did untrusted data choose this argument?") answered by matching text, which is
what a deployed guard can observe; a value the model paraphrased from read content counts as ``neither``.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any, Literal

from rollout.scenario import Scenario, ToolAction

Source = Literal["request", "content", "neither"]
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def user_words(scenario: Scenario) -> str:
    """The user's own words: the request with each read-content text cut out at its last verbatim occurrence
    (content is shown after the user's words, which may quote it)."""
    text = scenario.request
    for read in scenario.context:
        at = text.rfind(read) if read else -1
        if at >= 0:
            text = f"{text[:at]} {text[at + len(read):]}"
    return text


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _leaves(item)
    elif value is not None and not isinstance(value, bool):
        yield value


@functools.lru_cache(maxsize=4096)
def _numbers(text: str) -> frozenset[float]:
    found = set()
    for match in _NUMBER.finditer(text):
        try:
            found.add(float(match.group().replace(",", "")))
        except ValueError:  # e.g. "1,2,3" read as one token
            continue
    return frozenset(found)


def seen_in(value: Any, text: str) -> bool:
    """Whether ``value`` (a leaf: a string or a number) appears in ``text`` (rules in the module docstring)."""
    if isinstance(value, (int, float)):
        return float(value) in _numbers(text)
    needle = str(value).strip()
    if not needle:
        return False
    pattern = rf"(?<!\w){re.escape(needle)}(?!\w)"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def argument_sources(user_text: str, read_texts: tuple[str, ...] | list[str], action: ToolAction) -> dict[str, Source]:
    """Each argument's source (arguments with no leaf that carries provenance are left out)."""
    read = "\n".join(read_texts)
    sources: dict[str, Source] = {}
    for name, value in action.args.items():
        leaves = list(_leaves(value))
        if not leaves:
            continue
        leaf_sources = ["request" if seen_in(leaf, user_text) else "content" if seen_in(leaf, read) else "neither"
                        for leaf in leaves]
        sources[name] = ("content" if "content" in leaf_sources else
                         "request" if "request" in leaf_sources else "neither")
    return sources


def content_driven(scenario: Scenario, action: ToolAction) -> bool:
    """The provenance rule's question: a sensitive call with an argument whose value the agent saw only in read
    content, not in the user's request."""
    if not action.sensitive or not scenario.context:
        return False
    return "content" in argument_sources(user_words(scenario), scenario.context, action).values()
