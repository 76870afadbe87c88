"""Key ranges: "the key starts with this prefix" as bounds an index range scan can use."""

from __future__ import annotations

import sys

from sqlalchemy import ColumnElement, SQLColumnExpression


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix`.

    Keys compare by code point (UTF-8 byte order), so bumping the last code
    point that can be bumped gives the bound; None if there is none (empty
    prefix, or only U+10FFFF). Surrogates cannot occur in keys, so the
    successor of U+D7FF is U+E000.
    """
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < sys.maxunicode:
            successor = 0xE000 if 0xD800 <= last + 1 <= 0xDFFF else last + 1
            return "".join(chars) + chr(successor)
    return None


def key_prefix_bounds(column: SQLColumnExpression[str], prefix: str) -> list[ColumnElement[bool]]:
    """WHERE clauses for "the key starts with `prefix`" that an index range
    scan can use (LIKE cannot, and would need escaping); none for ''."""
    if not prefix:
        return []
    bounds = [column >= prefix]
    upper = prefix_upper_bound(prefix)
    if upper is not None:
        bounds.append(column < upper)
    return bounds
