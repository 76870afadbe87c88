"""Master keys and the envelope (app/sealing/keys.py)."""

from __future__ import annotations

import base64

import pytest

from app.sealing.keys import (
    BadMasterKey,
    UnwrapFailed,
    new_data_key,
    new_master_key_text,
    parse_keys,
    split_entries,
    unwrap,
    wrap,
)

SECRET = bytes(range(32))
TEXT = base64.b64encode(SECRET).decode()


def test_a_new_key_line_parses_back_and_the_first_key_is_current() -> None:
    line = new_master_key_text("2026-12.a")
    keyring = parse_keys(split_entries(f"# rotated in December\n{line}\nold:{TEXT} # kept\n"), "t")
    assert keyring.ids == ("2026-12.a", "old")
    assert keyring.current.id == "2026-12.a"
    assert keyring.get("old") is not None and keyring.get("old").secret == SECRET  # type: ignore[union-attr]
    assert TEXT not in repr(keyring)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (TEXT, "not of the form id:base64"),
        (f"bad id:{TEXT}", "a key id is"),
        (f"k:{TEXT[:-2]}!!", "not valid base64"),
        (f"k:{base64.b64encode(SECRET[:31]).decode()}", "31 bytes, not 32"),
        (f"k:{TEXT},k:{TEXT}", "given twice"),
        ("", "no key given"),
    ],
)
def test_a_malformed_key_is_one_line_that_never_shows_the_key(entry: str, says: str) -> None:
    with pytest.raises(BadMasterKey) as caught:
        parse_keys(split_entries(entry), "ENCRYPTION_KEYS")
    message = str(caught.value)
    assert says in message and "\n" not in message
    assert message.startswith("ENCRYPTION_KEYS")
    assert TEXT[:12] not in message and TEXT[8:20] not in message


def test_a_data_key_unwraps_only_under_its_master_key() -> None:
    keyring = parse_keys([f"a:{TEXT}", new_master_key_text("b")], "t")
    data_key = new_data_key()
    wrapped = wrap(keyring.current, data_key)
    assert data_key not in wrapped
    assert unwrap(keyring.current, wrapped) == data_key
    with pytest.raises(UnwrapFailed):
        unwrap(keyring.keys[1], wrapped)
