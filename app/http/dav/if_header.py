"""The `If` header (RFC 4918 section 10.4): conditions on lock tokens and
entity tags, which a request makes its precondition and by which it submits
the tokens of the locks it holds.

    If: (<urn:uuid:...> ["etag"]) (Not <DAV:no-lock>)
    If: <http://host/dav/a.txt> (<urn:uuid:...>) </dav/b/> (["etag"])

A list holds when all its conditions hold; the header holds for a resource
when one of the lists that apply to it holds. Untagged lists apply to the
request's resource; tagged ones to the resource they name, and a resource no
tag names ignores the header. Every state token anywhere in the header is
submitted (whether it holds or not: RFC 4918 section 10.4.1). Parsing is
strict: anything else is a 400, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: How many conditions one header may hold, in all.
MAX_CONDITIONS = 1000


class IfHeaderError(ValueError):
    """The header is not what RFC 4918 section 10.4 describes."""


@dataclass(frozen=True, slots=True)
class Condition:
    negated: bool
    # A state token (a lock token, or any other URI), or an entity tag.
    token: str | None = None
    etag: str | None = None


@dataclass(frozen=True, slots=True)
class IfList:
    # The tagged resource (a URL or an absolute path), None when untagged.
    resource: str | None
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class ResourceState:
    """What the conditions are checked against: the resource's entity tag
    (None for a folder or a missing resource), and the tokens of the locks
    that cover it."""

    etag: str | None
    tokens: frozenset[str]


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def skip_blanks(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in " \t\r\n":
            self.at += 1

    def peek(self) -> str:
        self.skip_blanks()
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self, char: str) -> None:
        if self.peek() != char:
            raise IfHeaderError(f"expected {char!r} at character {self.at}")
        self.at += 1

    def until(self, end: str) -> str:
        close = self.text.find(end, self.at)
        if close < 0:
            raise IfHeaderError(f"{end!r} is missing")
        found = self.text[self.at : close]
        self.at = close + 1
        return found


def parse_if(value: str) -> list[IfList]:
    scanner = _Scanner(value)
    lists: list[IfList] = []
    tagged: bool | None = None
    resource: str | None = None
    count = 0
    while scanner.peek():
        if scanner.peek() == "<":
            if tagged is False:
                raise IfHeaderError("tagged and untagged lists are mixed")
            tagged = True
            scanner.take("<")
            resource = _uri(scanner.until(">"))
            if scanner.peek() != "(":
                raise IfHeaderError("a resource tag is followed by no list")
        if scanner.peek() != "(":
            raise IfHeaderError(f"expected a list at character {scanner.at}")
        if tagged is None:
            tagged = False
        scanner.take("(")
        conditions: list[Condition] = []
        while scanner.peek() != ")":
            if not scanner.peek():
                raise IfHeaderError("a list is not closed")
            conditions.append(_condition(scanner))
            count += 1
            if count > MAX_CONDITIONS:
                raise IfHeaderError(f"more than {MAX_CONDITIONS} conditions")
        scanner.take(")")
        if not conditions:
            raise IfHeaderError("a list holds no condition")
        lists.append(IfList(resource if tagged else None, tuple(conditions)))
    if not lists:
        raise IfHeaderError("the header holds no list")
    return lists


def _condition(scanner: _Scanner) -> Condition:
    negated = False
    scanner.skip_blanks()
    if scanner.text.startswith("Not", scanner.at):
        negated = True
        scanner.at += 3
        if scanner.peek() not in ("<", "["):
            raise IfHeaderError("`Not` is followed by no state token or entity tag")
    if scanner.peek() == "<":
        scanner.take("<")
        return Condition(negated, token=_uri(scanner.until(">")))
    if scanner.peek() == "[":
        scanner.take("[")
        return Condition(negated, etag=_entity_tag(scanner.until("]")))
    raise IfHeaderError(f"expected a state token or an entity tag at character {scanner.at}")


def _uri(text: str) -> str:
    if not text or any(char in text for char in " \t\r\n<>()[]"):
        raise IfHeaderError(f"{text[:100]!r} is not a URI")
    return text


def _entity_tag(text: str) -> str:
    tag = text.strip()
    opaque = tag.removeprefix("W/")
    if len(opaque) < 2 or opaque[0] != '"' or opaque[-1] != '"' or '"' in opaque[1:-1]:
        raise IfHeaderError(f"{text[:100]!r} is not an entity tag")
    return tag


def submitted_tokens(lists: Iterable[IfList]) -> frozenset[str]:
    """Every state token of the header: the lock tokens it submits."""
    return frozenset(
        condition.token
        for if_list in lists
        for condition in if_list.conditions
        if condition.token is not None
    )


def _same_etag(wanted: str, actual: str | None) -> bool:
    if actual is None:
        return False
    return wanted.removeprefix("W/") == actual.removeprefix("W/")


def list_holds(if_list: IfList, state: ResourceState) -> bool:
    for condition in if_list.conditions:
        if condition.token is not None:
            matched = condition.token in state.tokens
        else:
            assert condition.etag is not None
            matched = _same_etag(condition.etag, state.etag)
        if matched == condition.negated:
            return False
    return True


def lists_for(
    lists: Iterable[IfList], path: str, *, request_path: str, path_of: Callable[[str], str | None]
) -> list[IfList]:
    """The lists that apply to the resource at `path` (a path under /dav/):
    untagged ones when it is the request's resource, and those whose tag
    names it (`path_of` turns a tag into a path, None when it names none of
    ours). Paths compare without a trailing slash."""
    wanted = path.rstrip("/")
    found = []
    for if_list in lists:
        if if_list.resource is None:
            if wanted == request_path.rstrip("/"):
                found.append(if_list)
            continue
        tagged = path_of(if_list.resource)
        if tagged is not None and tagged.rstrip("/") == wanted:
            found.append(if_list)
    return found


def holds(applicable: list[IfList], state: ResourceState) -> bool:
    """Whether the header holds for one resource: no list applies to it, or one of them holds."""
    return not applicable or any(list_holds(if_list, state) for if_list in applicable)
