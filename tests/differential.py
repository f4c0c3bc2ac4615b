"""Two servers' answers to the same request, reduced to what a client can rely on and compared
field by field, and the differences named on purpose (tests/http/test_eureka_differential.py).

An excuse names the paths of the differences it covers, never a whole answer: anything else
that differs, and always the status, still counts. The one status an excuse may cover is a
bad-input step's 400 where the other server answers a given code, and only that pair.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

BAD_INPUT = "bad input: "  # the steps whose 400 may stand where Eureka answers otherwise


def tree(element: ET.Element) -> Any:
    """An XML element as nested dicts: attributes as @name, text, children by tag (a repeated
    tag as a list)."""
    node: dict[str, Any] = {f"@{k}": v for k, v in element.attrib.items()}
    for child in element:
        value = tree(child)
        if child.tag in node:
            if not isinstance(node[child.tag], list):
                node[child.tag] = [node[child.tag]]
            node[child.tag].append(value)
        else:
            node[child.tag] = value
    text = (element.text or "").strip()
    if not node:
        return text
    if text:
        node["$"] = text
    return node


# Lists whose order carries no meaning, and what sorts them: Eureka's applications come out of
# a hash map, ours in the order they registered.
UNORDERED = {"application": "name", "instance": "instanceId"}


# Eureka's compact answers also carry registeredApplicationsEmpty, a getter derived from the
# document that its compact codec happens to write (its full forms do not): a reader derives
# it, and ours leave it out. Everything else of them is compared.
DERIVED = frozenset({"registeredApplicationsEmpty"})


def masked(value: Any, key: str = "") -> Any:
    """`value` with what differs by the moment masked (times), applications and instances in
    one order."""
    if isinstance(value, dict):
        return {k: masked(v, k) for k, v in value.items() if k not in DERIVED}
    if isinstance(value, list):
        items = [masked(v, key) for v in value]
        if key in UNORDERED and all(isinstance(item, dict) for item in items):
            items.sort(key=lambda item: str(item.get(UNORDERED[key])))
        return items
    if key.lower().endswith("timestamp") and value not in (0, "0"):
        return "<time>"
    return value


def reduced(status: int, content_type: str, body: bytes) -> dict[str, Any]:
    """What a client can rely on in an answer: the status, and the body parsed."""
    answer: dict[str, Any] = {"status": status}
    if not body:
        return answer
    try:
        if "json" in content_type:
            answer["json"] = masked(orjson.loads(body))
        elif "xml" in content_type:
            root = ET.fromstring(body)
            answer["xml"] = {root.tag: masked(tree(root))}
        else:
            answer["other"] = f"{content_type}: {body[:80]!r}"
    except (orjson.JSONDecodeError, ET.ParseError):
        answer["unreadable"] = f"{content_type}: {body[:80]!r}"
    return answer


@dataclass(frozen=True)
class Difference:
    """One place where two reduced answers differ."""

    path: str  # ".status", ".json.applications.versions__delta", ".xml.instance.port.@enabled"
    eureka: Any
    ours: Any

    def __str__(self) -> str:
        return f"{self.path}: {self.eureka!r} != {self.ours!r}"


def differences(eureka: Any, ours: Any, where: str = "") -> Iterator[Difference]:
    """Each place where two reduced answers differ (a key one of them lacks is `<absent>`)."""
    if isinstance(eureka, dict) and isinstance(ours, dict):
        for key in sorted(eureka.keys() | ours.keys()):
            yield from differences(
                eureka.get(key, "<absent>"), ours.get(key, "<absent>"), f"{where}.{key}"
            )
    elif isinstance(eureka, list) and isinstance(ours, list) and len(eureka) == len(ours):
        for n, (a, b) in enumerate(zip(eureka, ours, strict=True)):
            yield from differences(a, b, f"{where}[{n}]")
    elif eureka != ours:
        yield Difference(where, eureka, ours)


STATUS = ".status"


@dataclass(frozen=True)
class Excuse:
    """A difference made on purpose, and why (docs/differences.md says it too).

    `paths` are the body paths it covers, each with what lies under it (".json" covers
    ".json.error"; ".json.applications.versions__delta" covers that field alone).
    `eureka_status` covers the status only as ours 400 where Eureka answers that code."""

    reason: str
    paths: frozenset[str] = frozenset()
    eureka_status: int | None = None

    def __post_init__(self) -> None:
        if any(under(STATUS, path) for path in self.paths):
            raise ValueError("a status difference is excused only by eureka_status")
        if not self.paths and self.eureka_status is None:
            raise ValueError("an excuse covers something")

    def covers(self, difference: Difference) -> bool:
        if difference.path == STATUS:
            return (difference.eureka, difference.ours) == (self.eureka_status, 400)
        return any(under(difference.path, path) for path in self.paths)

    def unseen(self, seen: Iterable[Difference]) -> list[str]:
        """What it names that does not differ in `seen` (each must, or the excuse is stale)."""
        paths = [d.path for d in seen if self.covers(d)]
        gone = [p for p in sorted(self.paths) if not any(under(path, p) for path in paths)]
        if self.eureka_status is not None and STATUS not in paths:
            gone.append(f"{STATUS}: {self.eureka_status} != 400")
        return gone


def under(path: str, prefix: str) -> bool:
    """`path` is `prefix` or lies below it (a key or an item of it)."""
    return path == prefix or path.startswith((prefix + ".", prefix + "["))


@dataclass(frozen=True)
class Verdict:
    unexplained: dict[str, list[Difference]]  # step -> the differences no excuse covers
    stale: dict[str, list[str]]  # step -> what its excuses name that no longer differs

    def __bool__(self) -> bool:
        return not self.unexplained and not self.stale

    def __str__(self) -> str:
        lines = [f"{step}:\n  " + "\n  ".join(map(str, d)) for step, d in self.unexplained.items()]
        lines += [
            f"{step}, excused but the same:\n  " + "\n  ".join(named)
            for step, named in self.stale.items()
        ]
        return "\n".join(lines)


def judged(
    found: Mapping[str, Sequence[Difference]], on_purpose: Mapping[str, Sequence[Excuse]]
) -> Verdict:
    """The differences of each step (`found`) against those named on purpose for it."""
    unexplained: dict[str, list[Difference]] = {}
    stale: dict[str, list[str]] = {}
    for step, excuses in on_purpose.items():
        if any(e.eureka_status is not None for e in excuses) and not step.startswith(BAD_INPUT):
            raise ValueError(
                f"{step!r}: only a bad-input step may answer 400 where Eureka does not"
            )
    for step in [*found, *(step for step in on_purpose if step not in found)]:
        excuses = on_purpose.get(step, ())
        seen = found.get(step, ())
        left = [d for d in seen if not any(e.covers(d) for e in excuses)]
        if left:
            unexplained[step] = left
        gone = [name for excuse in excuses for name in excuse.unseen(seen)]
        if gone:
            stale[step] = gone
    return Verdict(unexplained, stale)
