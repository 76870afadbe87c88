"""A caller is the key's id, name and scope, read once: what the HTTP layer
decides with, after the session that read the key has ended."""

from __future__ import annotations

import pytest

from app.db.models import KEY_SCOPES, ApiKey
from app.store.callers import Caller


def test_each_scope_includes_the_ones_before_it() -> None:
    for held in KEY_SCOPES:
        caller = Caller(id=1, name="k", scope=held)
        allowed = [scope for scope in KEY_SCOPES if caller.allows(scope)]
        assert allowed == list(KEY_SCOPES[: KEY_SCOPES.index(held) + 1])


def test_a_caller_is_read_from_the_row_and_never_carries_its_hash() -> None:
    row = ApiKey(id=7, name="ci", prefix="tu_abcd", key_hash="f" * 64, scope="write")
    caller = Caller.of(row)
    assert caller == Caller(id=7, name="ci", scope="write")
    assert "f" * 64 not in repr(caller)


def test_a_row_with_a_scope_the_service_does_not_know_is_refused() -> None:
    row = ApiKey(id=8, name="odd", prefix="tu_abcd", key_hash="0" * 64, scope="root")
    with pytest.raises(ValueError, match="unknown scope"):
        Caller.of(row)
