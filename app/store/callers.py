"""Who is calling: the API key a request was made with (its `Authorization:
Bearer` header, or the web page's sign-in), as the HTTP layer sees it.

A value, not the database's row: one lookup's answer is shared by every
request presenting the key at once (app/store/key_checks.py), and it outlives
the session that read it. The HTTP layer decides with it what the caller may
do; it never sees the key's hash or its table.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.db.models import KEY_SCOPES, ApiKey, KeyScope

__all__ = ["Caller", "KeyScope"]


@dataclass(frozen=True, slots=True)
class Caller:
    id: int
    name: str
    scope: KeyScope

    @classmethod
    def of(cls, key: ApiKey) -> Caller:
        for scope in KEY_SCOPES:
            if key.scope == scope:
                return cls(id=key.id, name=key.name, scope=scope)
        # The table's CHECK constraint keeps other values out.
        raise ValueError(f"the API key {key.name!r} has an unknown scope {key.scope!r}")

    def allows(self, scope: KeyScope) -> bool:
        """Whether this key's scope includes `scope` (each includes the ones before it)."""
        return KEY_SCOPES.index(self.scope) >= KEY_SCOPES.index(scope)
