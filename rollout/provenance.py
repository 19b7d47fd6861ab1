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
from dataclasses import dataclass
from typing import Any, Literal

from far.rollout.scenario import ReadSource, Role, Scenario, ToolAction

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


# --- per-argument provenance: roles, sources and their trust ------------------------------------------------------

ArgumentOrigin = Literal["request", "trusted", "untrusted", "neither"]
ROLES: tuple[str, ...] = ("target", "payload")
TRUST_LEVELS: tuple[str, ...] = ("fields", "trusted", "untrusted")

# Arguments that carry what a call says or when, not where its effect goes: payloads. Every other argument is a
# target (a recipient, an account, an address, a URL, a path, a user, a channel, an id, a password), so an
# argument nobody declared is judged as the riskier role.
PAYLOAD_ARGUMENTS = frozenset({
    "amount", "subject", "body", "content", "message", "text", "title", "description", "note", "notes", "comment",
    "date", "time", "day", "start_time", "end_time", "start_day", "end_day", "start", "end", "duration", "query",
    "new_start_time", "new_end_time", "location", "filename", "permission", "rating", "quantity", "count", "n",
    "limit",
})
# Fields of a structured tool output whose text anyone who can write to the tool's data chooses (an email's
# body, a transaction's subject, a review): free text, never trusted. Other fields of structured output (ids,
# senders, recipients, IBANs, names, addresses, dates, amounts) are the records themselves.
FREE_TEXT_FIELDS = frozenset({
    "body", "content", "subject", "description", "message", "text", "title", "review", "reviews", "note", "notes",
    "comment", "comments", "snippet", "summary", "bio", "about", "html",
})


UNKNOWN_SOURCE = ReadSource(trust="untrusted")  # a read text nobody described: content, as today's rule sees it


def argument_role(name: str, declared: dict[str, str] | None = None) -> Role:
    """A declared role, else ``payload`` for the names in ``PAYLOAD_ARGUMENTS``, else ``target``."""
    if declared and name in declared:
        return declared[name]  # type: ignore[return-value]
    return "payload" if name.lower() in PAYLOAD_ARGUMENTS else "target"


@functools.lru_cache(maxsize=2048)
def _structured(text: str) -> tuple[tuple[str, Any], ...] | None:
    """A structured output's leaves as (field, value) pairs (a mapping's keys are leaves of their parent field);
    None for plain text."""
    import yaml

    stripped = text.strip()
    if not stripped:
        return None
    try:
        data = yaml.load(stripped, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        data = None
    if not isinstance(data, (dict, list)):
        return None
    pairs: list[tuple[str, Any]] = []

    def walk(value: Any, field: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                pairs.append((field, key))
                walk(item, str(key).lower())
        elif isinstance(value, list):
            for item in value:
                walk(item, field)
        elif value is not None and not isinstance(value, bool):
            pairs.append((field, value))

    walk(data, "")
    return tuple(pairs)


def _same(value: Any, leaf: Any) -> bool:
    """Whole-field equality: numbers by value, strings case-insensitively (dates and the like as text)."""
    if isinstance(value, (int, float)) or isinstance(leaf, (int, float)):
        try:
            return float(value) == float(leaf)
        except (TypeError, ValueError):
            return False
    return str(value).strip().casefold() == str(leaf).strip().casefold()


def read_origin(value: Any, text: str, source: ReadSource) -> tuple[ArgumentOrigin, str | None] | None:
    """How one read text shows a leaf value: ``("trusted", field)``, ``("untrusted", field)``, or None (not
    shown). A structured output shows a value as trusted only as the whole content of an identifier field; a
    token sequence inside a longer field is untrusted (whoever wrote a channel name may have written a link into
    it), numbers excepted outside free-text fields (an id of 7 is not "in" a date 2022-03-07); a plain-text
    output shows it anywhere as a token sequence (``seen_in``)."""
    if source.trust == "repeated":
        return None
    if source.trust != "fields":
        return (source.trust, None) if seen_in(value, text) else None  # type: ignore[return-value]
    leaves = _structured(text)
    if leaves is None:
        return ("untrusted", None) if seen_in(value, text) else None
    for field, leaf in leaves:
        if field not in FREE_TEXT_FIELDS and _same(value, leaf):
            return "trusted", field or None
    for field, leaf in leaves:
        if isinstance(leaf, str) and (field in FREE_TEXT_FIELDS or isinstance(value, str)) and seen_in(value, leaf):
            return "untrusted", field or None
    return None


@dataclass(frozen=True, slots=True)
class ArgumentSource:
    """One argument's provenance: its role, where its value was seen first (rules in ``argument_provenance``),
    and which tool and field showed it."""

    argument: str
    role: Role
    origin: ArgumentOrigin
    tool: str | None = None
    field: str | None = None

    def describe(self) -> str:
        where = {"request": "the user's request", "neither": "nowhere the agent read"}.get(self.origin)
        if where is None:
            where = f"{self.origin} {'field ' + repr(self.field) if self.field else 'text'} of " \
                    f"{self.tool or 'read content'}"
        return f"{self.role} {self.argument!r} from {where}"


def read_sources(scenario: Scenario) -> tuple[ReadSource, ...]:
    """One ``ReadSource`` per read text (``Scenario.read_from``; texts nobody described are untrusted)."""
    described = scenario.read_from
    return tuple(described[i] if i < len(described) else UNKNOWN_SOURCE for i in range(len(scenario.context)))


# Identifiers a free-text value may carry inside it (a link in a message body, an address or an account number
# in a subject): each is judged as a value of its own, since a composed text can smuggle one from read content.
_EMBEDDED = re.compile(
    r"(?:https?://)?(?:www\.)?[\w-]+(?:\.[\w-]+)*\.(?:com|org|net|io|ch|de|uk|fr|info|biz)(?![\w-])(?:/[\w./?=&%-]*)?"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    r"|\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b")


def embedded_identifiers(value: Any) -> tuple[str, ...]:
    """URLs, email addresses and IBAN-shaped account numbers inside a longer string (none in a value that is
    one already)."""
    if not isinstance(value, str):
        return ()
    found = tuple(match.group().rstrip(".") for match in _EMBEDDED.finditer(value))
    return () if found == (value.strip(),) else found


Found = tuple[ArgumentOrigin, str | None, str | None]


def _leaf_origin(leaf: Any, user_text: str, reads: tuple[tuple[str, ReadSource], ...]) -> Found:
    """A leaf's origin, or the riskiest of its own and its embedded identifiers' origins."""
    found = _value_origin(leaf, user_text, reads)
    for identifier in embedded_identifiers(leaf):
        inner = _value_origin(identifier, user_text, reads)
        if ORIGIN_ORDER[inner[0]] > ORIGIN_ORDER[found[0]]:
            found = inner
    return found


def _value_origin(leaf: Any, user_text: str, reads: tuple[tuple[str, ReadSource], ...]) -> Found:
    if seen_in(leaf, user_text):
        return "request", None, None
    untrusted: Found | None = None
    for text, source in reads:
        found = read_origin(leaf, text, source)
        if found is None:
            continue
        if found[0] == "trusted":
            return "trusted", source.tool or None, found[1]
        if untrusted is None:
            untrusted = ("untrusted", source.tool or None, found[1])
    return untrusted or ("neither", None, None)


ORIGIN_ORDER: dict[str, int] = {"neither": 0, "request": 1, "trusted": 2, "untrusted": 3}


def argument_provenance(scenario: Scenario, action: ToolAction) -> tuple[ArgumentSource, ...]:
    """Each argument's role and origin. A leaf value's origin: ``request`` when the user's words show it, else
    ``trusted`` when some trusted source shows it (a trusted output, or a whole identifier field of a
    structured one), else ``untrusted`` when some read text shows it, else ``neither``; the first read text to
    show it names the tool and field. A string leaf that carries identifiers inside it (``embedded_identifiers``)
    takes the riskiest of its own origin and theirs. An argument takes its riskiest leaf's origin (untrusted >
    trusted > request > neither). Arguments with no leaf that carries provenance are left out."""
    user_text = user_words(scenario)
    reads = tuple(zip(scenario.context, read_sources(scenario)))
    found = []
    for name, value in action.args.items():
        leaves = [_leaf_origin(leaf, user_text, reads) for leaf in _leaves(value)]
        if not leaves:
            continue
        origin, tool, field = max(leaves, key=lambda item: ORIGIN_ORDER[item[0]])
        found.append(ArgumentSource(name, argument_role(name, scenario.argument_roles), origin, tool, field))
    return tuple(found)


def untrusted_roles(scenario: Scenario, action: ToolAction) -> frozenset[str]:
    """The roles of the call's arguments whose value came from untrusted read content only."""
    if not scenario.context:
        return frozenset()
    return frozenset(a.role for a in argument_provenance(scenario, action) if a.origin == "untrusted")
