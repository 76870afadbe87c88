"""A request's headers with lookups in constant time.

Starlette's `Headers` scans every header on each lookup and raises (and
catches) a KeyError for a name that is not there. An S3 GET or HEAD asks for
a dozen names, conditions, range and checksum mode among them, nearly all of
them absent: those scans cost more than building a dict of the headers once.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from starlette.datastructures import Headers


class IndexedHeaders(Headers):
    """Starlette's `Headers` (case-insensitive, first value wins, `getlist`
    for all of them), with single lookups answered from a dict built on the
    first one."""

    @cached_property
    def _first_values(self) -> dict[str, str]:
        first: dict[str, str] = {}
        for name, value in self._list:
            first.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        return first

    def __getitem__(self, key: str) -> str:
        try:
            return self._first_values[key.lower()]
        except KeyError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        return self._first_values.get(key.lower(), default)

    def __contains__(self, key: Any) -> bool:
        return isinstance(key, str) and key.lower() in self._first_values
